"""When scheduled cycles run: every ``TIEROPS_INTERVAL`` seconds (start to start), or at the times
of ``TIEROPS_CRON``; with a checks file, its ``interval`` when it sets one.

Why a module of its own: the arithmetic of the schedule, apart from the cycles it starts
(``scheduler.py``) and from the staleness ``/healthz`` derives from it (``cycle_health.py``).
The checks file is read again before every wait, so an edit takes effect without a restart, and
a wait looks again when a setting changes at run time (:func:`wait_until_due`). A cycle that
overruns its slot delays the next one; none is ever stacked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from app.config import Settings
from app.logs import oneline
from app.probe.inventory import InventoryError, load_inventory

log = logging.getLogger(__name__)

SETTINGS_POLL = 30.0  # a wait reads the run-time settings this often (another process may change them)


def next_delay(settings: Settings, started: float) -> float:
    """Seconds until the next cycle: cron's next time, or the interval after ``started``
    (``time.monotonic()`` when the last one started); never negative."""
    if settings.cron:
        from croniter import croniter

        now = datetime.now(UTC)
        nxt: datetime = croniter(settings.cron, now).get_next(datetime)
        delay = (nxt - now).total_seconds()
    else:
        delay = cycle_interval(settings) - (time.monotonic() - started)
    return max(0.0, delay)


async def wait_until_due(delay: Callable[[], float], changed: asyncio.Event, reload: Callable[[], Awaitable[object]],
                         poll: float = SETTINGS_POLL) -> None:
    """Until ``delay()`` (seconds to the next cycle) is over, computed again whenever ``changed`` is
    set (a run-time change: a shortened interval applies at once) and after ``reload()`` every
    ``poll`` s."""
    while (left := delay()) > 0:
        changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), min(left, poll))
        if not changed.is_set():
            if left <= poll:
                return  # due (cron's next time, computed now, would be the one after)
            await reload()


def cycle_interval(settings: Settings) -> float:
    """Seconds between scheduled cycles: the checks file's ``interval`` when it sets one (read
    again every cycle, so an edit takes effect without a restart), else ``TIEROPS_INTERVAL``."""
    if settings.checks is not None:
        try:
            interval = load_inventory(settings.checks).interval_s
        except InventoryError as exc:  # the probe session reports it in full, as its failure
            log.warning("checks file: %s; cycles keep TIEROPS_INTERVAL=%d s", oneline(exc), settings.interval)
            return float(settings.interval)
        if interval is not None:
            return float(interval)
    return float(settings.interval)


def schedule_period(settings: Settings) -> float:
    """Seconds between scheduled cycles: the cron's gap between its next two times, else
    :func:`cycle_interval`."""
    if settings.cron:
        from croniter import croniter

        it = croniter(settings.cron, datetime.now(UTC))
        first: datetime = it.get_next(datetime)
        second: datetime = it.get_next(datetime)
        return (second - first).total_seconds()
    return cycle_interval(settings)


def cron_times(cron: str, since: datetime) -> tuple[datetime, datetime]:
    """The first two times of ``cron`` after ``since``: when a cycle was due, and the one after."""
    from croniter import croniter

    times = croniter(cron, since)
    due: datetime = times.get_next(datetime)
    following: datetime = times.get_next(datetime)
    return due, following


def longest_tier_timeout(settings: Settings) -> int:
    """The longest a session of a scheduled cycle may run (tiers first_tier..max_tier)."""
    first = settings.first_tier
    return max(settings.tier(n).timeout for n in range(first, max(first, settings.max_tier) + 1))
