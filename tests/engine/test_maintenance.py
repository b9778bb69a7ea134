"""Which maintenance window covers a service/check at a time (``app/engine/maintenance.py``): the
window arithmetic as pure functions (weekday lists, overnight windows, cron, daylight saving days
in Europe/Berlin, UTC by default), ``TIEROPS_MAINTENANCE``, and :func:`covering` / :func:`windows`
over a real SQLite file with configured and ad-hoc windows together."""

from __future__ import annotations

import os
from datetime import UTC, datetime, time
from pathlib import Path

import pytest

from app.config import Settings
from app.engine import maintenance as engine
from app.engine.maintenance import (
    MaintenanceConfigError,
    covering,
    next_occurrence,
    occurrence_at,
    parse_setting,
)
from app.probe.maintenance import WindowSpec
from app.store import maintenance as store
from tests.probe.test_yamltext import laughs

MONDAY = "2026-11-23"  # 2026-11-23 is a Monday; 2026-03-29 and 2026-10-25 are Berlin's DST Sundays


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def spec(**fields) -> WindowSpec:
    return WindowSpec(**{"name": "w", "source": "setting", "duration_s": 3600.0, **fields})


def span(occ) -> tuple[str, str] | None:
    if occ is None:
        return None
    return (occ.start.astimezone(UTC).strftime("%Y-%m-%dT%H:%M"), occ.end.astimezone(UTC).strftime("%Y-%m-%dT%H:%M"))


# --- the arithmetic -------------------------------------------------------------------------------

def test_utc_is_the_default_and_an_occurrence_is_half_open():
    daily = spec(start=time(2, 0), duration_s=7200)
    assert daily.timezone == "UTC"
    assert span(occurrence_at(daily, at("2026-11-23T02:00:00Z"))) == ("2026-11-23T02:00", "2026-11-23T04:00")
    assert span(occurrence_at(daily, at("2026-11-23T03:59:59.999Z"))) == ("2026-11-23T02:00", "2026-11-23T04:00")
    assert occurrence_at(daily, at("2026-11-23T04:00:00Z")) is None  # the end is outside
    assert occurrence_at(daily, at("2026-11-23T01:59:59Z")) is None
    assert span(next_occurrence(daily, at("2026-11-23T02:30:00Z"))) == ("2026-11-24T02:00", "2026-11-24T04:00")
    assert span(next_occurrence(daily, at("2026-11-23T01:00:00Z"))) == ("2026-11-23T02:00", "2026-11-23T04:00")


def test_a_weekday_list_covers_only_those_days():
    tue_sat = spec(start=time(2, 0), days=(1, 5))
    covered = [d for d in range(23, 30) if occurrence_at(tue_sat, at(f"2026-11-{d}T02:30:00Z")) is not None]
    assert covered == [24, 28]  # Tuesday and Saturday
    assert span(next_occurrence(tue_sat, at("2026-11-24T03:00:00Z"))) == ("2026-11-28T02:00", "2026-11-28T03:00")
    assert span(next_occurrence(tue_sat, at("2026-11-28T03:00:00Z"))) == ("2026-12-01T02:00", "2026-12-01T03:00")


def test_an_overnight_window_belongs_to_the_day_it_starts():
    friday_night = spec(start=time(22, 0), duration_s=4 * 3600, days=(4,))
    assert occurrence_at(friday_night, at("2026-11-27T21:59:00Z")) is None
    assert span(occurrence_at(friday_night, at("2026-11-27T22:00:00Z"))) == ("2026-11-27T22:00", "2026-11-28T02:00")
    assert span(occurrence_at(friday_night, at("2026-11-28T01:30:00Z"))) == ("2026-11-27T22:00", "2026-11-28T02:00")
    assert occurrence_at(friday_night, at("2026-11-28T02:00:00Z")) is None
    # Thursday night is not a Friday occurrence, though Friday is the day its morning falls on
    assert occurrence_at(friday_night, at("2026-11-27T01:00:00Z")) is None


def test_a_week_long_window_covers_until_the_next_one_starts():
    weekly = spec(start=time(0, 0), duration_s=7 * 86400 - 60, days=(0,))
    assert span(occurrence_at(weekly, at("2026-11-29T23:58:00Z"))) == ("2026-11-23T00:00", "2026-11-29T23:59")
    assert occurrence_at(weekly, at("2026-11-29T23:59:30Z")) is None


def test_a_local_start_follows_the_zone_summer_and_winter():
    berlin = spec(start=time(22, 0), timezone="Europe/Berlin")
    assert span(occurrence_at(berlin, at("2026-07-01T20:30:00Z"))) == ("2026-07-01T20:00", "2026-07-01T21:00")  # CEST
    assert span(occurrence_at(berlin, at("2026-11-23T21:30:00Z"))) == ("2026-11-23T21:00", "2026-11-23T22:00")  # CET


