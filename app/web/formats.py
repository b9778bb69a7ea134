"""How a value reads on the dashboard: costs, durations, counts and timestamps.

One formatter per kind of value, used by the transcript fragments (:mod:`app.web.pages.render`)
and, as Jinja filters registered by :mod:`app.web.templating`, by every page: a cost reads the
same in a result line and in a table.
"""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup

log = logging.getLogger(__name__)


def is_number(value: Any) -> bool:
    """A finite number (NaN and infinities are not figures)."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool)


def fmt_cost(value: Any) -> str:
    if is_number(value):
        return f"${value:.4f}" if value < 1 else f"${value:.2f}"
    return "—"


def fmt_duration(ms: Any) -> str:
    if not is_number(ms):
        return "—"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f} s"
    m, s = divmod(int(s), 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


def fmt_time(value: Any) -> str:
    if not value:
        return "—"
    return str(value)[:19].replace("T", " ")


def fmt_utc(value: Any) -> str:
    """Plain text for attributes (``title="until …"``): ``2026-11-23 09:14:03 UTC``."""
    return "—" if not value else f"{fmt_time(value)} UTC"


def time_tag(value: Any) -> Markup:
    """A stored timestamp as ``<time class="when" datetime="…Z" title="… UTC">…</time>``.

    The text is the absolute UTC time, so a page without JavaScript (or left open for an hour)
    never shows a stale "3 min ago"; app.js turns it into relative text in the viewer's time zone,
    refreshed every minute, with the absolute local time on hover. Not a timestamp: escaped text.
    """
    if not value:
        return Markup("—")
    text = str(value)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return Markup("{}").format(text)
    when = (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC)
    shown = when.strftime("%Y-%m-%d %H:%M:%S")
    return Markup('<time class="when" datetime="{}" title="{} UTC">{}</time>').format(
        when.isoformat(timespec="seconds").replace("+00:00", "Z"), shown, shown)


def fmt_int(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "—"
