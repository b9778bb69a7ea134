"""``app/store/maintenance.py`` against a real SQLite file: ad-hoc windows are created from a
duration or an end, refused when they end in the past or last too long, listed as active,
upcoming or recent, ended early once, and pruned with the retention once long over."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.clock import shift
from app.engine.retention import prune
from app.store import maintenance as store
from app.store import retention
from app.store.maintenance import MaintenanceStateError, WindowInputError, parse_span, parse_time, plan

T0 = "2026-11-23T09:00:00.000Z"


def at(seconds: float) -> str:
    return shift(T0, seconds)


async def make(db, start: float, end: float, **fields):
    return await store.create_window(db, starts_at=at(start), ends_at=at(end), reason=fields.pop("reason", "upgrade"),
                                     created_by=fields.pop("created_by", "alice via CLI"), now=T0, **fields)


@pytest.mark.parametrize("text, seconds", [
    ("30m", 1800), ("2h", 7200), ("1d", 86400), ("2h30m", 9000), ("1d12h", 129600), ("90s", 90), (" 2h ", 7200),
])
def test_durations(text, seconds):
    assert parse_span(text) == seconds


@pytest.mark.parametrize("text", ["", "2", "2x", "h", "30m2h", "0m", "-1h", "1.5h", "2 h"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_span(text)


def test_times_need_a_zone_and_are_stored_in_utc():
    assert parse_time("2026-11-23T19:00+01:00") == "2026-11-23T18:00:00.000Z"
    assert parse_time("2026-11-23T18:00:00Z") == "2026-11-23T18:00:00.000Z"
    for bad, why in (("2026-11-23T18:00", "no time zone"), ("tomorrow", "is not an ISO-8601 time"),
                     ("0001-01-01T00:00+01:00", "not a time that can be stored")):
        with pytest.raises(ValueError, match=why):
            parse_time(bad)


def test_plan_from_a_duration_or_an_end():
    assert plan(duration="2h", now=T0) == (T0, at(7200))
    assert plan(duration="30m", starts_at="2026-11-23T12:00:00Z", now=T0) == ("2026-11-23T12:00:00.000Z",
                                                                               "2026-11-23T12:30:00.000Z")
    assert plan(ends_at="2026-11-23T10:00:00+00:00", now=T0) == (T0, at(3600))
    assert plan(duration="90d", now=T0)[1] == at(90 * 86400)  # the longest


@pytest.mark.parametrize("fields, field, message", [
    ({}, "duration", "exactly one of duration"),
    ({"duration": "1h", "ends_at": "2026-11-23T10:00:00Z"}, "duration", "exactly one of duration"),
    ({"duration": "soon"}, "duration", "'soon' is not a duration"),
    ({"duration": "91d"}, "duration", r"longer than a window may last \(90 days\)"),
    ({"ends_at": "2026-11-23T08:00:00Z"}, "ends_at", "not in the future"),
    ({"ends_at": "2026-11-23T09:00:00Z"}, "ends_at", "not in the future"),  # now is not the future either
    ({"ends_at": "2027-06-01T00:00:00Z"}, "ends_at", "more than 90 days"),
    ({"ends_at": "next week"}, "ends_at", "is not an ISO-8601 time"),
    ({"ends_at": "2026-11-23T12:00:00Z", "starts_at": "2026-11-23T13:00:00Z"}, "ends_at", "not after its start"),
    ({"duration": "1h", "starts_at": "2026-11-23T07:00:00Z"}, "duration", "not in the future"),
    ({"duration": "1h", "starts_at": "2027-06-01T00:00:00Z"}, "starts_at", "more than 90 days ahead"),
    ({"duration": "1h", "starts_at": "9999-12-31T23:30:00Z"}, "starts_at", "beyond any storable time"),
])
def test_plan_refuses_with_the_field_at_fault(fields, field, message):
    with pytest.raises(WindowInputError, match=message) as caught:
        plan(now=T0, **fields)
    assert caught.value.field == field


async def test_create_stores_every_column(db):
    row = await make(db, 0, 3600, services=[" api ", "db-*"], reason="  db upgrade  ")
    assert {k: row[k] for k in ("created_at", "created_by", "reason", "starts_at", "ends_at", "services", "checks",
                                "cancelled_at", "cancelled_by")} == {
        "created_at": T0, "created_by": "alice via CLI", "reason": "db upgrade", "starts_at": T0, "ends_at": at(3600),
        "services": ["api", "db-*"], "checks": None, "cancelled_at": None, "cancelled_by": None}
    assert await store.get_window(db, row["id"]) == row
    assert await store.get_window(db, row["id"] + 1) is None


async def test_create_refuses_what_plan_refuses_and_bad_patterns(db):
    for kwargs, field in (({"start": 0, "end": -1}, "ends_at"), ({"start": 0, "end": 91 * 86400}, "ends_at")):
        with pytest.raises(WindowInputError) as caught:
            await make(db, kwargs["start"], kwargs["end"])
        assert caught.value.field == field
    for fields, field in (({"services": []}, "services"), ({"checks": ["  "]}, "checks"),
                          ({"checks": ["x" * 201]}, "checks"), ({"services": ["a"] * 101}, "services"),
                          ({"reason": "r" * 501}, "reason")):
        with pytest.raises(WindowInputError) as caught:
            await make(db, 0, 60, **fields)
        assert caught.value.field == field
    assert await store.list_windows(db) == []  # nothing stored


async def test_lists_by_state(db):
    active_long = await make(db, -60, 7200)
    active_short = await make(db, 0, 600)
    upcoming = await make(db, 3600, 7200)
    ended = await make(db, 0, 60)
    cancelled = await make(db, 0, 7200)
    await store.cancel_window(db, cancelled["id"], "bob via CLI", now=at(30))
    now = at(120)
    assert [r["id"] for r in await store.list_windows(db, state="active", now=now)] == [active_short["id"],
                                                                                       active_long["id"]]
    assert [r["id"] for r in await store.active_windows(db, now)] == [active_short["id"], active_long["id"]]
    assert [r["id"] for r in await store.list_windows(db, state="upcoming", now=now)] == [upcoming["id"]]
    assert [r["id"] for r in await store.list_windows(db, state="recent", now=now)] == [ended["id"], cancelled["id"]]
    assert len(await store.list_windows(db, state="all", now=now)) == 5


async def test_ending_early_once(db):
    row = await make(db, 0, 3600)
    ended = await store.cancel_window(db, row["id"], "bob via CLI", now=at(60))
    assert (ended["cancelled_at"], ended["cancelled_by"], ended["ends_at"]) == (at(60), "bob via CLI", at(3600))
    with pytest.raises(MaintenanceStateError, match="already ended by bob via CLI"):
        await store.cancel_window(db, row["id"], "carol", now=at(120))
    over = await make(db, 0, 60)
    with pytest.raises(MaintenanceStateError, match="already over"):
        await store.cancel_window(db, over["id"], "bob", now=at(60))
    upcoming = await make(db, 600, 1200)  # an upcoming window may be ended: it never starts
    assert (await store.cancel_window(db, upcoming["id"], "bob", now=at(60)))["cancelled_at"] == at(60)
    with pytest.raises(LookupError):
        await store.cancel_window(db, 999, "bob", now=at(60))


async def test_retention_deletes_windows_that_ended_before_the_cutoff(db, settings):
    old = await make(db, 0, 3600)
    cut_short = await make(db, 0, 80 * 86400)
    await store.cancel_window(db, cut_short["id"], "bob", now=at(600))
    recent = await make(db, 0, 60 * 86400)
    cutoff = at(40 * 86400)
    assert await retention.delete_maintenance_windows(db, cutoff, dry_run=True) == 2
    assert len(await store.list_windows(db)) == 3  # a dry run deletes nothing
    assert await retention.delete_maintenance_windows(db, cutoff) == 2
    assert [r["id"] for r in await store.list_windows(db)] == [recent["id"]] and old["id"] != recent["id"]


async def test_the_prune_reports_the_windows_it_deleted(db, settings):
    await make(db, 0, 3600)
    now = datetime(2027, 1, 31, tzinfo=UTC)  # 30 days of retention: the window ended in November
    dry = await prune(db, settings, dry_run=True, now=now)
    assert dry["deleted"]["maintenance_windows"] == 1 and len(await store.list_windows(db)) == 1
    done = await prune(db, settings, now=now)
    assert done["deleted"]["maintenance_windows"] == 1 and await store.list_windows(db) == []
