"""The ``memories`` table: what the agent remembers, and the operator's edits of it.

Sessions teach memories through routing (:func:`app.store.findings.write_routed`); this module
is the operator's side (create, edit, deactivate, delete) and the reads. A created memory has no
provenance session; an edit keeps the provenance it had.
"""

from __future__ import annotations

import sqlite3
from typing import Any, cast

from app.clock import utcnow
from app.errors import StoreError, TierOpsError
from app.store.db import Database
from app.store.rows import MemoryRow, PromptMemory, decode, decode_all, where

EDITABLE = ("service", "category", "value", "confidence", "active")
COLUMNS = ("id, service, category, value, confidence, active, times_seen, created_at, updated_at,"
           " created_by_session, reinforced_by_session")


class MemoryConflict(TierOpsError):
    """Another memory already has this service, category and value."""


_CONFLICT = "a memory with this service, category and value already exists"


async def create_memory(db: Database, *, category: str, value: str, service: str | None = None,
                        confidence: float = 0.7, active: bool = True) -> MemoryRow:
    """Create a memory and return it as stored."""
    now = utcnow()
    try:
        async with db.write() as conn:
            cur = await conn.execute(
                "INSERT INTO memories (service, category, value, confidence, active, created_at, updated_at)"  # noqa: S608 (a constant column list)
                " VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING " + COLUMNS,
                (db.redact(service) if service else None, db.redact(category), db.redact(" ".join(value.split())),
                 confidence, int(active), now, now))
            row = await cur.fetchone()
    except sqlite3.IntegrityError:
        raise MemoryConflict(_CONFLICT) from None
    if row is None:  # RETURNING of a successful INSERT always has a row
        raise StoreError(f"database {db.path}: the created memory was not returned")
    return cast(MemoryRow, decode(row))


async def update_memory(db: Database, pk: int, changes: dict[str, Any]) -> MemoryRow | None:
    """Apply ``changes`` (keys of :data:`EDITABLE`; others ignored); returns the memory as now
    stored, or None when there is no memory ``pk``."""
    fields = {k: v for k, v in changes.items() if k in EDITABLE}
    if "value" in fields:
        fields["value"] = db.redact(" ".join(str(fields["value"]).split()))
    if "category" in fields:
        fields["category"] = db.redact(str(fields["category"]))
    if "service" in fields:
        fields["service"] = db.redact(fields["service"]) if fields["service"] else None
    if "active" in fields:
        fields["active"] = int(bool(fields["active"]))
    if not fields:
        return await get_memory(db, pk, fresh=True)
    sets = ", ".join(f"{k} = ?" for k in fields)
    try:
        async with db.write() as conn:
            cur = await conn.execute(
                f"UPDATE memories SET {sets}, updated_at = ? WHERE id = ? RETURNING {COLUMNS}",  # noqa: S608 (EDITABLE names)
                (*fields.values(), utcnow(), pk))
            row = await cur.fetchone()
    except sqlite3.IntegrityError:
        raise MemoryConflict(_CONFLICT) from None
    return cast(MemoryRow, decode(row)) if row else None


async def delete_memory(db: Database, pk: int) -> bool:
    async with db.write() as conn:
        cur = await conn.execute("DELETE FROM memories WHERE id = ?", (pk,))
        return cur.rowcount == 1


async def get_memory(db: Database, pk: int, *, fresh: bool = False) -> MemoryRow | None:
    row = await db.fetchone(f"SELECT {COLUMNS} FROM memories WHERE id = ?", (pk,), fresh=fresh)  # noqa: S608
    return cast(MemoryRow, decode(row)) if row else None


async def list_memories(db: Database, *, service: str | None = None, category: str | None = None,
                        active: bool | None = None, limit: int = 200, offset: int = 0) -> list[MemoryRow]:
    """Memories most recently updated first."""
    cond, params = where(service=service, category=category, active=active)
    sql = f"SELECT {COLUMNS} FROM memories{cond} ORDER BY updated_at DESC, id DESC LIMIT ? OFFSET ?"  # noqa: S608
    return decode_all(await db.fetchall(sql, [*params, limit, offset]), MemoryRow)


async def session_memories(db: Database, session_pk: int) -> list[MemoryRow]:
    """Memories a session created or last reinforced (the ingest report)."""
    return decode_all(await db.fetchall(
        f"SELECT {COLUMNS} FROM memories WHERE created_by_session = ? OR reinforced_by_session = ? ORDER BY id",  # noqa: S608
        (session_pk, session_pk)), MemoryRow)


async def prompt_memories(db: Database, limit: int = 500) -> list[PromptMemory]:
    """Active memories by confidence, then recency: what a tier's system prompt draws from."""
    rows = await db.fetchall(
        "SELECT service, category, value, confidence FROM memories WHERE active = 1"
        " ORDER BY confidence DESC, updated_at DESC, id DESC LIMIT ?", (limit,))
    return cast(list[PromptMemory], [dict(r) for r in rows])


async def memory_services(db: Database, limit: int = 500) -> list[str]:
    rows = await db.fetchall(
        "SELECT DISTINCT service FROM memories WHERE service IS NOT NULL ORDER BY service LIMIT ?", (limit,))
    return [r[0] for r in rows]


async def memory_categories(db: Database, limit: int = 500) -> list[str]:
    rows = await db.fetchall("SELECT DISTINCT category FROM memories ORDER BY category LIMIT ?", (limit,))
    return [r[0] for r in rows]
