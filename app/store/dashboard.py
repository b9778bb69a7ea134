"""Aggregates for the overview page, ``/metrics`` and ``/healthz``: small reads over many rows.

The overview's console reads: the open needs-attention items (not acknowledged),
today's sessions and cost, the worst open incident, and the per-service status grid. Every one
is bounded by an index or by a primary-key range, so the overview costs the same at 10k sessions
as at 10 (``tests/store/test_console_reads.py`` measures it).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from datetime import UTC, datetime
from typing import TypedDict, cast
from urllib.parse import quote

from app.store.db import Database
from app.store.rows import AttentionRow, IncidentRow, RunningRow, StatusCount, decode_all
from app.vocab import MAX_TIER, SessionStatus

log = logging.getLogger(__name__)


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
    rows = await db.fetchall("SELECT status, coalesce(tier, 0) AS tier, count(*) AS n FROM sessions GROUP BY status, tier")
    return cast(list[StatusCount], [dict(r) for r in rows])


async def total_cost(db: Database) -> float:
    return float(await db.fetchval("SELECT coalesce(sum(cost_usd), 0) FROM sessions") or 0)


async def total_lines(db: Database) -> int:
    return int(await db.fetchval("SELECT coalesce(sum(line_count), 0) FROM sessions") or 0)


WRITE_PROBE_TIMEOUT = 2.0  # seconds /healthz waits for SQLite's write lock


async def write_problem(db: Database, timeout: float = WRITE_PROBE_TIMEOUT) -> str | None:
    """Why the database cannot be written now (None: it can). A real write probe for ``/healthz``:
    ``BEGIN IMMEDIATE; ROLLBACK`` on a connection of its own, opened read-write
    without creating anything, so a read-only file or folder, a vanished file or a lock held past
    ``timeout`` shows, and the writer connection (and its lock) is never held up by a health check."""
    if db.path == ":memory:":
        return None
    if db.dialect == "postgresql":
        problem: str | None = await db.write_problem(timeout)  # type: ignore[attr-defined]
        return problem
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


# -- the overview as a console ------------------------------------------------------------------

class OpenAttention(TypedDict):
    """A session needing a human that nobody acknowledged yet."""

    id: int
    tier: int | None
    status: str
    attention: str
    started_at: str


async def open_attention(db: Database, limit: int = 5) -> tuple[list[OpenAttention], int]:
    """The newest ``limit`` sessions whose attention is not acknowledged, and how many there are
    in all (the partial index ``sessions_attention_open`` holds exactly these)."""
    cond = "attention IS NOT NULL AND attention_acked_at IS NULL"
    rows = await db.fetchall(f"SELECT id, tier, status, attention, started_at FROM sessions WHERE {cond}"  # noqa: S608
                             " ORDER BY id DESC LIMIT ?", (limit,))
    total = int(await db.fetchval(f"SELECT count(*) FROM sessions WHERE {cond}") or 0)  # noqa: S608
    return cast(list[OpenAttention], [dict(r) for r in rows]), total


class IncidentAttention(TypedDict):
    """An open incident needing a human (``incidents.attention``: e.g. its alert's investigation
    could not be queued)."""

    id: int
    key: str
    service: str | None
    severity: str
    title: str
    attention: str
    attention_at: str | None


async def incident_attention(db: Database, limit: int = 5) -> tuple[list[IncidentAttention], int]:
    """The newest ``limit`` open incidents flagged as needing a human, and how many there are (the
    partial index ``incidents_attention_open`` holds exactly these; acknowledging or resolving an
    incident takes it off)."""
    cond = "attention IS NOT NULL AND status = 'open'"
    rows = await db.fetchall(f"SELECT id, key, service, severity, title, attention, attention_at FROM incidents"  # noqa: S608 (a constant)
                             f" WHERE {cond} ORDER BY id DESC LIMIT ?", (limit,))
    total = int(await db.fetchval(f"SELECT count(*) FROM incidents WHERE {cond}") or 0)  # noqa: S608 (a constant)
    return cast(list[IncidentAttention], [dict(r) for r in rows]), total


class StatusTotal(TypedDict):
    status: str
    sessions: int
    cost_usd: float


class Today(TypedDict):
    """Sessions started since 00:00 UTC: counts by status and what they cost (every tier)."""

    since: str
    sessions: int
    cost_usd: float
    by_status: list[StatusTotal]


def day_start(now: datetime | None = None) -> str:
    """00:00 UTC of ``now``'s day in the stored timestamps' format (``clock.utcnow``)."""
    return (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT00:00:00.000Z")


async def today(db: Database, *, now: datetime | None = None) -> Today:
    since = day_start(now)
    rows = await db.fetchall("SELECT status, count(*) AS sessions, coalesce(sum(cost_usd), 0) AS cost_usd"
                             " FROM sessions WHERE started_at >= ? GROUP BY status ORDER BY sessions DESC, status",
                             (since,))
    by_status = cast(list[StatusTotal], [dict(r) for r in rows])
    return {"since": since, "sessions": sum(r["sessions"] for r in by_status),
            "cost_usd": float(sum(r["cost_usd"] for r in by_status)), "by_status": by_status}


_SEVERITY_ORDER = "CASE severity WHEN 'critical' THEN 2 WHEN 'warning' THEN 1 ELSE 0 END"


class IncidentTally(TypedDict):
    unresolved: int
    acknowledged: int
    worst: IncidentRow | None  # the most severe unresolved incident, the most recently seen first


async def incident_tally(db: Database) -> IncidentTally:
    """How many incidents are unresolved (open or acknowledged) and the worst of them."""
    row = await db.fetchone("SELECT count(*) AS n, coalesce(sum(status = 'acknowledged'), 0) AS acked FROM incidents"
                            " WHERE status != 'resolved'")
    worst = await db.fetchall(f"SELECT * FROM incidents WHERE status != 'resolved'"  # noqa: S608 (a constant)
                              f" ORDER BY {_SEVERITY_ORDER} DESC, last_seen_at DESC, id DESC LIMIT 1")
    rows = decode_all(worst, IncidentRow)
    return {"unresolved": int(row["n"]) if row else 0, "acknowledged": int(row["acked"]) if row else 0,
            "worst": rows[0] if rows else None}


# The service grid: each reported status as one of four states, worst first when several checks of
# one service ran in one cycle. Probe checks report healthy/degraded/down/unreachable; models and
# handoff.json files may write other words, mapped here (anything unknown stays "unknown").
GRID_STATES = ("down", "degraded", "unknown", "ok")
_STATE_OF = {"healthy": "ok", "ok": "ok", "pass": "ok", "passed": "ok", "up": "ok", "running": "ok",
             "degraded": "degraded", "warning": "degraded", "warn": "degraded", "slow": "degraded",
             "down": "down", "unreachable": "down", "fail": "down", "failed": "down", "failing": "down",
             "error": "down", "critical": "down"}


def grid_state(status: str | None) -> str:
    """``ok``, ``degraded``, ``down`` or ``unknown`` for a reported service status."""
    return _STATE_OF.get((status or "").strip().lower(), "unknown")


class GridCycle(TypedDict):
    cycle: int  # the chain id (a session without a chain: its own id)
    started_at: str


class GridCell(TypedDict):
    cycle: int
    state: str  # ok | degraded | down | unknown (GRID_STATES)
    status: str  # the worst status as reported
    session_pk: int  # the session that reported it
    at: str
    detail: str | None
    checks: int  # how many checks of the service this cycle ran


class ServiceRow(TypedDict):
    service: str
    current: GridCell  # the newest cycle that checked it
    cells: list[GridCell | None]  # one per GridCycle, oldest first; None: not checked in that cycle


class ServiceGrid(TypedDict):
    cycles: list[GridCycle]
    services: list[ServiceRow]


async def service_grid(db: Database, cycles: int = 20) -> ServiceGrid:
    """Every service checked in the last ``cycles`` cycles, with its status in each of them.

    A service is the probe's ``service`` of a check (else the check's name) or the name a model
    reported in ``services_checked`` (``check_results``). A probe session's own
    ``services_checked`` rows repeat its probe results and are left out. Reads are bounded: the
    cycles come from the newest sessions (a chain has at most one session per tier), and their
    sessions from a primary-key range, the results through their ``session_pk`` indexes."""
    recent = await db.fetchall(
        "SELECT coalesce(chain_id, id) AS cycle, min(started_at) AS started_at FROM"
        " (SELECT id, chain_id, started_at FROM sessions ORDER BY id DESC LIMIT ?) newest"
        " GROUP BY cycle ORDER BY cycle DESC LIMIT ?", (cycles * (MAX_TIER + 2), cycles))
    if not recent:
        return {"cycles": [], "services": []}
    columns: list[GridCycle] = [{"cycle": r["cycle"], "started_at": r["started_at"]} for r in reversed(recent)]
    position = {c["cycle"]: i for i, c in enumerate(columns)}
    first = columns[0]["cycle"]
    rows = await db.fetchall(
        "SELECT coalesce(s.chain_id, s.id) AS cycle, s.id AS session_pk, coalesce(p.service, p.check_name) AS service,"
        " p.status, p.detail, p.created_at AS at FROM sessions s JOIN probe_results p ON p.session_pk = s.id"
        " WHERE s.id >= ?"
        " UNION ALL "
        "SELECT coalesce(s.chain_id, s.id), s.id, c.name, c.status, c.detail, c.created_at"
        " FROM sessions s JOIN check_results c ON c.session_pk = s.id"
        " WHERE s.id >= ? AND NOT EXISTS (SELECT 1 FROM probe_results p WHERE p.session_pk = s.id)",
        (first, first))
    cells: dict[str, list[GridCell | None]] = {}
    for r in rows:
        col = position.get(r["cycle"])
        if col is None or not r["service"]:
            continue
        line = cells.setdefault(r["service"], [None] * len(columns))
        state = grid_state(r["status"])
        cell = line[col]
        if cell is None:
            line[col] = {"cycle": r["cycle"], "state": state, "status": r["status"], "session_pk": r["session_pk"],
                         "at": r["at"], "detail": r["detail"], "checks": 1}
            continue
        cell["checks"] += 1
        # the worst state wins; at equal states, the later report
        if GRID_STATES.index(state) < GRID_STATES.index(cell["state"]) or (
                state == cell["state"] and r["at"] >= cell["at"]):
            cell["state"], cell["status"], cell["session_pk"] = state, r["status"], r["session_pk"]
            cell["at"], cell["detail"] = r["at"], r["detail"]
    services: list[ServiceRow] = []
    for name, line in cells.items():
        current = next(c for c in reversed(line) if c is not None)
        services.append({"service": name, "current": current, "cells": line})
    # the worst current state first, then by name
    services.sort(key=lambda s: (GRID_STATES.index(s["current"]["state"]), s["service"].lower()))
    return {"cycles": columns, "services": services}
