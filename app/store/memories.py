"""The ``memories`` table: what the agent remembers, how a memory lives and fades, and the
operator's edits of it.

Sessions teach memories through routing (:func:`app.store.findings.write_routed` calls
:func:`teach`); the operator creates, edits, deactivates and deletes them; the tiers are given
the most relevant ones (:func:`prompt_memories`, ``app/supervisor/context.py``). A created memory
has no provenance session; an edit keeps the provenance it had.

What it deliberately does: nothing is lost. Decay is derived when read
(:meth:`MemoryLifecycle.effective`), never written back, so being seen again cancels it and a
changed half-life applies at once; a memory below ``TIEROPS_MEMORY_FLOOR`` is marked stale
(:func:`sweep_stale`), no longer given to the tiers but still listed, and revived when taught
again or edited; a contradicted memory (another value taught for its service and category) is
deactivated with ``replaced_by`` pointing at what replaced it, kept, not deleted. Values one
session teaches together, and categories that collect observations (:data:`ACCUMULATING`), never
contradict. Only what sessions teach contradicts: an operator's edit never deactivates another
memory. The lifecycle in full: ARCHITECTURE.md, "Memories". ``now`` is a parameter wherever time
matters (ISO 8601 UTC text, as stored), so tests can simulate months passing.
"""

from __future__ import annotations

import logging
import math
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import aiosqlite

from app.clock import utcnow
from app.config import Settings
from app.errors import StoreError, TierOpsError
from app.store.db import Database
from app.store.rows import MemoryRow, PromptMemory, decode, where

log = logging.getLogger(__name__)

EDITABLE = ("service", "category", "value", "confidence", "active")
COLUMNS = ("id, service, category, value, confidence, active, times_seen, created_at, updated_at,"
           " created_by_session, reinforced_by_session, last_seen_at, stale, replaced_by")
# Categories that collect observations; a new value adds to them, never replaces.
ACCUMULATING = frozenset({"quirk", "pattern", "note", "observation", "incident", "history", "root-cause", "restart",
                          "redeployment", "config-change", "change", "runbook", "lesson", "event"})
_SECONDS_PER_DAY = 86_400.0


class MemoryConflict(TierOpsError):
    """Another memory already has this service, category and value."""


_CONFLICT = "a memory with this service, category and value already exists"


def _category_kind(category: str) -> str:
    kind = re.sub(r"[\s_]+", "-", category.strip().lower())
    return kind[:-1] if kind.endswith("s") and not kind.endswith("ss") else kind


def accumulates(category: str) -> bool:
    """True for a category whose values add up instead of contradicting each other."""
    return _category_kind(category) in ACCUMULATING


def parse_time(text: str | None) -> datetime | None:
    """A stored timestamp as an aware datetime (naive text is UTC); None when absent or unreadable."""
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@dataclass(frozen=True)
class MemoryLifecycle:
    """Decay and the stale floor. The defaults are the settings' defaults."""

    half_life_days: float = cast(float, Settings.model_fields["memory_half_life_days"].default)
    floor: float = cast(float, Settings.model_fields["memory_floor"].default)

    @classmethod
    def from_settings(cls, settings: Settings) -> MemoryLifecycle:
        return cls(half_life_days=settings.memory_half_life_days, floor=settings.memory_floor)

    def effective(self, confidence: float, last_seen_at: str | None, now: str) -> float:
        """``confidence * 0.5 ** (age_days / half_life)``; no decay without a half-life or a
        readable ``last_seen_at``, and none for a ``last_seen_at`` in the future."""
        if self.half_life_days <= 0:
            return confidence
        seen, at = parse_time(last_seen_at), parse_time(now)
        if seen is None or at is None:
            return confidence
        age_days = max(0.0, (at - seen).total_seconds() / _SECONDS_PER_DAY)
        return confidence * math.pow(0.5, age_days / self.half_life_days)

    def below_floor(self, confidence: float, last_seen_at: str | None, now: str) -> bool:
        return self.effective(confidence, last_seen_at, now) < self.floor

    def stale_at(self, confidence: float, last_seen_at: str | None) -> str | None:
        """When the decayed confidence reaches the floor (the memories page shows it),
        ``last_seen_at + half_life * log2(confidence / floor)`` days, in the stored format; None
        when it never decays (no half-life, no floor, no readable ``last_seen_at``) or was
        already at or below the floor when last seen."""
        seen = parse_time(last_seen_at)
        if self.half_life_days <= 0 or self.floor <= 0 or seen is None or confidence <= self.floor:
            return None
        days = self.half_life_days * math.log2(confidence / self.floor)
        try:
            when = seen + timedelta(days=days)
        except OverflowError:
            return None
        return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _seen(row: sqlite3.Row | dict[str, Any]) -> str | None:
    """When a memory was last seen; rows written without the column fall back to their update."""
    return cast(str | None, row["last_seen_at"] or row["updated_at"])


