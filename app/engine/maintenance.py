"""Maintenance windows: which one covers a service/check at a time, and what to show of them all.

Why a module of its own: windows come from three places — ``TIEROPS_MAINTENANCE``, the checks
file's ``maintenance:`` section (both parsed by ``app/probe/maintenance.py``) and the ad-hoc rows
of ``app/store/maintenance.py`` — and the incidents, the chain and the messages need one answer
to one question: :func:`covering`. The window arithmetic is pure functions here
(:func:`occurrence_at`, :func:`next_occurrence`); only :func:`covering` and :func:`windows`
touch the store.

What it deliberately does: a window lasts ``duration`` of real time, so one across a daylight
saving change is as long as written; of several windows covering the same thing the one ending
last wins. An unreadable ``TIEROPS_MAINTENANCE`` is an error at start
(:class:`MaintenanceConfigError`), while a checks file that cannot be loaded only contributes no
windows (the probe reports it). The checks file is re-read only when its modification time or
size changed, so :func:`covering` may be called for every incident of a cycle. The rules in full:
ARCHITECTURE.md, "Maintenance windows".
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import TypedDict

import yaml

from app.clock import parse_stamp, utcnow
from app.config import Settings
from app.errors import ConfigError
from app.probe import yamltext
from app.probe.inventory import InventoryError, load_inventory
from app.probe.maintenance import (
    SOURCE_SETTING,
    WindowSpec,
    matches,
    parse_windows,
    restore_times,
    schedule_text,
)
from app.store import maintenance as store
from app.store.db import Database
from app.store.maintenance import MaintenanceRow

log = logging.getLogger(__name__)

__all__ = [
    "SETTING",
    "SOURCE_AD_HOC",
    "ActiveWindow",
    "MaintenanceConfigError",
    "MaintenanceReport",
    "Occurrence",
    "WindowView",
    "configured",
    "covering",
    "next_occurrence",
    "occurrence_at",
    "parse_setting",
    "problems",
    "report",
    "setting_windows",
    "windows",
]

SETTING = "TIEROPS_MAINTENANCE"
SOURCE_AD_HOC = "ad-hoc"
_CRON_STEPS = 2000  # cron firings looked at per question: a per-minute cron needs ~62
_MARGIN = timedelta(minutes=61)  # wall clock vs. real time around a daylight saving change


class MaintenanceConfigError(ConfigError):
    """``TIEROPS_MAINTENANCE`` cannot be used; the message names every problem."""


@dataclass(frozen=True)
class Occurrence:
    """One occurrence of a window: ``[start, end)``, aware UTC datetimes."""

    start: datetime
    end: datetime

    def covers(self, at: datetime) -> bool:
        return self.start <= at < self.end


@dataclass(frozen=True)
class ActiveWindow:
    """The window covering something now (see :func:`covering`)."""

    name: str  # a configured window's name, or "#<id>" and the reason of an ad-hoc one
    source: str  # setting | checks file | ad-hoc
    starts_at: str  # this occurrence's start, ISO UTC as stored (2026-11-26T21:00:00.000Z)
    until: str  # its end (an ad-hoc window ended early is no longer active)
    id: int | None = None  # the ad-hoc window's id
    reason: str | None = None  # the ad-hoc window's reason, or the configured one's description
    services: tuple[str, ...] | None = None
    checks: tuple[str, ...] | None = None

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "source": self.source, "starts_at": self.starts_at, "until": self.until,
                "id": self.id, "reason": self.reason,
                "services": list(self.services) if self.services is not None else None,
                "checks": list(self.checks) if self.checks is not None else None}


class WindowView(TypedDict):
    """One window as the API, the page and ``tierops maintenance`` show it."""

    name: str
    source: str  # setting | checks file | ad-hoc
    state: str  # active | upcoming (ad-hoc, not started) | scheduled (configured, not now) | never (no next)
    id: int | None  # ad-hoc only
    reason: str | None  # ad-hoc: why; configured: its description
    schedule: str | None  # configured: "02:00 for 2h every Tuesday (Europe/Berlin)"
    timezone: str | None
    duration_s: float
    services: list[str] | None  # None: every service
    checks: list[str] | None  # None: every check
    starts_at: str | None  # active: this occurrence's start; otherwise the next one's
    ends_at: str | None
    created_by: str | None  # ad-hoc only
    created_at: str | None


class MaintenanceReport(TypedDict):
    """``GET /api/v1/maintenance``: every window (active first, then upcoming, then the configured
    schedules), the ad-hoc windows that ended lately, and why some windows may be missing."""

    now: str
    windows: list[WindowView]
    recent: list[MaintenanceRow]
    problems: list[str]


# --- the arithmetic -------------------------------------------------------------------------------

def _utc(when: datetime) -> datetime:
    return when.astimezone(UTC)


def _stamp(when: datetime) -> str:
    return _utc(when).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _daily_starts(spec: WindowSpec, days: Iterable[date]) -> Iterator[datetime]:
    """The UTC starts of ``spec`` (start-based) on each of ``days`` that is one of its weekdays."""
    if spec.start is None:
        return
    zone = spec.zone
    for day in days:
        if day.weekday() in spec.days:
            yield _utc(datetime.combine(day, spec.start, tzinfo=zone))  # fold=0: the first 02:30 of two


def _cron_iter(spec: WindowSpec, wall: datetime):  # type: ignore[no-untyped-def]
    from croniter import croniter

    return croniter(spec.cron, wall)


def _wall(spec: WindowSpec, at: datetime) -> datetime:
    """``at`` as the window's local wall-clock time, naive (what cron expressions speak)."""
    return at.astimezone(spec.zone).replace(tzinfo=None)


