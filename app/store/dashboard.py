"""Aggregates for the overview page, ``/metrics`` and ``/healthz``: small reads over many rows."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import cast
from urllib.parse import quote

from app.store.db import Database
from app.store.rows import AttentionRow, RunningRow, StatusCount
from app.vocab import SessionStatus


async def ping(db: Database) -> None:
    """Raises if the database cannot answer a query (the health check)."""
    await db.fetchval("SELECT 1")


async def running_sessions(db: Database, limit: int = 20) -> list[RunningRow]:
    rows = await db.fetchall("SELECT id, tier, model, trigger, started_at FROM sessions WHERE status = ?"
                             " ORDER BY id DESC LIMIT ?", (SessionStatus.RUNNING, limit))
    return cast(list[RunningRow], [dict(r) for r in rows])


async def attention_sessions(db: Database, limit: int = 5) -> list[AttentionRow]:
    """The newest sessions flagged as needing a human."""
    rows = await db.fetchall("SELECT id, tier, attention, started_at FROM sessions WHERE attention IS NOT NULL"
                             " ORDER BY id DESC LIMIT ?", (limit,))
    return cast(list[AttentionRow], [dict(r) for r in rows])


async def session_counts(db: Database) -> list[StatusCount]:
    """Sessions per (status, tier); tier 0 for sessions without one (ingested)."""
    rows = await db.fetchall("SELECT status, ifnull(tier, 0) AS tier, count(*) AS n FROM sessions GROUP BY status, tier")
    return cast(list[StatusCount], [dict(r) for r in rows])


async def total_cost(db: Database) -> float:
    return float(await db.fetchval("SELECT ifnull(sum(cost_usd), 0) FROM sessions") or 0)


async def total_lines(db: Database) -> int:
    return int(await db.fetchval("SELECT ifnull(sum(line_count), 0) FROM sessions") or 0)


WRITE_PROBE_TIMEOUT = 2.0  # seconds /healthz waits for SQLite's write lock


async def write_problem(db: Database, timeout: float = WRITE_PROBE_TIMEOUT) -> str | None:
    """Why the database cannot be written now (None: it can). A real write probe for ``/healthz``
    (issue #13): ``BEGIN IMMEDIATE; ROLLBACK`` on a connection of its own, opened read-write
    without creating anything, so a read-only file or folder, a vanished file or a lock held past
    ``timeout`` shows, and the writer connection (and its lock) is never held up by a health check."""
    if db.path == ":memory:":
        return None
    try:
        await asyncio.to_thread(_begin_immediate, db.path, timeout)
    except (sqlite3.Error, OSError) as exc:
        return str(exc) or type(exc).__name__
    return None


def _begin_immediate(path: str, timeout: float) -> None:
    conn = sqlite3.connect(f"file:{quote(path)}?mode=rw", uri=True, timeout=timeout, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
    finally:
        conn.close()
