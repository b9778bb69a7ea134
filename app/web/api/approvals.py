"""The approvals API: list, one approval, approve and reject.

A module of its own because an approval is the one decision that *starts* work: approving runs
the rest of a chain (``Supervisor.start_approved``, the same path as the dashboard's Approve),
answering 202 with the new session like ``POST /runs``; while another cycle runs it is refused
with 409 and the approval stays pending, to be approved again later. Who decided is recorded the
way incident actions record it (:func:`app.web.api.incidents.actor_for`: "alice via API token").
The dashboard's forms (``app/web/pages/approvals.py``) reject through :func:`reject` too: one place
applies and logs a rejection.

Order of checks: the body (413/415/422), then the approval (404), then its state (409).
"""

from __future__ import annotations

import logging
from typing import TypedDict

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.errors import CycleBusy
from app.store import approvals as approval_store
from app.store import sessions as session_store
from app.store.approvals import ApprovalRow, ApprovalStateError
from app.store.db import Database
from app.vocab import ApprovalStatus, values
from app.web.api.incidents import IncidentAction, actor_for
from app.web.common import ApiError, choice_param, int_param, json_body, limit_param, path_int, state
from app.web.faults import storage_fault, unavailable
from app.web.limits import APPROVALS_LIMIT

log = logging.getLogger(__name__)

ApprovalAction = IncidentAction  # the same optional body: {note?, by?}


class ApprovalStarted(TypedDict):
    """An approval just approved and the session of the tier it started."""

    approval: ApprovalRow
    session_id: int


async def reject(db: Database, pk: int, actor: str, note: str | None) -> ApprovalRow:
    """Reject a pending approval and log it. Raises LookupError or :class:`ApprovalStateError`."""
    row = await approval_store.decide(db, pk, "rejected", actor, note)
    log.warning("approval #%d to run tier %d rejected by %s; session %s needs attention", pk, row["tier"], actor,
                row["session_pk"], extra={"session": row["session_pk"], "chain": row["chain_id"], "tier": row["tier"]})
    return row


async def approvals(request: Request) -> Response:
    rows = await approval_store.list_approvals(
        state(request).db, status=choice_param(request, "status", values(ApprovalStatus)),
        limit=limit_param(request, APPROVALS_LIMIT), offset=int_param(request, "offset", 0))
    return JSONResponse(rows)


async def _approval_or_404(db: Database, pk: int) -> ApprovalRow:
    row = await approval_store.get_approval(db, pk)
    if row is None:
        raise ApiError(404, "not_found", f"no approval {pk}")
    return row


async def approval(request: Request) -> Response:
    return JSONResponse(await _approval_or_404(state(request).db, path_int(request)))


async def approve(request: Request) -> Response:
    """Approve and start the rest of the chain; answer with its first session as soon as it exists."""
    pk = path_int(request)
    body = await json_body(request, ApprovalAction, required=False)
    st = state(request)
    await _approval_or_404(st.db, pk)
    try:
        started = await st.supervisor.start_approved(pk, actor_for(request, body.by), body.note)
    except LookupError:  # deleted since the look-up above
        raise ApiError(404, "not_found", f"no approval {pk}") from None
    except ApprovalStateError as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    except CycleBusy as exc:
        raise ApiError(409, "cycle_running", str(exc)) from None
    except Exception as exc:  # the cycle failed before its first session (logged by the supervisor)
        if (reason := storage_fault(exc)) is not None:
            raise unavailable(f"approval #{pk}: its tier could not start: {reason}") from None
        raise ApiError(500, "run_failed", f"approval #{pk} was approved but its tier could not start: {exc}") from None
    row = await _approval_or_404(st.db, pk)
    if started.session_pk is None:
        if started.task.done():  # refused once approved (e.g. the daily budget): the escalating session says why
            parent = await session_store.get_session(st.db, row["session_pk"]) if row["session_pk"] else None
            why = parent["attention"] if parent is not None and parent["attention"] else "see the session"
            raise ApiError(409, "not_started", f"approval #{pk} was approved but tier {row['tier']} did not start: "
                                               f"{why}")
        raise ApiError(503, "run_not_started", "the approved tier did not create its session in time; "
                                               "see /api/v1/sessions")
    body_out: ApprovalStarted = {"approval": row, "session_id": started.session_pk}
    return JSONResponse(body_out, status_code=202, headers={"location": f"/api/v1/sessions/{started.session_pk}"})


async def reject_endpoint(request: Request) -> Response:
    pk = path_int(request)
    body = await json_body(request, ApprovalAction, required=False)
    db = state(request).db
    await _approval_or_404(db, pk)
    try:
        row = await reject(db, pk, actor_for(request, body.by), body.note)
    except LookupError:  # deleted since the look-up above
        raise ApiError(404, "not_found", f"no approval {pk}") from None
    except ApprovalStateError as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    return JSONResponse(row)
