"""The ``/notifications`` page: what was sent, what was only recorded and why, the routes, and what
the settings in force would send where for the last incidents.

It renders the bodies ``GET /api/v1/notifications`` and ``GET /api/v1/notifications/preview``
return (``app/web/api/notifications.py``): one reader for the page and the API. URLs are never shown,
only their scheme and host.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.web.api.notifications import NOTIFICATIONS_LIMIT, PREVIEW_LAST, notifications_body, preview_body
from app.web.common import int_param
from app.web.templating import page

log = logging.getLogger(__name__)


async def notifications_page(request: Request) -> Response:
    last = int_param(request, "last", PREVIEW_LAST[0], minimum=PREVIEW_LAST[1], maximum=PREVIEW_LAST[2])
    body = await notifications_body(request, NOTIFICATIONS_LIMIT[0])
    return page(request, "notifications.html", {"body": body, "preview": await preview_body(request, last),
                                                "last": last})


routes = [Route("/notifications", notifications_page, methods=["GET"])]