def test_spring_forward_in_berlin():
    # 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC)
    early = spec(start=time(1, 0), duration_s=3 * 3600, timezone="Europe/Berlin")
    assert span(occurrence_at(early, at("2026-03-29T02:00:00Z"))) == ("2026-03-29T00:00", "2026-03-29T03:00")  # 3 real hours
    skipped = spec(start=time(2, 30), timezone="Europe/Berlin")  # 02:30 does not exist that night
    assert span(next_occurrence(skipped, at("2026-03-28T12:00:00Z"))) == ("2026-03-29T01:30", "2026-03-29T02:30")
    assert span(next_occurrence(skipped, at("2026-03-29T02:00:00Z"))) == ("2026-03-30T00:30", "2026-03-30T01:30")
    assert span(occurrence_at(skipped, at("2026-03-28T01:45:00Z"))) == ("2026-03-28T01:30", "2026-03-28T02:30")  # CET
    cron = spec(cron="30 2 * * *", timezone="Europe/Berlin")
    assert span(occurrence_at(cron, at("2026-03-29T01:45:00Z"))) == ("2026-03-29T01:30", "2026-03-29T02:30")
    assert span(occurrence_at(cron, at("2026-03-30T00:45:00Z"))) == ("2026-03-30T00:30", "2026-03-30T01:30")


def test_fall_back_in_berlin():
    # 2026-10-25: 03:00 CEST goes back to 02:00 CET (01:00 UTC); 02:30 happens twice, the first counts
    twice = spec(start=time(2, 30), timezone="Europe/Berlin")
    assert span(occurrence_at(twice, at("2026-10-25T00:45:00Z"))) == ("2026-10-25T00:30", "2026-10-25T01:30")
    assert occurrence_at(twice, at("2026-10-25T01:45:00Z")) is None  # the second 02:30 does not start it again
    cron = spec(cron="30 2 * * *", timezone="Europe/Berlin")
    assert span(occurrence_at(cron, at("2026-10-25T00:45:00Z"))) == ("2026-10-25T00:30", "2026-10-25T01:30")
    assert span(next_occurrence(cron, at("2026-10-25T00:45:00Z"))) == ("2026-10-26T01:30", "2026-10-26T02:30")
    night = spec(start=time(1, 0), duration_s=3 * 3600, timezone="Europe/Berlin")  # 01:00 CEST + 3 real hours
    assert span(occurrence_at(night, at("2026-10-25T01:00:00Z"))) == ("2026-10-24T23:00", "2026-10-25T02:00")


def test_cron_windows_and_overlapping_occurrences():
    tuesdays = spec(cron="0 2 * * 2", duration_s=1800)
    assert span(occurrence_at(tuesdays, at("2026-11-24T02:10:00Z"))) == ("2026-11-24T02:00", "2026-11-24T02:30")
    assert occurrence_at(tuesdays, at("2026-11-25T02:10:00Z")) is None
    assert span(next_occurrence(tuesdays, at("2026-11-24T02:10:00Z"))) == ("2026-12-01T02:00", "2026-12-01T02:30")
    often = spec(cron="*/10 * * * *", duration_s=1800)  # fires more often than it lasts: the one ending last
    assert span(occurrence_at(often, at("2026-11-23T12:25:00Z"))) == ("2026-11-23T12:20", "2026-11-23T12:50")
    never = spec(cron="0 0 30 2 *")  # 30 February
    assert occurrence_at(never, at("2026-11-23T12:00:00Z")) is None
    assert next_occurrence(never, at("2026-11-23T12:00:00Z")) is None


# --- the setting ------------------------------------------------------------------------------------

def test_the_setting_in_yaml_or_json():
    yaml_text = "- {name: nightly, start: 02:00, duration: 2h, every: weekday, timezone: Europe/Berlin}\n"
    json_text = '[{"name": "deploys", "cron": "0 18 * * 5", "duration": "1h", "services": ["api"]}]'
    assert parse_setting("") == parse_setting("  \n") == ()
    (nightly,) = parse_setting(yaml_text)
    assert (nightly.start, nightly.days, nightly.source) == (time(2, 0), (0, 1, 2, 3, 4), "setting")
    (deploys,) = parse_setting(json_text)
    assert (deploys.cron, deploys.services) == ("0 18 * * 5", ("api",))
    (flow,) = parse_setting("[{name: flow, start: '23:00', duration: 30m}]")  # YAML flow style, not JSON
    assert flow.name == "flow"


