"""The incidents API: list, one incident with its timeline, its alerts and the actions the tiers
proposed for it, and the operator actions acknowledge, resolve and silence.

A module of its own because incidents bring what no other endpoint has: *who* acted. An action
records an actor built from the operator's optional ``by`` and how the request was authenticated
(:func:`actor_for`: the bearer token, the dashboard's login cookie, or no token configured), so a
timeline says "alice via API token" rather than a name anyone could type. Every other operator
action (approvals, maintenance windows, Stop, acknowledging a session) records its actor the same
way, and the dashboard's forms (``app/web/pages/incidents.py``) go through :func:`perform` too:
one place applies and logs an action.

Order of checks for an action: the body (413/415/422, structure only), then the incident (404),
then what the body means (422: ``until`` read by :func:`app.store.incidents.parse_until`), then
the incident's state (409): a body the document accepts is never refused for its shape.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.store import alert_incidents
from app.store import cooldowns as action_store
from app.store import incidents as incident_store
from app.store.alert_incidents import AlertCounts, IncidentAlertRow
from app.store.cooldowns import ProposalRow
from app.store.db import Database
from app.store.incidents import NOTE_MAX, OPERATOR_MAX, IncidentStateError, parse_until
from app.store.rows import IncidentRow, TimelineRow
from app.web.auth import token_ok
from app.web.common import ApiError, choice_param, int_param, json_body, limit_param, path_int, state
from app.web.limits import (
    INCIDENT_FILTERS,
    INCIDENTS_LIMIT,
    OPERATOR_PATTERN,
    PROPOSALS_MAX,
    UNTIL_MAX,
    UNTIL_PATTERN,
)

log = logging.getLogger(__name__)

Action = Literal["ack", "resolve", "silence"]
PAST = {"ack": "acknowledged", "resolve": "resolved", "silence": "silenced"}


class IncidentDetail(IncidentRow):
    """An incident with its timeline (the latest 500 entries, oldest first) and the actions the
    tiers proposed for it (newest first, each with the proposing session and tier). An alert
    incident lists its alerts (a group's several: firing first, the worst first; at most 1000,
    ``alert_counts`` counts them all), each with its labels, annotations and http(s) links; the
    incident's own ``links`` (runbooks first) and ``annotations`` come from them. Every text of an
    alert is the sender's."""

    timeline: Sequence[TimelineRow]
    proposals: Sequence[ProposalRow]
    alerts: Sequence[IncidentAlertRow]
    alert_counts: AlertCounts


def _blank_is_none(value: str | None) -> str | None:
    """Surrounding whitespace dropped after the length check; nothing left is no value."""
    return (value.strip() or None) if value is not None else None


class IncidentAction(BaseModel):
    """The optional body of ack and resolve (strict: the OpenAPI types are the only ones accepted)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    note: str | None = Field(None, max_length=NOTE_MAX)
    by: str | None = Field(None, max_length=OPERATOR_MAX, pattern=OPERATOR_PATTERN)

    @field_validator("note", "by")
    @classmethod
    def _stripped(cls, value: str | None) -> str | None:
        return _blank_is_none(value)


class IncidentSilence(IncidentAction):
    until: str = Field(min_length=1, max_length=UNTIL_MAX, pattern=UNTIL_PATTERN)


def actor_for(request: Request, by: str | None) -> str:
    """Who acts, as recorded: ``by`` (if given) and how this request got past the security
    middleware: a valid bearer token ("via API token"), else the login cookie ("via dashboard"),
    or no token configured at all."""
    token = state(request).token
    if token is None:
        return f"{by} (no token configured)" if by else "local user (no token configured)"
    auth = request.headers.get("authorization", "")
    bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
    via = "API token" if token_ok(token, bearer) else "dashboard"  # the middleware let only these through
    return f"{by} via {via}" if by else via


async def perform(db: Database, pk: int, action: Action, actor: str, note: str | None,
                  until: str | None = None) -> IncidentRow:
    """Apply one operator action and log it. Raises LookupError (no such incident) or
    :class:`IncidentStateError` (not applicable in its state, or a silence that is already over)."""
    if action == "ack":
        row = await incident_store.acknowledge(db, pk, actor, note)
    elif action == "resolve":
        row = await incident_store.resolve(db, pk, actor, note)
    else:
        if until is None:  # pragma: no cover - the callers parse it first
            raise ValueError("a silence needs an end")
        row = await incident_store.silence(db, pk, until, actor, note)
    log.info("incident %d (%s) %s by %s%s", pk, row["key"], PAST[action], actor,
             f" until {until}" if until else "")
    return row


async def incidents(request: Request) -> Response:
    rows = await incident_store.list_incidents(
        state(request).db, status=choice_param(request, "status", INCIDENT_FILTERS),
        service=request.query_params.get("service") or None, limit=limit_param(request, INCIDENTS_LIMIT),
        offset=int_param(request, "offset", 0))
    return JSONResponse(rows)


async def incident(request: Request) -> Response:
    pk = path_int(request)
    db = state(request).db
    row = await incident_store.get_incident(db, pk)
    if row is None:
        raise ApiError(404, "not_found", f"no incident {pk}")
    body: IncidentDetail = {**row, "timeline": await incident_store.timeline(db, pk),
                            "proposals": await action_store.proposals(db, incident_id=pk, limit=PROPOSALS_MAX),
                            "alerts": await alert_incidents.incident_alerts(db, pk),
                            "alert_counts": await alert_incidents.alert_counts(db, pk)}
    return JSONResponse(body)


async def _act(request: Request, action: Action) -> Response:
    pk = path_int(request)
    body: IncidentAction = await (json_body(request, IncidentSilence) if action == "silence"
                                  else json_body(request, IncidentAction, required=False))
    db = state(request).db
    if await incident_store.get_incident(db, pk) is None:
        raise ApiError(404, "not_found", f"no incident {pk}")
    until = None
    if isinstance(body, IncidentSilence):
        try:
            until = parse_until(body.until)
        except ValueError as exc:
            raise ApiError(422, "invalid_body", [{"path": "$.until", "message": str(exc)}]) from None
    try:
        row = await perform(db, pk, action, actor_for(request, body.by), body.note, until)
    except LookupError:  # deleted since the look-up above
        raise ApiError(404, "not_found", f"no incident {pk}") from None
    except IncidentStateError as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    return JSONResponse(row)


async def ack(request: Request) -> Response:
    return await _act(request, "ack")


async def resolve(request: Request) -> Response:
    return await _act(request, "resolve")


async def silence(request: Request) -> Response:
    return await _act(request, "silence")
