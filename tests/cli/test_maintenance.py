"""``tierops maintenance`` (list, add, end), run as a real subprocess against a real SQLite file;
and a broken ``TIEROPS_MAINTENANCE`` refused in one line by ``run``, ``serve`` and ``doctor``."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from app.store.db import Database
from tests.cli.helpers import one_error_line, run
from tests.cli.test_doctor import doctor, lines_by_check

OPERATOR = {"USER": "opsbot", "LOGNAME": "opsbot"}  # getpass.getuser() reads these first
SETTING = "- {name: nightly, start: '02:00', duration: 2h, every: weekday, timezone: Europe/Berlin}"
BROKEN = "- {name: nightly, start: '02:00', duration: 2h, every: [Mondy]}"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "m.db"

    async def create() -> None:
        await (await Database.open(path)).close()

    asyncio.run(create())
    return path


def ok(*args: str, db: Path, env: dict | None = None) -> str:
    out = run("maintenance", *args, db=db, env={**OPERATOR, **(env or {})})
    assert out.returncode == 0, out.stderr
    return out.stdout.decode()


def test_add_list_and_end(db):
    added = json.loads(ok("add", "--duration", "2h", "--service", "api", "--service", "db-*", "--check", "*-tls",
                          "--reason", "db upgrade", "--json", db=db))
    assert (added["services"], added["checks"], added["reason"], added["created_by"]) == (
        ["api", "db-*"], ["*-tls"], "db upgrade", "opsbot via CLI")
    text = ok("add", "--duration", "30m", "--reason", "everything", db=db)
    assert text.startswith("added maintenance window #2 (everything): ") and "every service; every check" in text
    assert text.rstrip().endswith("by opsbot via CLI")

    listing = ok(db=db, env={"TIEROPS_MAINTENANCE": SETTING})  # bare `maintenance` lists
    lines = listing.splitlines()
    assert lines[0].split() == ["STATE", "ID", "FROM", "(UTC)", "UNTIL", "(UTC)", "SOURCE", "NAME"]
    rows = [line.split() for line in lines[1::2]]
    assert [(r[0], r[1]) for r in rows] == [("active", "2"), ("active", "1"), ("next", "-")]  # ending first
    assert lines[1].endswith("ad-hoc       #2 everything") and lines[5].endswith("setting      nightly")
    assert "services api, db-*; checks *-tls" in lines[4]
    assert "02:00 for 2h every weekday (Europe/Berlin)" in lines[6]
    as_json = json.loads(ok("list", "--json", db=db))
    assert [w["name"] for w in as_json["windows"]] == ["#2 everything", "#1 db upgrade"]
    assert as_json["problems"] == [] and as_json["recent"] == []

    ended = ok("end", "1", db=db)
    assert ended.startswith("ended maintenance window #1 (db upgrade)") and ended.rstrip().endswith("by opsbot via CLI")
    assert json.loads(ok("--json", db=db))["recent"][0]["cancelled_by"] == "opsbot via CLI"  # --json on the group
    one_error_line(run("maintenance", "end", "1", db=db), "maintenance window #1 was already ended by opsbot via CLI")
    one_error_line(run("maintenance", "end", "99", db=db), "no maintenance window 99")


def test_an_upcoming_window_from_a_start_and_an_end(db):
    start = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    row = json.loads(ok("add", "--starts-at", start.isoformat(), "--ends-at",
                        (start + timedelta(hours=2)).astimezone(timezone(timedelta(hours=1))).isoformat(),
                        "--reason", "later", "--json", db=db))
    assert (row["starts_at"], row["ends_at"]) == (start.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                                                  (start + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S.000Z"))
    (view,) = json.loads(ok("--json", db=db))["windows"]
    assert view["state"] == "upcoming" and view["id"] == row["id"]
    assert ok("end", str(row["id"]), db=db).startswith(f"ended maintenance window #{row['id']} (later)")


@pytest.mark.parametrize("args, message", [
    (["--reason", "x"], "--duration: give exactly one of duration (e.g. 2h) and ends_at"),
    (["--duration", "1h", "--ends-at", "2099-01-01T00:00:00Z", "--reason", "x"], "--duration: give exactly one"),
    (["--duration", "2 hours", "--reason", "x"], "--duration: '2 hours' is not a duration such as 30m"),
    (["--duration", "91d", "--reason", "x"], "--duration: '91d' is longer than a window may last (90 days)"),
    (["--ends-at", "2000-01-01T00:00:00Z", "--reason", "x"], "--ends-at: the window would end at 2000-01-01"),
    (["--ends-at", "2099-01-01T00:00", "--reason", "x"], "--ends-at: '2099-01-01T00:00' has no time zone"),
    (["--duration", "1h", "--starts-at", "2099-01-01T00:00:00Z", "--reason", "x"],
     "--starts-at: starts_at is more than 90 days ahead"),
    (["--duration", "1h", "--service", " ", "--reason", "x"], "--service: '' is not a pattern"),
    (["--duration", "1h", "--reason", " "], "--reason must say why"),
    (["--duration", "1h"], "Missing option '--reason'"),
])
def test_add_refuses_in_one_line(db, args, message):
    one_error_line(run("maintenance", "add", *args, db=db), message)
    assert json.loads(ok("--json", db=db))["windows"] == []  # nothing stored


def test_every_command_needs_an_existing_database(tmp_path):
    missing = tmp_path / "none.db"
    for args in (["maintenance"], ["maintenance", "add", "--duration", "1h", "--reason", "x"],
                 ["maintenance", "end", "1"]):
        one_error_line(run(*args, db=missing), "no database at")
    assert not missing.exists()


def test_a_broken_setting_is_one_line_for_list_run_serve_and_a_failed_doctor_check(db, tmp_path):
    env = {"TIEROPS_MAINTENANCE": BROKEN}
    expected = "TIEROPS_MAINTENANCE: [0].every: unknown weekday 'Mondy'"
    one_error_line(run("maintenance", db=db, env=env), expected)
    one_error_line(run("run", "--tier", "1", db=db, env={**env, "TIEROPS_CLAUDE_BIN": "/bin/false"}), expected)
    one_error_line(run("serve", "--port", "1", db=db, env=env), expected)
    out = doctor(tmp_path, env=env)
    status, detail = lines_by_check(out.stdout)["maintenance"]
    assert status == "fail" and expected in detail and out.returncode == 1
    good = lines_by_check(doctor(tmp_path, env={"TIEROPS_MAINTENANCE": SETTING}).stdout)["maintenance"]
    assert good == ("ok", "1 window(s) in TIEROPS_MAINTENANCE: nightly")


def test_checks_validate_counts_the_windows_and_reports_their_lines(tmp_path):
    path = tmp_path / "checks.yaml"
    path.write_text("checks:\n  - {name: api, http: 'http://127.0.0.1:1/'}\nmaintenance:\n"
                    "  - {name: nightly, start: 02:00, duration: 1h}\n")
    out = run("checks", "validate", str(path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().strip().endswith(", 1 maintenance window(s)")
    path.write_text("checks:\n  - {name: api, http: 'http://127.0.0.1:1/'}\nmaintenance:\n"
                    "  - {name: nightly, start: 02:00, duration: 8d}\n")
    out = run("checks", "validate", str(path))
    assert out.returncode == 2
    assert out.stderr.decode().strip() == f"{path}:4: maintenance[0].duration: '8d' is not a duration; use e.g. " \
                                          "30m, 1h, 2h30m (h, m, s) or seconds"