@pytest.mark.parametrize("text, message", [
    ("[{name: x", "TIEROPS_MAINTENANCE: not YAML or JSON at line 1"),
    ("name: x\nstart: 01:00", "TIEROPS_MAINTENANCE: the setting: expected a list of windows, got a mapping"),
    ("- {name: x, start: 01:00, duration: 1h, timezone: Nowhere/City}",
     "TIEROPS_MAINTENANCE: [0].timezone: unknown time zone 'Nowhere/City'"),
    ('[{"name": "a", "start": "01:00", "duration": "1h"}, {"name": "a", "cron": "0 1 * * *", "duration": "1h"}]',
     "TIEROPS_MAINTENANCE: [1].name: duplicate window name 'a' (first at [0])"),
])
def test_a_broken_setting_is_a_config_error_naming_the_problem(text, message):
    with pytest.raises(MaintenanceConfigError) as caught:
        parse_setting(text)
    assert str(caught.value).startswith(message), str(caught.value)


def test_nested_aliases_in_the_setting_are_refused_before_they_expand():
    text = laughs() + "- {name: nightly, start: '02:00', duration: 1h, services: *l7}\n"
    with pytest.raises(MaintenanceConfigError) as caught:
        parse_setting(text)
    assert str(caught.value) == ("TIEROPS_MAINTENANCE: line 2, column 8: found the alias *l0: YAML anchors and "
                                 "aliases are not accepted here (each would be expanded everywhere it is used); "
                                 "write the value out")
    with pytest.raises(MaintenanceConfigError, match="alias"):  # YAML flow style, which is tried after JSON
        parse_setting("[&a {name: x, start: '01:00', duration: 1h}, *a]")


# --- covering -----------------------------------------------------------------------------------------

NOW = "2026-11-23T22:30:00.000Z"
SETTING = """\
- {name: nightly-api, start: "22:00", duration: 1h, services: [api]}
- {name: tls-checks, start: "22:00", duration: 2h, checks: ["*-tls"]}
- {name: everything, cron: "0 22 * * 1", duration: 30m, description: weekly restart}
"""


def configured(tmp_path: Path, text: str = SETTING, **overrides) -> Settings:
    return Settings(db=tmp_path / "tierops.db", maintenance=text, **overrides)


