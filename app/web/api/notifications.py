"""What people are told, as JSON: ``GET /api/v1/notifications`` and ``GET /api/v1/notifications/preview``.

* ``/notifications?limit=N`` — the sender's state (URLs counted, never shown; minimum severity,
  quiet hours, routes and where they came from, failures of the last 24 h), the routes with the
  URLs each reaches (scheme and host only), and the newest recorded messages with their fate.
* ``/notifications/preview?last=N`` — for the last N incidents, which messages the settings in
  force would send where, or why not, beside what was really recorded (``app/notify/preview.py``).

The ``/notifications`` page renders the same bodies (:func:`notifications_body`,
:func:`preview_body`), so the page and the API cannot disagree.
"""

from __future__ import annotations

import logging
from typing import Any, TypedDict

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.notify.sender import Notifier
from app.store import notifications as store
from app.store.notifications import NotificationRow
from app.web.common import int_param, state

log = logging.getLogger(__name__)

# (default, minimum, maximum): read by the handlers below and by the OpenAPI document.
NOTIFICATIONS_LIMIT = (50, 1, 500)
PREVIEW_LAST = (10, 1, 200)


# One route as people read it: its matchers in words, its targets (tags, 'all', URLs as scheme
# and host), the URLs it reaches now and whether the next routes are tried too.
RouteView = TypedDict("RouteView", {"name": str, "match": str, "to": list[str], "urls": list[str],
                                    "continue": bool})


class NotificationsBody(TypedDict):
    status: dict[str, Any]
    routes: list[RouteView]
    recent: list[NotificationRow]


class PreviewMessage(TypedDict):
    kind: str
    title: str
    severity: str
    sent: bool
    routes: list[str]
    urls: list[str]
    why: str | None
    follows: bool


class PreviewRecorded(TypedDict):
    kind: str
    title: str
    status: str
    routes: list[str]
    why: str | None


class PreviewIncident(TypedDict):
    id: int
    key: str
    service: str | None
    severity: str
    status: str
    messages: list[PreviewMessage]
    recorded: list[PreviewRecorded]


class PreviewBody(TypedDict):
    routes: list[RouteView]
    incidents: list[PreviewIncident]


def _notifier(request: Request) -> Notifier:
    notifier: Notifier = state(request).supervisor.notifier
    return notifier


def _routes(notifier: Notifier) -> list[RouteView]:
    return [{"name": r["name"], "match": r["match"], "to": list(r["to"]), "urls": list(r["urls"]),
             "continue": bool(r["continue"])} for r in notifier.routes_view()]


async def notifications_body(request: Request, limit: int) -> NotificationsBody:
    notifier = _notifier(request)
    return {"status": notifier.status(), "routes": _routes(notifier),
            "recent": await store.recent(state(request).db, limit)}


async def preview_body(request: Request, last: int) -> PreviewBody:
    notifier = _notifier(request)
    previews = await notifier.preview(last)
    return {"routes": _routes(notifier), "incidents": [
        {"id": p.incident["id"], "key": p.incident["key"], "service": p.incident["service"],
         "severity": p.incident["severity"], "status": p.incident["status"],
         "messages": [{"kind": m.kind, "title": m.title, "severity": m.severity, "sent": m.sent,
                       "routes": list(m.routes), "urls": list(m.urls), "why": m.why, "follows": m.follows}
                      for m in p.lines],
         "recorded": [{"kind": r["kind"], "title": r["title"], "status": r["status"], "routes": r["routes"],
                       "why": r["why"]} for r in p.recorded]}
        for p in previews]}


async def notifications(request: Request) -> Response:
    limit = int_param(request, "limit", NOTIFICATIONS_LIMIT[0], minimum=NOTIFICATIONS_LIMIT[1],
                      maximum=NOTIFICATIONS_LIMIT[2])
    return JSONResponse(await notifications_body(request, limit))


async def preview(request: Request) -> Response:
    last = int_param(request, "last", PREVIEW_LAST[0], minimum=PREVIEW_LAST[1], maximum=PREVIEW_LAST[2])
    return JSONResponse(await preview_body(request, last))
