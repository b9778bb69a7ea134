"""Statistics over sessions: per day, per tier and per escalation chain.

Why a module of its own: ``GET /api/v1/stats`` (Homepage and Grafana widgets), the ``/stats``
page's charts and the sessions API's roll-ups read the same sums, and they must agree to the cent.
:mod:`app.store.dashboard` answers "how many now" for the overview and ``/metrics``; this module
answers "how much per day" over a window.

* **Days are UTC calendar days** of a session's ``started_at`` (the store's text timestamps sort
  and cut as text: ``substr(started_at, 1, 10)``), so a session is counted on the day it started,
  whatever day it ended. A window of N days is today and the N - 1 days before it, every day
  present (zero-filled), oldest first.
* **A chain** is the sessions sharing a ``chain_id``, which is the id of its first session; an
  ingested session has no chain and counts as a chain of one (its own id).
* An escalation is a session that escalated (``escalated_to`` set); the window's success rate is
  completed / finished (completed, failed, interrupted), None while nothing finished.
* Evidence counts sum the sessions' stored ``findings_*`` counts per tier and model (the model asked
  for, else the one the CLI reported); sessions whose findings were never checked are left out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import TypedDict, cast

from app.store.db import Database
from app.vocab import TIERS, SessionStatus

log = logging.getLogger(__name__)

__all__ = ["AllTime", "ChainRollupRow", "ChainSum", "EvidenceCount", "StatsDay", "TierCost", "all_time",
           "chain_rollup", "chain_sums", "daily", "evidence_counts", "since_day"]


class TierCost(TypedDict):
    tier: int | None  # None: ingested sessions recorded without a tier
    sessions: int
    cost_usd: float


class StatsDay(TypedDict):
    """One UTC day of the window."""

    day: str  # YYYY-MM-DD
    sessions: int
    running: int
    completed: int
    failed: int
    interrupted: int
    escalations: int
    attention: int
    cost_usd: float
    tiers: list[TierCost]  # tiers 0..3 always, then None when ingested sessions without a tier exist


class AllTime(TypedDict):
    sessions: int
    cost_usd: float


class ChainSum(TypedDict):
    sessions: int
    cost_usd: float


class EvidenceCount(TypedDict):
    """Findings of one tier and model by evidence status (app/engine/evidence_check.py)."""

    tier: int | None
    model: str  # "" when neither asked for nor reported
    verified: int
    unsupported: int
    uncited: int


class ChainRollupRow(TypedDict):
    """One escalation chain (or a session outside any chain), by the id of its first session."""

    chain_root_id: int
    sessions: int
    max_tier: int | None
    running: int
    failed: int
    attention: int
    cost_usd: float
    input_tokens: int
    output_tokens: int
    duration_ms: int
    started_at: str
    ended_at: str | None  # the last end; None while a session of the chain runs


def since_day(days: int, now: datetime | None = None) -> str:
    """The first day (``YYYY-MM-DD``, UTC) of a window of ``days`` days ending today."""
    today = (now or datetime.now(UTC)).astimezone(UTC).date()
    return (today - timedelta(days=max(1, days) - 1)).isoformat()


def _day_names(days: int, now: datetime | None) -> list[str]:
    first = datetime.fromisoformat(since_day(days, now)).date()
    return [(first + timedelta(days=i)).isoformat() for i in range(max(1, days))]


async def daily(db: Database, days: int, *, now: datetime | None = None) -> list[StatsDay]:
    """Every day of the window, oldest first, with its sessions by status, escalations, sessions
    needing attention and cost, in total and per tier."""
    names = _day_names(days, now)
    rows = await db.fetchall(
        "SELECT substr(started_at, 1, 10) AS day, tier, status, count(*) AS n, coalesce(sum(cost_usd), 0) AS cost,"
        " sum(escalated_to IS NOT NULL) AS escalations, sum(attention IS NOT NULL) AS attention"
        " FROM sessions WHERE started_at >= ? GROUP BY day, tier, status", (names[0],))
    out: dict[str, StatsDay] = {name: _empty_day(name) for name in names}
    for r in rows:
        day = out.get(r["day"])
        if day is None:  # started "in the future" (a clock moved back): not in the window
            continue
        n, cost = int(r["n"]), float(r["cost"])
        day["sessions"] += n
        if r["status"] in _STATUS_KEYS:
            day[_STATUS_KEYS[r["status"]]] += n  # type: ignore[literal-required]
        day["escalations"] += int(r["escalations"] or 0)
        day["attention"] += int(r["attention"] or 0)
        day["cost_usd"] += cost
        _tier(day, r["tier"])["sessions"] += n
        _tier(day, r["tier"])["cost_usd"] += cost
    for day in out.values():  # sums of REAL values: rounded to a micro-dollar, as people read them
        day["cost_usd"] = round(day["cost_usd"], 6)
        for t in day["tiers"]:
            t["cost_usd"] = round(t["cost_usd"], 6)
    return list(out.values())


_STATUS_KEYS = {SessionStatus.RUNNING: "running", SessionStatus.COMPLETED: "completed",
                SessionStatus.FAILED: "failed", SessionStatus.INTERRUPTED: "interrupted"}


def _empty_day(name: str) -> StatsDay:
    return {"day": name, "sessions": 0, "running": 0, "completed": 0, "failed": 0, "interrupted": 0,
            "escalations": 0, "attention": 0, "cost_usd": 0.0,
            "tiers": [{"tier": t, "sessions": 0, "cost_usd": 0.0} for t in TIERS]}


def _tier(day: StatsDay, tier: int | None) -> TierCost:
    for t in day["tiers"]:
        if t["tier"] == tier:
            return t
    added: TierCost = {"tier": tier, "sessions": 0, "cost_usd": 0.0}
    day["tiers"].append(added)
    return added


async def all_time(db: Database) -> AllTime:
    row = await db.fetchone("SELECT count(*) AS sessions, coalesce(sum(cost_usd), 0) AS cost_usd FROM sessions")
    return {"sessions": int(row["sessions"]) if row else 0,
            "cost_usd": round(float(row["cost_usd"]), 6) if row else 0.0}


async def chain_sums(db: Database, chain_ids: Iterable[int]) -> dict[int, ChainSum]:
    """The sessions and cost of each chain given (by its root id), read in one query."""
    ids = sorted(set(chain_ids))
    if not ids:
        return {}
    marks = ", ".join("?" * len(ids))
    rows = await db.fetchall(
        f"SELECT chain_id, count(*) AS sessions, coalesce(sum(cost_usd), 0) AS cost_usd FROM sessions"  # noqa: S608 (placeholders only)
        f" WHERE chain_id IN ({marks}) GROUP BY chain_id", ids)
    return {int(r["chain_id"]): {"sessions": int(r["sessions"]), "cost_usd": round(float(r["cost_usd"]), 6)}
            for r in rows}


async def chain_rollup(db: Database, days: int, *, limit: int = 100, offset: int = 0,
                       now: datetime | None = None) -> list[ChainRollupRow]:
    """The chains whose first session started in the window, newest first. A chain that began
    before the window is left out whole (not cut): its root is the smallest id of its group."""
    rows = await db.fetchall(
        "SELECT coalesce(chain_id, id) AS chain_root_id, count(*) AS sessions, max(tier) AS max_tier,"
        " sum(status = 'running') AS running, sum(status = 'failed') AS failed,"
        " sum(attention IS NOT NULL) AS attention, coalesce(sum(cost_usd), 0) AS cost_usd,"
        " coalesce(sum(input_tokens), 0) AS input_tokens, coalesce(sum(output_tokens), 0) AS output_tokens,"
        " coalesce(sum(duration_ms), 0) AS duration_ms, min(started_at) AS started_at,"
        " CASE WHEN sum(status = 'running') > 0 THEN NULL ELSE max(ended_at) END AS ended_at"
        " FROM sessions WHERE started_at >= ? GROUP BY chain_root_id HAVING min(id) = coalesce(chain_id, id)"
        " ORDER BY chain_root_id DESC LIMIT ? OFFSET ?", (since_day(days, now), limit, offset))
    out = [dict(r) for r in rows]
    for r in out:
        r["cost_usd"] = round(float(r["cost_usd"]), 6)
    return cast(list[ChainRollupRow], out)


async def evidence_counts(db: Database, since: str | None = None) -> list[EvidenceCount]:
    """Verified, unsupported and uncited findings per tier and model, of the sessions started on or
    after the day ``since`` (all when None), tier then model order."""
    rows = await db.fetchall(
        "SELECT tier, coalesce(model, coalesce(cli_model, '')) AS model, sum(coalesce(findings_verified, 0)) AS verified,"
        " sum(coalesce(findings_unsupported, 0)) AS unsupported, sum(coalesce(findings_uncited, 0)) AS uncited"
        " FROM sessions WHERE started_at >= ? AND findings_verified IS NOT NULL"
        " GROUP BY tier, 2 ORDER BY tier, 2", (since or "",))
    return [{"tier": r["tier"], "model": str(r["model"]), "verified": int(r["verified"]),
             "unsupported": int(r["unsupported"]), "uncited": int(r["uncited"])} for r in rows]
