"""Sessions over the API: the list (each with its chain's totals), one session with its output
attempts, proposals and the runbooks it was given, its stored lines, its result, Stop and acknowledging its needs-attention
flag. The response shapes beyond the store's rows are the ``TypedDict``\\ s below; the OpenAPI
document is generated from them (:mod:`app.web.api.responses`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TypedDict

from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.store import activity as activity_store
from app.store import attempts
from app.store import cooldowns as action_store
from app.store import runbooks as runbook_store
from app.store import sessions as session_store
from app.store.cooldowns import ProposalRow
from app.store.incidents import OPERATOR_MAX
from app.store.rows import SessionRow
from app.store.runbooks import SessionRunbookRow
from app.supervisor.remote_stop import StopRefused, stop_anywhere
from app.vocab import MAX_TIER, MIN_TIER, SessionStatus, values
from app.web.api import stats
from app.web.api.incidents import actor_for
from app.web.api.results import OutputAttempt, result_body
from app.web.common import (
    ApiError,
    choice_param,
    int_param,
    json_body,
    limit_param,
    path_int,
    state,
    stripped,
)
from app.web.limits import ACTIVITY_LIMIT, OPERATOR_PATTERN, PROPOSALS_MAX, SESSIONS_LIMIT

log = logging.getLogger(__name__)


class SessionDetail(SessionRow):
    output_attempts: Sequence[OutputAttempt]
    proposals: Sequence[ProposalRow]  # the actions it proposed, in its order (never taken, never counted)
    runbooks: Sequence[SessionRunbookRow]  # the runbooks its system prompt quoted or linked, in order


class ActivityLine(TypedDict):
    """One stored stream line of a session (the session is in the URL)."""

    seq: int
    attempt: int
    ts: str
    type: str
    subtype: str | None
    display: str
    raw: str | None


class StopAccepted(TypedDict):
    id: int
    stopping: bool


async def _session_or_404(request: Request) -> SessionRow:
    pk = path_int(request)
    row = await session_store.get_session(state(request).db, pk)
    if row is None:
        raise ApiError(404, "not_found", f"no session {pk}")
    return row


async def sessions(request: Request) -> Response:
    """Newest first, each with its chain's totals (``stats.with_chains``)."""
    db = state(request).db
    rows = await session_store.list_sessions(
        db, status=choice_param(request, "status", values(SessionStatus)),
        tier=int_param(request, "tier", minimum=MIN_TIER, maximum=MAX_TIER),
        limit=limit_param(request, SESSIONS_LIMIT), offset=int_param(request, "offset", 0))
    return JSONResponse(await stats.with_chains(db, rows))


async def session(request: Request) -> Response:
    row = await _session_or_404(request)
    db = state(request).db
    body: SessionDetail = {**row, "output_attempts": await attempts.list_attempts(db, row["id"]),
                           "proposals": await action_store.proposals(db, session_pk=row["id"], limit=PROPOSALS_MAX),
                           "runbooks": await runbook_store.session_runbooks(db, row["id"])}
    return JSONResponse(body)


async def activity(request: Request) -> Response:
    pk = path_int(request)
    db = state(request).db
    if await session_store.session_status(db, pk) is None:
        raise ApiError(404, "not_found", f"no session {pk}")
    after = int_param(request, "after", 0)
    rows = await activity_store.lines_after(db, pk, after, limit_param(request, ACTIVITY_LIMIT))
    # the session is in the URL
    lines: list[ActivityLine] = [{"seq": r["seq"], "attempt": r["attempt"], "ts": r["ts"], "type": r["type"],
                                  "subtype": r["subtype"], "display": r["display"], "raw": r["raw"]} for r in rows]
    return JSONResponse(lines)


async def result(request: Request) -> Response:
    """result_data (the accepted structured output, whatever its schema) or result_text (the CLI's
    text, only when there is no schema), never both; with the contract it ran under."""
    row = await _session_or_404(request)
    body = result_body(row, await attempts.list_attempts(state(request).db, row["id"], with_output=True))
    return JSONResponse(body)


async def stop(request: Request) -> Response:
    """Stop a running session, this server's own or one another process runs on the same state
    directory: its verified CLI's process group is signalled (``remote_stop``)."""
    pk = path_int(request)
    st = state(request)
    try:
        await stop_anywhere(st.supervisor, pk, f"{actor_for(request, None)}, server pid {os.getpid()}")
    except StopRefused as exc:
        raise ApiError(exc.status, "not_found" if exc.status == 404 else "not_running", exc.message) from None
    accepted: StopAccepted = {"id": pk, "stopping": True}
    return JSONResponse(accepted, status_code=202)


class AttentionAckRequest(BaseModel):
    """The optional body of POST /sessions/{id}/attention/ack."""

    model_config = ConfigDict(extra="forbid", strict=True)
    by: str | None = Field(None, max_length=OPERATOR_MAX, pattern=OPERATOR_PATTERN)

    @field_validator("by")
    @classmethod
    def _stripped(cls, value: str | None) -> str | None:
        return stripped(value, blank_ok=True) or None


async def attention_ack(request: Request) -> Response:
    """Acknowledge a session's needs-attention flag (who: ``by`` and how the request was
    authenticated); the overview stops listing it. 409 when it needs no attention."""
    pk = path_int(request)
    body: AttentionAckRequest = await json_body(request, AttentionAckRequest, required=False)
    try:
        row = await session_store.acknowledge_attention(state(request).db, pk, actor_for(request, body.by))
    except LookupError:
        raise ApiError(404, "not_found", f"no session {pk}") from None
    except session_store.AttentionStateError as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    return JSONResponse(row)
