"""Alerts in (issue #13): ``POST /api/v1/alerts`` and the run queue, ``GET /api/v1/queue``.

A module of its own because this endpoint is the one a *machine* outside TierOps calls:
Alertmanager's webhook receiver, Grafana's webhook contact point or a script. It may
authenticate with ``TIEROPS_WEBHOOK_TOKEN`` instead of the API token (bearer, or ``?token=`` for
senders that cannot set headers; ``app/web/auth.py`` checks it, for this endpoint only), and its
body is one of three shapes, told apart and validated by ``app/engine/alerts.py``: a problem is a
422 listing every ``{path, message}``, like the other endpoints. The body is read by
``common.json_body`` (415 for another media type, 413 beyond ``API_BODY_MAX_BYTES``, refused
while reading).

The answer is 202 with one item per alert: its fingerprint, the incident it opened, updated or
resolved (or ``ignored``), and the run: the session started, the queued run, or why none. The
alerts of one group (``TIEROPS_ALERT_GROUPING=group``) share their incident and its run.
A payload that would open an incident while the run queue is full is 503 ``queue_full`` with
nothing written (the sender retries).
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import RootModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.engine.alerts import AlertPayloadError, parse_payload
from app.store import run_queue
from app.supervisor.alerts import AlertOutcome, QueueFull, receive_alerts
from app.web.common import ApiError, choice_param, int_param, json_body, state
from app.web.openapi import QUEUE_LIMIT, AlertResult, AlertsAccepted

log = logging.getLogger(__name__)


class AlertBody(RootModel[Any]):
    """Any JSON: the shape is told and checked by :func:`app.engine.alerts.parse_payload`."""


def _result(o: AlertOutcome) -> AlertResult:
    return {"fingerprint": o.alert.fingerprint,
            "incident_id": o.change.incident["id"] if o.change is not None else None,
            "change": o.change_word,
            "run": {"session_id": o.run.session_pk, "queued_id": o.run.queued_id, "why_not": o.run.why_not}}


async def alerts(request: Request) -> Response:
    body = await json_body(request, AlertBody)
    try:
        source, parsed = parse_payload(body.root)
    except AlertPayloadError as exc:
        raise ApiError(422, "invalid_body", exc.problems) from None
    st = state(request)
    try:
        outcomes = await receive_alerts(st.supervisor, parsed)
    except QueueFull as exc:
        raise ApiError(503, "queue_full", str(exc)) from None
    log.info("received %d alert(s) from %s: %s", len(parsed), source,
             ", ".join(f"{o.change_word} {o.change.incident['key'] if o.change else o.alert.key}" for o in outcomes[:10])
             + (" …" if len(outcomes) > 10 else ""))
    accepted: AlertsAccepted = {"alerts": [_result(o) for o in outcomes]}
    return JSONResponse(accepted, status_code=202)


async def queue(request: Request) -> Response:
    default, low, high = QUEUE_LIMIT
    rows = await run_queue.list_runs(state(request).db, status=choice_param(request, "status", run_queue.STATUSES),
                                     limit=int_param(request, "limit", default, minimum=low, maximum=high),
                                     offset=int_param(request, "offset", 0))
    return JSONResponse(rows)
