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
import math
import os
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from app.clock import utcnow
from app.engine import cooldowns as cooldown_engine
from app.errors import CycleBusy
from app.store import approvals as approval_store
from app.store import attempts, chains, dashboard, findings, run_queue
from app.store import incidents as incident_store
from app.store import memories as memory_store
from app.store import notifications as notification_store
from app.store import sessions as session_store
from app.store.activity import transcript_page
from app.store.memories import MemoryConflict
from app.supervisor.chain import BudgetSpent, tier0_problem
from app.supervisor.runner import CLINotFound, resolve_binary
from app.vocab import MAX_TIER, MIN_TIER, ApprovalStatus, Level, SessionStatus, Trigger, values
from app.web.common import ApiError, choice_param, int_param, path_int, read_body, state
from app.web.limits import (
    FILTER_TEXT_MAX,
    FORM_MAX_BYTES,
    MEMORY_CATEGORY_MAX,
    MEMORY_DEFAULT_CONFIDENCE,
    MEMORY_SERVICE_MAX,
    MEMORY_VALUE_MAX,
    PROMPT_MAX_CHARS,
)
from app.web.render import PAGE_RAW_LIMIT, render_activity, render_event_row, render_json
from app.web.results import failure_of
from app.web.templating import page

log = logging.getLogger(__name__)

SESSIONS_PER_PAGE = 50
EVENTS_PER_PAGE = 100
MEMORIES_PER_PAGE = 200
OVERVIEW_INCIDENTS = 20
OVERVIEW_NOTIFICATIONS = 6  # issue #13: the newest notifications on the overview
OVERVIEW_ACTIONS = 10  # issue #13: recent actions in the Cooldowns section
TRANSCRIPT_ROWS = 200  # rendering costs ~0.2 ms a row (bench/pages.py); "earlier lines" pages back


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
    return dict(parse_qsl(text, keep_blank_values=True, max_num_fields=100))


def _query(**params: Any) -> str:
    clean = {k: v for k, v in params.items() if v is not None and v != ""}
    return ("?" + urlencode(clean)) if clean else ""


def _redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def _filter_text(request: Request, name: str) -> str | None:
    return (request.query_params.get(name) or "").strip()[:FILTER_TEXT_MAX] or None


def _not_found(what: str, pk: int) -> ApiError:
    return ApiError(404, "not_found", f"There is no {what} {pk}.")


# -- overview ----------------------------------------------------------------------------------

def _cli_problem(request: Request) -> str | None:
    settings = state(request).settings
    try:
        resolve_binary(settings.claude_bin, os.environ.get("PATH"))
    except CLINotFound as exc:
        return str(exc)
    return None


async def _cooldowns(request: Request) -> dict[str, Any]:
    """The overview's Cooldowns section (issue #13); a bad TIEROPS_COOLDOWNS is shown, not a 500."""
    st = state(request)
    try:
        limits = cooldown_engine.parse_limits(st.settings.cooldowns)
    except cooldown_engine.CooldownError as exc:
        return {"error": str(exc), "limits": [], "active": [], "recent": []}
    return {"error": None, **await cooldown_engine.report(st.db, limits, recent=OVERVIEW_ACTIONS)}


async def _overview_ctx(request: Request) -> dict[str, Any]:
    st = state(request)
    db = st.db
    chain_id = await chains.latest_chain_id(db)
    chain = await chains.chain_links(db, chain_id) if chain_id is not None else []
    sup = st.supervisor
    # Issue #12: the overview leads with what is broken now, worst first, then most recent.
    unresolved = await incident_store.list_incidents(db, status="unresolved", limit=OVERVIEW_INCIDENTS + 1)
    return {
        "incidents": sorted(unresolved[:OVERVIEW_INCIDENTS],
                            key=lambda i: -incident_store.SEVERITY_RANK.get(i["severity"], 1)),
        "more_incidents": len(unresolved) > OVERVIEW_INCIDENTS,
        "queued_runs": await run_queue.waiting(db, OVERVIEW_INCIDENTS),  # issue #13: alerts waiting for a cycle
        "chain": chain,
        "chain_cost": sum(s["cost_usd"] or 0 for s in chain),
        "checks": await findings.latest_checks(db),
        "alerts": [render_event_row(e) for e in await findings.recent_alerts(db, 20)],
        "cooldowns": await _cooldowns(request),
        "running": await dashboard.running_sessions(db, 20),
        "attention": await dashboard.attention_sessions(db, 5),
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
        "cli_error": _cli_problem(request),
        "run_error": None,
        "form": {"tier": str(st.settings.first_tier), "prompt": "", "dry_run": st.settings.dry_run},
        # issue #13: what the language-model tiers cost today against TIEROPS_DAILY_BUDGET_USD
        "spent_today": await session_store.model_cost_today(db),
        "daily_budget": st.settings.daily_budget_usd,
        "dry_run_always": st.settings.dry_run,
    }


