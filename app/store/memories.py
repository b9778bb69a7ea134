"""Operator edits of memories (create, edit, deactivate, delete), for the dashboard and the API.

Routing (``app/output/route.py``) learns memories from sessions; this module is the operator's
side. A created memory has no provenance session; an edit keeps the provenance it had.
"""

from __future__ import annotations

import sqlite3

from app.recorder import utcnow
from app.store.db import Database

EDITABLE = ("service", "category", "value", "confidence", "active")


class MemoryConflict(Exception):
    """Another memory already has this service, category and value."""


async def create_memory(db: Database, *, category: str, value: str, service: str | None = None,
                        confidence: float = 0.7, active: bool = True) -> int:
    now = utcnow()
    try:
        async with db.write() as conn:
            cur = await conn.execute(
                "INSERT INTO memories (service, category, value, confidence, active, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (service or None, category, " ".join(value.split()), confidence, int(active), now, now))
            return cur.lastrowid
    except sqlite3.IntegrityError:
        raise MemoryConflict("a memory with this service, category and value already exists") from None


async def update_memory(db: Database, pk: int, changes: dict) -> bool:
    fields = {k: v for k, v in changes.items() if k in EDITABLE}
    if "value" in fields:
        fields["value"] = " ".join(str(fields["value"]).split())
    if "service" in fields:
        fields["service"] = fields["service"] or None
    if "active" in fields:
        fields["active"] = int(bool(fields["active"]))
    if not fields:
        return await db.fetchone("SELECT 1 FROM memories WHERE id = ?", (pk,)) is not None
    sets = ", ".join(f"{k} = ?" for k in fields)
    try:
        async with db.write() as conn:
            cur = await conn.execute(f"UPDATE memories SET {sets}, updated_at = ? WHERE id = ?",
                                     (*fields.values(), utcnow(), pk))
            return cur.rowcount == 1
    except sqlite3.IntegrityError:
        raise MemoryConflict("a memory with this service, category and value already exists") from None


async def delete_memory(db: Database, pk: int) -> bool:
    async with db.write() as conn:
        cur = await conn.execute("DELETE FROM memories WHERE id = ?", (pk,))
        return cur.rowcount == 1
