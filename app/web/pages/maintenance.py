"""The ``/maintenance`` page: every window (active now first, then upcoming, then the configured
schedules), the ad-hoc ones that ended lately, a form to add one and an End button per active or
upcoming ad-hoc window.

It shows what ``GET /api/v1/maintenance`` returns (:func:`app.engine.maintenance.report`), and
its forms do what ``POST /api/v1/maintenance`` and ``POST /api/v1/maintenance/{id}/end`` do,
through the same store rules (:func:`app.store.maintenance.plan`, ``create_window``,
``cancel_window``); the actor is "dashboard" (or "local user (no token configured)"). The form
takes patterns as one line each for services and checks, separated by commas or spaces, since a
pattern never holds either. Like the other forms (``app/web/pages/forms.py``) they answer with a 303 and
a fixed notice, or re-render the page with the message and a 4xx status. A
``TIEROPS_MAINTENANCE`` that cannot be read is shown as an error on the page, not a 500.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from app.engine import maintenance as engine
from app.store import maintenance as store
from app.store.maintenance import MaintenanceStateError, WindowInputError
from app.units import span
from app.web.api.incidents import actor_for
from app.web.common import ApiError, path_int, state
from app.web.pages.forms import read_form
from app.web.templating import page

log = logging.getLogger(__name__)

DURATION_CHOICES = ("30m", "1h", "2h", "4h", "8h", "1d")
NOTICES = {  # fixed texts after a redirect (never query text echoed into the page)
    "maintenance_added": "Maintenance window added: incidents it covers are recorded, nothing escalates.",
    "maintenance_ended": "Maintenance window ended: open incidents it held escalate as if they had just opened.",
}
_SPLIT = re.compile(r"[,\s]+")
FIELDS = {"duration": "Duration", "ends_at": "Ends", "starts_at": "Starts", "services": "Services",
          "checks": "Checks", "reason": "Reason"}


def split_patterns(text: str) -> list[str] | None:
    """``api, db-*`` → ``["api", "db-*"]``; nothing → None (every service/check)."""
    found = [p for p in _SPLIT.split(text.strip()) if p]
    return found or None


async def _ctx(request: Request, form: dict[str, str] | None = None, error: str | None = None) -> dict[str, Any]:
    st = state(request)
    ctx: dict[str, Any] = {
        "report": await engine.report(st.db, st.settings), "setting": engine.SETTING, "span": span,
        "duration_choices": DURATION_CHOICES, "error": error,
        "form": form or {"services": "", "checks": "", "duration": "2h", "reason": ""},
        "duration_help": store.DURATION_HELP}
    if (notice := NOTICES.get(request.query_params.get("notice", ""))) is not None:
        ctx["notice"] = notice
    return ctx


async def maintenance_page(request: Request) -> Response:
    return page(request, "maintenance.html", await _ctx(request))


async def add_window(request: Request) -> Response:
    raw = await read_form(request)
    form = {key: raw.get(key, "").strip() for key in ("services", "checks", "duration", "reason")}
    error = None
    if not form["reason"]:
        error = "Give a reason: it is shown with the window and on the incidents it holds."
    else:
        try:
            starts_at, ends_at = store.plan(duration=form["duration"] or "")
            await store.create_window(state(request).db, starts_at=starts_at, ends_at=ends_at, reason=form["reason"],
                                      created_by=actor_for(request, None),
                                      services=split_patterns(form["services"]), checks=split_patterns(form["checks"]))
        except WindowInputError as exc:
            error = f"{FIELDS.get(exc.field, exc.field)}: {exc}."
        else:
            return RedirectResponse("/maintenance?notice=maintenance_added", status_code=303)
    return page(request, "maintenance.html", await _ctx(request, form, error), 422)


async def end_window(request: Request) -> Response:
    pk = path_int(request)  # the button's form has no fields (like Stop); CSRF is the middleware's
    db = state(request).db
    try:
        await store.cancel_window(db, pk, actor_for(request, None))
    except LookupError:
        raise ApiError(404, "not_found", f"There is no maintenance window {pk}.") from None
    except MaintenanceStateError as exc:
        return page(request, "maintenance.html", await _ctx(request, error=f"Cannot end it: {exc}."), 409)
    return RedirectResponse("/maintenance?notice=maintenance_ended", status_code=303)


routes = [
    Route("/maintenance", maintenance_page, methods=["GET"]),
    Route("/maintenance", add_window, methods=["POST"]),
    Route("/maintenance/{id}/end", end_window, methods=["POST"]),
]
