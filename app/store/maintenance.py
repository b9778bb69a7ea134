"""Ad-hoc maintenance windows: added at run time (API, dashboard, CLI), ended early by an operator.

Why a module of its own: configured windows (``TIEROPS_MAINTENANCE`` and the checks file's
``maintenance:``) are text read at start; these are rows, written by whoever is about to work on a
service. Both kinds are answered together by ``app/engine/maintenance.py`` (which one covers this
service/check now); this module only stores and lists the rows, and holds the input rules every
way in shares (the API body, the dashboard's form and ``tierops maintenance add``), so they accept
and refuse the same things:

* a window is ``starts_at`` (default now) to ``ends_at``, given directly or as a ``duration``
  (``2h``, ``30m``, ``1d``, ``2h30m``); ``ends_at`` in the past is refused, the window lasts at most
  :data:`MAX_DAYS` days and starts at most :data:`MAX_DAYS` days ahead;
* ``services`` and ``checks`` are fnmatch-style patterns (None: every service / every check);
* ending a window early sets ``cancelled_at``/``cancelled_by`` and keeps ``ends_at`` as planned, so
  the row still says what was intended; only a window not yet over can be ended, once.

Rows are kept until the retention prune (``app/store/retention.py``) deletes windows that ended
more than ``TIEROPS_RETENTION_DAYS`` ago.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Literal, TypedDict

import aiosqlite

from app.clock import parse_stamp, utcnow
from app.probe.maintenance import PATTERN_MAX, PATTERNS_MAX
from app.store.db import Database

log = logging.getLogger(__name__)

__all__ = [
    "DURATION_HELP",
    "DURATION_MAX",
    "DURATION_PATTERN",
    "MAX_DAYS",
    "PATTERNS_MAX",
    "PATTERN_MAX",
    "REASON_MAX",
    "TIME_HELP",
    "TIME_MAX",
    "TIME_PATTERN",
    "MaintenanceRow",
    "MaintenanceStateError",
    "State",
    "WindowInputError",
    "active_windows",
    "cancel_window",
    "create_window",
    "get_window",
    "list_windows",
    "parse_span",
    "parse_time",
    "plan",
]

MAX_DAYS = 90
REASON_MAX = 500
# 2h, 30m, 1d, 2h30m, 1d12h, 90s: parts in this order; an empty text matches too and is refused
# by its length (no look-ahead here: the API's pydantic models compile it with Rust's regex crate).
DURATION_PATTERN = r"^([0-9]{1,6}d)?([0-9]{1,6}h)?([0-9]{1,6}m)?([0-9]{1,7}s)?$"
DURATION_MAX = 32
TIME_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ].+$"  # the shape; parse_time reads it
TIME_MAX = 64
DURATION_HELP = "a duration such as 30m, 2h, 1d or 2h30m (d, h, m, s)"
TIME_HELP = "an ISO-8601 time with a zone, such as 2026-11-23T18:00:00Z or 2026-11-23T19:00+01:00"
_PART = re.compile(r"([0-9]+)([dhms])")
_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}

State = Literal["active", "upcoming", "recent", "all"]


class MaintenanceRow(TypedDict):
    """An ad-hoc window, every column of ``maintenance_windows`` (services/checks decoded)."""

    id: int
    created_at: str
    created_by: str
    reason: str | None
    starts_at: str
    ends_at: str  # as planned; an ended-early window also has cancelled_at
    services: list[str] | None  # None: every service
    checks: list[str] | None  # None: every check
    cancelled_at: str | None
    cancelled_by: str | None


class WindowInputError(ValueError):
    """A window that cannot be created as asked; ``field`` names what was wrong (``ends_at``,
    ``duration``, ``starts_at``, ``services``, ``checks``, ``reason``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class MaintenanceStateError(ValueError):
    """An end the window's state refuses: it is already over, or already ended by someone."""


# --- input rules --------------------------------------------------------------------------------

def parse_span(text: str) -> float:
    """Seconds of ``30m``, ``2h``, ``1d``, ``2h30m``; ValueError saying what was wrong."""
    raw = text.strip()
    if not raw or not re.fullmatch(DURATION_PATTERN, raw):
        raise ValueError(f"{raw[:40]!r} is not {DURATION_HELP}")
    seconds = float(sum(int(n) * _UNIT_S[u] for n, u in _PART.findall(raw)))
    if seconds <= 0:
        raise ValueError(f"{raw!r} must be longer than zero")
    return seconds


def parse_time(text: str) -> str:
    """``text`` (ISO 8601 with a zone) in the stored format ``2026-11-23T18:00:00.000Z``."""
    raw = text.strip()
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00") if raw.endswith("Z") else raw)
    except ValueError:
        raise ValueError(f"{raw[:60]!r} is not {TIME_HELP}") from None
    if when.tzinfo is None:
        raise ValueError(f"{raw[:60]!r} has no time zone: add Z (UTC) or an offset such as +01:00")
    try:
        return _stamp(when)
    except OverflowError:  # 0001-01-01T00:00+01:00: before the first representable UTC time
        raise ValueError(f"{raw[:60]!r} is not a time that can be stored") from None


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def plan(*, duration: str | None = None, ends_at: str | None = None, starts_at: str | None = None,
         now: str | None = None) -> tuple[str, str]:
    """``(starts_at, ends_at)`` in the stored format from what an operator gave: exactly one of
    ``duration`` and ``ends_at``, and optionally ``starts_at`` (default now). Raises
    :class:`WindowInputError` naming the field that is wrong."""
    now_dt = parse_stamp(now or utcnow())
    if (duration is None) == (ends_at is None):
        raise WindowInputError("duration", "give exactly one of duration (e.g. 2h) and ends_at (an ISO time)")
    start = now_dt
    if starts_at is not None:
        try:
            start = parse_stamp(parse_time(starts_at))
        except ValueError as exc:
            raise WindowInputError("starts_at", str(exc)) from None
    if duration is not None:
        try:
            seconds = parse_span(duration)
        except ValueError as exc:
            raise WindowInputError("duration", str(exc)) from None
        if seconds > MAX_DAYS * 86400:
            raise WindowInputError("duration", f"{duration.strip()!r} is longer than a window may last "
                                               f"({MAX_DAYS} days)")
        try:
            end = start + timedelta(seconds=seconds)
        except OverflowError:
            raise WindowInputError("starts_at", "starts_at plus duration is beyond any storable time") from None
    else:
        try:
            end = parse_stamp(parse_time(ends_at or ""))
        except ValueError as exc:
            raise WindowInputError("ends_at", str(exc)) from None
    _check(start, end, now_dt, "duration" if duration is not None else "ends_at")
    return _stamp(start), _stamp(end)


def _check(start: datetime, end: datetime, now: datetime, field: str) -> None:
    if end <= now:
        raise WindowInputError(field, f"the window would end at {_stamp(end)}, which is not in the future "
                                      f"(now {_stamp(now)})")
    if end <= start:
        raise WindowInputError(field, f"the window would end at {_stamp(end)}, not after its start {_stamp(start)}")
    if end - start > timedelta(days=MAX_DAYS):
        raise WindowInputError(field, f"the window would last more than {MAX_DAYS} days")
    if start - now > timedelta(days=MAX_DAYS):
        raise WindowInputError("starts_at", f"starts_at is more than {MAX_DAYS} days ahead")


def _patterns(field: str, values: list[str] | None) -> str | None:
    if values is None:
        return None
    cleaned = [v.strip() for v in values]
    if not cleaned:
        raise WindowInputError(field, f"the list is empty; leave {field} out to match every "
                                      f"{'service' if field == 'services' else 'check'}")
    if len(cleaned) > PATTERNS_MAX:
        raise WindowInputError(field, f"at most {PATTERNS_MAX} patterns (got {len(cleaned)})")
    for p in cleaned:
        if not p or len(p) > PATTERN_MAX:
            raise WindowInputError(field, f"{p[:40]!r} is not a pattern; give 1-{PATTERN_MAX} characters "
                                          "(* and ? as wildcards)")
    return json.dumps(cleaned, ensure_ascii=False)


# --- rows -----------------------------------------------------------------------------------------

def _decode(row: aiosqlite.Row) -> MaintenanceRow:
    out = dict(row)
    for key in ("services", "checks"):
        if isinstance(out[key], str):
            try:
                out[key] = json.loads(out[key])
            except ValueError:  # pragma: no cover - only this module writes the column
                out[key] = [out[key]]
    return out  # type: ignore[return-value]


async def create_window(db: Database, *, starts_at: str, ends_at: str, reason: str | None, created_by: str,
                        services: list[str] | None = None, checks: list[str] | None = None,
                        now: str | None = None) -> MaintenanceRow:
    """Store a window (``starts_at``/``ends_at`` in the stored format, see :func:`plan`). Raises
    :class:`WindowInputError` for a window :func:`plan` would refuse or bad patterns."""
    now = now or utcnow()
    _check(parse_stamp(starts_at), parse_stamp(ends_at), parse_stamp(now), "ends_at")
    reason = (reason or "").strip() or None
    if reason is not None and len(reason) > REASON_MAX:
        raise WindowInputError("reason", f"the reason is too long ({len(reason):,} characters; at most {REASON_MAX})")
    svc, chk = _patterns("services", services), _patterns("checks", checks)
    async with db.write() as conn:
        cur = await conn.execute(
            "INSERT INTO maintenance_windows (created_at, created_by, reason, starts_at, ends_at, services, checks)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (now, db.redact(created_by), db.redact(reason) if reason else None, starts_at, ends_at, svc, chk))
        if cur.lastrowid is None:  # pragma: no cover - an INSERT always has one
            raise LookupError("the window was not stored")
        row = await _get(conn, cur.lastrowid)
    log.info("maintenance window #%d added by %s: %s to %s (services %s, checks %s)%s", row["id"],
             row["created_by"], starts_at, ends_at, row["services"] or "all", row["checks"] or "all",
             f": {row['reason']}" if row["reason"] else "")
    return row


async def _get(conn: aiosqlite.Connection, pk: int) -> MaintenanceRow:
    async with conn.execute("SELECT * FROM maintenance_windows WHERE id = ?", (pk,)) as cur:
        row = await cur.fetchone()
    if row is None:
        raise LookupError(f"no maintenance window {pk}")
    return _decode(row)


async def get_window(db: Database, pk: int, *, fresh: bool = False) -> MaintenanceRow | None:
    row = await db.fetchone("SELECT * FROM maintenance_windows WHERE id = ?", (pk,), fresh=fresh)
    return _decode(row) if row else None


_STATES: dict[str, tuple[str, int, str]] = {  # (condition, how many times it takes now, order)
    "active": ("cancelled_at IS NULL AND starts_at <= ? AND ends_at > ?", 2, "ends_at, id"),
    "upcoming": ("cancelled_at IS NULL AND starts_at > ?", 1, "starts_at, id"),
    "recent": ("cancelled_at IS NOT NULL OR ends_at <= ?", 1, "min(coalesce(cancelled_at, ends_at), ends_at) DESC, id DESC"),
    "all": ("1 = 1", 0, "id DESC"),
}


async def list_windows(db: Database, *, state: State = "all", now: str | None = None, limit: int = 100,
                       offset: int = 0, fresh: bool = False) -> list[MaintenanceRow]:
    """Windows in ``state`` at ``now``: ``active`` (ending first), ``upcoming`` (starting first),
    ``recent`` (over or ended early, latest end first) or ``all`` (newest first)."""
    condition, uses, order = _STATES[state]
    rows = await db.fetchall(
        f"SELECT * FROM maintenance_windows WHERE {condition} ORDER BY {order} LIMIT ? OFFSET ?",  # noqa: S608 (fixed texts)
        [*[now or utcnow()] * uses, int(limit), int(offset)], fresh=fresh)
    return [_decode(r) for r in rows]


async def active_windows(db: Database, now: str | None = None) -> list[MaintenanceRow]:
    """Every window in force at ``now`` (not ended early), ending first."""
    return await list_windows(db, state="active", now=now, limit=10_000)


async def cancel_window(db: Database, pk: int, actor: str, now: str | None = None) -> MaintenanceRow:
    """End a window now (an upcoming one never starts): sets ``cancelled_at``/``cancelled_by``.
    Raises LookupError (no such window) or :class:`MaintenanceStateError` (already over or ended)."""
    now = now or utcnow()
    async with db.write() as conn:
        row = await _get(conn, pk)
        if row["cancelled_at"] is not None:
            raise MaintenanceStateError(f"maintenance window #{pk} was already ended by "
                                        f"{row['cancelled_by'] or 'someone'} at {row['cancelled_at']}")
        if row["ends_at"] <= now:
            raise MaintenanceStateError(f"maintenance window #{pk} is already over (it ended at {row['ends_at']})")
        await conn.execute("UPDATE maintenance_windows SET cancelled_at = ?, cancelled_by = ? WHERE id = ?",
                           (now, db.redact(actor), pk))
        row = await _get(conn, pk)
    log.info("maintenance window #%d ended by %s", pk, row["cancelled_by"])
    return row
