"""Whether a message is sent, and where: one pure decision the sender and the preview share.

Why a module of its own: ``tierops notify preview`` and the notifications page must say exactly
what the sender would do with the settings in force, so the rules are a function of the message,
the settings and what its opening became — nothing else. In order:

1. A message the chain holds back (maintenance window, silenced key, flapping already told) is
   recorded with why, never sent.
2. **A follow-up follows its opening** (a resolution, an investigation's outcome, an expired
   approval, "monitor healthy again"): when the message it follows went out, it goes to the same
   routes whatever ``TIEROPS_NOTIFY_MIN_SEVERITY`` and the quiet hours say (Alertmanager's
   ``send_resolved``); when that one was only recorded, so is this one. A follow-up of nothing
   recorded is decided like any message.
3. Below ``TIEROPS_NOTIFY_MIN_SEVERITY``: recorded. During ``TIEROPS_NOTIFY_QUIET_HOURS`` (UTC)
   only critical is sent.
4. The routes (``routes.py``) choose the URLs; a route that reaches no URL records the message
   with why.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from app.notify.messages import Notice
from app.notify.routes import DEFAULT_ROUTE, RouteTable
from app.notify.urls import NOT_INSTALLED

log = logging.getLogger(__name__)

__all__ = ["NO_URLS", "Decision", "Earlier", "decide", "format_title", "in_quiet_hours", "quiet_hours"]

SEVERITIES = ("info", "warning", "critical")
RANK = {name: i for i, name in enumerate(SEVERITIES)}
PENDING, SUPPRESSED, FAILED = "pending", "suppressed", "failed"
NO_URLS = "no TIEROPS_NOTIFY_URLS"
_QUIET = re.compile(r"^\s*(\d{1,2})(?::00)?\s*-\s*(\d{1,2})(?::00)?\s*$")
_TAGGED = re.compile(r"^\[[A-Z]+\] ")


def quiet_hours(spec: str) -> tuple[int, int] | None:
    """``"22-07"`` → (22, 7); ``"0-24"`` → (0, 24), all day; None for empty. Raises ValueError
    for anything else, and for a start equal to its end (it would mean nothing or all day)."""
    if not spec.strip():
        return None
    match = _QUIET.match(spec)
    if match is None:
        raise ValueError(f"TIEROPS_NOTIFY_QUIET_HOURS={spec!r} is not START-END in UTC hours, e.g. 22-07")
    start, end = int(match.group(1)), int(match.group(2))
    if not (0 <= start <= 24 and 0 <= end <= 24):
        raise ValueError(f"TIEROPS_NOTIFY_QUIET_HOURS={spec!r}: hours are 0 to 24")
    if (start, end) in ((0, 24), (24, 24)) or end - start == 24:
        return 0, 24
    if start % 24 == end % 24:
        raise ValueError(f"TIEROPS_NOTIFY_QUIET_HOURS={spec!r}: start and end are the same hour; write 0-24 for "
                         "all day, or leave it empty for none")
    return start % 24, end % 24 if end != 24 else 24


def in_quiet_hours(hours: tuple[int, int] | None, now: datetime) -> bool:
    if hours is None:
        return False
    start, end = hours
    hour = now.astimezone(UTC).hour
    return start <= hour < end if start < end else (hour >= start or hour < end)


def format_title(severity: str, title: str) -> str:
    """``[CRITICAL] api: api-health failing``: the severity first, unless the title carries its
    own tag already (``[RESOLVED] api: …``)."""
    return title if _TAGGED.match(title) else f"[{severity.upper()}] {title}"


@dataclass(frozen=True)
class Earlier:
    """What became of the messages a follow-up follows: whether one went out (sent, or on its way),
    the routes they took, and why they did not go out if none did."""

    went_out: bool
    routes: tuple[str, ...] = ()
    why: str | None = None


@dataclass(frozen=True)
class Decision:
    status: str  # pending | suppressed | failed
    why: str | None = None
    error: str | None = None
    routes: tuple[str, ...] = ()
    targets: tuple[int, ...] = ()  # the URLs (indexes into the table's targets) it goes to


def decide(notice: Notice, *, min_severity: str, quiet: tuple[int, int] | None, quiet_text: str,
           table: RouteTable, config_error: str | None, apprise: Callable[[], bool], now: datetime,
           earlier: Earlier | None = None) -> Decision:
    """The fate of a new message (see the module docstring for the order of the rules)."""
    if notice.suppress:
        return Decision(SUPPRESSED, notice.suppress)
    if earlier is not None:
        if not earlier.went_out:
            return Decision(SUPPRESSED, f"follows a message that was not sent ({earlier.why or 'recorded only'})")
        return _reach(table, earlier.routes or (DEFAULT_ROUTE,), config_error, apprise, following=True)
    if RANK.get(notice.severity, 1) < RANK.get(min_severity, 1):
        return Decision(SUPPRESSED, f"below TIEROPS_NOTIFY_MIN_SEVERITY={min_severity}")
    if notice.severity != "critical" and in_quiet_hours(quiet, now):
        return Decision(SUPPRESSED, f"quiet hours ({quiet_text} UTC): only critical is sent")
    return _reach(table, tuple(table.select(notice.subject)), config_error, apprise)


def _reach(table: RouteTable, routes: Sequence[str], config_error: str | None, apprise: Callable[[], bool], *,
           following: bool = False) -> Decision:
    if not table.targets:
        if config_error:
            return Decision(FAILED, error=config_error, routes=tuple(routes))
        return Decision(SUPPRESSED, NO_URLS, routes=tuple(routes))
    targets = tuple(table.indexes(routes))
    if not targets:
        names = ", ".join(routes)
        if list(routes) == [DEFAULT_ROUTE]:
            why = ("no route matched, and every URL carries a tag (the default route takes the URLs without one)"
                   if not following else "the routes it follows reach no URL now")
        else:
            why = f"route {names} sends to no URL (to: [] or tags no URL carries)"
        return Decision(SUPPRESSED, why, routes=tuple(routes))
    if not apprise():
        return Decision(FAILED, error=NOT_INSTALLED, routes=tuple(routes), targets=targets)
    return Decision(PENDING, routes=tuple(routes), targets=targets)