async def adhoc(db, minutes: int, *, services=None, checks=None, reason="db upgrade", start_min: int = -10):
    starts = datetime.fromisoformat(NOW.replace("Z", "+00:00")).timestamp() + start_min * 60
    ends = datetime.fromisoformat(NOW.replace("Z", "+00:00")).timestamp() + minutes * 60
    iso = [datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z") for t in (starts, ends)]
    return await store.create_window(db, starts_at=iso[0], ends_at=iso[1], reason=reason, created_by="alice via CLI",
                                     services=services, checks=checks, now=NOW)


async def test_covering_picks_the_window_ending_last_among_those_that_match(db, tmp_path):
    settings = configured(tmp_path)
    api = await covering(db, settings, service="api", check="api-health", now=NOW)
    assert (api.name, api.source, api.starts_at, api.until) == (
        "nightly-api", "setting", "2026-11-23T22:00:00.000Z", "2026-11-23T23:00:00.000Z")
    tls = await covering(db, settings, service="api", check="api-tls", now=NOW)
    assert (tls.name, tls.until) == ("tls-checks", "2026-11-24T00:00:00.000Z")  # ends after nightly-api
    web = await covering(db, settings, service="web", check="web-health", now=NOW)
    assert web is None  # "everything" ended at 22:30 (half open)
    early = await covering(db, settings, service="web", check=None, now="2026-11-23T22:10:00.000Z")
    assert (early.name, early.reason, early.services, early.checks) == ("everything", "weekly restart", None, None)
    assert early.as_dict()["services"] is None


async def test_a_missing_service_or_check_matches_only_windows_without_that_matcher(db, tmp_path):
    settings = configured(tmp_path)
    found = await covering(db, settings, service=None, check="api-tls", now=NOW)
    assert found.name == "tls-checks"  # no services matcher: covers a check without a service
    assert await covering(db, settings, service="api", check=None, now=NOW) is not None  # nightly-api
    assert await covering(db, settings, service=None, check=None, now=NOW) is None  # none is for everything now
    assert (await covering(db, settings, service=None, check=None, now="2026-11-23T22:05:00.000Z")).name == "everything"


async def test_ad_hoc_windows_count_until_they_end_or_are_ended(db, tmp_path):
    settings = configured(tmp_path, text="")
    row = await adhoc(db, 60, services=["db-*"])
    found = await covering(db, settings, service="db-main", check="db-port", now=NOW)
    assert (found.name, found.source, found.id, found.until, found.reason) == (
        f"#{row['id']} db upgrade", "ad-hoc", row["id"], "2026-11-23T23:30:00.000Z", "db upgrade")
    assert found.services == ("db-*",) and found.checks is None
    assert await covering(db, settings, service="api", check="api-health", now=NOW) is None
    await store.cancel_window(db, row["id"], "bob via CLI", now=NOW)
    assert await covering(db, settings, service="db-main", check="db-port", now=NOW) is None
    later = await adhoc(db, 90, start_min=30)  # upcoming: not yet
    assert await covering(db, settings, service="db-main", check="db-port", now=NOW) is None
    inside = await covering(db, settings, service="db-main", check="db-port", now="2026-11-23T23:10:00.000Z")
    assert inside.id == later["id"]


async def test_configured_and_ad_hoc_together_the_later_end_wins(db, tmp_path):
    settings = configured(tmp_path)
    short = await adhoc(db, 20, services=["api"])  # ends 22:50, before nightly-api (23:00)
    assert (await covering(db, settings, service="api", check="api-health", now=NOW)).name == "nightly-api"
    long = await adhoc(db, 45, services=["api"], reason="")  # ends 23:15
    found = await covering(db, settings, service="api", check="api-health", now=NOW)
    assert (found.name, found.source) == (f"#{long['id']}", "ad-hoc") and short["id"] != long["id"]
    same = await adhoc(db, 30, services=["api"])  # ends 23:00 like nightly-api: configured first on a tie
    await store.cancel_window(db, long["id"], "bob", now=NOW)
    assert (await covering(db, settings, service="api", check="api-health", now=NOW)).name == "nightly-api"
    assert same["ends_at"] == "2026-11-23T23:00:00.000Z"


async def test_checks_file_windows_are_read_again_when_the_file_changes(db, tmp_path):
    path = tmp_path / "checks.yaml"
    head = "checks:\n  - {name: api-health, service: api, http: 'http://127.0.0.1:1/'}\nmaintenance:\n"
    path.write_text(head + "  - {name: file-window, start: '22:00', duration: 1h}\n")
    settings = configured(tmp_path, text="", checks=path)
    found = await covering(db, settings, service="api", check="api-health", now=NOW)
    assert (found.name, found.source) == ("file-window", "checks file")
    path.write_text(head + "  - {name: longer-file-window, start: '22:00', duration: 90m}\n")
    os.utime(path, ns=(1, 1))  # a different mtime whatever the clock's resolution
    found = await covering(db, settings, service="api", check="api-health", now=NOW)
    assert (found.name, found.until) == ("longer-file-window", "2026-11-23T23:30:00.000Z")
    path.write_text(head + "  - {name: broken, start: '25:00', duration: 1h}\n")
    assert await covering(db, settings, service="api", check="api-health", now=NOW) is None  # the probe reports it
    (problem,) = engine.problems(settings)
    assert str(path) in problem and "1 problem(s)" in problem and "not applied" in problem


async def test_a_broken_setting_is_raised_not_ignored(db, tmp_path):
    settings = configured(tmp_path, text="- {name: x, start: '01:00'}")
    with pytest.raises(MaintenanceConfigError, match=r"\[0\]: missing 'duration'"):
        await covering(db, settings, service="api", check=None, now=NOW)
    assert engine.problems(settings) == [
        "TIEROPS_MAINTENANCE: [0]: missing 'duration' (how long each occurrence lasts, e.g. 30m, 2h, 2h30m)"]
    assert await engine.windows(db, settings, NOW) == []  # for display: shown as a problem instead


async def test_windows_lists_active_then_upcoming_then_schedules(db, tmp_path):
    settings = configured(tmp_path, text=SETTING + "- {name: never, cron: '0 0 30 2 *', duration: 1h}\n")
    active = await adhoc(db, 60, checks=["db-port"])
    upcoming = await adhoc(db, 120, start_min=60, reason="later")
    views = await engine.windows(db, settings, NOW)
    assert [(v["name"], v["state"]) for v in views] == [
        ("nightly-api", "active"), (f"#{active['id']} db upgrade", "active"), ("tls-checks", "active"),  # ending first
        (f"#{upcoming['id']} later", "upcoming"), ("everything", "scheduled"), ("never", "never")]
    nightly, everything = views[0], views[4]
    assert nightly["schedule"] == "22:00 for 1h every day (UTC)" and nightly["services"] == ["api"]
    assert (everything["starts_at"], everything["ends_at"]) == ("2026-11-30T22:00:00.000Z", "2026-11-30T22:30:00.000Z")
    assert views[1]["created_by"] == "alice via CLI" and views[1]["duration_s"] == 70 * 60
    assert views[5]["starts_at"] is None
    report = await engine.report(db, settings, NOW)
    assert report["now"] == NOW and report["problems"] == [] and report["recent"] == []
