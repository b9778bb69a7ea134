"""Cooldown limits: how often an action may be taken on one service.

Why a module of its own: the limits are one policy read in three places — the tiers' appended
system prompt (what is still allowed), the chain's escalation guard (a handoff proposing an action
over its limit is refused) and the check of what a session reported it did (an action over its
limit is flagged) — and shown by the API, the overview and ``tierops cooldowns``. Parsing
``TIEROPS_COOLDOWNS`` (``restart:2/4h,redeploy:1/24h``) and the window arithmetic are pure
functions here; rows come from ``app/store/cooldowns.py``.

What it deliberately does: only actions *taken* count (done or failed: a failed restart still
restarted something); dry runs and proposals never do, and proposals are shown apart with whether
the limits would allow them now (:func:`judge`). Kinds without a limit are recorded and shown,
never limited. A window is per (kind, service), a host-wide action having its own. The rules in
full: ARCHITECTURE.md, "Cooldown limits".
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

from app.clock import utcnow
from app.errors import ConfigError
from app.store import cooldowns as store
from app.store.cooldowns import KIND_ALIASES, ActionRow, ProposalRow
from app.store.db import Database

log = logging.getLogger(__name__)

SETTING = "TIEROPS_COOLDOWNS"
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
HOST_WIDE = "(host-wide)"  # how an action without a service is named in texts
_LIMIT = re.compile(r"(?P<kind>[^:\s][^:]*?)\s*:\s*(?P<count>\d+)\s*/\s*(?P<n>\d+)\s*(?P<unit>[smhd])", re.IGNORECASE)


class CooldownError(ConfigError):
    """``TIEROPS_COOLDOWNS`` cannot be parsed; the message names the bad part."""


class LimitView(TypedDict):
    kind: str
    count: int
    window_s: int
    window: str  # as written: "4h"


class WindowView(TypedDict):
    kind: str
    service: str | None  # None: host-wide
    used: int
    limit: int
    window_s: int
    window: str
    remaining: int
    next_allowed_at: str | None  # None: allowed now
    frees_at: str | None


class ProposalView(ProposalRow):
    """A proposed action with what the current limits say of it."""

    allowed: bool  # the limits would allow one more now (always, for a kind without a limit)
    limit: str | None  # "2/4h"; None: the kind has no limit
    remaining: int | None  # how many more are allowed now; None: no limit
    next_allowed_at: str | None  # when one more is allowed, while none is


class CooldownReport(TypedDict):
    """What the API, the overview and ``tierops cooldowns`` show: actions taken (and dry runs) in
    ``recent``, proposed ones apart in ``proposals``."""

    limits: Sequence[LimitView]
    active: Sequence[WindowView]
    recent: Sequence[ActionRow]
    proposals: Sequence[ProposalView]


@dataclass(frozen=True)
class Limit:
    kind: str
    count: int
    window_s: int
    window_text: str  # as written: "4h"

    @property
    def text(self) -> str:
        """``2/4h``"""
        return f"{self.count}/{self.window_text}"

    def as_dict(self) -> LimitView:
        return {"kind": self.kind, "count": self.count, "window_s": self.window_s, "window": self.window_text}


@dataclass(frozen=True)
class Window:
    """The taken actions of one (kind, service) inside its limit's window, at ``now``."""

    kind: str
    service: str | None
    used: int
    limit: Limit
    remaining: int
    next_allowed_at: str | None  # None: allowed now
    frees_at: str | None  # when the oldest action in the window falls out of it

    def as_dict(self) -> WindowView:
        return {"kind": self.kind, "service": self.service, "used": self.used, "limit": self.limit.count,
                "window_s": self.limit.window_s, "window": self.limit.window_text, "remaining": self.remaining,
                "next_allowed_at": self.next_allowed_at, "frees_at": self.frees_at}

    def describe(self) -> str:
        """``restart api: 2 of 2 in 4h used, next allowed at …``"""
        head = f"{self.kind} {service_name(self.service)}: {self.used} of {self.limit.count} in {self.limit.window_text} used"
        if self.remaining > 0:
            return f"{head}, {self.remaining} more allowed"
        return f"{head}, next allowed at {self.next_allowed_at or 'never (limit 0)'}"


