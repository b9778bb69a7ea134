"""The monitor's record of its own cycles: what ``/healthz`` reports, the dead-man heartbeat, and
the "monitor unhealthy" notice.

Why a module of its own: it judges cycles, it does not run them (``scheduler.py`` does, and hands
each one's end here). A cycle *failed* when it raised or the session it started with ended
``failed`` (the check itself did not run); one that ran its check and then needs attention, waits
for an approval or escalated did its job. A skip (the first tier may not start) is no failure: it
pings the heartbeat's success URL and counts neither way. ``TIEROPS_UNHEALTHY_AFTER`` failures in a
row, or one storage error, send one critical notice per episode, and a cycle that succeeds after
it an info one. Staleness: with an interval a cycle must finish within twice the period plus the
longest tier timeout; with cron, counted from when a cycle was *due* (ARCHITECTURE.md).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from app.clock import utcnow
from app.config import Settings
from app.errors import StorageUnavailable
from app.logs import oneline
from app.notify import messages as notices
from app.notify.heartbeat import Heartbeat
from app.notify.sender import Notifier
from app.store import approvals as approval_store
from app.store.db import is_transient
from app.store.rows import ChainLink
from app.supervisor.schedule import cron_times, longest_tier_timeout, schedule_period
from app.vocab import SessionStatus

log = logging.getLogger(__name__)

NEEDS_ATTENTION = "needs_attention"  # a cycle's status when one of its sessions needs a human
AWAITING_APPROVAL = "awaiting_approval"  # it ended waiting for an operator's approval


def cycle_status(chain: list[ChainLink]) -> str:
    """One word for a finished cycle: ``needs_attention`` when a session of it does,
    ``awaiting_approval`` when its last session waits for an approval to escalate, else the
    status of the session it ended with (``empty`` when it ran none)."""
    if not chain:
        return "empty"
    if any(link["attention"] for link in chain):
        return NEEDS_ATTENTION
    if approval_store.is_waiting(chain[-1]["escalation_gate"]):
        return AWAITING_APPROVAL
    return chain[-1]["status"]


class CycleHealth:
    """The facts of this process's cycles since it started, and what they mean for its health."""

    def __init__(self, settings: Settings, notifier: Notifier, heartbeat: Heartbeat) -> None:
        self.settings = settings
        self.notifier = notifier
        self.heartbeat = heartbeat
        self.last_cycle_wall: datetime | None = None  # when the last cycle finished (or was skipped)
        self.last_cycle_at: str | None = None  # when the last cycle finished (UTC, ISO 8601)
        self.last_cycle_monotonic: float | None = None
        self.last_cycle_status: str | None = None  # its cycle_status() word, or "error" when it raised
        self.last_ok_at: str | None = None  # when the last cycle that did not fail finished
        self.consecutive_failures = 0
        self._unhealthy_since: str | None = None  # an open "monitor unhealthy" episode (its dedup key)

    async def finished(self, cycle: int, chain: list[ChainLink] | None, exc: BaseException | None) -> None:
        """Record the cycle's health, ping the heartbeat, tell about the monitor's own health.
        Never raises: the cycle's result is what its caller gets."""
        try:
            word = "error" if exc is not None else cycle_status(chain or [])
            first = chain[0] if chain else None
            failed = exc is not None or word == SessionStatus.FAILED or (
                first is not None and first["status"] == SessionStatus.FAILED)
            self.last_cycle_at, self.last_cycle_monotonic, self.last_cycle_status = utcnow(), time.monotonic(), word
            self.last_cycle_wall = datetime.now(UTC)
            if failed:
                self.consecutive_failures += 1
                await self.heartbeat.cycle_failed()
            else:
                self.consecutive_failures = 0
                self.last_ok_at = self.last_cycle_at
                await self.heartbeat.cycle_ok()
            await self._monitor_notices(failed, storage_error(chain, exc), _failure(chain, exc))
        except Exception:
            log.exception("cycle %d: its health could not be recorded", cycle, extra={"cycle": cycle})

    async def skipped(self, cycle: int, why: str) -> None:
        """A cycle whose first tier may not start (the daily budget is spent, the model tiers are
        paused) did what it must: nothing. Not a failure — no ``/fail`` ping, no count towards
        ``TIEROPS_UNHEALTHY_AFTER``, no "monitor unhealthy" — but the last cycle's status says
        ``skipped: why``, and the heartbeat hears that the monitor is alive. Never raises."""
        try:
            self.last_cycle_at, self.last_cycle_monotonic = utcnow(), time.monotonic()
            self.last_cycle_wall, self.last_cycle_status = datetime.now(UTC), f"skipped: {why}"
            await self.heartbeat.cycle_ok()
        except Exception:
            log.exception("cycle %d: its skip could not be recorded", cycle, extra={"cycle": cycle})

    async def _monitor_notices(self, failed: bool, storage: str | None, failure: str) -> None:
        n, limit = self.consecutive_failures, self.settings.unhealthy_after
        if failed and self._unhealthy_since is None and (storage is not None or n >= limit):
            self._unhealthy_since = self.last_cycle_at or utcnow()
            what = "storage error" if storage is not None else f"{n} cycles in a row failed"
            body = (f"{n} cycle(s) in a row failed (TIEROPS_UNHEALTHY_AFTER={limit}); the last: "
                    f"{storage or failure}.\nLast cycle that did not fail: {self.last_ok_at or 'none since start'}. "
                    "/healthz answers 503 while this lasts.")
            await self.notifier.post(notices.monitor_notice(
                "monitor", "critical", f"monitor unhealthy — {what}", body, f"monitor:unhealthy:{self._unhealthy_since}"))
        elif not failed and self._unhealthy_since is not None:
            since, self._unhealthy_since = self._unhealthy_since, None
            # A follow-up: it goes wherever "unhealthy" went, whatever the minimum severity.
            await self.notifier.post(notices.monitor_notice(
                "monitor", "info", "monitor healthy again",
                f"A cycle finished ({self.last_cycle_status}) at {self.last_cycle_at}; cycles had failed since {since}.",
                f"monitor:healthy:{since}", follows_key=f"monitor:unhealthy:{since}"))

    def _cron_stale(self, now: datetime, started_wall: datetime) -> str | None:
        """With cron, staleness is measured from when a cycle was *due*: the first cron time after
        the last cycle (or after the start, before any) may be missed; by the cron time after that
        one plus the longest tier timeout a cycle must have finished. A weekday-only or office-hours
        cron is then never "stale" on a weekend or at night. None: not stale."""
        since = self.last_cycle_wall or started_wall
        due, following = cron_times(self.settings.cron, since)
        deadline = following + timedelta(seconds=longest_tier_timeout(self.settings))
        if now <= deadline:
            return None
        what = "no cycle finished since the start" if self.last_cycle_wall is None else "no cycle finished since"
        return (f"{what} {since:%Y-%m-%dT%H:%M:%SZ}: one was due at {due:%Y-%m-%dT%H:%M:%SZ} "
                f"(TIEROPS_CRON {self.settings.cron!r}); allowed until {deadline:%Y-%m-%dT%H:%M:%SZ}, the cron time "
                "after it plus the longest tier timeout")

    def report(self, *, scheduled: bool, busy: bool, holder: str | None, started_wall: datetime,
               started_monotonic: float, now: datetime | None = None) -> dict[str, Any]:
        """For ``/healthz``: the cycle facts and ``problems`` (empty: healthy). ``scheduled``: this
        process runs the schedule; then, with an interval, a cycle must have finished within twice
        the schedule's period plus the longest tier timeout (counted from the start until one has);
        with ``TIEROPS_CRON`` (:meth:`_cron_stale`) by the cron time after the one that was due next
        after the last cycle, plus the longest tier timeout. ``busy``, ``holder``: whether a cycle
        runs now and who runs it (the cycle lock); ``started_*``: when the supervisor started (the
        wall clock, ``time.monotonic()``), which counts until a cycle finished. ``now``: the wall
        clock (tests)."""
        problems: list[str] = []
        scheduler = "off"
        if scheduled:
            scheduler = "ok"
            if self.settings.cron:
                if (stale := self._cron_stale(now or datetime.now(UTC), started_wall)) is not None:
                    scheduler = "stale"
                    problems.append(stale)
            else:
                allowed = 2 * schedule_period(self.settings) + longest_tier_timeout(self.settings)
                age = time.monotonic() - (self.last_cycle_monotonic or started_monotonic)
                if age > allowed:
                    scheduler = "stale"
                    what = "no cycle finished" if self.last_cycle_monotonic is None else "no cycle finished since"
                    problems.append(f"{what} in {age:.0f} s (allowed: {allowed:.0f} s, twice the schedule's period "
                                    "plus the longest tier timeout)")
        if self.consecutive_failures >= self.settings.unhealthy_after:
            problems.append(f"the last {self.consecutive_failures} cycles failed "
                            f"(TIEROPS_UNHEALTHY_AFTER={self.settings.unhealthy_after})")
        return {"scheduler": scheduler, "cycle_running": busy, "cycle_holder": holder,
                "last_cycle_at": self.last_cycle_at,
                "last_cycle_status": self.last_cycle_status, "consecutive_failures": self.consecutive_failures,
                "problems": problems}


def storage_error(chain: list[ChainLink] | None, exc: BaseException | None) -> str | None:
    """The storage error a cycle ended with (raised, or a session's "storage error: …"), if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, StorageUnavailable) or (is_transient(seen) and not isinstance(seen, OSError)):
            text = oneline(seen)
            return text if text.startswith("storage error") else f"storage error: {type(seen).__name__}: {text}"
        seen = seen.__cause__ or seen.__context__
    for link in chain or []:
        if (link["status_reason"] or "").startswith("storage error"):
            return oneline(link["status_reason"])
    return None


def _failure(chain: list[ChainLink] | None, exc: BaseException | None) -> str:
    """What went wrong, in one line, for the monitor's notice."""
    if exc is not None:
        return f"{type(exc).__name__}: {oneline(exc)}"
    if chain:
        first = chain[0]
        return f"session {first['id']} (tier {first['tier']}) ended {first['status']}: {oneline(first['status_reason'] or '')}"
    return "no session ran"