def _memory(row: sqlite3.Row) -> MemoryRow:
    out = decode(row)
    out["stale"] = bool(out["stale"])  # a lifecycle flag; rows.BOOL_COLUMNS is shared, kept as is
    return cast(MemoryRow, out)


def effective_confidences(rows: Iterable[MemoryRow], lifecycle: MemoryLifecycle,
                          now: str | None = None) -> dict[int, float]:
    """Each row's decayed confidence, by id (what the memories page shows next to the stored one)."""
    now = now or utcnow()
    return {r["id"]: lifecycle.effective(r["confidence"], _seen(cast(dict[str, Any], r)), now) for r in rows}


def stale_times(rows: Iterable[MemoryRow], lifecycle: MemoryLifecycle) -> dict[int, str | None]:
    """Each row's projected time to turn stale (:meth:`MemoryLifecycle.stale_at`), by id."""
    return {r["id"]: lifecycle.stale_at(r["confidence"], _seen(cast(dict[str, Any], r))) for r in rows}


# -- what sessions teach ----------------------------------------------------------------------

async def teach(conn: aiosqlite.Connection, session_pk: int, memories: Sequence[tuple[str | None, str, str]],
                now: str, initial_confidence: float, reinforce: float) -> None:
    """Create or reinforce what a session taught, and deactivate what it contradicts (see the
    module docstring). Runs inside the caller's write transaction (the session's final one)."""
    taught: dict[tuple[str, str], list[int]] = {}
    for service, category, value in memories:
        cur = await conn.execute(
            """INSERT INTO memories (service, category, value, confidence, created_at, updated_at, last_seen_at,
                                     created_by_session, reinforced_by_session)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL)
               ON CONFLICT (coalesce(service, ''), category, value) DO UPDATE SET
                   confidence = min(1.0, memories.confidence + (1.0 - memories.confidence) * ?),
                   times_seen = memories.times_seen + 1,
                   updated_at = excluded.updated_at,
                   last_seen_at = max(coalesce(memories.last_seen_at, ''), excluded.last_seen_at),
                   stale = 0,
                   active = CASE WHEN memories.replaced_by IS NULL THEN memories.active ELSE 1 END,
                   replaced_by = NULL,
                   reinforced_by_session = excluded.created_by_session
               RETURNING id, active""",
            (service, category, " ".join(value.split()), initial_confidence, now, now, now, session_pk, reinforce),
        )
        row = await cur.fetchone()
        if row is None:  # an upsert with RETURNING always returns its row
            continue
        pk, active = int(row[0]), bool(row[1])
        key = (service or "", category)
        same_session = taught.setdefault(key, [])
        same_session.append(pk)
        if not active or accumulates(category):
            continue  # an operator's deactivation contradicts nothing; observations add up
        marks = ", ".join("?" * len(same_session))
        await conn.execute(
            "UPDATE memories SET active = 0, replaced_by = ?, updated_at = ?"  # noqa: S608 (placeholders only)
            f" WHERE coalesce(service, '') = ? AND category = ? AND active = 1 AND id NOT IN ({marks})",
            (pk, now, key[0], category, *same_session))


# -- the lifecycle sweep ----------------------------------------------------------------------

async def sweep_stale(db: Database, lifecycle: MemoryLifecycle, *, now: str | None = None) -> list[int]:
    """Mark active memories whose decayed confidence fell below the floor as ``stale``; returns
    their ids. Reads first and writes only when something is due, re-checking each row so a
    memory reinforced meanwhile is left alone."""
    now = now or utcnow()
    rows = await db.fetchall(
        "SELECT id, confidence, last_seen_at, updated_at FROM memories WHERE active = 1 AND stale = 0")
    due = [(r["id"], r["confidence"], _seen(r)) for r in rows if lifecycle.below_floor(r["confidence"], _seen(r), now)]
    if not due:
        return []
    marked: list[int] = []
    async with db.write() as conn:
        for pk, confidence, seen in due:
            cur = await conn.execute(
                "UPDATE memories SET stale = 1 WHERE id = ? AND active = 1 AND stale = 0 AND confidence = ?"
                " AND coalesce(last_seen_at, updated_at) IS ?", (pk, confidence, seen))
            if cur.rowcount == 1:
                marked.append(pk)
    return marked


# -- the operator's side ----------------------------------------------------------------------

async def create_memory(db: Database, *, category: str, value: str, service: str | None = None,
                        confidence: float = 0.7, active: bool = True) -> MemoryRow:
    """Create a memory and return it as stored (seen now: its decay starts here)."""
    now = utcnow()
    try:
        async with db.write() as conn:
            cur = await conn.execute(
                "INSERT INTO memories (service, category, value, confidence, active, created_at, updated_at,"  # noqa: S608 (a constant column list)
                " last_seen_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING " + COLUMNS,
                (db.redact(service) if service else None, db.redact(category), db.redact(" ".join(value.split())),
                 confidence, int(active), now, now, now))
            row = await cur.fetchone()
    except sqlite3.IntegrityError:
        raise MemoryConflict(_CONFLICT) from None
    if row is None:  # RETURNING of a successful INSERT always has a row
        raise StoreError(f"database {db.path}: the created memory was not returned")
    return _memory(row)


