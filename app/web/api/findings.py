"""What the tiers reported and did, over the API: events (newest first, filtered) and cooldowns
(the limits of ``TIEROPS_COOLDOWNS``, what each (kind, service) has used, the newest actions).
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.engine import cooldowns as cooldown_engine
from app.store import findings
from app.vocab import Level, values
from app.web.common import ApiError, choice_param, int_param, limit_param, state
from app.web.limits import COOLDOWN_ACTIONS_LIMIT, EVENTS_LIMIT

log = logging.getLogger(__name__)


async def events(request: Request) -> Response:
    rows = await findings.list_events(
        state(request).db, level=choice_param(request, "level", values(Level)),
        service=request.query_params.get("service") or None, session=int_param(request, "session"),
        limit=limit_param(request, EVENTS_LIMIT), offset=int_param(request, "offset", 0))
    return JSONResponse(rows)


async def cooldowns(request: Request) -> Response:
    """The limits, what each (kind, service) has used and the newest actions; a
    ``TIEROPS_COOLDOWNS`` the server cannot read is a 500 naming the problem."""
    st = state(request)
    try:
        limits = cooldown_engine.parse_limits(st.settings.cooldowns)
    except cooldown_engine.CooldownError as exc:
        raise ApiError(500, "config_error", str(exc)) from None
    body = await cooldown_engine.report(st.db, limits, recent=limit_param(request, COOLDOWN_ACTIONS_LIMIT))
    return JSONResponse(body)