def service_name(service: str | None) -> str:
    return service or HOST_WIDE


def kind_of(action: str) -> str:
    """The kind an action counts as: lower-cased, whitespace collapsed, markers' words mapped."""
    kind = " ".join(action.split()).lower()
    return KIND_ALIASES.get(kind, kind)


def parse_limits(text: str) -> dict[str, Limit]:
    """``restart:2/4h,redeploy:1/24h`` → the limits by kind; :class:`CooldownError` naming the
    first bad part. Empty parts (a trailing comma) are ignored; an empty text is no limits."""
    limits: dict[str, Limit] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        m = _LIMIT.fullmatch(part.strip())
        if m is None:
            raise CooldownError(f"{SETTING}: {part.strip()!r} is not KIND:COUNT/WINDOW (e.g. restart:2/4h; the "
                                "window in s, m, h or d)")
        kind = kind_of(m.group("kind"))
        window_s = int(m.group("n")) * UNITS[m.group("unit").lower()]
        if window_s <= 0:
            raise CooldownError(f"{SETTING}: {part.strip()!r} has an empty window; give one above 0 (e.g. 4h)")
        if kind in limits:
            raise CooldownError(f"{SETTING}: {part.strip()!r} repeats the kind {kind!r}; give each kind once")
        limits[kind] = Limit(kind, int(m.group("count")), window_s, f"{int(m.group('n'))}{m.group('unit').lower()}")
    return limits


def _parse_time(stamp: str) -> datetime | None:
    try:
        at = datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _stamp(at: datetime) -> str:
    """A datetime in the store's format (``app/clock.py``)."""
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _now(now: str | datetime | None) -> datetime:
    if isinstance(now, datetime):
        return now
    at = _parse_time(now or utcnow())
    if at is None:
        raise ValueError(f"not a timestamp: {now!r}")
    return at


