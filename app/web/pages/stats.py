"""The ``/stats`` page: cost, sessions and failures per day as small server-drawn
charts, over the same numbers ``GET /api/v1/stats`` returns.

The page renders :func:`app.web.api.stats.stats_body` (one source for the page and the API) and
draws each series with :mod:`app.web.pages.charts`: inline SVG, no script and no chart library,
each chart with its numbers in a table underneath. ``?days=`` takes 1 to 365 like the API (a bad
value is the error page, 422).
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.web.api.stats import StatsBody, days_param, stats_body
from app.web.common import state
from app.web.formats import fmt_cost
from app.web.pages.charts import Point, bar_chart
from app.web.templating import page

log = logging.getLogger(__name__)

DAY_CHOICES = (7, 14, 30, 90, 365)


def _count(value: float) -> str:
    return f"{int(value):,}"


def charts(body: StatsBody) -> list[Any]:
    """The three charts of the page, oldest day first."""
    days = body["by_day"]
    return [
        bar_chart([Point(d["day"], d["cost_usd"]) for d in days], title="Cost per day", fmt=fmt_cost,
                  value_name="Cost (USD)", css_class="status-running", chart_id="chart-cost"),
        bar_chart([Point(d["day"], d["sessions"]) for d in days], title="Sessions per day", fmt=_count,
                  value_name="Sessions", css_class="status-completed", chart_id="chart-sessions"),
        bar_chart([Point(d["day"], d["failed"]) for d in days], title="Failed sessions per day", fmt=_count,
                  value_name="Failed sessions", css_class="status-failed", chart_id="chart-failures"),
    ]


async def stats_page(request: Request) -> Response:
    days = days_param(request)
    body = await stats_body(state(request).db, days)
    return page(request, "stats.html", {"s": body, "charts": charts(body), "days": days,
                                        "day_choices": sorted({*DAY_CHOICES, days})})


routes = [Route("/stats", stats_page, methods=["GET"])]
