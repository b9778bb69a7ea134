"""Maintenance windows as written (``app/probe/maintenance.py``): the checks file's ``maintenance:``
section loads into windows and every mistake is reported at its ``FILE:LINE`` with the rest of the
file's problems; the parser the setting shares says what is wrong with each field."""

from __future__ import annotations

from datetime import time
from pathlib import Path

import pytest

from app.probe.inventory import InventoryError, load_inventory
from app.probe.maintenance import matches, parse_windows, schedule_text

CHECKS = "checks:\n  - {name: api, service: api, http: 'http://127.0.0.1:8000/healthz'}\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "checks.yaml"
    path.write_text(CHECKS + text)
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    text = str(caught.value)
    assert all(line.startswith(f"{path}:") for line in text.splitlines()), text
    return [line.removeprefix(f"{path}:") for line in text.splitlines()]


def test_the_section_loads_with_unquoted_times_weekdays_cron_and_matchers(tmp_path):
    path = write(tmp_path, """\
maintenance:
  - name: nightly-backup
    start: 02:00              # unquoted: YAML 1.1 reads 120; the scalar's text is used
    duration: 2h30m
    every: [Tuesday, sat]
    timezone: Europe/Berlin
    services: [api, "db-*"]
    description: backups lock the tables
  - name: patch-tuesday
    cron: "0 3 * * 2"
    duration: 45m
    checks: ["*-health"]
  - {name: weekdays, start: "22:00", duration: 4h, every: weekday}
""")
    inv = load_inventory(path)
    nightly, patch, weekdays = inv.maintenance
    assert (nightly.name, nightly.source, nightly.start, nightly.days, nightly.duration_s, nightly.timezone) == (
        "nightly-backup", "checks file", time(2, 0), (1, 5), 9000.0, "Europe/Berlin")
    assert nightly.services == ("api", "db-*") and nightly.checks is None and nightly.line == 4
    assert nightly.description == "backups lock the tables"
    assert (patch.cron, patch.start, patch.timezone, patch.checks, patch.services) == (
        "0 3 * * 2", None, "UTC", ("*-health",), None)
    assert weekdays.days == (0, 1, 2, 3, 4)
    assert schedule_text(nightly) == "02:00 for 2h30m every Tuesday, Saturday (Europe/Berlin)"
    assert schedule_text(patch) == "cron 0 3 * * 2 for 45m (UTC)"
    assert schedule_text(weekdays) == "22:00 for 4h every weekday (UTC)"
    assert len(inv.checks) == 1  # the rest of the file is untouched


def test_every_mistake_is_reported_at_its_line_all_at_once(tmp_path):
    path = write(tmp_path, """\
maintenance:
  - name: nightly
    start: "25:00"
    duration: 0
    every: [Mondy]
    timezone: Mars/Olympus
  - name: nightly
    cron: "0 2 * *"
    duration: 200h
    services: api
    checks: []
    tmeout: 1
  - name: both
    start: "01:00"
    cron: "* * * * *"
    duration: 1h
  - {start: "01:00", duration: 1h}
  - name: neither
    duration: 1h
  - name: wrong-every
    cron: "0 1 * * *"
    every: day
    duration: 1h
  - name: listed
    start: "01:00"
    duration: 1h
    services: [api, 3]
  - 5
""")
    assert problems(path) == [
        "5: maintenance[0].start: '25:00' is not a time; use HH:MM from 00:00 to 23:59 (24-hour clock, local to "
        "the window's timezone)",
        "6: maintenance[0].duration: 0 must be longer than zero",
        "7: maintenance[0].every: unknown weekday 'Mondy'; use Monday … Sunday (or Mon … Sun), day, weekday or "
        "weekend",
        "8: maintenance[0].timezone: unknown time zone 'Mars/Olympus'; use an IANA name such as UTC, Europe/Berlin "
        "or America/New_York",
        "9: maintenance[1].name: duplicate window name 'nightly' (first at line 4)",
        "10: maintenance[1].cron: '0 2 * *' is not a cron expression; use five fields: minute hour day-of-month "
        "month day-of-week, e.g. '0 2 * * 2' (02:00 every Tuesday)",
        "11: maintenance[1].duration: 200h is too long; a window lasts at most 7 days (168h)",
        "12: maintenance[1].services: expected a list of service name patterns such as [api, 'db-*'], got 'api'",
        "13: maintenance[1].checks: the list is empty; leave 'checks' out to match every check",
        "14: maintenance[1].tmeout: unknown key 'tmeout' (allowed: name, start, cron, duration, every, timezone, "
        "services, checks, description)",
        "15: maintenance[2]: give exactly one of start (HH:MM, with optional every) and cron (five fields) "
        "(found both)",
        "19: maintenance[3]: missing 'name' (each window needs a unique name)",
        "20: maintenance[4]: give exactly one of start (HH:MM, with optional every) and cron (five fields) "
        "(found neither)",
        "24: maintenance[5].every: applies only to windows with start; a cron expression names its own days",
        "29: maintenance[6].services: expected a list of service name patterns such as [api, 'db-*'], got "
        "['api', 3]",
        "30: maintenance[7]: expected a mapping with name, start or cron, and duration; got a number 5",
    ]