def windows(actions: Iterable[Mapping[str, Any]], limits: Mapping[str, Limit],
            now: str | datetime | None = None) -> list[Window]:
    """The active windows at ``now`` of the taken actions given (each with ``action``,
    ``service``, ``created_at``), sorted by kind and service. An action at exactly ``now`` is in
    its window; one a whole window old is out."""
    at = _now(now)
    times: dict[tuple[str, str | None], list[datetime]] = {}
    for row in actions:
        kind = kind_of(str(row["action"]))
        limit = limits.get(kind)
        when = _parse_time(str(row["created_at"]))
        if limit is None or when is None or not (at - timedelta(seconds=limit.window_s) < when <= at):
            continue
        times.setdefault((kind, row["service"] or None), []).append(when)
    out = []
    for (kind, service), stamps in sorted(times.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        limit = limits[kind]
        stamps.sort()
        window = timedelta(seconds=limit.window_s)
        used = len(stamps)
        nxt = None
        if used >= limit.count:
            nxt = _stamp(stamps[used - limit.count] + window) if limit.count > 0 else None
        out.append(Window(kind, service, used, limit, max(0, limit.count - used), nxt, _stamp(stamps[0] + window)))
    return out


async def active(db: Database, limits: Mapping[str, Limit], now: str | None = None, *,
                 fresh: bool = False) -> list[Window]:
    """The windows with at least one taken action at ``now`` (default: now)."""
    if not limits:
        return []
    at = _now(now)
    longest = max(limit.window_s for limit in limits.values())
    rows = await store.taken_between(db, _stamp(at - timedelta(seconds=longest)), _stamp(at), fresh=fresh)
    return windows(rows, limits, at)


def allowance(kind: str, service: str | None, active_windows: Iterable[Window],
              limits: Mapping[str, Limit]) -> tuple[int, Window | None] | None:
    """How many more ``kind`` actions on ``service`` are allowed now, and its window; None when the
    kind has no limit."""
    limit = limits.get(kind_of(kind))
    if limit is None:
        return None
    for w in active_windows:
        if w.kind == limit.kind and w.service == (service or None):
            return w.remaining, w
    return limit.count, None


def over_limit(proposals: Iterable[tuple[str, str | None]], active_windows: list[Window],
               limits: Mapping[str, Limit]) -> tuple[str, str | None, Limit, str | None] | None:
    """The first proposed (kind, service) that more proposals than allowed ask for, with its
    limit and when it is next allowed; None when every proposal fits."""
    asked: dict[tuple[str, str | None], int] = {}
    for kind, service in proposals:
        key = (kind_of(kind), service or None)
        asked[key] = asked.get(key, 0) + 1
    for (kind, service), n in asked.items():
        room = allowance(kind, service, active_windows, limits)
        if room is None or n <= room[0]:
            continue
        window = room[1]
        nxt = window.next_allowed_at if window is not None else None
        return kind, service, limits[kind], nxt
    return None


async def exceeded_by(db: Database, limits: Mapping[str, Limit], session_pk: int) -> list[Window]:
    """The windows a session's taken actions pushed over their limit: for each (kind, service)
    it acted on, the window at the time of its action, counted with every other session's."""
    if not limits:
        return []
    latest: dict[tuple[str, str | None], datetime] = {}
    for row in await store.session_taken(db, session_pk, fresh=True):
        kind, when = kind_of(row["action"]), _parse_time(row["created_at"])
        if kind in limits and when is not None:
            key = (kind, row["service"] or None)
            latest[key] = max(when, latest.get(key, when))
    out = []
    for (kind, service), at in latest.items():
        limit = limits[kind]
        rows = await store.taken_between(db, _stamp(at - timedelta(seconds=limit.window_s)), _stamp(at), fresh=True)
        out += [w for w in windows(rows, limits, at) if (w.kind, w.service) == (kind, service) and w.used > limit.count]
    return out


def prompt_block(active_windows: list[Window], limits: Mapping[str, Limit]) -> str:
    """The cooldowns as a tier is told them: the limits, then each active window with what it
    allows; the text ``app/supervisor/context.py`` appends for tiers 2 and 3."""
    if not limits:
        return ""
    lines = ["## Cooldowns (limits on actions per service)",
             "Limits: " + "; ".join(f"{lim.kind} at most {lim.count} per service in {lim.window_text}"
                                    for lim in limits.values()) + ". Report every action in `actions` with its result."]
    if not active_windows:
        lines.append("No action is in cooldown now.")
    for w in active_windows:
        text = f"- {w.describe()}"
        if w.remaining <= 0:
            name = service_name(w.service)
            text += f"; do not {w.kind} {name}, propose it instead (an action with result `proposed`)"
        lines.append(text)
    return "\n".join(lines)


def judge(proposal: ProposalRow, active_windows: Iterable[Window], limits: Mapping[str, Limit]) -> ProposalView:
    """``proposal`` with whether the limits allow it now, on its own (each proposal is judged
    against the actions taken, never against the other proposals)."""
    room = allowance(proposal["kind"], proposal["service"], active_windows, limits)
    if room is None:
        return {**proposal, "allowed": True, "limit": None, "remaining": None, "next_allowed_at": None}
    remaining, window = room
    limit = limits[kind_of(proposal["kind"])]
    return {**proposal, "allowed": remaining > 0, "limit": limit.text, "remaining": remaining,
            "next_allowed_at": window.next_allowed_at if window is not None and remaining <= 0 else None}


def judgement(view: ProposalView) -> str:
    """``allowed now (1 of 2/4h left)``, ``over its limit 2/4h: next allowed at …``, ``no limit``."""
    if view["limit"] is None:
        return "no limit"
    if view["allowed"]:
        return f"allowed now ({view['remaining']} of {view['limit']} left)"
    return f"over its limit {view['limit']}: next allowed at {view['next_allowed_at'] or 'never (limit 0)'}"


async def report(db: Database, limits: Mapping[str, Limit], *, recent: int = 20,
                 now: str | None = None) -> CooldownReport:
    """The limits, the active windows, the ``recent`` newest recorded actions taken (or dry runs)
    and the ``recent`` newest proposals, each judged against the limits now."""
    windows_now = await active(db, limits, now)
    return {"limits": [lim.as_dict() for lim in limits.values()],
            "active": [w.as_dict() for w in windows_now],
            "recent": await store.recent_actions(db, recent),
            "proposals": [judge(p, windows_now, limits) for p in await store.proposals(db, limit=recent)]}
