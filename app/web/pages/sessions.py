"""The sessions pages: the list (filtered, paged), one session and its two forms, Stop and
acknowledging its needs-attention flag.

A session's page opens with its verdict (:mod:`app.web.pages.verdict`), then its chain, then the
transcript: the newest :data:`TRANSCRIPT_ROWS` lines rendered by :mod:`app.web.pages.render` (the
same fragments the SSE stream sends while it runs), with badges on the lines that produced its
findings, and "earlier lines" paging back. The runbooks its system prompt quoted are listed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.store import approvals as approval_store
from app.store import attempts, chains, chats, findings, provenance
from app.store import cooldowns as action_store
from app.store import guard as guard_store
from app.store import incidents as incident_store
from app.store import runbooks as runbook_store
from app.store import sessions as session_store
from app.store.activity import transcript_page
from app.store.guard import GuardDecisionRow
from app.store.sessions import AttentionStateError
from app.supervisor.remote_stop import StopRefused, refusal, stop_anywhere
from app.vocab import MAX_TIER, MIN_TIER, SessionStatus, Trigger, values
from app.web.api.incidents import actor_for
from app.web.api.results import failure_of
from app.web.common import ApiError, choice_param, int_param, path_int, state
from app.web.limits import PROPOSALS_MAX
from app.web.pages import evidence, verdict
from app.web.pages.forms import not_found, page_notice, page_query, read_form, see_other
from app.web.pages.render import PAGE_RAW_LIMIT, render_activity, render_event_row, render_json
from app.web.templating import page

log = logging.getLogger(__name__)

SESSIONS_PER_PAGE = 50
TRANSCRIPT_ROWS = 200  # rendering costs ~0.2 ms a row (bench/pages.py); "earlier lines" pages back


async def sessions_page(request: Request) -> Response:
    st = state(request)
    pg = int_param(request, "page", 1, minimum=1, maximum=100_000)
    status = choice_param(request, "status", values(SessionStatus))
    tier = int_param(request, "tier", None, minimum=MIN_TIER, maximum=MAX_TIER)
    # ?attention=open lists what needs a human and is not acknowledged (the overview's link)
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
    # the verdict first, and badges on the lines that produced the findings
    badges = await verdict.transcript_badges(st.db, s, attempt_rows, event_rows, cooldown_rows)
    guarded = await guard_store.decisions(st.db, pk)
    # the evidence: each finding's status, the lines its quotes were found on, and badges back on them
    cited = evidence.session_findings(event_rows, checks, cooldown_rows, s["escalation_evidence"])
    call_lines = await guard_store.tool_call_lines(st.db, pk, [*(d["tool_use_id"] for d in guarded if d["tool_use_id"]),
                                                               *evidence.found_ids(ev for _, _, ev in cited)])
    cites = evidence.cited_lines(cited, call_lines)
    marks: dict[int, list[GuardDecisionRow]] = {}
    for d in guarded:
        if d["tool_use_id"] in call_lines:
            marks.setdefault(call_lines[d["tool_use_id"]], []).append(d)
    # never "resolved" while an incident it touched (or its chain handed it) is open: who must act
    open_now = await verdict.read_still_open(st.db, s, chain, incidents, st.settings.escalate_after)
    # Stop reaches a session another process runs too, when its CLI can be verified
    stop_note = await refusal(st.supervisor, pk) if running else None
    return page(request, "session.html", page_notice(request, {
        "s": s,
        "conversation": await chats.conversation_of_session(st.db, pk) if s["trigger"] == Trigger.CHAT else None,
        "verdict": verdict.verdict(s, checks=checks, events=event_rows, incidents=incidents, approvals=approvals,
                                   runs=await provenance.run_totals(st.db, pk),
                                   event_counts=await provenance.event_counts(st.db, pk),
                                   proposals=await action_store.proposals(st.db, session_pk=pk, limit=PROPOSALS_MAX),
                                   open_now=open_now),
        "transcript": [render_activity(r, badges.get(r["seq"]), marks.get(r["seq"]),
                                       evidence.cite_badges(cites.get(r["seq"]))) for r in rows],
        "evidence": evidence.summary(s),
        "check_marks": [evidence.mark(c["evidence_status"], c["evidence"], call_lines) for c in checks],
        "actions": [{**a, "mark": evidence.mark(a["evidence_status"], a["evidence"], call_lines)}
                    for a in cooldown_rows],
        "escalation_mark": evidence.mark(s["escalation_evidence_status"], s["escalation_evidence"], call_lines),
        "guard": [{**d, "seq": call_lines.get(d["tool_use_id"] or "")} for d in guarded],
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
        "runbooks": await runbook_store.session_runbooks(st.db, pk),
        "events": [render_event_row(e, evidence.mark(e["evidence_status"], e["evidence"], call_lines))
                   for e in event_rows],
        "chain": chain if len(chain) > 1 else [],
        "structured": render_json(s["structured_output"], session_pk=pk) if s["structured_output"] is not None
        else None,
        "invalid": render_json(_decode_json(invalid), session_pk=pk, cls="json schema-error") if invalid else None,
        "validation_errors": _list_or_empty(s["validation_errors"]),
        "failed_checks": _list_or_empty(s["escalation_failed_checks"]),
        "result_errors": _list_or_empty(s["result_errors"]),
        "notes": _list_or_empty(s["notes"]),
        # the approvals this session's escalation asked for (pending ones with the form)
        "approvals": approvals,
        "approval_back": "session", "note_max": incident_store.NOTE_MAX,
    }))


async def attention_ack(request: Request) -> Response:
    """Acknowledge a session's needs-attention flag from the overview or its page (303
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
    """Stop, wherever the session runs (``remote_stop``); a refusal (not running, its
    process cannot be verified) is the error page saying why."""
    st = state(request)
    pk = path_int(request)
    try:
        await stop_anywhere(st.supervisor, pk, f"{actor_for(request, None)}, server pid {os.getpid()}")
    except StopRefused as exc:
        raise (not_found("session", pk) if exc.status == 404 else ApiError(exc.status, "not_running", exc.message)) \
            from None
    return see_other(f"/sessions/{pk}?notice=stop_sent")



routes = [
    Route("/sessions", sessions_page, methods=["GET"]),
    Route("/sessions/{id}", session_page, methods=["GET"]),
    Route("/sessions/{id}/stop", stop_session, methods=["POST"]),
    Route("/sessions/{id}/attention/ack", attention_ack, methods=["POST"]),
]