async def overview(request: Request) -> Response:
    return page(request, "overview.html", await _overview_ctx(request))


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
        except (CycleBusy, BudgetSpent) as exc:
            error, status = str(exc), 409
        except Exception as exc:  # the cycle failed before its first session (logged by the supervisor)
            error, status = f"The cycle could not start: {type(exc).__name__}: {exc}", 500
        else:
            if started.session_pk is not None:
                return _redirect(f"/sessions/{started.session_pk}")
            if started.task.done():
                return _redirect("/sessions?notice=run_finished")
            return _redirect("/?notice=run_started")
    ctx = await _overview_ctx(request)
    ctx.update(run_error=error, form={"tier": tier_text, "prompt": prompt, "dry_run": dry_run})
    return page(request, "overview.html", ctx, status)


# -- sessions ----------------------------------------------------------------------------------

async def sessions_page(request: Request) -> Response:
    st = state(request)
    pg = int_param(request, "page", 1, minimum=1, maximum=100_000)
    status = choice_param(request, "status", values(SessionStatus))
    tier = int_param(request, "tier", None, minimum=MIN_TIER, maximum=MAX_TIER)
    rows = await session_store.list_sessions(st.db, status=status, tier=tier, limit=SESSIONS_PER_PAGE + 1,
                                             offset=(pg - 1) * SESSIONS_PER_PAGE)
    return page(request, "sessions.html", {
        "sessions": rows[:SESSIONS_PER_PAGE], "page": pg, "status": status, "tier": tier,
        "statuses": values(SessionStatus),
        "prev_url": _query(page=pg - 1, status=status, tier=tier) if pg > 1 else None,
        "next_url": _query(page=pg + 1, status=status, tier=tier) if len(rows) > SESSIONS_PER_PAGE else None,
    })


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
        raise _not_found("session", pk)
    newest_first = await transcript_page(st.db, pk, before=before, limit=TRANSCRIPT_ROWS + 1,
                                         raw_limit=PAGE_RAW_LIMIT)
    more = len(newest_first) > TRANSCRIPT_ROWS
    rows = newest_first[:TRANSCRIPT_ROWS][::-1]
    running = s["status"] == SessionStatus.RUNNING
    chain = await chains.chain_links(st.db, s["chain_id"]) if s["chain_id"] is not None else []
    invalid = s["invalid_output"]
    attempt_rows = await attempts.list_attempts(st.db, pk, with_output=True)
    return page(request, "session.html", {
        "s": s,
        "transcript": [render_activity(r) for r in rows],
        "more_before": rows[0]["seq"] if more and rows else None,
        "viewing_earlier": before is not None,
        "last_seq": rows[-1]["seq"] if rows and before is None else 0,
        "live": running and before is None,
        "running": running,
        "stoppable": running and pk in st.supervisor.handles,
        "attempts": attempt_rows,
        "failure": failure_of(s, attempt_rows),
        "checks": await findings.session_checks(st.db, pk),
        "incidents": await incident_store.session_incidents(st.db, pk),
        "events": [render_event_row(e) for e in await findings.list_events(st.db, session=pk, limit=200)],
        "chain": chain if len(chain) > 1 else [],
        "structured": render_json(s["structured_output"], session_pk=pk) if s["structured_output"] is not None
        else None,
        "invalid": render_json(_decode_json(invalid), session_pk=pk, cls="json schema-error") if invalid else None,
        "validation_errors": _list_or_empty(s["validation_errors"]),
        "failed_checks": _list_or_empty(s["escalation_failed_checks"]),
        "result_errors": _list_or_empty(s["result_errors"]),
        "notes": _list_or_empty(s["notes"]),
        # issue #13: the approvals this session's escalation asked for (pending ones with the form)
        "approvals": await approval_store.list_approvals(st.db, session_pk=pk),
        "approval_back": "session", "note_max": incident_store.NOTE_MAX,
    })


