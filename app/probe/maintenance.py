"""Maintenance windows as an operator writes them: in the checks file's ``maintenance:`` section
and in ``TIEROPS_MAINTENANCE``.

Why a module of its own, and here: both sources hold the same list of windows and must agree on
what a valid one is, and the checks file is read by the probe (``app/probe/inventory.py``), the
leftmost layer; the setting is read by the engine (``app/engine/maintenance.py``), which also
does the window arithmetic. This module only parses and validates: every problem comes back as a
``(path, message)`` pair, so the inventory reports it at its ``FILE:LINE`` and the setting as
``TIEROPS_MAINTENANCE: [0].start: …``. It never raises for bad input.

What it does differently from the rest of the checks file:

* ``start: 02:00`` unquoted is a *sexagesimal integer* to YAML 1.1 (``120``); the scalar's own text
  is used instead (:func:`restore_times`), so the obvious spelling works.
* Weekdays are English names (``Monday`` … ``Sunday``, or ``Mon`` … ``Sun``, any case) or the
  words ``day`` (every day, the default), ``weekday`` (Monday to Friday) and ``weekend``.
* A window has exactly one of ``start`` (a local ``HH:MM`` on the listed days) and ``cron`` (five
  fields, local time); ``every`` only goes with ``start``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import time
from fnmatch import fnmatchcase
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml

from app.probe.targets import NAME_PATTERN, format_duration, parse_duration, quote
from app.redact import MASK, secret_name

log = logging.getLogger(__name__)

__all__ = [
    "KEYS",
    "MAX_DURATION_S",
    "SOURCE_CHECKS_FILE",
    "SOURCE_SETTING",
    "WEEKDAYS",
    "ProblemPath",
    "WindowSpec",
    "matches",
    "parse_windows",
    "restore_times",
    "schedule_text",
]

SOURCE_SETTING = "setting"
SOURCE_CHECKS_FILE = "checks file"
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_DAY_WORDS: dict[str, tuple[int, ...]] = {
    "day": tuple(range(7)), "days": tuple(range(7)), "daily": tuple(range(7)),
    "weekday": tuple(range(5)), "weekdays": tuple(range(5)),
    "weekend": (5, 6), "weekends": (5, 6),
}
_NAMES: dict[str, int] = {**{d.lower(): i for i, d in enumerate(WEEKDAYS)},
                          **{d[:3].lower(): i for i, d in enumerate(WEEKDAYS)}}
MAX_DURATION_S = 7 * 86400.0
PATTERN_MAX = 200  # characters of one services/checks pattern
PATTERNS_MAX = 100  # patterns in one matcher
DESCRIPTION_MAX = 500
KEYS = ("name", "start", "cron", "duration", "every", "timezone", "services", "checks", "description")
_TIME = re.compile(r"([0-9]{1,2}):([0-9]{2})")
_DAYS_HINT = "use Monday … Sunday (or Mon … Sun), day, weekday or weekend"

ProblemPath = list[str | int]  # where a problem is, as JSON path steps: ["maintenance", 0, "start"]


@dataclass(frozen=True)
class WindowSpec:
    """One configured window: ``start`` on ``days``, or ``cron``, lasting ``duration_s``, in ``timezone``.
    ``services``/``checks`` None: every service/check."""

    name: str
    source: str  # setting | checks file
    duration_s: float
    timezone: str = "UTC"
    start: time | None = None
    days: tuple[int, ...] = tuple(range(7))  # 0 = Monday
    cron: str | None = None
    services: tuple[str, ...] | None = None
    checks: tuple[str, ...] | None = None
    description: str | None = None
    line: int | None = None  # in the checks file

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


def matches(services: Iterable[str] | None, checks: Iterable[str] | None, *, service: str | None,
            check: str | None) -> bool:
    """Whether a window with these matchers covers (``service``, ``check``): every matcher given must
    match (fnmatch-style, case-sensitive); a service or check that is None matches only a window
    without that matcher."""
    for patterns, value in ((services, service), (checks, check)):
        if patterns is None:
            continue
        if value is None or not any(fnmatchcase(value, p) for p in patterns):
            return False
    return True


def schedule_text(spec: WindowSpec) -> str:
    """``02:00 for 2h every Tuesday (Europe/Berlin)`` or ``cron 0 2 * * 2 for 1h (UTC)``."""
    length = format_duration(spec.duration_s)
    if spec.cron is not None:
        return f"cron {spec.cron} for {length} ({spec.timezone})"
    start = spec.start.strftime("%H:%M") if spec.start is not None else "?"
    return f"{start} for {length} {_days_text(spec.days)} ({spec.timezone})"


def _days_text(days: tuple[int, ...]) -> str:
    for word, group in (("every day", tuple(range(7))), ("every weekday", tuple(range(5))),
                        ("every weekend day", (5, 6))):
        if days == group:
            return word
    return "every " + ", ".join(WEEKDAYS[d] for d in days)


# --- parsing ----------------------------------------------------------------------------------

def restore_times(items: Any, node: yaml.Node | None) -> Any:
    """``items`` (a loaded ``maintenance`` list) with every ``start`` that YAML read as a
    sexagesimal integer (``start: 02:00`` → 120) replaced by the scalar's own text, read from
    ``node`` (the list's YAML node). Anything else is returned as it was."""
    if not isinstance(items, list) or not isinstance(node, yaml.SequenceNode):
        return items
    for item, item_node in zip(items, node.value, strict=False):
        if not (isinstance(item, dict) and isinstance(item_node, yaml.MappingNode)):
            continue
        for key, value in item_node.value:
            if (str(key.value) == "start" and isinstance(value, yaml.ScalarNode) and ":" in str(value.value)
                    and isinstance(item.get("start"), int) and not isinstance(item.get("start"), bool)):
                item["start"] = str(value.value)
    return items


def parse_windows(items: Any, source: str, where: ProblemPath, *,
                  lines: Any = None) -> tuple[list[WindowSpec], list[tuple[ProblemPath, str]]]:
    """Every valid window of ``items`` (a list) and every problem as ``(path, message)``.

    ``where`` is the list's own path (``["maintenance"]`` in the checks file, ``[]`` for the
    setting); ``lines`` (optional) maps a path to its line for :attr:`WindowSpec.line`."""
    problems: list[tuple[ProblemPath, str]] = []
    if not isinstance(items, list):
        what = "the setting" if not where else _where(where)
        problems.append((where, f"{what}: expected a list of windows, got {_kind(items)}"))
        return [], problems
    specs: list[WindowSpec] = []
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        spec, found = _parse_one(item, source, [*where, i])
        problems += found
        name = item.get("name") if isinstance(item, dict) else None
        if isinstance(name, str) and name in first:
            problems.append(([*where, i, "name"], f"{_where([*where, i, 'name'])}: duplicate window name "
                                                  f"'{name}' (first at {_first(where, first[name], lines)})"))
            continue
        if isinstance(name, str):
            first[name] = i
        if spec is None:
            continue
        if lines is not None:
            spec = replace(spec, line=lines.line([*where, i]))
        specs.append(spec)
    return specs, problems


def _first(where: ProblemPath, i: int, lines: Any) -> str:
    return f"line {lines.line([*where, i, 'name'])}" if lines is not None else _where([*where, i])


def _parse_one(item: Any, source: str, path: ProblemPath) -> tuple[WindowSpec | None, list[tuple[ProblemPath, str]]]:
    problems: list[tuple[ProblemPath, str]] = []

    def bad(key: str | None, message: str) -> None:
        at = [*path, key] if key else path
        problems.append((at, f"{_where(at)}: {message}"))

    if not isinstance(item, dict):
        bad(None, f"expected a mapping with name, start or cron, and duration; got {_kind(item)}")
        return None, problems
    for key in item:
        if key not in KEYS:
            bad(str(key), f"unknown key '{key}' (allowed: {', '.join(KEYS)})")

    name = item.get("name")
    if name is None:
        bad(None, "missing 'name' (each window needs a unique name)")
    elif not isinstance(name, str) or not re.match(NAME_PATTERN, name):
        bad("name", f"{_short(name)} is not valid; use 1-64 letters, digits, '.', '_' or '-', starting with a "
                    "letter or digit")

    duration = _duration(item, bad)
    zone = _zone(item, bad)
    start, days, cron = _schedule(item, bad)
    services = _matcher(item, "services", bad)
    checks = _matcher(item, "checks", bad)
    description = item.get("description")
    if description is not None and (not isinstance(description, str) or len(description) > DESCRIPTION_MAX):
        bad("description", f"expected text of at most {DESCRIPTION_MAX} characters, got {_short(description)}")
    if problems or not isinstance(name, str) or duration is None or zone is None:
        return None, problems
    return WindowSpec(name=name, source=source, duration_s=duration, timezone=zone, start=start, days=days,
                      cron=cron, services=services, checks=checks,
                      description=description if isinstance(description, str) else None), problems


def _duration(item: dict[str, Any], bad: Any) -> float | None:
    if "duration" not in item:
        bad(None, "missing 'duration' (how long each occurrence lasts, e.g. 30m, 2h, 2h30m)")
        return None
    raw = item["duration"]
    seconds = parse_duration(raw)
    if seconds is None:
        bad("duration", f"{_short(raw)} is not a duration; use e.g. 30m, 1h, 2h30m (h, m, s) or seconds")
        return None
    if seconds <= 0:
        bad("duration", f"{_short(raw)} must be longer than zero")
        return None
    if seconds > MAX_DURATION_S:
        bad("duration", f"{format_duration(seconds)} is too long; a window lasts at most 7 days (168h)")
        return None
    return seconds


def _zone(item: dict[str, Any], bad: Any) -> str | None:
    raw = item.get("timezone", "UTC")
    if not isinstance(raw, str) or not raw.strip():
        bad("timezone", f"expected an IANA time zone name such as Europe/Berlin, got {_short(raw)}")
        return None
    name = raw.strip()
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        bad("timezone", f"unknown time zone {quote(name)}; use an IANA name such as UTC, Europe/Berlin or "
                        "America/New_York")
        return None
    return name


def _schedule(item: dict[str, Any], bad: Any) -> tuple[time | None, tuple[int, ...], str | None]:
    days = tuple(range(7))
    has_start, has_cron = "start" in item, "cron" in item
    if has_start == has_cron:
        bad(None, "give exactly one of start (HH:MM, with optional every) and cron (five fields)"
                  + (" (found both)" if has_start else " (found neither)"))
        return None, days, None
    if has_cron:
        if "every" in item:
            bad("every", "applies only to windows with start; a cron expression names its own days")
        return None, days, _cron(item["cron"], bad)
    start = _start(item["start"], bad)
    if "every" in item:
        days = _days(item["every"], bad) or days
    return start, days, None


def _start(raw: Any, bad: Any) -> time | None:
    m = _TIME.fullmatch(raw.strip()) if isinstance(raw, str) else None
    if m is None or int(m[1]) > 23 or int(m[2]) > 59:
        bad("start", f"{_short(raw)} is not a time; use HH:MM from 00:00 to 23:59 (24-hour clock, local to "
                     "the window's timezone)")
        return None
    return time(int(m[1]), int(m[2]))


def _days(raw: Any, bad: Any) -> tuple[int, ...] | None:
    values = [raw] if isinstance(raw, str) else raw
    if not isinstance(values, list) or not values:
        bad("every", f"expected a weekday, a word such as weekday, or a list of them; got {_short(raw)}; {_DAYS_HINT}")
        return None
    days: set[int] = set()
    ok = True
    for value in values:
        key = value.strip().lower() if isinstance(value, str) else None
        if key in _DAY_WORDS:
            days.update(_DAY_WORDS[key])
        elif key in _NAMES:
            days.add(_NAMES[key])
        else:
            bad("every", f"unknown weekday {_short(value)}; {_DAYS_HINT}")
            ok = False
    return tuple(sorted(days)) if ok else None


def _cron(raw: Any, bad: Any) -> str | None:
    from croniter import croniter

    text = " ".join(raw.split()) if isinstance(raw, str) else None
    if text is None or len(text.split()) != 5 or not croniter.is_valid(text):
        bad("cron", f"{_short(raw)} is not a cron expression; use five fields: minute hour day-of-month month "
                    "day-of-week, e.g. '0 2 * * 2' (02:00 every Tuesday)")
        return None
    return text


def _matcher(item: dict[str, Any], key: str, bad: Any) -> tuple[str, ...] | None:
    if key not in item:
        return None
    raw = item[key]
    what = "service" if key == "services" else "check"
    if not isinstance(raw, list) or not all(isinstance(p, str) for p in raw):
        bad(key, f"expected a list of {what} name patterns such as [api, 'db-*'], got {_short(raw)}")
        return None
    if not raw:
        bad(key, f"the list is empty; leave '{key}' out to match every {what}")
        return None
    if len(raw) > PATTERNS_MAX:
        bad(key, f"at most {PATTERNS_MAX} patterns (got {len(raw)})")
        return None
    for p in raw:
        if not p.strip() or len(p) > PATTERN_MAX:
            bad(key, f"{_short(p)} is not a pattern; give 1-{PATTERN_MAX} characters (* and ? as wildcards)")
            return None
    return tuple(p.strip() for p in raw)


def _where(path: Iterable[str | int]) -> str:
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out or "the setting"


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    for kind, name in ((bool, "a boolean"), (int, "a number"), (float, "a number"), (str, "a string"),
                       (list, "a list"), (dict, "a mapping")):
        if isinstance(value, kind):
            return f"{name} {_short(value)}" if kind in (str, int, float, bool) else name
    return type(value).__name__


def _short(value: Any) -> str:
    """A value as a problem quotes it: redacted, then cut (a secret cut first would pass)."""
    if isinstance(value, dict):  # never a value under a secret-named key, whatever its shape
        value = {k: MASK if isinstance(k, str) and secret_name(k) else v for k, v in value.items()}
    return quote(value)
