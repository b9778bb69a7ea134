"""The approval page and the Approve / Reject forms.

Pending approvals are shown with their handoff and one small form (a note, Approve, Reject) on the
overview and on the escalating session's page (``templates/_approvals.html``, included by both),
and on ``/approvals/{id}``, the page a notification links to. The forms do what ``POST
/api/v1/approvals/{id}/approve|reject`` do: Approve starts the rest of the chain through
``Supervisor.start_approved``, Reject goes through :func:`app.web.api.approvals.reject`; the actor
is "dashboard" (or "local user (no token configured)").

Like the other forms (``app/web/pages/forms.py``) they answer with a 303 back to where the form was
(the hidden ``back`` field: overview, session or approval) with a fixed notice, or render the
approval page with the message and a 4xx status: a note that is too long (422), an approval
already decided or past its time, or a cycle running (409: approve again when it has finished;
the approval stays pending).
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from app.errors import CycleBusy
from app.store import approvals as approval_store
from app.store.approvals import ApprovalRow, ApprovalStateError
from app.store.incidents import NOTE_MAX
from app.web.api.approvals import reject
from app.web.api.incidents import actor_for
from app.web.common import ApiError, path_int, state
from app.web.faults import storage_fault, unavailable
from app.web.pages.forms import read_form
from app.web.templating import page

log = logging.getLogger(__name__)

BACK = ("overview", "session", "approval")
NOTICES = {  # this page's own notices (the overview and session pages show theirs from the partial)
    "approval_approved": "Approved: the escalated tier is starting.",
    "approval_rejected": "Rejected: the escalation will not run; its session is flagged as needing attention.",
}


async def _approval(request: Request, pk: int) -> ApprovalRow:
    row = await approval_store.get_approval(state(request).db, pk, fresh=True)
    if row is None:
        raise ApiError(404, "not_found", f"There is no approval {pk}.")
    return row


async def _ctx(request: Request, row: ApprovalRow) -> dict[str, Any]:
    ctx: dict[str, Any] = {"a": row, "error": None, "note_max": NOTE_MAX}
    if (notice := NOTICES.get(request.query_params.get("notice", ""))) is not None:
        ctx["notice"] = notice
    return ctx


async def approval_page(request: Request) -> Response:
    row = await _approval(request, path_int(request))
    return page(request, "approval.html", await _ctx(request, row))


def _back(where: str, row: ApprovalRow, notice: str) -> RedirectResponse:
    if where == "overview":
        url = "/"
    elif where == "session" and row["session_pk"] is not None:
        url = f"/sessions/{row['session_pk']}"
    else:
        url = f"/approvals/{row['id']}"
    return RedirectResponse(f"{url}?notice={notice}", status_code=303)


async def _decide(request: Request, approve: bool) -> Response:
    pk = path_int(request)
    form = await read_form(request)
    row = await _approval(request, pk)
    note = form.get("note", "").strip()
    where = form.get("back", "approval")
    error, status = None, 422
    if len(note) > NOTE_MAX:
        error = f"The note is too long ({len(note):,} characters; at most {NOTE_MAX:,})."
    elif where not in BACK:
        error = f"Unknown form field back={where[:40]!r}: one of {', '.join(BACK)}."
    else:
        st = state(request)
        actor = actor_for(request, None)
        try:
            if approve:
                await st.supervisor.start_approved(pk, actor, note or None)
            else:
                await reject(st.db, pk, actor, note or None)
        except LookupError:
            raise ApiError(404, "not_found", f"There is no approval {pk}.") from None
        except (ApprovalStateError, CycleBusy) as exc:
            error, status = f"Cannot {'approve' if approve else 'reject'}: {exc}.", 409
        except Exception as exc:  # the approved tier failed before its first session (logged by the supervisor)
            if (reason := storage_fault(exc)) is not None:
                raise unavailable(f"approval #{pk}: {reason}") from None
            error, status = f"Approved, but the tier could not start: {type(exc).__name__}: {exc}", 500
        else:
            return _back(where, row, "approval_approved" if approve else "approval_rejected")
    ctx = await _ctx(request, await _approval(request, pk))
    ctx["error"] = error
    return page(request, "approval.html", ctx, status)


async def approve_form(request: Request) -> Response:
    return await _decide(request, approve=True)


async def reject_form(request: Request) -> Response:
    return await _decide(request, approve=False)


routes = [
    Route("/approvals/{id}", approval_page, methods=["GET"]),
    Route("/approvals/{id}/approve", approve_form, methods=["POST"]),
    Route("/approvals/{id}/reject", reject_form, methods=["POST"]),
]
