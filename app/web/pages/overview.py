"""The overview (``/``) and its Run Now form.

The overview leads with the answer (one headline, :mod:`app.web.pages.console`), then what needs
a human, the per-service grid, the open incidents worst first, the runs queued by alerts, the
pending approvals, the latest chain, alerts, cooldowns, notifications and the scheduler. Run Now
starts a cycle the way ``POST /api/v1/runs`` does (``Supervisor.start_cycle``).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.engine import cooldowns as cooldown_engine
from app.errors import CycleBusy
from app.store import approvals as approval_store
from app.store import chains, dashboard, findings, run_queue
from app.store import incidents as incident_store
from app.store import nodes as node_store
from app.store import notifications as notification_store
from app.store import sessions as session_store
from app.supervisor.credentials import ModelTiersPaused
from app.supervisor.guards import BudgetSpent, tier0_problem
from app.supervisor.launch import CLINotFound, resolve_binary
from app.vocab import MIN_TIER, ApprovalStatus, Trigger
from app.web.common import state
from app.web.faults import storage_fault, unavailable
from app.web.limits import PROMPT_MAX_CHARS
from app.web.pages import console
from app.web.pages.forms import page_notice, read_form, see_other
from app.web.pages.render import render_event_row
from app.web.templating import page

log = logging.getLogger(__name__)

OVERVIEW_INCIDENTS = 20
OVERVIEW_NOTIFICATIONS = 6  # the newest notifications on the overview
OVERVIEW_ACTIONS = 10  # recent actions in the Cooldowns section
OVERVIEW_ATTENTION = 5  # the newest unacknowledged needs-attention items; the rest are counted
GRID_CYCLES = 20  # cycles of status history per service on the overview


def _cli_problem(request: Request) -> str | None:
    settings = state(request).settings
    try:
        resolve_binary(settings.claude_bin, os.environ.get("PATH"))
    except CLINotFound as exc:
        return str(exc)
    return None


async def cooldowns_ctx(request: Request) -> dict[str, Any]:
    """The overview's Cooldowns section; a bad TIEROPS_COOLDOWNS is shown, not a 500."""
    st = state(request)
    try:
        limits = cooldown_engine.parse_limits(st.settings.cooldowns)
    except cooldown_engine.CooldownError as exc:
        return {"error": str(exc), "limits": [], "active": [], "recent": [], "proposals": []}
    return {"error": None, **await cooldown_engine.report(st.db, limits, recent=OVERVIEW_ACTIONS)}


async def _overview_ctx(request: Request) -> dict[str, Any]:
    st = state(request)
    db = st.db
    chain_id = await chains.latest_chain_id(db)
    chain = await chains.chain_links(db, chain_id) if chain_id is not None else []
    sup = st.supervisor
    cli_error = _cli_problem(request)
    # The overview leads with what is broken now, worst first, then most recent.
    unresolved = await incident_store.list_incidents(db, status="unresolved", limit=OVERVIEW_INCIDENTS + 1)
    attention, attention_total = await dashboard.open_attention(db, OVERVIEW_ATTENTION)
    # alerts in: open incidents whose investigation could not be queued (no session carries them)
    flagged, flagged_total = await dashboard.incident_attention(db, OVERVIEW_ATTENTION)
    return {
        # the answer first — one headline, then what needs a human, then the grid
        "headline": await console.headline(st, chain),
        "attention": attention, "attention_more": max(0, attention_total - len(attention)),
        "incident_attention": flagged, "incident_attention_more": max(0, flagged_total - len(flagged)),
        "grid": console.grid_view(await dashboard.service_grid(db, GRID_CYCLES)),
        "today": await dashboard.today(db),
        "incidents": sorted(unresolved[:OVERVIEW_INCIDENTS],
                            key=lambda i: -incident_store.SEVERITY_RANK.get(i["severity"], 1)),
        "more_incidents": len(unresolved) > OVERVIEW_INCIDENTS,
        "queued_runs": await run_queue.waiting(db, OVERVIEW_INCIDENTS),  # alerts waiting for a cycle
        "chain": chain,
        "chain_cost": sum(s["cost_usd"] or 0 for s in chain),
        "alerts": [render_event_row(e) for e in await findings.recent_alerts(db, 20)],
        "cooldowns": await cooldowns_ctx(request),
        "running": await dashboard.running_sessions(db, 20),
        **await _nodes(request),
        # the Notifications panel (templates/overview.html, after the Scheduler)
        "notify": sup.notifier.status(),
        "notifications": await notification_store.recent(db, OVERVIEW_NOTIFICATIONS),
        # escalations waiting for an operator (templates/_approvals.html), right after the incidents
        "approvals": await approval_store.list_approvals(db, status=ApprovalStatus.PENDING),
        "approval_back": "overview", "note_max": incident_store.NOTE_MAX,
        "busy": sup.busy,
        "full": not sup.has_capacity,  # Run Now would be refused
        "cycles_running": len(sup.runs),
        "max_concurrent": sup.settings.max_concurrent,
        "next_run_at": sup.next_run_at.isoformat(timespec="seconds") if sup.next_run_at else None,
        "schedule": getattr(st.settings, "schedule", None),
        "cron": st.settings.cron,
        "interval": int(st.supervisor.cycle_interval()),
        "probe_only": st.settings.checks is not None,  # without the CLI, tier 0 still runs
        "max_tier": st.settings.max_tier,
        "cli_error": cli_error,
        "run_error": None,
        "form": {"tier": str(st.settings.first_tier), "prompt": "", "dry_run": st.settings.dry_run},
        # what the language-model tiers cost today against TIEROPS_DAILY_BUDGET_USD
        "spent_today": await session_store.model_cost_today(db),
        "daily_budget": st.settings.daily_budget_usd,
        "dry_run_always": st.settings.dry_run,
    }


