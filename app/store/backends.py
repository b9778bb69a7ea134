"""Which store to open: a ``postgresql://`` URL (``pg.py``), else a SQLite file (``db.py``).

Why a module of its own: both backends' modules stay free of each other's imports, and psycopg is
imported only when PostgreSQL is used.
"""

from __future__ import annotations

import logging
from pathlib import Path

from app.redact import Redactor
from app.store.db import READERS, Database

log = logging.getLogger(__name__)

__all__ = ["open_database"]


async def open_database(target: str | Path, readers: int = READERS, redact: Redactor | None = None) -> Database:
    """The store at ``target``: a ``postgresql://`` URL, else a SQLite file."""
    if isinstance(target, str) and target.startswith(("postgresql://", "postgres://")):
        from app.store.pg import PgDatabase

        return await PgDatabase.open(target, readers=readers, redact=redact)
    return await Database.open(target, readers=readers, redact=redact)