def test_a_section_that_is_not_a_list_and_the_other_sections_problems_together(tmp_path):
    path = tmp_path / "checks.yaml"
    path.write_text("checks:\n  - {name: api, htp: 'http://x/'}\nmaintenance: {name: x}\n")
    found = problems(path)
    assert "3: maintenance: expected a list of windows, got a mapping" in found
    assert any(line.startswith("2: checks[0].htp: unknown key") for line in found)


@pytest.mark.parametrize("every, days", [
    ("day", (0, 1, 2, 3, 4, 5, 6)), ("weekend", (5, 6)), ("Sunday", (6,)), (["mon", "FRIDAY"], (0, 4)),
    (["weekday", "Saturday"], (0, 1, 2, 3, 4, 5)),
])
def test_weekday_words_and_names(every, days):
    specs, found = parse_windows([{"name": "w", "start": "01:00", "duration": "1h", "every": every}], "setting", [])
    assert found == [] and specs[0].days == days


@pytest.mark.parametrize("item, message", [
    ({"name": "w", "start": "7:5", "duration": "1h"}, "[0].start: '7:5' is not a time"),
    ({"name": "w", "start": 700, "duration": "1h"}, "[0].start: 700 is not a time"),
    ({"name": "w", "start": "01:00", "duration": "soon"}, "[0].duration: 'soon' is not a duration"),
    ({"name": "w", "start": "01:00", "duration": "-1"}, "[0].duration: '-1' is not a duration"),
    ({"name": "w", "start": "01:00", "duration": 604801}, "[0].duration: 168h1s is too long"),
    ({"name": "w", "start": "01:00", "duration": "1h", "every": []}, "[0].every: expected a weekday"),
    ({"name": "w", "start": "01:00", "duration": "1h", "timezone": ""}, "[0].timezone: expected an IANA"),
    ({"name": "w", "start": "01:00", "duration": "1h", "timezone": "../../etc/passwd"}, "unknown time zone"),
    ({"name": "w", "cron": "0 2 * * 2 2026", "duration": "1h"}, "[0].cron: '0 2 * * 2 2026' is not a cron"),
    ({"name": "w", "cron": "61 * * * *", "duration": "1h"}, "[0].cron: '61 * * * *' is not a cron"),
    ({"name": "w", "start": "01:00", "duration": "1h", "checks": [""]}, "[0].checks: '' is not a pattern"),
    ({"name": "w x", "start": "01:00", "duration": "1h"}, "[0].name: 'w x' is not valid"),
])
def test_each_bad_field_says_what_is_wrong(item, message):
    specs, found = parse_windows([item], "setting", [])
    assert specs == [] and len(found) == 1 and message in found[0][1], found


def test_a_week_long_window_is_the_longest_allowed():
    specs, found = parse_windows([{"name": "w", "start": "00:00", "duration": "168h", "every": "Monday"}],
                                 "setting", [])
    assert found == [] and specs[0].duration_s == 7 * 86400


@pytest.mark.parametrize("services, checks, service, check, expected", [
    (None, None, None, None, True),                # matches everything, even nothing
    (["api"], None, "api", "api-health", True),
    (["db-*"], None, "db-replica", None, True),
    (["db-*"], None, "api", None, False),
    (["API"], None, "api", None, False),           # case-sensitive
    (["api"], None, None, "api-health", False),    # no service: only windows without a services matcher
    (None, ["*-health"], "api", "api-health", True),
    (None, ["*-health"], "api", None, False),      # no check (a model's incident): not a checks window
    (["api"], ["*-tls"], "api", "api-health", False),  # both matchers must match
    (["api", "web"], ["api-?ealth"], "api", "api-health", True),
])
def test_matchers(services, checks, service, check, expected):
    assert matches(services, checks, service=service, check=check) is expected