async def _nodes(request: Request) -> dict[str, Any]:
    """Every node seen on the store (shown when there is more than this one)."""
    node = getattr(request.app.state, "node", None)
    if node is None:
        return {"nodes": []}
    rows = await node_store.list_nodes(state(request).db)
    return {"this_node": node.id, "nodes": [{**r, "state": "stopped" if r["stopped_at"] else
                                             "gone" if r["seen_s"] > 2 * node.lease_s else "up"} for r in rows]}


async def overview(request: Request) -> Response:
    return page(request, "overview.html", page_notice(request, await _overview_ctx(request)))


async def run_now(request: Request) -> Response:
    """The Run Now form: the same start as POST /api/v1/runs (Supervisor.start_cycle)."""
    st = state(request)
    form = await read_form(request)
    first = str(st.settings.first_tier)
    tier_text = form.get("tier", first).strip() or first
    prompt = form.get("prompt", "").strip()
    dry_run = form.get("dry_run", "") != ""  # the checkbox is sent only when ticked
    try:
        tier = int(tier_text)
    except ValueError:
        tier = -1
    error, status = None, 422
    if not MIN_TIER <= tier <= st.settings.max_tier:
        error = f"Tier must be a number from {MIN_TIER} to {st.settings.max_tier}."
    elif (problem := tier0_problem(st.settings, tier)):
        error = problem
    elif len(prompt) > PROMPT_MAX_CHARS:
        error = f"The prompt is too long ({len(prompt):,} characters; at most {PROMPT_MAX_CHARS:,})."
    elif "\x00" in prompt:
        error = "The prompt must not contain a NUL character (it cannot be passed on a command line)."
    else:
        try:
            started = await st.supervisor.start_cycle(tier=tier, prompt=prompt or None, trigger=Trigger.MANUAL,
                                                      dry_run=dry_run)
        except (CycleBusy, BudgetSpent, ModelTiersPaused) as exc:
            error, status = str(exc), 409
        except Exception as exc:  # the cycle failed before its first session (logged by the supervisor)
            if (reason := storage_fault(exc)) is not None:  # the error page, 503: this page needs the store too
                raise unavailable(f"the cycle could not start: {reason}") from None
            error, status = f"The cycle could not start: {type(exc).__name__}: {exc}", 500
        else:
            if started.session_pk is not None:
                return see_other(f"/sessions/{started.session_pk}")
            if started.task.done():
                return see_other("/sessions?notice=run_finished")
            return see_other("/?notice=run_started")
    ctx = await _overview_ctx(request)
    ctx.update(run_error=error, form={"tier": tier_text, "prompt": prompt, "dry_run": dry_run})
    return page(request, "overview.html", ctx, status)



routes = [
    Route("/", overview, methods=["GET"]),
    Route("/run", run_now, methods=["POST"]),
]
