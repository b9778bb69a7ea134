"""Alerts in: ``POST``/``PUT /api/v1/alerts`` and the run queue, ``GET /api/v1/queue``.

A module of its own because this endpoint is the one a *machine* outside TierOps calls:
Alertmanager's webhook receiver, Grafana's webhook contact point (unified or legacy; its HTTP
method may be PUT) or a script. It may authenticate with ``TIEROPS_WEBHOOK_TOKEN`` instead of the
API token (bearer, ``?token=`` for senders that cannot set headers, or either token as the HTTP
Basic password; ``app/web/auth.py`` checks it, for this endpoint only), and its body is one of
four shapes, told apart and validated by ``app/engine/alerts.py``: a problem is a 422 listing
every ``{path, message}``, like the other endpoints.

Size is never a reason to drop a sender's payload (Alertmanager sends a whole group per webhook
and retries only 5xx): the body has its own limit, ``TIEROPS_ALERT_BODY_MAX_BYTES`` (32 MiB by
default; 413 naming it beyond, refused while reading), and no field or alert count of a payload
is refused for its size (see the engine). Every text is redacted before it is cut or used.

The answer is 202 with one item per alert: its fingerprint, the severity read, the incident it
opened, updated or resolved (or ``ignored``), and the run: the session started, the queued run
(``coalesced`` when it joined a run of the same service), or why none (``attention`` when the
incident now needs a human). The alerts of one group (``TIEROPS_ALERT_GROUPING=group``) share
their incident and its run. A full run queue never refuses an alert: it is recorded and told.
"""

from __future__ import annotations

import logging
from typing import Any, TypedDict

from pydantic import RootModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.engine.alert_payloads import AlertPayloadError
from app.engine.alerts import parse_payload
from app.store import run_queue
from app.supervisor.alerts import AlertOutcome, receive_alerts
from app.web.common import ApiError, choice_param, int_param, json_body, limit_param, state
from app.web.limits import QUEUE_LIMIT

log = logging.getLogger(__name__)


class AlertRun(TypedDict):
    """The investigation of one alert: the session started, the queued run (``coalesced``: joined,
    queued for another incident of its service), or why none (``attention``: the incident now needs
    a human, e.g. the run queue was full)."""

    session_id: int | None
    queued_id: int | None
    coalesced: bool
    why_not: str | None
    attention: bool


class AlertResult(TypedDict):
    fingerprint: str
    severity: str  # critical | warning | info, as read (TIEROPS_ALERT_DEFAULT_SEVERITY for unknown words)
    incident_id: int | None
    change: str  # opened | updated | resolved | ignored
    run: AlertRun


class AlertsAccepted(TypedDict):
    alerts: list[AlertResult]


class AlertBody(RootModel[Any]):
    """Any JSON: the shape is told and checked by :func:`app.engine.alerts.parse_payload`."""


def _result(o: AlertOutcome) -> AlertResult:
    return {"fingerprint": o.alert.fingerprint,
            "severity": o.alert.severity,
            "incident_id": o.change.incident["id"] if o.change is not None else None,
            "change": o.change_word,
            "run": {"session_id": o.run.session_pk, "queued_id": o.run.queued_id, "coalesced": o.run.coalesced,
                    "why_not": o.run.why_not, "attention": o.run.needs_human}}


async def alerts(request: Request) -> Response:
    st = state(request)
    settings = st.settings
    body = await json_body(request, AlertBody, limit=settings.alert_body_max_bytes,
                           setting="TIEROPS_ALERT_BODY_MAX_BYTES")
    try:
        source, parsed = parse_payload(body.root, default_severity=settings.alert_default_severity,
                                       max_alerts=settings.alert_max_alerts, redact=st.db.redact)
    except AlertPayloadError as exc:
        raise ApiError(422, "invalid_body", exc.problems) from None
    outcomes = await receive_alerts(st.supervisor, parsed)
    log.info("received %d alert(s) from %s: %s", len(parsed), source,
             ", ".join(f"{o.change_word} {o.change.incident['key'] if o.change else o.alert.key}" for o in outcomes[:10])
             + (" …" if len(outcomes) > 10 else ""))
    accepted: AlertsAccepted = {"alerts": [_result(o) for o in outcomes]}
    return JSONResponse(accepted, status_code=202)


async def queue(request: Request) -> Response:
    rows = await run_queue.list_runs(state(request).db, status=choice_param(request, "status", run_queue.STATUSES),
                                     limit=limit_param(request, QUEUE_LIMIT), offset=int_param(request, "offset", 0))
    return JSONResponse(rows)
