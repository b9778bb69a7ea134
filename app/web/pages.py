"""Server-rendered dashboard pages: overview, sessions, one session, events, memories.

Pages read through the named functions of :mod:`app.store` and render Jinja templates
(autoescape on) with :func:`app.web.templating.page`; the transcript and event rows come from
:mod:`app.web.render`, the same fragments the SSE streams send. Forms are plain HTML POSTs (CSRF
is checked by the security middleware from the Origin / Sec-Fetch-Site headers) and answer with a
303 redirect, or re-render the page with a message and a 4xx status when the input is wrong. A bad
query parameter or an unknown id raises :class:`~app.web.common.ApiError`, which the app's error
handler renders as the error page; nothing a visitor types can make a page fail with 500.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from app.engine import cooldowns as cooldown_engine
from app.errors import CycleBusy
from app.store import approvals as approval_store
from app.store import attempts, chains, dashboard, findings, provenance, run_queue
from app.store import cooldowns as action_store
from app.store import incidents as incident_store
from app.store import notifications as notification_store
from app.store import sessions as session_store
from app.store.activity import transcript_page
from app.store.sessions import AttentionStateError
from app.supervisor.chain import BudgetSpent, tier0_problem
from app.supervisor.credentials import ModelTiersPaused
from app.supervisor.remote_stop import StopRefused, refusal, stop_anywhere
from app.supervisor.runner import CLINotFound, resolve_binary
from app.vocab import MAX_TIER, MIN_TIER, ApprovalStatus, Level, SessionStatus, Trigger, values
from app.web import console, verdict
from app.web.common import ApiError, choice_param, int_param, path_int, read_body, state
from app.web.faults import storage_fault, unavailable
from app.web.incidents_api import actor_for
from app.web.limits import (
    FILTER_TEXT_MAX,
    FORM_MAX_BYTES,
    FORM_MAX_FIELDS,
    PROMPT_MAX_CHARS,
)
from app.web.openapi import PROPOSALS_MAX
from app.web.render import PAGE_RAW_LIMIT, render_activity, render_event_row, render_json
from app.web.results import failure_of
from app.web.templating import page

log = logging.getLogger(__name__)

SESSIONS_PER_PAGE = 50
EVENTS_PER_PAGE = 100
OVERVIEW_INCIDENTS = 20
OVERVIEW_NOTIFICATIONS = 6  # issue #13: the newest notifications on the overview
OVERVIEW_ACTIONS = 10  # issue #13: recent actions in the Cooldowns section
TRANSCRIPT_ROWS = 200  # rendering costs ~0.2 ms a row (bench/pages.py); "earlier lines" pages back
OVERVIEW_ATTENTION = 5  # issue #14: the newest unacknowledged needs-attention items; the rest are counted
GRID_CYCLES = 20  # issue #14: cycles of status history per service on the overview
# Issue #14: fixed texts after an acknowledgement (over the shared ?notice= texts of templating.py)
PAGE_NOTICES = {"attention_acked": "Acknowledged: the overview no longer lists it; this page keeps it, marked."}


async def read_form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body as a dict (last value wins).

    Parsed here rather than with ``request.form()``: that needs python-multipart, and the
    dashboard's forms are all urlencoded."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/x-www-form-urlencoded":
        raise ApiError(415, "unsupported_media_type", "forms must be sent as application/x-www-form-urlencoded")
    body = await read_body(request, FORM_MAX_BYTES, "the form")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "bad_request", "form is not valid UTF-8") from None
    try:
        return dict(parse_qsl(text, keep_blank_values=True, max_num_fields=FORM_MAX_FIELDS))
    except ValueError:  # urllib's "Max number of fields exceeded": the sender's input, never a 500
        raise ApiError(400, "bad_request", f"the form has more than {FORM_MAX_FIELDS} fields; send only the "
                                           "fields of the dashboard's form") from None


def page_query(**params: Any) -> str:
    clean = {k: v for k, v in params.items() if v is not None and v != ""}
    return ("?" + urlencode(clean)) if clean else ""


def see_other(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def filter_text(request: Request, name: str) -> str | None:
    return (request.query_params.get(name) or "").strip()[:FILTER_TEXT_MAX] or None


def not_found(what: str, pk: int) -> ApiError:
    return ApiError(404, "not_found", f"There is no {what} {pk}.")


# -- overview ----------------------------------------------------------------------------------

def _cli_problem(request: Request) -> str | None:
    settings = state(request).settings
    try:
        resolve_binary(settings.claude_bin, os.environ.get("PATH"))
    except CLINotFound as exc:
        return str(exc)
    return None


async def cooldowns_ctx(request: Request) -> dict[str, Any]:
    """The overview's Cooldowns section (issue #13); a bad TIEROPS_COOLDOWNS is shown, not a 500."""
    st = state(request)
    try:
        limits = cooldown_engine.parse_limits(st.settings.cooldowns)
    except cooldown_engine.CooldownError as exc:
        return {"error": str(exc), "limits": [], "active": [], "recent": [], "proposals": []}
    return {"error": None, **await cooldown_engine.report(st.db, limits, recent=OVERVIEW_ACTIONS)}


