"""The one Jinja environment of the dashboard: templates, filters and the context every page gets.

Filters are registered here once (the value formatters live in :mod:`app.web.pages.render`, which the
SSE fragments share); :func:`page` is the only way a handler renders a full page, so the nav,
the log-out button and the ``?notice=`` banner are there on every page, error pages included.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from app.units import every, human_interval, span
from app.vocab import TIERS
from app.web import limits
from app.web.formats import fmt_cost, fmt_duration, fmt_int, fmt_utc, time_tag
from app.web.pages.render import render_json

log = logging.getLogger(__name__)

WEB_DIR = Path(__file__).resolve().parent
templates = Jinja2Templates(directory=str(WEB_DIR / "templates"))  # autoescape on for .html
# ``when`` is a <time> element (app.js makes it relative, in the viewer's zone); ``utc``
# is the same instant as plain text, for attributes; ``every``/``interval`` say periods in words.
templates.env.filters.update(cost=fmt_cost, duration=fmt_duration, when=time_tag, utc=fmt_utc, num=fmt_int,
                             as_json=render_json, every=every, interval=human_interval, span=span)
templates.env.globals.update(limits=limits, tiers=TIERS)

# Fixed notices for ?notice= after a redirect: never echo query text into a page.
NOTICES = {
    "stop_sent": "Stop sent: the session's process group is being terminated.",
    "stop_unknown": "This session is not running in this process (nothing to stop).",
    "run_started": "The cycle started; its first session is not recorded yet — see Sessions shortly.",
    "run_finished": "The cycle finished before its first session could be shown.",
    "memory_created": "Memory created.",
    "memory_saved": "Memory saved.",
    "memory_toggled": "Memory updated.",
    "memory_deleted": "Memory deleted.",
    "schema_created": "Schema stored.",
    "schema_deleted": "Schema name removed (sessions keep the schema they ran with).",
}


def page(request: Request, name: str, ctx: dict[str, Any], status: int = 200) -> Response:
    """Render ``name`` with the context every page shares, then ``ctx``."""
    st = getattr(request.app.state, "tierops", None)  # None only if the lifespan has not run
    base = {"nav": name.removesuffix(".html"),
            "auth_enabled": st is not None and st.token is not None,
            "notice": NOTICES.get(request.query_params.get("notice", ""))}
    return templates.TemplateResponse(request, name, {**base, **ctx}, status_code=status)


def error_page(request: Request, status: int, message: Any) -> Response:
    return page(request, "error.html", {"status": status, "message": message}, status)
