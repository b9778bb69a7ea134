"""The monitor's own state, shared by every process on one database (``monitor_state``, 0011_signal).

Why a table and not a field of the supervisor: ``tierops serve``, ``tierops supervise`` and
``tierops run`` may all run cycles on the same state directory, and a fact one of them learned —
the API rejected the credentials, so the language-model tiers are paused — must hold for the
others and survive a restart. Each fact is one row: a ``name``, a JSON ``value`` and when it was
last written. Callers own the shape of their values; this module only reads, writes and deletes
rows. :func:`read_readonly` serves ``tierops doctor``, which must never create or migrate a
database (it opens the file read-only, like :mod:`app.store.inspect`).
"""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path
from typing import Any, TypedDict

from app.clock import utcnow
from app.store.db import Database

log = logging.getLogger(__name__)

__all__ = ["MonitorStateRow", "delete", "get", "put", "read_readonly"]


class MonitorStateRow(TypedDict):
    name: str
    value: Any  # the JSON value as written (text that is not JSON comes back as text)
    updated_at: str


def _row(name: str, value: str, updated_at: str) -> MonitorStateRow:
    try:
        decoded: Any = json.loads(value)
    except ValueError:
        decoded = value
    return {"name": name, "value": decoded, "updated_at": updated_at}


async def get(db: Database, name: str, *, fresh: bool = False) -> MonitorStateRow | None:
    """The row ``name``, or None. ``fresh``: read on the writer (this process's last write included)."""
    row = await db.fetchone("SELECT name, value, updated_at FROM monitor_state WHERE name = ?", (name,), fresh=fresh)
    return _row(row["name"], row["value"], row["updated_at"]) if row is not None else None


async def put(db: Database, name: str, value: Any, *, now: str | None = None) -> MonitorStateRow:
    """Write ``value`` (JSON-encoded) under ``name``, replacing what was there."""
    when = now or utcnow()
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    async with db.write() as conn:
        await conn.execute("INSERT INTO monitor_state (name, value, updated_at) VALUES (?, ?, ?)"
                           " ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                           (name, text, when))
    return _row(name, text, when)


async def delete(db: Database, name: str) -> bool:
    """Remove the row ``name``; True when there was one."""
    async with db.write() as conn:
        cur = await conn.execute("DELETE FROM monitor_state WHERE name = ?", (name,))
        return bool(cur.rowcount)


def read_readonly(path: Path, name: str, busy_timeout_ms: int = 2000) -> MonitorStateRow | None:
    """The row ``name`` of the database file at ``path``, opened read-only; None when the file, the
    table (a database before 0011_signal) or the row is missing, or the file cannot be read."""
    if not path.is_file():
        return None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None,
                               timeout=busy_timeout_ms / 1000)
    except sqlite3.Error:
        return None
    try:
        row = conn.execute("SELECT name, value, updated_at FROM monitor_state WHERE name = ?", (name,)).fetchone()
    except sqlite3.Error as exc:  # no such table (not migrated yet), or unreadable: nothing to report
        log.debug("monitor_state of %s not readable: %s", path, exc)
        return None
    finally:
        conn.close()
    return _row(row[0], row[1], row[2]) if row is not None else None