async def stop_session(request: Request) -> Response:
    st = state(request)
    pk = path_int(request)
    if await session_store.session_status(st.db, pk) is None:
        raise _not_found("session", pk)
    stopped = st.supervisor.stop_session(pk)
    return _redirect(f"/sessions/{pk}?notice={'stop_sent' if stopped else 'stop_unknown'}")


# -- events ------------------------------------------------------------------------------------

async def events_page(request: Request) -> Response:
    st = state(request)
    pg = int_param(request, "page", 1, minimum=1, maximum=100_000)
    level = choice_param(request, "level", values(Level))
    service = _filter_text(request, "service")
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
        "prev_url": _query(page=pg - 1, level=level, service=service, session=session) if pg > 1 else None,
        "next_url": _query(page=pg + 1, level=level, service=service, session=session) if has_next else None,
    })


# -- memories ----------------------------------------------------------------------------------

async def _memories_ctx(request: Request) -> dict[str, Any]:
    """The memories page. Issue #11: showing it sweeps the memories' decay first (those below
    TIEROPS_MEMORY_FLOOR are marked stale), and each row shows its decayed confidence, whether it
    is stale, and the contradiction links (replaced by / replaces)."""
    st = state(request)
    pg = int_param(request, "page", 1, minimum=1, maximum=100_000)
    service = _filter_text(request, "service")
    category = _filter_text(request, "category")
    active_param = choice_param(request, "active", ("1", "0"))
    active = None if active_param is None else active_param == "1"
    stale_param = choice_param(request, "stale", ("1", "0"))
    lifecycle = memory_store.MemoryLifecycle.from_settings(st.settings)
    now = utcnow()
    await memory_store.sweep_stale(st.db, lifecycle, now=now)
    rows = await memory_store.list_memories(st.db, service=service, category=category, active=active,
                                            stale=None if stale_param is None else stale_param == "1",
                                            limit=MEMORIES_PER_PAGE + 1, offset=(pg - 1) * MEMORIES_PER_PAGE)
    shown = rows[:MEMORIES_PER_PAGE]
    replaces: dict[int, list[int]] = {}
    for m in shown:
        if m["replaced_by"] is not None:
            replaces.setdefault(m["replaced_by"], []).append(m["id"])
    filters = {"service": service, "category": category, "active": active_param, "stale": stale_param}
    return {
        "memories": shown, "service": service, "category": category, "active": active_param,
        "stale": stale_param, "effective": memory_store.effective_confidences(shown, lifecycle, now),
        "replaces": replaces, "lifecycle": lifecycle,
        "services": await memory_store.memory_services(st.db),
        "categories": await memory_store.memory_categories(st.db), "page": pg,
        "prev_url": _query(page=pg - 1, **filters) if pg > 1 else None,
        "next_url": _query(page=pg + 1, **filters) if len(rows) > MEMORIES_PER_PAGE else None,
        "error": None, "error_id": None,
        "form": {"service": "", "category": "", "value": "", "confidence": str(MEMORY_DEFAULT_CONFIDENCE)},
    }


async def memories_page(request: Request) -> Response:
    return page(request, "memories.html", await _memories_ctx(request))


