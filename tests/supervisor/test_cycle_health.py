"""app/supervisor/cycle_health.py: when ``/healthz`` calls the schedule stale — with cron, counted
from when a cycle was due; with an interval, twice the period plus the longest tier timeout."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.supervisor.scheduler import Supervisor
from tests.fakes import claude_control as cc
from tests.helpers import healthy

pytestmark = pytest.mark.timeout(60)


def quick(tmp_path: Path) -> cc.FakeClaude:
    return cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), healthy())}])


def _weekday(now: datetime, weekday: int, hour: int) -> datetime:
    """The latest ``weekday`` (0 = Monday) at ``hour``:00 UTC before ``now``."""
    day = now.replace(hour=hour, minute=0, second=0, microsecond=0) - timedelta(days=(now.weekday() - weekday) % 7)
    return day if day < now else day - timedelta(days=7)


def test_with_cron_staleness_counts_from_when_the_next_cycle_was_due(db, make_settings, validator, tmp_path):
    """Office hours on weekdays: the last cycle on Friday at 17:00 is not stale on Sunday, nor on
    Monday at 08:00; it is once the cycle due on Monday at 09:00 and the next one (10:00) plus the
    longest tier timeout went by without one."""
    settings = make_settings(quick(tmp_path), cron="0 9-17 * * 1-5", tier1_timeout=600, max_tier=1)
    sup = Supervisor(db, settings, validator)
    friday = _weekday(datetime.now(UTC), 4, 17)
    sup.cycle_health.last_cycle_wall = friday
    for later in (timedelta(days=2), timedelta(days=2, hours=15), timedelta(days=2, hours=17, minutes=9)):
        health = sup.health(scheduled=True, now=friday + later)
        assert (health["scheduler"], health["problems"]) == ("ok", []), later
    stale = sup.health(scheduled=True, now=friday + timedelta(days=2, hours=17, minutes=11))
    assert stale["scheduler"] == "stale"
    [problem] = stale["problems"]
    monday = friday + timedelta(days=2, hours=16)
    assert problem.startswith(f"no cycle finished since {friday:%Y-%m-%dT%H:%M:%SZ}: one was due at "
                              f"{monday:%Y-%m-%dT%H:%M:%SZ} (TIEROPS_CRON '0 9-17 * * 1-5')")
    # before any cycle: from the start
    sup.cycle_health.last_cycle_wall = None
    sup.started_wall = friday
    assert sup.health(scheduled=True, now=friday + timedelta(days=2))["problems"] == []
    assert sup.health(scheduled=True, now=friday + timedelta(days=4))["problems"][0].startswith(
        "no cycle finished since the start")


def test_with_an_interval_staleness_keeps_twice_the_period(db, make_settings, validator, tmp_path):
    sup = Supervisor(db, make_settings(quick(tmp_path), interval=60, tier1_timeout=30), validator)
    assert sup.health(scheduled=True)["scheduler"] == "ok"
    sup.started_monotonic -= 2 * 60 + 30 + 5
    health = sup.health(scheduled=True)
    assert health["scheduler"] == "stale" and "allowed: 150 s, twice the schedule's period" in health["problems"][0]