def _from_wall(spec: WindowSpec, wall: datetime) -> datetime:
    return _utc(wall.replace(tzinfo=spec.zone))


def _latest_start(spec: WindowSpec, at: datetime) -> datetime | None:
    """The latest start of ``spec`` at or before ``at`` within the last 8 days (a window lasts at
    most 7), or None."""
    if spec.cron is None:
        local = at.astimezone(spec.zone).date()
        for start in _daily_starts(spec, (local - timedelta(days=d) for d in range(-1, 9))):
            if start <= at:
                return start if at - start <= timedelta(days=8) else None
        return None
    from croniter import CroniterBadDateError

    it = _cron_iter(spec, _wall(spec, at) + _MARGIN)
    oldest = at - timedelta(days=8)
    try:
        for _ in range(_CRON_STEPS):
            start = _from_wall(spec, it.get_prev(datetime))
            if start <= at:
                return start
            if start < oldest:
                break
    except (CroniterBadDateError, ValueError, OverflowError):
        return None
    return None


def _next_start(spec: WindowSpec, after: datetime) -> datetime | None:
    """The first start of ``spec`` strictly after ``after``, or None (a cron that never fires)."""
    if spec.cron is None:
        local = after.astimezone(spec.zone).date()
        return next((s for s in _daily_starts(spec, (local + timedelta(days=d) for d in range(-1, 9)))
                     if s > after), None)
    from croniter import CroniterBadDateError

    it = _cron_iter(spec, _wall(spec, after) - _MARGIN)
    try:
        for _ in range(_CRON_STEPS):
            start = _from_wall(spec, it.get_next(datetime))
            if start > after:
                return start
    except (CroniterBadDateError, ValueError, OverflowError):
        return None
    return None


def occurrence_at(spec: WindowSpec, at: datetime) -> Occurrence | None:
    """The occurrence of ``spec`` covering ``at`` (an aware datetime), the one ending last when
    several do; None outside every occurrence."""
    start = _latest_start(spec, at)
    if start is None:
        return None
    occurrence = Occurrence(start, start + timedelta(seconds=spec.duration_s))
    return occurrence if occurrence.covers(at) else None


def next_occurrence(spec: WindowSpec, after: datetime) -> Occurrence | None:
    """The first occurrence of ``spec`` starting after ``after``; None if it never starts again."""
    start = _next_start(spec, after)
    return Occurrence(start, start + timedelta(seconds=spec.duration_s)) if start is not None else None


# --- configured windows -----------------------------------------------------------------------------