def _page_notice(request: Request, ctx: dict[str, Any]) -> dict[str, Any]:
    if (notice := PAGE_NOTICES.get(request.query_params.get("notice", ""))) is not None:
        ctx["notice"] = notice
    return ctx


async def _overview_ctx(request: Request) -> dict[str, Any]:
    st = state(request)
    db = st.db
    chain_id = await chains.latest_chain_id(db)
    chain = await chains.chain_links(db, chain_id) if chain_id is not None else []
    sup = st.supervisor
    cli_error = _cli_problem(request)
    # Issue #12: the overview leads with what is broken now, worst first, then most recent.
    unresolved = await incident_store.list_incidents(db, status="unresolved", limit=OVERVIEW_INCIDENTS + 1)
    attention, attention_total = await dashboard.open_attention(db, OVERVIEW_ATTENTION)
    # alerts in: open incidents whose investigation could not be queued (no session carries them)
    flagged, flagged_total = await dashboard.incident_attention(db, OVERVIEW_ATTENTION)
    return {
        # issue #14: the answer first — one headline, then what needs a human, then the grid
        "headline": await console.headline(st, chain),
        "attention": attention, "attention_more": max(0, attention_total - len(attention)),
        "incident_attention": flagged, "incident_attention_more": max(0, flagged_total - len(flagged)),
        "grid": console.grid_view(await dashboard.service_grid(db, GRID_CYCLES)),
        "today": await dashboard.today(db),
        "incidents": sorted(unresolved[:OVERVIEW_INCIDENTS],
                            key=lambda i: -incident_store.SEVERITY_RANK.get(i["severity"], 1)),
        "more_incidents": len(unresolved) > OVERVIEW_INCIDENTS,
        "queued_runs": await run_queue.waiting(db, OVERVIEW_INCIDENTS),  # issue #13: alerts waiting for a cycle
        "chain": chain,
        "chain_cost": sum(s["cost_usd"] or 0 for s in chain),
        "alerts": [render_event_row(e) for e in await findings.recent_alerts(db, 20)],
        "cooldowns": await cooldowns_ctx(request),
        "running": await dashboard.running_sessions(db, 20),
        # issue #13: the Notifications panel (templates/overview.html, after the Scheduler)
        "notify": sup.notifier.status(),
        "notifications": await notification_store.recent(db, OVERVIEW_NOTIFICATIONS),
        # issue #13: escalations waiting for an operator (templates/_approvals.html), right after the incidents
        "approvals": await approval_store.list_approvals(db, status=ApprovalStatus.PENDING),
        "approval_back": "overview", "note_max": incident_store.NOTE_MAX,
        "busy": sup.busy,
        "next_run_at": sup.next_run_at.isoformat(timespec="seconds") if sup.next_run_at else None,
        "schedule": getattr(st.settings, "schedule", None),
        "cron": st.settings.cron,
        "interval": int(st.supervisor.cycle_interval()),
        "probe_only": st.settings.checks is not None,  # issue #12: without the CLI, tier 0 still runs
        "max_tier": st.settings.max_tier,
        "cli_error": cli_error,
        "run_error": None,
        "form": {"tier": str(st.settings.first_tier), "prompt": "", "dry_run": st.settings.dry_run},
        # issue #13: what the language-model tiers cost today against TIEROPS_DAILY_BUDGET_USD
        "spent_today": await session_store.model_cost_today(db),
        "daily_budget": st.settings.daily_budget_usd,
        "dry_run_always": st.settings.dry_run,
    }


