"""The ``/cooldowns`` page: the limits of ``TIEROPS_COOLDOWNS``, every (action, service)
window with actions in it — used, remaining and when the next one is allowed — the newest
recorded actions (taken or dry runs) and, apart, the newest proposed ones with whether the limits
would allow each now.

It shows what ``GET /api/v1/cooldowns`` returns, read by the overview's own context function
(:func:`app.web.pages.overview.cooldowns_ctx`, one reader for both pages): a ``TIEROPS_COOLDOWNS``
that cannot be parsed is shown as an error on the page rather than a 500. The limits get their window in
words (``4 hours``); kinds without a limit are recorded and listed, never limited.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.engine.cooldowns import HOST_WIDE, SETTING
from app.units import span
from app.web.common import state
from app.web.pages.overview import cooldowns_ctx
from app.web.templating import page

log = logging.getLogger(__name__)


async def cooldowns_page(request: Request) -> Response:
    ctx = await cooldowns_ctx(request)
    limited = {w["kind"] for w in ctx["active"]}
    return page(request, "cooldowns.html", {
        "cooldowns": ctx, "setting": SETTING, "setting_value": state(request).settings.cooldowns,
        "host_wide": HOST_WIDE, "span": span,
        "idle_limits": [lim for lim in ctx["limits"] if lim["kind"] not in limited]})


routes = [Route("/cooldowns", cooldowns_page, methods=["GET"])]
