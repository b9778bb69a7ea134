"""The route table of the REST API under ``/api/v1`` (JSON; errors are ``{error, detail}``).

Bad input never yields a 500: query and path parameters are checked (422/404), bodies are
read up to ``API_BODY_MAX_BYTES`` (413 beyond, refused while reading), must be JSON (415 for
another declared media type), are validated with pydantic models (422 listing every problem),
and state conflicts are 409. Every route but the document itself refuses query parameters its
OpenAPI operation does not list (:func:`_documented`), so a misspelt filter is not ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.web.api import (
    alerts,
    approvals,
    config,
    findings,
    incidents,
    maintenance,
    memories,
    models,
    notifications,
    runs,
    schemas,
    sessions,
    stats,
)
from app.web.api.openapi import document
from app.web.api.operations import paths
from app.web.common import ApiError, state

log = logging.getLogger(__name__)


async def openapi(request: Request) -> Response:
    return JSONResponse(document(token_required=state(request).token is not None))


Endpoint = Callable[[Request], Awaitable[Response]]
OPERATIONS = paths(auth=False)  # the query parameters of an operation do not depend on the token


def _documented(path: str, endpoint: Endpoint) -> Endpoint:
    """``endpoint`` refusing query parameters its OpenAPI operation does not list (422 naming them,
    so a misspelt filter is not silently ignored)."""
    ops = OPERATIONS[path]
    known = {method.upper(): {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
             for method, op in ops.items()}
    if "GET" in known:
        known["HEAD"] = known["GET"]

    async def checked(request: Request) -> Response:
        allowed = known.get(request.method, set())
        if unknown := sorted(set(request.query_params) - allowed):
            takes = ", ".join(sorted(allowed)) or "none"
            raise ApiError(422, "invalid_parameter", f"unknown query parameter(s) {', '.join(map(repr, unknown))};"
                                                     f" {request.method} {path} takes: {takes}")
        return await endpoint(request)

    return checked


routes = [
    Route("/sessions", _documented("/sessions", sessions.sessions)),
    # before /sessions/{id}, which would take "rollup" for an id
    Route("/sessions/rollup", _documented("/sessions/rollup", stats.rollup)),
    Route("/sessions/{id}", _documented("/sessions/{id}", sessions.session)),
    Route("/sessions/{id}/activity", _documented("/sessions/{id}/activity", sessions.activity)),
    Route("/sessions/{id}/result", _documented("/sessions/{id}/result", sessions.result)),
    Route("/sessions/{id}/stop", _documented("/sessions/{id}/stop", sessions.stop), methods=["POST"]),
    Route("/sessions/{id}/attention/ack", _documented("/sessions/{id}/attention/ack", sessions.attention_ack),
          methods=["POST"]),
    Route("/runs", _documented("/runs", runs.runs), methods=["POST"]),
    Route("/events", _documented("/events", findings.events)),
    Route("/memories", _documented("/memories", memories.memories), methods=["GET", "POST"]),
    Route("/memories/{id}", _documented("/memories/{id}", memories.memory), methods=["PATCH", "DELETE"]),
    Route("/schemas", _documented("/schemas", schemas.schemas), methods=["GET", "POST"]),
    Route("/schemas/{name}", _documented("/schemas/{name}", schemas.schema), methods=["GET", "DELETE"]),
    Route("/incidents", _documented("/incidents", incidents.incidents)),
    Route("/incidents/{id}", _documented("/incidents/{id}", incidents.incident)),
    Route("/incidents/{id}/ack", _documented("/incidents/{id}/ack", incidents.ack), methods=["POST"]),
    Route("/incidents/{id}/resolve", _documented("/incidents/{id}/resolve", incidents.resolve), methods=["POST"]),
    Route("/incidents/{id}/silence", _documented("/incidents/{id}/silence", incidents.silence), methods=["POST"]),
    Route("/approvals", _documented("/approvals", approvals.approvals)),
    Route("/approvals/{id}", _documented("/approvals/{id}", approvals.approval)),
    Route("/approvals/{id}/approve", _documented("/approvals/{id}/approve", approvals.approve), methods=["POST"]),
    Route("/approvals/{id}/reject", _documented("/approvals/{id}/reject", approvals.reject_endpoint),
          methods=["POST"]),
    Route("/cooldowns", _documented("/cooldowns", findings.cooldowns)),
    Route("/alerts", _documented("/alerts", alerts.alerts), methods=["POST", "PUT"]),  # PUT: Grafana
    Route("/queue", _documented("/queue", alerts.queue)),
    Route("/stats", _documented("/stats", stats.stats)),
    Route("/maintenance", _documented("/maintenance", maintenance.maintenance), methods=["GET", "POST"]),
    Route("/maintenance/{id}/end", _documented("/maintenance/{id}/end", maintenance.end), methods=["POST"]),
    Route("/notifications", _documented("/notifications", notifications.notifications)),
    Route("/notifications/preview", _documented("/notifications/preview", notifications.preview)),
    Route("/config", _documented("/config", config.config), methods=["GET", "PUT"]),
    Route("/models", _documented("/models", models.models)),
    Route("/models/refresh", _documented("/models/refresh", models.refresh), methods=["POST"]),
    Route("/openapi.json", openapi),
]
