"""The ``schemas`` table: named, immutable output schemas a run can ask for.

Why immutable: a session records the exact schema it ran with (``sessions.output_schema`` and its
SHA-256), so history stays explainable whatever happens to the registry; a name that could be
re-pointed would make "ran with schema X" mean two things. A change is a new name; deleting a
name never touches the sessions that used it. The body is stored as canonical JSON (sorted keys,
no spaces), so the same schema always has the same hash.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any, cast

from app.clock import utcnow
from app.errors import StoreError, TierOpsError
from app.output.spec import canonical_json, schema_sha256
from app.store.db import Database
from app.store.rows import SchemaRow, decode, decode_all

log = logging.getLogger(__name__)

__all__ = ["SchemaExists", "create_schema", "delete_schema", "get_schema", "list_schemas"]

_COLUMNS = ("s.id, s.name, s.description, s.body, s.sha256, s.created_at,"
            " (SELECT count(*) FROM sessions WHERE schema_sha256 = s.sha256) AS used_by")


class SchemaExists(TierOpsError):
    """A schema of that name is already stored (schemas are immutable: use a new name)."""


async def create_schema(db: Database, *, name: str, schema: Any, description: str | None = None) -> SchemaRow:
    """Store ``schema`` under ``name``; :class:`SchemaExists` when the name is taken."""
    body = canonical_json(schema)
    try:
        async with db.write() as conn:
            await conn.execute(
                "INSERT INTO schemas (name, description, body, sha256, created_at) VALUES (?, ?, ?, ?, ?)",
                (name, db.redact(description) if description else None, body, schema_sha256(schema), utcnow()))
    except sqlite3.IntegrityError:
        raise SchemaExists(f"a schema named {name!r} already exists; stored schemas never change, so store the "
                           "new version under a new name") from None
    row = await get_schema(db, name, fresh=True)
    if row is None:  # pragma: no cover - just written
        raise StoreError(f"database {db.path}: the stored schema {name!r} was not found")
    return row


async def get_schema(db: Database, name: str, *, fresh: bool = False) -> SchemaRow | None:
    row = await db.fetchone(f"SELECT {_COLUMNS} FROM schemas s WHERE s.name = ?", (name,), fresh=fresh)  # noqa: S608 (constant columns)
    return cast(SchemaRow, decode(row)) if row is not None else None


async def list_schemas(db: Database, limit: int = 500, offset: int = 0) -> list[SchemaRow]:
    rows = await db.fetchall(f"SELECT {_COLUMNS} FROM schemas s ORDER BY s.name LIMIT ? OFFSET ?",  # noqa: S608
                             (limit, offset))
    return cast(list[SchemaRow], decode_all(rows, SchemaRow))


async def delete_schema(db: Database, name: str) -> bool:
    """Forget the name (sessions keep the schema they ran with); False when there was none."""
    async with db.write() as conn:
        cur = await conn.execute("DELETE FROM schemas WHERE name = ?", (name,))
        return (cur.rowcount or 0) > 0