async def overview(request: Request) -> Response:
    return page(request, "overview.html", _page_notice(request, await _overview_ctx(request)))


async def run_now(request: Request) -> Response:
    """The Run Now form: the same start as POST /api/v1/runs (Supervisor.start_cycle)."""
    st = state(request)
    form = await read_form(request)
    first = str(st.settings.first_tier)
    tier_text = form.get("tier", first).strip() or first
    prompt = form.get("prompt", "").strip()
    dry_run = form.get("dry_run", "") != ""  # issue #13: the checkbox is sent only when ticked
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


# -- sessions ----------------------------------------------------------------------------------

async def sessions_page(request: Request) -> Response:
    st = state(request)
    pg = int_param(request, "page", 1, minimum=1, maximum=100_000)
    status = choice_param(request, "status", values(SessionStatus))
    tier = int_param(request, "tier", None, minimum=MIN_TIER, maximum=MAX_TIER)
    # issue #14: ?attention=open lists what needs a human and is not acknowledged (the overview's link)
    attention = choice_param(request, "attention", ("open",))
    rows = await session_store.list_sessions(st.db, status=status, tier=tier, limit=SESSIONS_PER_PAGE + 1,
                                             offset=(pg - 1) * SESSIONS_PER_PAGE, attention_open=attention == "open")
    ctx = {
        "sessions": rows[:SESSIONS_PER_PAGE], "page": pg, "status": status, "tier": tier,
        "statuses": values(SessionStatus), "attention_filter": attention,
        "prev_url": page_query(page=pg - 1, status=status, tier=tier, attention=attention) if pg > 1 else None,
        "next_url": page_query(page=pg + 1, status=status, tier=tier, attention=attention)
        if len(rows) > SESSIONS_PER_PAGE else None,
    }
    if attention == "open":
        ctx["notice"] = "Showing sessions that need attention and are not acknowledged (newest first)."
    return page(request, "sessions.html", ctx)


def _decode_json(value: Any) -> Any:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return json.loads(value)
    return value


