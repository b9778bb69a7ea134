"""The overview's answer first: one headline that says whether everything is OK.

"Is everything OK?" has one answer, decided here, worst first; the monitor's own part is the very
decision ``/healthz`` makes (``app/supervisor/health.py``):

1. **Monitor unhealthy** (red; ``/healthz`` 503): the database cannot be written, the schedule is
   stale or the last ``TIEROPS_UNHEALTHY_AFTER`` cycles failed.
2. **Model tiers unavailable** (amber, ``data-state="degraded"``; ``/healthz`` 200 ``degraded``):
   tier 0 runs, but no language-model tier can start (no claude CLI while ``TIEROPS_MAX_TIER`` >= 1,
   the daily budget spent, the model tiers paused after rejected credentials).
3. **N open incidents**: unresolved incidents, the worst named (listed under the first two too).
4. **All clear**.

Each state has a colour *and* a word and a symbol, a stable ``#headline`` id and ``data-state``,
and the time of the last and the next cycle. The last cycle is read from the database (the newest
chain), so cycles of ``tierops run`` or ``supervise`` count too; the supervisor's own record wins
when newer (a cycle that failed before its first session has no row). This module also shapes the
service grid's cells for the template (symbol, word, link).
"""

from __future__ import annotations

import logging
from typing import Any, TypedDict

from app.clock import parse_stamp
from app.store import dashboard
from app.store.dashboard import GridCell, ServiceGrid
from app.store.rows import ChainLink
from app.supervisor.cycle_health import cycle_status
from app.supervisor.health import assess
from app.web.common import WebState

log = logging.getLogger(__name__)

STATE_SYMBOL = {"unhealthy": "✕", "degraded": "⚠", "incidents": "!", "clear": "✓"}
# Service grid cells: a symbol and a word beside the colour (colour-blind safe).
CELL_SYMBOL = {"ok": "✓", "degraded": "!", "down": "✕", "unknown": "?"}
CELL_WORD = {"ok": "healthy", "degraded": "degraded", "down": "down", "unknown": "unknown status"}


class Headline(TypedDict):
    state: str  # unhealthy | degraded | incidents | clear
    symbol: str
    title: str
    problems: list[str]  # unhealthy: why; degraded: the warnings
    incidents: dashboard.IncidentTally
    last_cycle_at: str | None
    last_cycle_status: str | None
    last_cycle_session: int | None
    next_cycle: str  # a time, or words ("not scheduled", "after the running cycle")
    next_cycle_at: str | None


def _newer(a: str | None, b: str | None) -> bool:
    """True when stamp ``a`` is later than ``b`` (unreadable stamps lose)."""
    if not a:
        return False
    if not b:
        return True
    try:
        return parse_stamp(a) > parse_stamp(b)
    except ValueError:
        return False


async def headline(st: WebState, chain: list[ChainLink]) -> Headline:
    sup = st.supervisor
    health = await assess(sup)
    tally = await dashboard.incident_tally(st.db)
    last_at: str | None = None
    last_status: str | None = None
    last_session: int | None = None
    if chain:
        last_at = chain[-1]["ended_at"] or chain[0]["started_at"]
        last_status = cycle_status(chain) if chain[-1]["ended_at"] else "running"
        last_session = chain[0]["id"]
    if _newer(sup.last_cycle_at, last_at):  # this process finished a cycle after the newest chain's row
        last_at, last_status = sup.last_cycle_at, sup.last_cycle_status
        if last_status == "error" or (last_status or "").startswith("skipped"):  # no row to link
            last_session = None
    next_at = sup.next_run_at.isoformat(timespec="seconds") if sup.next_run_at else None
    if not st.settings.schedule:
        next_words = "not scheduled (TIEROPS_SCHEDULE is off: Run Now only)"
        next_at = None
    elif next_at:
        next_words = next_at
    elif sup.busy:
        next_words = "after the running cycle"
    else:
        next_words = "starting"
    found = health.problems or health.warnings
    if health.problems:
        state = "unhealthy"
        title = "Monitor unhealthy"
    elif health.warnings:
        state = "degraded"
        title = "Model tiers unavailable"
    elif tally["unresolved"]:
        state = "incidents"
        n = tally["unresolved"]
        title = f"{n} open incident{'s' if n != 1 else ''}"
    else:
        state, title = "clear", "All clear"
    return {"state": state, "symbol": STATE_SYMBOL[state], "title": title, "problems": found, "incidents": tally,
            "last_cycle_at": last_at, "last_cycle_status": last_status, "last_cycle_session": last_session,
            "next_cycle": next_words, "next_cycle_at": next_at}


def grid_view(grid: ServiceGrid) -> dict[str, Any]:
    """The grid with each cell's symbol, word and a label for its ``title``/``aria-label``."""

    def cell(c: GridCell | None, service: str, started: str) -> dict[str, Any]:
        if c is None:
            return {"state": "none", "symbol": "·", "label": f"{service}: not checked in the cycle of {started} UTC",
                    "link": None}
        word = CELL_WORD[c["state"]]
        detail = f" — {c['detail']}" if c["detail"] else ""
        checks = f" ({c['checks']} checks)" if c["checks"] > 1 else ""
        return {"state": c["state"], "symbol": CELL_SYMBOL[c["state"]], "word": word,
                "label": f"{service}: {word} ({c['status']}){checks} at {c['at'][:19].replace('T', ' ')} UTC, "
                         f"session #{c['session_pk']}{detail}"[:300],
                "link": f"/sessions/{c['session_pk']}"}

    starts = [c["started_at"][:19].replace("T", " ") for c in grid["cycles"]]
    rows = []
    for s in grid["services"]:
        current = s["current"]
        rows.append({"service": s["service"], "state": current["state"], "symbol": CELL_SYMBOL[current["state"]],
                     "word": CELL_WORD[current["state"]], "status": current["status"], "detail": current["detail"],
                     "at": current["at"], "session_pk": current["session_pk"],
                     "cells": [cell(c, s["service"], starts[i]) for i, c in enumerate(s["cells"])]})
    return {"cycles": len(grid["cycles"]), "rows": rows}