@lru_cache(maxsize=8)
def parse_setting(text: str) -> tuple[WindowSpec, ...]:
    """The windows of ``TIEROPS_MAINTENANCE`` (YAML or JSON text: a list); empty text is none.
    Raises :class:`MaintenanceConfigError` naming every problem."""
    if not text.strip():
        return ()
    try:
        if text.lstrip().startswith(("[", "{")):
            try:
                data, node = json.loads(text), None
            except ValueError:  # YAML flow style ([{name: x, …}]) is not JSON
                data, node = yamltext.safe_load(text), yamltext.compose(text)
        else:  # no aliases: a few hundred bytes of them stand for 10^9 nodes (app/probe/yamltext.py)
            data, node = yamltext.safe_load(text), yamltext.compose(text)
    except yamltext.Refused as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise MaintenanceConfigError(f"{SETTING}: {where}{exc.problem}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise MaintenanceConfigError(f"{SETTING}: not YAML or JSON{where}: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise MaintenanceConfigError(f"{SETTING}: not YAML or JSON: {exc}") from None
    restore_times(data, node)
    specs, found = parse_windows(data, SOURCE_SETTING, [])
    if found:
        raise MaintenanceConfigError(f"{SETTING}: " + "; ".join(message for _, message in found))
    return tuple(specs)


def setting_windows(settings: Settings) -> tuple[WindowSpec, ...]:
    """The windows of ``TIEROPS_MAINTENANCE``; :class:`MaintenanceConfigError` if it is broken."""
    return parse_setting(settings.maintenance)


_file_cache: dict[Path, tuple[tuple[int, int], tuple[WindowSpec, ...], str | None]] = {}


def _file_windows(path: Path) -> tuple[tuple[WindowSpec, ...], str | None]:
    """The checks file's windows and, when it cannot be loaded, why (cached by mtime and size)."""
    try:
        st = path.stat()
        key = (st.st_mtime_ns, st.st_size)
    except OSError:
        key = (-1, -1)
    cached = _file_cache.get(path)
    if cached is not None and cached[0] == key:
        return cached[1], cached[2]
    try:
        found, problem = load_inventory(path).maintenance, None
    except InventoryError as exc:
        found = ()
        problem = (f"the checks file {path} has {len(exc.problems)} problem(s) (see `tierops checks validate`); "
                   "its maintenance windows are not applied")
        log.warning("%s", problem)
    _file_cache[path] = (key, found, problem)
    return found, problem


def configured(settings: Settings) -> tuple[WindowSpec, ...]:
    """Every configured window: ``TIEROPS_MAINTENANCE``'s, then the checks file's."""
    file_windows = _file_windows(settings.checks)[0] if settings.checks is not None else ()
    return (*setting_windows(settings), *file_windows)


def problems(settings: Settings) -> list[str]:
    """Why configured windows may be missing (for display; never raises)."""
    out = []
    try:
        setting_windows(settings)
    except MaintenanceConfigError as exc:
        out.append(str(exc))
    if settings.checks is not None and (problem := _file_windows(settings.checks)[1]):
        out.append(problem)
    return out


# --- the questions ------------------------------------------------------------------------------------

def _now(now: str | datetime | None) -> datetime:
    if isinstance(now, datetime):
        return _utc(now)
    return parse_stamp(now or utcnow())


def _ad_hoc_name(row: MaintenanceRow) -> str:
    return f"#{row['id']} {row['reason']}" if row["reason"] else f"#{row['id']}"


def _tuple(values: list[str] | None) -> tuple[str, ...] | None:
    return tuple(values) if values is not None else None


async def covering(db: Database, settings: Settings, *, service: str | None, check: str | None,
                   now: str | None = None) -> ActiveWindow | None:
    """The maintenance window covering ``service``/``check`` at ``now`` (default: now), configured
    or ad-hoc; the one ending last when several do; None when none does.

    Raises :class:`MaintenanceConfigError` for a broken ``TIEROPS_MAINTENANCE`` (refused at start)."""
    at = _now(now)
    found: list[tuple[str, int, str, ActiveWindow]] = []
    for spec in configured(settings):
        if not matches(spec.services, spec.checks, service=service, check=check):
            continue
        if (occ := occurrence_at(spec, at)) is not None:
            found.append((_stamp(occ.end), 0, spec.name, ActiveWindow(
                name=spec.name, source=spec.source, starts_at=_stamp(occ.start), until=_stamp(occ.end),
                reason=spec.description, services=spec.services, checks=spec.checks)))
    found += [(row["ends_at"], 1, str(row["id"]), ActiveWindow(
        name=_ad_hoc_name(row), source=SOURCE_AD_HOC, starts_at=row["starts_at"], until=row["ends_at"], id=row["id"],
        reason=row["reason"], services=_tuple(row["services"]), checks=_tuple(row["checks"])))
        for row in await store.active_windows(db, _stamp(at))
        if matches(row["services"], row["checks"], service=service, check=check)]
    if not found:
        return None
    until = max(f[0] for f in found)
    return min((f for f in found if f[0] == until), key=lambda f: (f[1], f[2]))[3]


def _configured_view(spec: WindowSpec, at: datetime) -> WindowView:
    occ = occurrence_at(spec, at)
    state = "active" if occ is not None else "scheduled"
    if occ is None and (occ := next_occurrence(spec, at)) is None:
        state = "never"
    return {"name": spec.name, "source": spec.source, "state": state, "id": None, "reason": spec.description,
            "schedule": schedule_text(spec), "timezone": spec.timezone, "duration_s": spec.duration_s,
            "services": list(spec.services) if spec.services is not None else None,
            "checks": list(spec.checks) if spec.checks is not None else None,
            "starts_at": _stamp(occ.start) if occ else None, "ends_at": _stamp(occ.end) if occ else None,
            "created_by": None, "created_at": None}


def _ad_hoc_view(row: MaintenanceRow, state: str) -> WindowView:
    length = (parse_stamp(row["ends_at"]) - parse_stamp(row["starts_at"])).total_seconds()
    return {"name": _ad_hoc_name(row), "source": SOURCE_AD_HOC, "state": state, "id": row["id"],
            "reason": row["reason"], "schedule": None, "timezone": None, "duration_s": length,
            "services": row["services"], "checks": row["checks"], "starts_at": row["starts_at"],
            "ends_at": row["ends_at"], "created_by": row["created_by"], "created_at": row["created_at"]}


async def windows(db: Database, settings: Settings, now: str | None = None) -> list[WindowView]:
    """Every window for display: the active ones (configured and ad-hoc, ending first), then the
    upcoming ad-hoc ones (starting first), then the configured ones not active now (next start
    first; those that never start again last). A broken ``TIEROPS_MAINTENANCE`` or checks file
    contributes nothing here (see :func:`problems`)."""
    at = _now(now)
    stamp = _stamp(at)
    try:
        specs: tuple[WindowSpec, ...] = setting_windows(settings)
    except MaintenanceConfigError:
        specs = ()
    if settings.checks is not None:
        specs = (*specs, *_file_windows(settings.checks)[0])
    views = [_configured_view(spec, at) for spec in specs]
    views += [_ad_hoc_view(row, "active") for row in await store.active_windows(db, stamp)]
    views += [_ad_hoc_view(row, "upcoming") for row in await store.list_windows(db, state="upcoming", now=stamp,
                                                                                limit=1000)]
    rank = {"active": 0, "upcoming": 1, "scheduled": 2, "never": 3}

    def order(v: WindowView) -> tuple[int, str, str]:
        when = v["ends_at"] if v["state"] == "active" else v["starts_at"]
        return rank[v["state"]], when or "", v["name"]

    return sorted(views, key=order)


async def report(db: Database, settings: Settings, now: str | None = None, recent: int = 20) -> MaintenanceReport:
    """What ``GET /api/v1/maintenance`` answers and the page shows."""
    stamp = _stamp(_now(now))
    return {"now": stamp, "windows": await windows(db, settings, stamp),
            "recent": await store.list_windows(db, state="recent", now=stamp, limit=recent),
            "problems": problems(settings)}