async def update_memory(db: Database, pk: int, changes: dict[str, Any]) -> MemoryRow | None:
    """Apply ``changes`` (keys of :data:`EDITABLE`; others ignored); returns the memory as now
    stored, or None when there is no memory ``pk``.

    Any edit but a deactivation renews the memory: the operator vouches for it, so
    its decay restarts (``last_seen_at`` = now) and it is no longer stale; an activation also
    clears the ``replaced_by`` link of a contradicted memory."""
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
    now = utcnow()
    sets = ", ".join(f"{k} = ?" for k in fields)
    if fields.get("active", 1):  # not a deactivation
        sets += ", last_seen_at = ?, stale = 0"
        fields["last_seen_at"] = now
    if fields.get("active") == 1:
        sets += ", replaced_by = NULL"
    try:
        async with db.write() as conn:
            cur = await conn.execute(
                f"UPDATE memories SET {sets}, updated_at = ? WHERE id = ? RETURNING {COLUMNS}",  # noqa: S608 (EDITABLE names)
                (*fields.values(), now, pk))
            row = await cur.fetchone()
    except sqlite3.IntegrityError:
        raise MemoryConflict(_CONFLICT) from None
    return _memory(row) if row else None


async def delete_memory(db: Database, pk: int) -> bool:
    async with db.write() as conn:
        cur = await conn.execute("DELETE FROM memories WHERE id = ?", (pk,))
        return cur.rowcount == 1


# -- reads ------------------------------------------------------------------------------------

async def get_memory(db: Database, pk: int, *, fresh: bool = False) -> MemoryRow | None:
    row = await db.fetchone(f"SELECT {COLUMNS} FROM memories WHERE id = ?", (pk,), fresh=fresh)  # noqa: S608
    return _memory(row) if row else None


async def list_memories(db: Database, *, service: str | None = None, category: str | None = None,
                        active: bool | None = None, stale: bool | None = None, limit: int = 200,
                        offset: int = 0) -> list[MemoryRow]:
    """Memories most recently updated first."""
    cond, params = where(service=service, category=category, active=active, stale=stale)
    sql = f"SELECT {COLUMNS} FROM memories{cond} ORDER BY updated_at DESC, id DESC LIMIT ? OFFSET ?"  # noqa: S608
    return [_memory(r) for r in await db.fetchall(sql, [*params, limit, offset])]


async def session_memories(db: Database, session_pk: int) -> list[MemoryRow]:
    """Memories a session created or last reinforced (the ingest report)."""
    return [_memory(r) for r in await db.fetchall(
        f"SELECT {COLUMNS} FROM memories WHERE created_by_session = ? OR reinforced_by_session = ? ORDER BY id",  # noqa: S608
        (session_pk, session_pk))]


async def prompt_memories(db: Database, limit: int = 500, *, lifecycle: MemoryLifecycle | None = None,
                          now: str | None = None) -> list[PromptMemory]:
    """Active memories that are not stale, by confidence, then recency: what a tier's system
    prompt draws from.

    With a ``lifecycle`` the confidence is the decayed one, memories below the floor
    are left out even before a sweep marks them, and the order follows the decayed confidence.
    Without one, stored confidences are used as they are."""
    if lifecycle is None:
        rows = await db.fetchall(
            "SELECT service, category, value, confidence FROM memories WHERE active = 1 AND stale = 0"
            " ORDER BY confidence DESC, updated_at DESC, id DESC LIMIT ?", (limit,))
        return cast(list[PromptMemory], [dict(r) for r in rows])
    now = now or utcnow()
    rows = await db.fetchall(
        "SELECT service, category, value, confidence, last_seen_at, updated_at FROM memories"
        " WHERE active = 1 AND stale = 0 ORDER BY confidence DESC, updated_at DESC, id DESC")
    found: list[PromptMemory] = []
    for r in rows:
        confidence = lifecycle.effective(r["confidence"], _seen(r), now)
        if confidence >= lifecycle.floor:
            found.append({"service": r["service"], "category": r["category"], "value": r["value"],
                          "confidence": confidence})
    found.sort(key=lambda m: -m["confidence"])  # stable: ties keep the recency order
    return found[:limit]


async def memory_services(db: Database, limit: int = 500) -> list[str]:
    rows = await db.fetchall(
        "SELECT DISTINCT service FROM memories WHERE service IS NOT NULL ORDER BY service LIMIT ?", (limit,))
    return [r[0] for r in rows]


async def memory_categories(db: Database, limit: int = 500) -> list[str]:
    rows = await db.fetchall("SELECT DISTINCT category FROM memories ORDER BY category LIMIT ?", (limit,))
    return [r[0] for r in rows]
