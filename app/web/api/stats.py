"""Statistics for widgets and the roll-ups of the sessions API.

* ``GET /api/v1/stats?days=N`` — one JSON object a Homepage ``customapi`` widget or a Grafana
  JSON datasource can read by path (``sessions.today``, ``cost.today_usd``, ``success_rate``,
  ``incidents.open``): the window's sessions by status, success rate, escalations, cost in total,
  today and per tier, every day of the window (zero-filled, oldest first), open incidents by
  severity, the all-time totals and the window's findings by evidence status per tier and model
  (verified / unsupported / uncited: does a cheaper model invent more?). The ``/stats`` page renders the same object
  (:func:`stats_body`), so the charts and the API cannot disagree.
* ``GET /api/v1/sessions/rollup?by=day|chain&days=N`` — cost roll-ups: per day, or per
  escalation chain (newest first, paged with ``limit``/``offset``).
* ``GET /api/v1/sessions`` items carry their chain's totals (:func:`with_chains`): the chain's
  root id, its number of sessions and its cost; a session outside any chain (ingested) is a
  chain of one.

The response shapes are the ``TypedDict``\\ s below; the OpenAPI document is generated from
these types, and the query parameter ranges from the constants here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TypedDict

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.clock import utcnow
from app.store import incidents as incident_store
from app.store import stats as stats_store
from app.store.db import Database
from app.store.rows import SessionListRow
from app.store.stats import AllTime, ChainRollupRow, EvidenceCount, StatsDay, TierCost
from app.vocab import IncidentStatus, Level
from app.web.common import choice_param, int_param, state

log = logging.getLogger(__name__)

# (default, minimum, maximum) of ?days= and of the chains' ?limit=: read by the handlers below
# and by the OpenAPI document.
STATS_DAYS = (14, 1, 365)
ROLLUP_LIMIT = (100, 1, 1000)
ROLLUP_BY = ("day", "chain")


class SessionCounts(TypedDict):
    total: int
    today: int
    running: int
    completed: int
    failed: int
    interrupted: int
    attention: int  # sessions flagged as needing a human


class CostSummary(TypedDict):
    total_usd: float  # the window's
    today_usd: float
    by_tier: list[TierCost]


class SeverityCounts(TypedDict):
    info: int
    warning: int
    critical: int


class IncidentSummary(TypedDict):
    open: int  # unresolved: open or acknowledged
    acknowledged: int
    by_severity: SeverityCounts


class StatsBody(TypedDict):
    generated_at: str
    days: int
    since: str  # the window's first UTC day
    sessions: SessionCounts
    success_rate: float | None  # completed / finished in the window; None while nothing finished
    escalations: int
    cost: CostSummary
    by_day: list[StatsDay]
    incidents: IncidentSummary
    all_time: AllTime
    evidence: list[EvidenceCount]  # the window's checked findings per tier and model


class RollupBody(TypedDict):
    by: str  # day | chain
    days: int
    since: str
    rows: Sequence[StatsDay] | Sequence[ChainRollupRow]


class SessionListItem(SessionListRow):
    """A listed session with the totals of its escalation chain."""

    chain_root_id: int
    chain_sessions: int
    chain_cost_usd: float


async def stats_body(db: Database, days: int, *, now: datetime | None = None) -> StatsBody:
    """The statistics of the ``days``-day window ending today (UTC)."""
    by_day = await stats_store.daily(db, days, now=now)
    counts: SessionCounts = {"total": 0, "today": by_day[-1]["sessions"], "running": 0, "completed": 0,
                             "failed": 0, "interrupted": 0, "attention": 0}
    tiers: dict[int | None, TierCost] = {}
    escalations = 0
    total_cost = 0.0
    for day in by_day:
        counts["total"] += day["sessions"]
        counts["running"] += day["running"]
        counts["completed"] += day["completed"]
        counts["failed"] += day["failed"]
        counts["interrupted"] += day["interrupted"]
        counts["attention"] += day["attention"]
        escalations += day["escalations"]
        total_cost += day["cost_usd"]
        for t in day["tiers"]:
            into = tiers.setdefault(t["tier"], {"tier": t["tier"], "sessions": 0, "cost_usd": 0.0})
            into["sessions"] += t["sessions"]
            into["cost_usd"] = round(into["cost_usd"] + t["cost_usd"], 6)
    finished = counts["completed"] + counts["failed"] + counts["interrupted"]
    return {
        "generated_at": utcnow(), "days": len(by_day), "since": by_day[0]["day"], "sessions": counts,
        "success_rate": round(counts["completed"] / finished, 4) if finished else None,
        "escalations": escalations,
        "cost": {"total_usd": round(total_cost, 6), "today_usd": by_day[-1]["cost_usd"],
                 "by_tier": list(tiers.values())},
        "by_day": by_day, "incidents": await _incidents(db), "all_time": await stats_store.all_time(db),
        "evidence": await stats_store.evidence_counts(db, by_day[0]["day"])}


async def _incidents(db: Database) -> IncidentSummary:
    severities: SeverityCounts = {"info": 0, "warning": 0, "critical": 0}
    summary: IncidentSummary = {"open": 0, "acknowledged": 0, "by_severity": severities}
    for c in await incident_store.counts(db):  # unresolved only
        summary["open"] += c["count"]
        if c["status"] == IncidentStatus.ACKNOWLEDGED:
            summary["acknowledged"] += c["count"]
        if c["severity"] == Level.INFO:
            severities["info"] += c["count"]
        elif c["severity"] == Level.CRITICAL:
            severities["critical"] += c["count"]
        else:
            severities["warning"] += c["count"]
    return summary


def days_param(request: Request) -> int:
    """``?days=``: 1 to 365 (422 otherwise), 14 when not given."""
    default, low, high = STATS_DAYS
    return int_param(request, "days", default, minimum=low, maximum=high)


async def with_chains(db: Database, rows: list[SessionListRow]) -> list[SessionListItem]:
    """``rows`` with their chain's root id, number of sessions and cost (one query for the page)."""
    sums = await stats_store.chain_sums(db, (r["chain_id"] for r in rows if r["chain_id"] is not None))
    out: list[SessionListItem] = []
    for r in rows:
        chain = sums.get(r["chain_id"]) if r["chain_id"] is not None else None
        if chain is None:  # not in a chain (ingested): a chain of one
            chain = {"sessions": 1, "cost_usd": round(float(r["cost_usd"] or 0), 6)}
        out.append({**r, "chain_root_id": r["chain_id"] if r["chain_id"] is not None else r["id"],
                    "chain_sessions": chain["sessions"], "chain_cost_usd": chain["cost_usd"]})
    return out


async def stats(request: Request) -> Response:
    body = await stats_body(state(request).db, days_param(request))
    return JSONResponse(body)


async def rollup(request: Request) -> Response:
    db = state(request).db
    by = choice_param(request, "by", ROLLUP_BY) or "day"
    days = days_param(request)
    default, low, high = ROLLUP_LIMIT
    limit = int_param(request, "limit", default, minimum=low, maximum=high)
    offset = int_param(request, "offset", 0)
    rows: Sequence[StatsDay] | Sequence[ChainRollupRow]
    if by == "chain":
        rows = await stats_store.chain_rollup(db, days, limit=limit, offset=offset)
    else:
        rows = await stats_store.daily(db, days)
    body: RollupBody = {"by": by, "days": days, "since": stats_store.since_day(days), "rows": rows}
    return JSONResponse(body)
