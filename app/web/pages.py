"""Server-rendered dashboard pages: overview, sessions, one session, events, memories.

Pages read through ``state(request).db`` and render Jinja templates (autoescape on); the
transcript and event rows come from :mod:`app.web.render`, the same fragments the SSE streams
send. Forms are plain HTML POSTs (CSRF is checked by the security middleware from the Origin /
Sec-Fetch-Site headers) and answer with a 303 redirect, or re-render the page with a message
and a 4xx status when the input is wrong. Bad query parameters render ``error.html`` with 422;
nothing a visitor types can make a page fail with 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from app.store.memories import MemoryConflict, create_memory, delete_memory, update_memory
from app.store.queries import get_session, list_events, list_memories, list_sessions
from app.supervisor.chain import chain_summary
from app.supervisor.runner import CLINotFound, resolve_binary
from app.supervisor.scheduler import CycleBusy
from app.web.common import ApiError, choice_param, int_param, path_int, state, templates
from app.web.render import (
    EVENT_LEVELS,
    PAGE_RAW_LIMIT,
    render_activity,
    render_event_row,
    render_json,
)

SESSIONS_PER_PAGE = 50
EVENTS_PER_PAGE = 100
MEMORIES_PER_PAGE = 200
TRANSCRIPT_ROWS = 200  # rendering costs ~0.2 ms a row (bench/pages.py); "earlier lines" pages back
FORM_MAX_BYTES = 256 * 1024
PROMPT_MAX_CHARS = 20_000
RUN_WAIT_SECONDS = 5.0
STATUSES = ("running", "completed", "failed", "interrupted")

# Fixed notices for ?notice= after a redirect: never echo query text into a page.
NOTICES = {
    "stop_sent": "Stop sent: the session's process group is being terminated.",
    "stop_unknown": "This session is not running in this process (nothing to stop).",
    "run_started": "The cycle started; its first session is not recorded yet — see Sessions shortly.",
    "run_finished": "The cycle finished before its first session could be shown.",
    "memory_created": "Memory created.",
    "memory_saved": "Memory saved.",
    "memory_toggled": "Memory updated.",
    "memory_deleted": "Memory deleted.",
}


# -- template helpers --------------------------------------------------------------------------

def _fmt_cost(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"${value:.4f}" if value < 1 else f"${value:.2f}"
    return "—"


def _fmt_duration(ms: Any) -> str:
    if not isinstance(ms, int | float) or isinstance(ms, bool):
        return "—"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f} s"
    m, s = divmod(int(s), 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


def _fmt_time(value: Any) -> str:
    if not value:
        return "—"
    text = str(value)
    return text[:19].replace("T", " ")


def _fmt_int(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "—"


templates.env.filters.setdefault("cost", _fmt_cost)
templates.env.filters.setdefault("duration", _fmt_duration)
templates.env.filters.setdefault("when", _fmt_time)
templates.env.filters.setdefault("num", _fmt_int)
templates.env.filters.setdefault("as_json", render_json)


def _page(request: Request, name: str, ctx: dict, status: int = 200) -> Response:
    st = state(request)
    base = {"nav": name.removesuffix(".html"), "auth_enabled": st.token is not None,
            "notice": NOTICES.get(request.query_params.get("notice", ""))}
    return templates.TemplateResponse(request, name, {**base, **ctx}, status_code=status)


def _error(request: Request, status: int, message: Any) -> Response:
    return _page(request, "error.html", {"status": status, "message": message}, status)


def _guard(handler):  # type: ignore[no-untyped-def]
    """Render ApiError (bad parameter, unknown id) as the error page instead of JSON."""

    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as exc:
            return _error(request, exc.status_code, exc.detail)

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    return wrapped


async def read_form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body as a dict (last value wins).

    Parsed here rather than with ``request.form()``: that needs python-multipart, and the
    dashboard's forms are all urlencoded."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/x-www-form-urlencoded":
        raise ApiError(415, "unsupported_media_type", "forms must be sent as application/x-www-form-urlencoded")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > FORM_MAX_BYTES:
            raise ApiError(413, "too_large", f"form larger than {FORM_MAX_BYTES} bytes")
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


# -- overview ----------------------------------------------------------------------------------

def _cli_problem(request: Request) -> str | None:
    settings = state(request).settings
    try:
        resolve_binary(settings.claude_bin, os.environ.get("PATH"))
    except CLINotFound as exc:
        return str(exc)
    return None


async def _overview_ctx(request: Request) -> dict:
    st = state(request)
    db = st.db
    chain_id = await db.fetchval(
        "SELECT chain_id FROM sessions WHERE chain_id IS NOT NULL ORDER BY id DESC LIMIT 1")
    chain = await chain_summary(db, chain_id) if chain_id is not None else []
    checks = [dict(r) for r in await db.fetchall(
        "SELECT c.name, c.status, c.detail, c.created_at, c.session_pk FROM check_results c"
        " WHERE c.id IN (SELECT max(id) FROM check_results GROUP BY name) ORDER BY c.name")]
    alerts = [dict(r) for r in await db.fetchall(
        # Newest 20 of each level first, via the (level, id) index: sorting every warning took 19 ms
        # at 20k events (bench/pages.py), this takes under 1 ms.
        "SELECT e.id, e.session_pk, s.session_id, s.tier, e.level, e.original_level, e.service, e.message,"
        " e.source, e.created_at FROM ("
        " SELECT * FROM (SELECT * FROM events WHERE level = 'critical' ORDER BY id DESC LIMIT 20)"
        " UNION ALL SELECT * FROM (SELECT * FROM events WHERE level = 'warning' ORDER BY id DESC LIMIT 20)) e"
        " JOIN sessions s ON s.id = e.session_pk ORDER BY e.id DESC LIMIT 20")]
    running = [dict(r) for r in await db.fetchall(
        "SELECT id, tier, model, trigger, started_at FROM sessions WHERE status = 'running' ORDER BY id DESC LIMIT 20")]
    attention = [dict(r) for r in await db.fetchall(
        "SELECT id, tier, attention, started_at FROM sessions WHERE attention IS NOT NULL"
        " ORDER BY id DESC LIMIT 5")]
    sup = st.supervisor
    return {
        "chain": chain,
        "chain_cost": sum(s["cost_usd"] or 0 for s in chain),
        "checks": checks,
        "alerts": [render_event_row(e) for e in alerts],
        "running": running,
        "attention": attention,
        "busy": sup.busy,
        "next_run_at": sup.next_run_at.isoformat(timespec="seconds") if sup.next_run_at else None,
        "schedule": getattr(st.settings, "schedule", None),
        "cron": st.settings.cron,
        "interval": st.settings.interval,
        "max_tier": st.settings.max_tier,
        "cli_error": _cli_problem(request),
        "run_error": None,
        "form": {"tier": "1", "prompt": ""},
    }


@_guard
async def overview(request: Request) -> Response:
    return _page(request, "overview.html", await _overview_ctx(request))


async def _first_session(request: Request, before: int, task: asyncio.Task) -> int | None:
    """The first session of the cycle just started, waiting up to RUN_WAIT_SECONDS for it."""
    st = state(request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RUN_WAIT_SECONDS
    while True:
        fut = getattr(st.supervisor, "first_session", None)
        if isinstance(fut, asyncio.Future) and fut.done() and not fut.cancelled() and fut.exception() is None:
            pk = fut.result()
            if isinstance(pk, int) and pk > before:
                return pk
        mine = [pk for pk in st.supervisor.handles if pk > before]
        if mine:
            return min(mine)
        pk = await st.db.fetchval("SELECT min(id) FROM sessions WHERE id > ? AND trigger = 'manual'", (before,))
        if pk is not None or task.done() or loop.time() >= deadline:
            return pk
        await asyncio.sleep(0.05)


@_guard
async def run_now(request: Request) -> Response:
    st = state(request)
    form = await read_form(request)
    tier_text = form.get("tier", "1").strip() or "1"
    prompt = form.get("prompt", "").strip()
    error = None
    try:
        tier = int(tier_text)
    except ValueError:
        tier = 0
    if not 1 <= tier <= st.settings.max_tier:
        error = f"Tier must be a number from 1 to {st.settings.max_tier}."
    elif len(prompt) > PROMPT_MAX_CHARS:
        error = f"The prompt is too long ({len(prompt):,} characters; at most {PROMPT_MAX_CHARS:,})."
    status = 422
    if error is None:
        before = int(await st.db.fetchval("SELECT ifnull(max(id), 0) FROM sessions"))
        try:
            task = st.supervisor.start_cycle(tier=tier, prompt=prompt or None, trigger="manual")
        except CycleBusy as exc:
            error, status = str(exc), 409
        else:
            pk = await _first_session(request, before, task)
            if pk is not None:
                return _redirect(f"/sessions/{pk}")
            if task.done():
                exc = None if task.cancelled() else task.exception()
                if exc is None:
                    return _redirect("/sessions?notice=run_finished")
                error, status = f"The cycle could not start: {type(exc).__name__}: {exc}", 500
            else:
                return _redirect("/?notice=run_started")
    ctx = await _overview_ctx(request)
    ctx.update(run_error=error, form={"tier": tier_text, "prompt": prompt})
    return _page(request, "overview.html", ctx, status)


# -- sessions ----------------------------------------------------------------------------------

@_guard
async def sessions_page(request: Request) -> Response:
    st = state(request)
    page = int_param(request, "page", 1, minimum=1, maximum=100_000)
    status = choice_param(request, "status", STATUSES)
    tier = int_param(request, "tier", None, minimum=1, maximum=3)
    rows = await list_sessions(st.db, status=status, tier=tier, limit=SESSIONS_PER_PAGE + 1,
                               offset=(page - 1) * SESSIONS_PER_PAGE)
    has_next = len(rows) > SESSIONS_PER_PAGE
    rows = rows[:SESSIONS_PER_PAGE]
    if rows:
        extra = {r["id"]: dict(r) for r in await st.db.fetchall(
            f"SELECT id, attention, chain_id FROM sessions WHERE id IN ({','.join('?' * len(rows))})",
            [r["id"] for r in rows])}
        for r in rows:
            r.update(attention=extra.get(r["id"], {}).get("attention"), chain_id=extra.get(r["id"], {}).get("chain_id"))
    return _page(request, "sessions.html", {
        "sessions": rows, "page": page, "status": status, "tier": tier, "statuses": STATUSES,
        "prev_url": _query(page=page - 1, status=status, tier=tier) if page > 1 else None,
        "next_url": _query(page=page + 1, status=status, tier=tier) if has_next else None,
    })


def _decode_json(value: Any) -> Any:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return json.loads(value)
    return value


async def _transcript(request: Request, pk: int, before: int | None) -> tuple[list, bool]:
    rows = await state(request).db.fetchall(
        "SELECT session_pk, seq, attempt, ts, type, subtype, display,"
        " CASE WHEN length(raw) > ? THEN NULL ELSE raw END AS raw, length(raw) AS raw_len"
        " FROM activity WHERE session_pk = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
        (PAGE_RAW_LIMIT, pk, before if before is not None else 2**62, TRANSCRIPT_ROWS + 1))
    more = len(rows) > TRANSCRIPT_ROWS
    rows = [dict(r) for r in rows[:TRANSCRIPT_ROWS]]
    rows.reverse()
    return rows, more


@_guard
async def session_page(request: Request) -> Response:
    st = state(request)
    pk = path_int(request)
    before = int_param(request, "before", None, minimum=1)
    s = await get_session(st.db, pk)
    if s is None:
        return _error(request, 404, f"There is no session {pk}.")
    rows, more = await _transcript(request, pk, before)
    running = s["status"] == "running"
    live = running and before is None
    last_seq = rows[-1]["seq"] if rows and before is None else 0
    attempts = []
    for r in await st.db.fetchall(
            "SELECT attempt, kind, result_subtype, is_error, has_output, output, valid, errors, created_at"
            " FROM output_attempts WHERE session_pk = ? ORDER BY attempt", (pk,)):
        a = dict(r)
        a["errors"] = _decode_json(a["errors"]) or []
        a["output"] = _decode_json(a["output"])
        attempts.append(a)
    checks = [dict(r) for r in await st.db.fetchall(
        "SELECT name, status, detail, created_at FROM check_results WHERE session_pk = ? ORDER BY id", (pk,))]
    events = await list_events(st.db, session=pk, limit=200)
    chain = await chain_summary(st.db, s.get("chain_id")) if s.get("chain_id") is not None else []
    invalid = s.get("invalid_output")
    return _page(request, "session.html", {
        "s": s,
        "transcript": [render_activity(r) for r in rows],
        "more_before": rows[0]["seq"] if more and rows else None,
        "viewing_earlier": before is not None,
        "last_seq": last_seq,
        "live": live,
        "running": running,
        "stoppable": running and pk in st.supervisor.handles,
        "attempts": attempts,
        "checks": checks,
        "events": [render_event_row(e) for e in events],
        "chain": chain if len(chain) > 1 else [],
        "structured": render_json(s["structured_output"], session_pk=pk) if s.get("structured_output") is not None
        else None,
        "invalid": render_json(_decode_json(invalid), session_pk=pk, cls="json schema-error")
        if invalid else None,
        "validation_errors": s.get("validation_errors") if isinstance(s.get("validation_errors"), list) else [],
        "failed_checks": s.get("escalation_failed_checks")
        if isinstance(s.get("escalation_failed_checks"), list) else [],
        "result_errors": s.get("result_errors") if isinstance(s.get("result_errors"), list) else [],
        "notes": s.get("notes") if isinstance(s.get("notes"), list) else [],
    })


@_guard
async def stop_session(request: Request) -> Response:
    st = state(request)
    pk = path_int(request)
    if await st.db.fetchone("SELECT 1 FROM sessions WHERE id = ?", (pk,)) is None:
        return _error(request, 404, f"There is no session {pk}.")
    stopped = st.supervisor.stop_session(pk)
    return _redirect(f"/sessions/{pk}?notice={'stop_sent' if stopped else 'stop_unknown'}")


# -- events ------------------------------------------------------------------------------------

@_guard
async def events_page(request: Request) -> Response:
    st = state(request)
    page = int_param(request, "page", 1, minimum=1, maximum=100_000)
    level = choice_param(request, "level", EVENT_LEVELS)
    service = (request.query_params.get("service") or "").strip()[:200] or None
    session = int_param(request, "session", None, minimum=1)
    rows = await list_events(st.db, level=level, service=service, session=session,
                             limit=EVENTS_PER_PAGE + 1, offset=(page - 1) * EVENTS_PER_PAGE)
    has_next = len(rows) > EVENTS_PER_PAGE
    rows = rows[:EVENTS_PER_PAGE]
    services = [r[0] for r in await st.db.fetchall(
        "SELECT DISTINCT service FROM events WHERE service IS NOT NULL ORDER BY service LIMIT 500")]
    filtered = bool(level or service or session)
    return _page(request, "events.html", {
        "rows": [render_event_row(e) for e in rows],
        "level": level, "service": service, "session": session, "levels": EVENT_LEVELS, "services": services,
        "page": page, "live": page == 1 and not filtered, "last_event_id": rows[0]["id"] if rows else 0,
        "prev_url": _query(page=page - 1, level=level, service=service, session=session) if page > 1 else None,
        "next_url": _query(page=page + 1, level=level, service=service, session=session) if has_next else None,
    })


# -- memories ----------------------------------------------------------------------------------

async def _memories_ctx(request: Request) -> dict:
    st = state(request)
    page = int_param(request, "page", 1, minimum=1, maximum=100_000)
    service = (request.query_params.get("service") or "").strip()[:200] or None
    category = (request.query_params.get("category") or "").strip()[:200] or None
    active_param = choice_param(request, "active", ("1", "0"))
    active = None if active_param is None else active_param == "1"
    rows = await list_memories(st.db, service=service, category=category, active=active,
                               limit=MEMORIES_PER_PAGE + 1, offset=(page - 1) * MEMORIES_PER_PAGE)
    has_next = len(rows) > MEMORIES_PER_PAGE
    services = [r[0] for r in await st.db.fetchall(
        "SELECT DISTINCT service FROM memories WHERE service IS NOT NULL ORDER BY service LIMIT 500")]
    categories = [r[0] for r in await st.db.fetchall(
        "SELECT DISTINCT category FROM memories ORDER BY category LIMIT 500")]
    return {
        "memories": rows[:MEMORIES_PER_PAGE], "service": service, "category": category, "active": active_param,
        "services": services, "categories": categories, "page": page,
        "prev_url": _query(page=page - 1, service=service, category=category, active=active_param)
        if page > 1 else None,
        "next_url": _query(page=page + 1, service=service, category=category, active=active_param)
        if has_next else None,
        "error": None, "error_id": None,
        "form": {"service": "", "category": "", "value": "", "confidence": "0.7"},
    }


@_guard
async def memories_page(request: Request) -> Response:
    return _page(request, "memories.html", await _memories_ctx(request))


def _confidence(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and 0.0 <= value <= 1.0 else None


async def _memory_error(request: Request, message: str, status: int, *, form: dict | None = None,
                        error_id: int | None = None) -> Response:
    ctx = await _memories_ctx(request)
    ctx.update(error=message, error_id=error_id)
    if form is not None:
        ctx["form"] = form
    return _page(request, "memories.html", ctx, status)


@_guard
async def memory_create(request: Request) -> Response:
    form = await read_form(request)
    service = form.get("service", "").strip()
    category = form.get("category", "").strip()
    value = form.get("value", "").strip()
    conf_text = form.get("confidence", "").strip() or "0.7"
    kept = {"service": service, "category": category, "value": value, "confidence": conf_text}
    confidence = _confidence(conf_text)
    if not category or not value:
        return await _memory_error(request, "Category and value must not be empty.", 422, form=kept)
    if confidence is None:
        return await _memory_error(request, "Confidence must be a number from 0 to 1.", 422, form=kept)
    try:
        await create_memory(state(request).db, category=category, value=value, service=service or None,
                            confidence=confidence)
    except MemoryConflict as exc:
        return await _memory_error(request, str(exc), 409, form=kept)
    return _redirect("/memories?notice=memory_created")


@_guard
async def memory_edit(request: Request) -> Response:
    pk = path_int(request)
    form = await read_form(request)
    value = form.get("value", "").strip()
    confidence = _confidence(form.get("confidence", ""))
    if not value:
        return await _memory_error(request, f"Memory {pk}: the value must not be empty.", 422, error_id=pk)
    if confidence is None:
        return await _memory_error(request, f"Memory {pk}: confidence must be a number from 0 to 1.", 422,
                                   error_id=pk)
    try:
        found = await update_memory(state(request).db, pk, {"value": value, "confidence": confidence,
                                                             "active": "active" in form})
    except MemoryConflict as exc:
        return await _memory_error(request, f"Memory {pk}: {exc}", 409, error_id=pk)
    if not found:
        return _error(request, 404, f"There is no memory {pk}.")
    return _redirect("/memories?notice=memory_saved")


@_guard
async def memory_toggle(request: Request) -> Response:
    pk = path_int(request)
    db = state(request).db
    active = await db.fetchval("SELECT active FROM memories WHERE id = ?", (pk,))
    if active is None:
        return _error(request, 404, f"There is no memory {pk}.")
    try:
        await update_memory(db, pk, {"active": not active})
    except MemoryConflict as exc:  # not expected for a flag, but never a 500
        return await _memory_error(request, f"Memory {pk}: {exc}", 409, error_id=pk)
    return _redirect("/memories?notice=memory_toggled")


@_guard
async def memory_delete(request: Request) -> Response:
    pk = path_int(request)
    if not await delete_memory(state(request).db, pk):
        return _error(request, 404, f"There is no memory {pk}.")
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
