"""``GET /api/v1/models`` and ``POST /api/v1/models/refresh``: the models the upstream offers.

The list comes from the supervisor's :class:`~app.supervisor.upstream_models.ModelCatalog` (the
Anthropic Models API with the CLI's credential, kept ``TIEROPS_MODELS_CACHE_TTL`` s, one fetch at
a time). A failure is 502 (unreachable, refused, not the expected list) or 504 (no answer within
``TIEROPS_MODELS_TIMEOUT``) with ``{error, detail}`` naming the URL and why, plus the last good
list marked ``stale`` with its age when there is one. Neither takes a body or a parameter.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.web.common import state

log = logging.getLogger(__name__)


async def models(request: Request) -> Response:
    view = await state(request).supervisor.models.get()
    return JSONResponse(view.body, status_code=view.status)


async def refresh(request: Request) -> Response:
    view = await state(request).supervisor.models.get(refresh=True)
    return JSONResponse(view.body, status_code=view.status)
