"""The ``/incidents`` pages: the list (unresolved by default, filtered by status and
service) and one incident with its latest evidence, the actions the tiers proposed for it (each
with the session that proposed it), the runbooks its sessions were given, the evidence status of
their findings about it, its timeline and three small forms — Acknowledge, Resolve,
Silence — each with a note.

The forms do what ``POST /api/v1/incidents/{id}/ack|resolve|silence`` do, through the same
:func:`app.web.api.incidents.perform` with the same rules (the note's length, the silence's end
read by :func:`app.store.incidents.parse_until`); the actor is "dashboard" (or "local user (no
token configured)"). Like the other forms (``app/web/pages/forms.py``) they answer with a 303 back to
the incident and a fixed notice, or re-render the page with the message and a 4xx status.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from app.clock import utcnow
from app.engine.alerts import is_link
from app.store import alert_incidents
from app.store import cooldowns as action_store
from app.store import evidence as evidence_store
from app.store import guard as guard_store
from app.store import incidents as incident_store
from app.store import runbooks as runbook_store
from app.store.db import Database
from app.store.incidents import NOTE_MAX, IncidentStateError, parse_until
from app.store.rows import IncidentRow
from app.vocab import IncidentStatus, values
from app.web.api.incidents import Action, actor_for, perform
from app.web.common import ApiError, choice_param, int_param, path_int, state
from app.web.limits import FILTER_TEXT_MAX, PROPOSALS_MAX
from app.web.pages import evidence
from app.web.pages.forms import page_query, read_form
from app.web.templating import page

log = logging.getLogger(__name__)

INCIDENTS_PER_PAGE = 100
ALERTS_SHOWN = 200  # alerts of one incident listed on its page (the API lists up to 1000)
STATUS_CHOICES = ("unresolved", *values(IncidentStatus), "all")
SILENCE_CHOICES = (("1h", "1 hour"), ("4h", "4 hours"), ("1d", "1 day"), ("7d", "7 days"))
# Fixed notices after a redirect (never query text echoed into the page).
NOTICES = {
    "incident_ack": "Incident acknowledged: it will not escalate again while it stays open.",
    "incident_resolve": "Incident resolved. If its check fails again, a new incident opens.",
    "incident_silence": "Incident silenced: no escalation for its key until the time shown.",
}


async def incidents_page(request: Request) -> Response:
    db = state(request).db
    pg = int_param(request, "page", 1, minimum=1, maximum=100_000)
    status = choice_param(request, "status", STATUS_CHOICES) or "unresolved"
    service = (request.query_params.get("service") or "").strip()[:FILTER_TEXT_MAX] or None
    rows = await incident_store.list_incidents(db, status=None if status == "all" else status, service=service,
                                               limit=INCIDENTS_PER_PAGE + 1, offset=(pg - 1) * INCIDENTS_PER_PAGE)
    filters = {"status": None if status == "unresolved" else status, "service": service}
    return page(request, "incidents.html", {
        "incidents": rows[:INCIDENTS_PER_PAGE], "status": status, "service": service, "statuses": STATUS_CHOICES,
        "services": await incident_store.incident_services(db), "now": utcnow(), "page": pg,
        "prev_url": page_query(page=pg - 1, **filters) if pg > 1 else None,
        "next_url": page_query(page=pg + 1, **filters) if len(rows) > INCIDENTS_PER_PAGE else None,
    })


async def _incident_ctx(request: Request, pk: int) -> dict[str, Any]:
    db = state(request).db
    row = await incident_store.get_incident(db, pk)
    if row is None:
        raise ApiError(404, "not_found", f"There is no incident {pk}.")
    ctx: dict[str, Any] = {"i": row, "timeline": await incident_store.timeline(db, pk), "now": utcnow(),
                           "proposals": await action_store.proposals(db, incident_id=pk, limit=PROPOSALS_MAX),
                           "runbooks": await runbook_store.incident_runbooks(db, pk),
                           "guard_denials": await guard_store.denials_for_incident(db, pk),
                           "findings": [{**f, "mark": evidence.mark(f["evidence_status"], f["evidence"], {})}
                                        for f in await evidence_store.incident_findings(db, pk, row["service"])],
                           **await _alert_ctx(db, row),
                           "silence_choices": SILENCE_CHOICES, "note_max": NOTE_MAX, "error": None,
                           "form": {"action": None, "note": "", "until": "1h"}}
    if (notice := NOTICES.get(request.query_params.get("notice", ""))) is not None:
        ctx["notice"] = notice  # over the shared ?notice= texts of templating.py
    return ctx


def links_of(value: Any) -> list[dict[str, str]]:
    """Stored ``[{label, url}]`` as the page may show them: http(s) URLs only, whatever the row holds."""
    if not isinstance(value, list):
        return []
    return [{"label": str(v.get("label") or "link"), "url": v["url"]} for v in value
            if isinstance(v, dict) and isinstance(v.get("url"), str) and is_link(v["url"])]


async def _alert_ctx(db: Database, row: IncidentRow) -> dict[str, Any]:
    """An alert incident's links (runbooks first), annotations and alerts, for the page."""
    alerts = await alert_incidents.incident_alerts(db, row["id"], limit=ALERTS_SHOWN)
    counts = await alert_incidents.alert_counts(db, row["id"])
    notes = row.get("annotations")
    return {"links": links_of(row.get("links")), "annotations": notes if isinstance(notes, dict) else {},
            "alerts": [{**a, "links": links_of(a["links"])} for a in alerts], "alert_counts": counts,
            "alerts_more": counts["firing"] + counts["resolved"] - len(alerts)}


async def incident_page(request: Request) -> Response:
    return page(request, "incident.html", await _incident_ctx(request, path_int(request)))


async def _act(request: Request, action: Action) -> Response:
    pk = path_int(request)
    form = await read_form(request)
    note = form.get("note", "").strip()
    until_text = form.get("until", "").strip()
    error, status = None, 422
    until = None
    if len(note) > NOTE_MAX:
        error = f"The note is too long ({len(note):,} characters; at most {NOTE_MAX:,})."
    elif action == "silence":
        try:
            until = parse_until(until_text)
        except ValueError as exc:
            error = f"Cannot silence: {exc}."
    if error is None:
        try:
            await perform(state(request).db, pk, action, actor_for(request, None), note or None, until)
        except LookupError:
            raise ApiError(404, "not_found", f"There is no incident {pk}.") from None
        except IncidentStateError as exc:
            error, status = f"Cannot {'acknowledge' if action == 'ack' else action}: {exc}.", 409
        else:
            return RedirectResponse(f"/incidents/{pk}?notice=incident_{action}", status_code=303)
    ctx = await _incident_ctx(request, pk)
    ctx.update(error=error, form={"action": action, "note": note, "until": until_text or "1h"})
    return page(request, "incident.html", ctx, status)


async def incident_ack(request: Request) -> Response:
    return await _act(request, "ack")


async def incident_resolve(request: Request) -> Response:
    return await _act(request, "resolve")


async def incident_silence(request: Request) -> Response:
    return await _act(request, "silence")


routes = [
    Route("/incidents", incidents_page, methods=["GET"]),
    Route("/incidents/{id}", incident_page, methods=["GET"]),
    Route("/incidents/{id}/ack", incident_ack, methods=["POST"]),
    Route("/incidents/{id}/resolve", incident_resolve, methods=["POST"]),
    Route("/incidents/{id}/silence", incident_silence, methods=["POST"]),
]