def _list_or_empty(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


async def session_page(request: Request) -> Response:
    st = state(request)
    pk = path_int(request)
    before = int_param(request, "before", None, minimum=1)
    s = await session_store.get_session(st.db, pk)
    if s is None:
        raise not_found("session", pk)
    newest_first = await transcript_page(st.db, pk, before=before, limit=TRANSCRIPT_ROWS + 1,
                                         raw_limit=PAGE_RAW_LIMIT)
    more = len(newest_first) > TRANSCRIPT_ROWS
    rows = newest_first[:TRANSCRIPT_ROWS][::-1]
    running = s["status"] == SessionStatus.RUNNING
    chain = await chains.chain_links(st.db, s["chain_id"]) if s["chain_id"] is not None else []
    invalid = s["invalid_output"]
    attempt_rows = await attempts.list_attempts(st.db, pk, with_output=True)
    checks = await findings.session_checks(st.db, pk)
    incidents = await incident_store.session_incidents(st.db, pk)
    event_rows = await findings.list_events(st.db, session=pk, limit=200)
    cooldown_rows = await findings.session_cooldowns(st.db, pk)
    approvals = await approval_store.list_approvals(st.db, session_pk=pk)
    # issue #14: the verdict first, and badges on the lines that produced the findings
    badges = await verdict.transcript_badges(st.db, s, attempt_rows, event_rows, cooldown_rows)
    # never "resolved" while an incident it touched (or its chain handed it) is open: who must act
    open_now = await verdict.read_still_open(st.db, s, chain, incidents, st.settings.escalate_after)
    # issue #14: Stop reaches a session another process runs too, when its CLI can be verified
    stop_note = await refusal(st.supervisor, pk) if running else None
    return page(request, "session.html", _page_notice(request, {
        "s": s,
        "verdict": verdict.verdict(s, checks=checks, events=event_rows, incidents=incidents, approvals=approvals,
                                   runs=await provenance.run_totals(st.db, pk),
                                   event_counts=await provenance.event_counts(st.db, pk),
                                   proposals=await action_store.proposals(st.db, session_pk=pk, limit=PROPOSALS_MAX),
                                   open_now=open_now),
        "transcript": [render_activity(r, badges.get(r["seq"])) for r in rows],
        "more_before": rows[0]["seq"] if more and rows else None,
        "viewing_earlier": before is not None,
        "last_seq": rows[-1]["seq"] if rows and before is None else 0,
        "live": running and before is None,
        "running": running,
        "stoppable": running and stop_note is None,
        "stop_note": stop_note,
        "attempts": attempt_rows,
        "failure": failure_of(s, attempt_rows),
        "checks": checks,
        "incidents": incidents,
        "events": [render_event_row(e) for e in event_rows],
        "chain": chain if len(chain) > 1 else [],
        "structured": render_json(s["structured_output"], session_pk=pk) if s["structured_output"] is not None
        else None,
        "invalid": render_json(_decode_json(invalid), session_pk=pk, cls="json schema-error") if invalid else None,
        "validation_errors": _list_or_empty(s["validation_errors"]),
        "failed_checks": _list_or_empty(s["escalation_failed_checks"]),
        "result_errors": _list_or_empty(s["result_errors"]),
        "notes": _list_or_empty(s["notes"]),
        # issue #13: the approvals this session's escalation asked for (pending ones with the form)
        "approvals": approvals,
        "approval_back": "session", "note_max": incident_store.NOTE_MAX,
    }))


async def attention_ack(request: Request) -> Response:
    """Issue #14: acknowledge a session's needs-attention flag from the overview or its page (303
    back to where the form was: ``back`` = overview or session)."""
    pk = path_int(request)
    form = await read_form(request)
    try:
        await session_store.acknowledge_attention(state(request).db, pk, actor_for(request, None))
    except LookupError:
        raise not_found("session", pk) from None
    except AttentionStateError as exc:
        raise ApiError(409, "conflict", f"Nothing to acknowledge: {exc}.") from None
    if form.get("back") == "overview":
        return see_other("/?notice=attention_acked#needs-attention")
    return see_other(f"/sessions/{pk}?notice=attention_acked")


async def stop_session(request: Request) -> Response:
    """Stop, wherever the session runs (issue #14, ``remote_stop``); a refusal (not running, its
    process cannot be verified) is the error page saying why."""
    st = state(request)
    pk = path_int(request)
    try:
        await stop_anywhere(st.supervisor, pk, f"{actor_for(request, None)}, server pid {os.getpid()}")
    except StopRefused as exc:
        raise (not_found("session", pk) if exc.status == 404 else ApiError(exc.status, "not_running", exc.message)) \
            from None
    return see_other(f"/sessions/{pk}?notice=stop_sent")


# -- events ------------------------------------------------------------------------------------

async def events_page(request: Request) -> Response:
    st = state(request)
    pg = int_param(request, "page", 1, minimum=1, maximum=100_000)
    level = choice_param(request, "level", values(Level))
    service = filter_text(request, "service")
    session = int_param(request, "session", None, minimum=1)
    rows = await findings.list_events(st.db, level=level, service=service, session=session,
                                      limit=EVENTS_PER_PAGE + 1, offset=(pg - 1) * EVENTS_PER_PAGE)
    has_next = len(rows) > EVENTS_PER_PAGE
    rows = rows[:EVENTS_PER_PAGE]
    filtered = bool(level or service or session)
    return page(request, "events.html", {
        "rows": [render_event_row(e) for e in rows],
        "level": level, "service": service, "session": session, "levels": values(Level),
        "services": await findings.event_services(st.db),
        "page": pg, "live": pg == 1 and not filtered, "last_event_id": rows[0]["id"] if rows else 0,
        "prev_url": page_query(page=pg - 1, level=level, service=service, session=session) if pg > 1 else None,
        "next_url": page_query(page=pg + 1, level=level, service=service, session=session) if has_next else None,
    })


# -- memories ----------------------------------------------------------------------------------


routes = [
    Route("/", overview, methods=["GET"]),
    Route("/run", run_now, methods=["POST"]),
    Route("/sessions", sessions_page, methods=["GET"]),
    Route("/sessions/{id}", session_page, methods=["GET"]),
    Route("/sessions/{id}/stop", stop_session, methods=["POST"]),
    Route("/sessions/{id}/attention/ack", attention_ack, methods=["POST"]),
    Route("/events", events_page, methods=["GET"]),
]
