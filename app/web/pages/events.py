"""The events page: every event the tiers reported, newest first, filtered by level, service and
session, paged; its first unfiltered page follows new events live (``/events/stream``).
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.store import findings
from app.vocab import Level, values
from app.web.common import choice_param, int_param, state
from app.web.pages.forms import filter_text, page_query
from app.web.pages.render import render_event_row
from app.web.templating import page

log = logging.getLogger(__name__)

EVENTS_PER_PAGE = 100


async def events_page(request: Request) -> Response:
    st = state(request)
    pg = int_param(request, "page", 1, minimum=1, maximum=100_000)
    level = choice_param(request, "level", values(Level))
    service = filter_text(request, "service")
    session = int_param(request, "session", None, minimum=1)
    rows = await findings.list_events(st.db, level=level, service=service, session=session,
                                      limit=EVENTS_PER_PAGE + 1, offset=(pg - 1) * EVENTS_PER_PAGE)
    has_next = len(rows) > EVENTS_PER_PAGE
    rows = rows[:EVENTS_PER_PAGE]
    filtered = bool(level or service or session)
    return page(request, "events.html", {
        "rows": [render_event_row(e) for e in rows],
        "level": level, "service": service, "session": session, "levels": values(Level),
        "services": await findings.event_services(st.db),
        "page": pg, "live": pg == 1 and not filtered, "last_event_id": rows[0]["id"] if rows else 0,
        "prev_url": page_query(page=pg - 1, level=level, service=service, session=session) if pg > 1 else None,
        "next_url": page_query(page=pg + 1, level=level, service=service, session=session) if has_next else None,
    })



routes = [Route("/events", events_page, methods=["GET"])]
