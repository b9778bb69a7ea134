"""Small bar charts as inline SVG, drawn on the server (the ``/stats`` page).

Why not a chart library: the dashboard loads no script from elsewhere (no CDN) and its
Content-Security-Policy allows no inline style, so a chart is plain SVG markup built here: a
pure function of its series, every text escaped. Colours come from ``currentColor`` (the
element's CSS colour, e.g. ``status-failed``), so charts follow the page's light and dark
themes without a style attribute.

Each chart is an ``<svg role="img">`` labelled by its own ``<title>`` and ``<desc>`` (the
largest value and the total, also written under the chart), each bar carries a ``<title>`` with
its day and value (a tooltip on hover), and :func:`bar_chart` gives the same numbers as a plain table in a ``<details>``
underneath, for screen readers and for copying.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup

log = logging.getLogger(__name__)

__all__ = ["Point", "bar_chart", "bar_svg"]

WIDTH = 640
HEIGHT = 160  # also the drawn height in CSS pixels: the width stretches (no text inside to distort)
TOP = 4
BOTTOM = 4
LEFT = 4
RIGHT = 4
GAP = 0.2  # share of a slot left empty between bars


@dataclass(frozen=True)
class Point:
    label: str  # e.g. the day, 2026-11-24
    value: float


def _number(value: float) -> str:
    """Coordinates with at most two decimals (``12``, ``12.5``), as SVG reads them."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "chart"


def _values(points: Sequence[Point]) -> list[float]:
    return [v if math.isfinite(v) and v > 0 else 0.0 for v in (p.value for p in points)]


def describe(points: Sequence[Point], fmt: Callable[[float], str]) -> str:
    """The chart in one sentence: its range, total and highest value (the SVG's ``<desc>`` and the
    line under it, readable at any width, where text inside a scaled SVG would be tiny)."""
    values = _values(points)
    peak = max(values, default=0.0)
    if not points:
        return "No data."
    if peak == 0:
        return f"All {len(points)} values are {fmt(0)}."
    best = points[values.index(peak)]
    return f"{len(points)} values from {points[0].label} to {points[-1].label}; total {fmt(sum(values))}; " \
           f"highest {fmt(peak)} on {best.label}."


def bar_svg(points: Sequence[Point], *, title: str, fmt: Callable[[float], str], css_class: str = "",
            chart_id: str | None = None) -> Markup:
    """One bar per point, scaled to the largest value (an empty or all-zero series draws a flat
    baseline and says so). Negative and non-finite values are drawn as 0."""
    ident = _slug(chart_id or title)
    values = _values(points)
    peak = max(values, default=0.0)
    desc = describe(points, fmt)
    plot_h = HEIGHT - TOP - BOTTOM
    slot = (WIDTH - LEFT - RIGHT) / max(1, len(points))
    bar_w = max(slot * (1 - GAP), 0.5)
    parts = [Markup('<svg class="bars {}" role="img" viewBox="0 0 {} {}" width="100%" height="{}"'
                    ' preserveAspectRatio="none" aria-labelledby="{}-title {}-desc" focusable="false">').format(
        css_class, WIDTH, HEIGHT, HEIGHT, ident, ident),
        Markup('<title id="{}-title">{}</title><desc id="{}-desc">{}</desc>').format(ident, title, ident, desc)]
    baseline = TOP + plot_h
    parts.append(Markup('<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="currentColor" stroke-opacity="0.4"/>').format(
        LEFT, _number(baseline), WIDTH - RIGHT, _number(baseline)))
    for i, (point, value) in enumerate(zip(points, values, strict=True)):
        h = plot_h * value / peak if peak else 0.0
        if value > 0:
            h = max(h, 1.0)  # a small value stays visible
        x = LEFT + i * slot + (slot - bar_w) / 2
        parts.append(Markup('<rect x="{}" y="{}" width="{}" height="{}" fill="currentColor">'
                            '<title>{}: {}</title></rect>').format(
            _number(x), _number(baseline - h), _number(bar_w), _number(h), point.label, fmt(point.value)))
    parts.append(Markup("</svg>"))
    return Markup("").join(parts)


def bar_chart(points: Sequence[Point], *, title: str, fmt: Callable[[float], str], value_name: str,
              css_class: str = "", chart_id: str | None = None) -> Markup:
    """A ``<div class="chart">``: the heading, the SVG, its sentence (:func:`describe`) and the
    numbers in a table inside ``<details>``."""
    rows = Markup("").join(Markup("<tr><td>{}</td><td>{}</td></tr>").format(p.label, fmt(p.value)) for p in points)
    table = Markup('<details><summary>{} as a table</summary><div class="table-scroll"><table>'
                   '<thead><tr><th scope="col">Day</th><th scope="col">{}</th></tr></thead><tbody>{}</tbody>'
                   '</table></div></details>').format(title, value_name, rows)
    ident = _slug(chart_id or title)
    return Markup('<div class="chart" id="{}"><h2>{}</h2>{}<p class="muted small" aria-hidden="true">{}</p>{}'
                  '</div>').format(ident, title, bar_svg(points, title=title, fmt=fmt, css_class=css_class,
                                                         chart_id=chart_id), describe(points, fmt), table)

