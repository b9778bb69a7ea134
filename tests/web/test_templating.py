"""The page filters: ``when`` (a <time> app.js makes relative and local), ``utc`` (the
same instant as attribute text), ``every``/``interval`` (periods in words); and that every template
using them still renders and never puts markup into an attribute."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markupsafe import Markup

from app.units import every, human_interval
from app.web.formats import time_tag
from app.web.pages.render import render_event_row
from app.web.templating import WEB_DIR, templates


@pytest.mark.parametrize(("seconds", "text"), [
    (1, "every second"), (5, "every 5 seconds"), (0.5, "every 0.5 seconds"), (45.0, "every 45 seconds"),
    (60, "every minute"), (90, "every 1 min 30 s"), (300, "every 5 minutes"), (3600, "every hour"),
    (5400, "every 1 h 30 min"), (3601, "every 1 h 1 s"), (7200, "every 2 hours"), (86_400, "every day"),
    (90_000, "every 1 d 1 h"), (172_800, "every 2 days"), (604_800, "every 7 days"),
])
def test_every_says_periods_in_words(seconds: float, text: str) -> None:
    assert every(seconds) == text
    assert human_interval(seconds) == text.removeprefix("every ")


@pytest.mark.parametrize("bad", [None, 0, -5, float("nan"), float("inf"), True, "3600"])
def test_every_without_a_period_is_a_dash(bad: object) -> None:
    assert every(bad) == "—"  # type: ignore[arg-type]
    assert human_interval(bad) == "—"  # type: ignore[arg-type]


def test_when_is_a_time_element_with_absolute_utc_text() -> None:
    html = time_tag("2026-11-23T09:14:03.512Z")
    assert isinstance(html, Markup)
    assert html == ('<time class="when" datetime="2026-11-23T09:14:03Z" title="2026-11-23 09:14:03 UTC">'
                    "2026-11-23 09:14:03</time>")
    # another zone is converted; a naive time is taken as UTC
    assert 'datetime="2026-11-23T07:44:03Z"' in time_tag("2026-11-23T09:14:03+01:30")
    assert 'datetime="2026-11-23T09:14:03Z"' in time_tag("2026-11-23 09:14:03")


def test_when_of_nothing_or_not_a_time_is_safe_text() -> None:
    assert time_tag(None) == "—" and time_tag("") == "—"
    hostile = time_tag('<img src=x onerror="alert(1)">')
    assert "<img" not in hostile and "&lt;img" in hostile and "<time" not in hostile


def test_filters_render_through_jinja() -> None:
    page = templates.env.from_string(
        '<p>{{ t|when }}</p><span title="until {{ t|utc }}">x</span> {{ s|every }} ({{ s|interval }})')
    out = page.render(t="2026-11-23T09:14:03Z", s=3600)
    assert out == ('<p><time class="when" datetime="2026-11-23T09:14:03Z" title="2026-11-23 09:14:03 UTC">'
                   '2026-11-23 09:14:03</time></p><span title="until 2026-11-23 09:14:03 UTC">x</span> '
                   "every hour (hour)")


def test_live_event_rows_carry_the_same_time_markup() -> None:
    row = render_event_row({"id": 7, "level": "warning", "created_at": "2026-11-23T09:14:03.512Z",
                            "message": "disk", "service": "db", "session_pk": None})
    assert str(time_tag("2026-11-23T09:14:03.512Z")) in row


TEMPLATES = sorted((WEB_DIR / "templates").glob("*.html"))


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_no_template_puts_a_time_element_into_an_attribute(path: Path) -> None:
    """``when`` is markup: inside ``title="…"`` it would break the tag; attributes use ``utc``."""
    text = path.read_text(encoding="utf-8")
    inside = re.findall(r'=\s*"[^"<>]*\{\{[^}]*\|\s*when\b[^}]*\}\}[^"<>]*"', text)
    assert inside == [], f"{path.name}: use |utc inside attributes: {inside}"


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_no_template_writes_utc_after_a_relative_time(path: Path) -> None:
    """app.js turns a ``when`` into "in 59 min" in the viewer's zone: a literal " UTC" after it
    would then be wrong (the title says the zone)."""
    text = path.read_text(encoding="utf-8")
    after = re.findall(r"\{\{[^}]*\|\s*when\b[^}]*\}\}\s*UTC", text)
    assert after == [], f"{path.name}: drop the ' UTC' after |when: {after}"