def _confidence(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and 0.0 <= value <= 1.0 else None


def _too_long(**fields: tuple[str, int]) -> str | None:
    """The first field longer than its limit, as a message (the API's limits, app/web/limits.py)."""
    for name, (text, limit) in fields.items():
        if len(text) > limit:
            return f"The {name} is too long ({len(text):,} characters; at most {limit:,})."
    return None


async def _memory_error(request: Request, message: str, status: int, *, form: dict[str, Any] | None = None,
                        error_id: int | None = None) -> Response:
    ctx = await _memories_ctx(request)
    ctx.update(error=message, error_id=error_id)
    if form is not None:
        ctx["form"] = form
    return page(request, "memories.html", ctx, status)


async def memory_create(request: Request) -> Response:
    form = await read_form(request)
    service = form.get("service", "").strip()
    category = form.get("category", "").strip()
    value = form.get("value", "").strip()
    conf_text = form.get("confidence", "").strip() or str(MEMORY_DEFAULT_CONFIDENCE)
    kept = {"service": service, "category": category, "value": value, "confidence": conf_text}
    confidence = _confidence(conf_text)
    if not category or not value:
        return await _memory_error(request, "Category and value must not be empty.", 422, form=kept)
    if too_long := _too_long(service=(service, MEMORY_SERVICE_MAX), category=(category, MEMORY_CATEGORY_MAX),
                             value=(value, MEMORY_VALUE_MAX)):
        return await _memory_error(request, too_long, 422, form=kept)
    if confidence is None:
        return await _memory_error(request, "Confidence must be a number from 0 to 1.", 422, form=kept)
    try:
        await memory_store.create_memory(state(request).db, category=category, value=value, service=service or None,
                                         confidence=confidence)
    except MemoryConflict as exc:
        return await _memory_error(request, str(exc), 409, form=kept)
    return _redirect("/memories?notice=memory_created")


async def memory_edit(request: Request) -> Response:
    pk = path_int(request)
    form = await read_form(request)
    value = form.get("value", "").strip()
    confidence = _confidence(form.get("confidence", ""))
    if not value:
        return await _memory_error(request, f"Memory {pk}: the value must not be empty.", 422, error_id=pk)
    if too_long := _too_long(value=(value, MEMORY_VALUE_MAX)):
        return await _memory_error(request, f"Memory {pk}: {too_long}", 422, error_id=pk)
    if confidence is None:
        return await _memory_error(request, f"Memory {pk}: confidence must be a number from 0 to 1.", 422,
                                   error_id=pk)
    try:
        row = await memory_store.update_memory(state(request).db, pk, {"value": value, "confidence": confidence,
                                                                       "active": "active" in form})
    except MemoryConflict as exc:
        return await _memory_error(request, f"Memory {pk}: {exc}", 409, error_id=pk)
    if row is None:
        raise _not_found("memory", pk)
    return _redirect("/memories?notice=memory_saved")


async def memory_toggle(request: Request) -> Response:
    pk = path_int(request)
    db = state(request).db
    memory = await memory_store.get_memory(db, pk, fresh=True)
    if memory is None:
        raise _not_found("memory", pk)
    try:
        await memory_store.update_memory(db, pk, {"active": not memory["active"]})
    except MemoryConflict as exc:  # not expected for a flag, but never a 500
        return await _memory_error(request, f"Memory {pk}: {exc}", 409, error_id=pk)
    return _redirect("/memories?notice=memory_toggled")


async def memory_delete(request: Request) -> Response:
    pk = path_int(request)
    if not await memory_store.delete_memory(state(request).db, pk):
        raise _not_found("memory", pk)
    return _redirect("/memories?notice=memory_deleted")


routes = [
    Route("/", overview, methods=["GET"]),
    Route("/run", run_now, methods=["POST"]),
    Route("/sessions", sessions_page, methods=["GET"]),
    Route("/sessions/{id}", session_page, methods=["GET"]),
    Route("/sessions/{id}/stop", stop_session, methods=["POST"]),
    Route("/events", events_page, methods=["GET"]),
    Route("/memories", memories_page, methods=["GET"]),
    Route("/memories", memory_create, methods=["POST"]),
    Route("/memories/{id}", memory_edit, methods=["POST"]),
    Route("/memories/{id}/toggle", memory_toggle, methods=["POST"]),
    Route("/memories/{id}/delete", memory_delete, methods=["POST"]),
]
