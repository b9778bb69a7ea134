"""`tierops doctor`: one line per check, exit 1 if any fails, changes nothing.

Run as a real subprocess; the CLI it probes is a small executable answering ``--version`` and
``--help`` with what the real 2.1.197 printed (tests/fixtures/claude-code/2.1.197).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.doctor_checks import REQUIRED_FLAGS, check_clock
from app.cli.doctor_online import check_online
from app.config import Settings
from tests.cli import forkserver
from tests.fakes.claude_control import FIXTURES, REPO
from tests.fakes.fake_anthropic import FakeAnthropic
from tests.helpers import fixture_stream

SECRET = "sk-ant-api03-doctorDoctorDoctorDoctorDoctorDoctor-xyz"


def probe_cli(folder: Path, *, version: str | None = None, drop_flag: str | None = None) -> Path:
    """An executable that prints the real CLI's --version / --help (optionally altered)."""
    folder.mkdir(parents=True, exist_ok=True)
    help_text = (FIXTURES / "help.txt").read_text()
    if drop_flag:
        help_text = help_text.replace(drop_flag, "--gone")
    (folder / "help.txt").write_text(help_text)
    (folder / "version.txt").write_text(version or (FIXTURES / "version.txt").read_text())
    exe = folder / "claude"
    exe.write_text(f"#!{sys.executable}\n"
                   "import sys, pathlib\n"
                   "here = pathlib.Path(__file__).parent\n"
                   "name = 'version.txt' if '--version' in sys.argv else 'help.txt'\n"
                   "sys.stdout.write((here / name).read_text())\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def doctor(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("TIEROPS_", "ANTHROPIC_", "CLAUDE_CODE_"))}
    full = {**base, "PYTHONPATH": str(REPO), "TIEROPS_HOME": str(tmp_path / "home"), **(env or {})}
    return forkserver.run("app", ["doctor", *args], env=full, cwd=tmp_path, timeout=120, text=True)


def lines_by_check(out: str) -> dict[str, tuple[str, str]]:
    found = {}
    for line in out.splitlines():
        status, rest = line.split(None, 1)
        for name in ("settings", "state dir", "database", "schema", "prompts", "claude CLI", "credentials",
                     "online", "checks file", "extensions", "model tiers", "mcp servers", "maintenance", "notifications", "disk",
                     "clock"):
            if rest.startswith(name):
                found[name] = (status, rest[len(name):].strip())
    return found


def ingest(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "app", "ingest", str(fixture_stream("a_plain"))],
                          capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO),
                                                    "TIEROPS_HOME": str(tmp_path / "home")}, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_healthy_installation_passes_every_check(tmp_path):
    ingest(tmp_path)
    exe = probe_cli(tmp_path / "bin")
    out = doctor(tmp_path, env={"TIEROPS_CLAUDE_BIN": str(exe), "ANTHROPIC_API_KEY": SECRET})
    assert out.returncode == 0, out.stdout + out.stderr
    checks = lines_by_check(out.stdout)
    assert len(out.stdout.splitlines()) == len(checks) == 15
    assert {name: status for name, (status, _) in checks.items()} == {
        "settings": "ok", "state dir": "ok", "database": "ok", "schema": "ok", "prompts": "ok",
        "claude CLI": "ok", "credentials": "ok", "checks file": "skip", "extensions": "skip", "model tiers": "ok",
        "mcp servers": "skip",
        "maintenance": "skip",
        "notifications": "skip", "disk": "ok", "clock": "ok"}
    assert checks["notifications"][1].startswith("no URL: messages are recorded, not sent")
    assert checks["model tiers"][1].startswith("a cycle can escalate to tiers 1 to 3 (claude CLI found, credentials")
    assert checks["database"][1].startswith(f"{tmp_path / 'home' / 'tierops.db'}: writable, migrations current")
    assert f"all {len(REQUIRED_FLAGS)} flags present" in checks["claude CLI"][1]
    assert "2.1.197 (Claude Code)" in checks["claude CLI"][1]
    assert "ANTHROPIC_API_KEY" in checks["credentials"][1]
    assert SECRET not in out.stdout + out.stderr  # the name, never the value
    as_json = json.loads(doctor(tmp_path, "--json", env={"TIEROPS_CLAUDE_BIN": str(exe),
                                                         "ANTHROPIC_API_KEY": SECRET}).stdout)
    assert [c["name"] for c in as_json][:3] == ["settings", "state dir", "database"]
    assert set(as_json[0]) == {"name", "status", "detail"}


def test_doctor_changes_nothing(tmp_path):
    out = doctor(tmp_path)
    assert out.returncode == 1  # no CLI, no credentials here
    checks = lines_by_check(out.stdout)
    assert checks["state dir"][0] == "warn" and "does not exist yet" in checks["state dir"][1]
    assert checks["database"][0] == "warn" and "none yet" in checks["database"][1]
    assert not (tmp_path / "home").exists()
    assert checks["claude CLI"][0] == "fail" and "npm install -g @anthropic-ai/claude-code@2.1.197" in out.stdout
    assert checks["credentials"][0] == "fail"
    assert out.stderr.strip() == "tierops: warning: 3 check(s) failed: claude CLI, credentials, model tiers"
    # an existing database is not migrated or written by the doctor
    ingest(tmp_path)
    db = tmp_path / "home" / "tierops.db"
    before = db.stat().st_mtime_ns
    doctor(tmp_path)
    assert db.stat().st_mtime_ns == before


@pytest.mark.parametrize("change,status,text", [
    ({"drop_flag": "--json-schema"}, "fail", "lacks --json-schema"),
    ({"version": "2.0.1 (Claude Code)\n"}, "warn", "TierOps is tested with 2.1.197"),
])
def test_the_cli_check_names_what_is_wrong(tmp_path, change, status, text):
    exe = probe_cli(tmp_path / "bin", **change)
    out = doctor(tmp_path, env={"TIEROPS_CLAUDE_BIN": str(exe)})
    got = lines_by_check(out.stdout)["claude CLI"]
    assert got[0] == status and text in got[1], out.stdout


def test_database_problems_are_failures_with_what_to_do(tmp_path):
    ingest(tmp_path)
    db = tmp_path / "home" / "tierops.db"
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO migrations VALUES ('9999_from_the_future', '2030-01-01')")
    got = lines_by_check(doctor(tmp_path).stdout)["database"]
    assert got[0] == "fail" and "written by a newer TierOps" in got[1] and "9999_from_the_future" in got[1]
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM migrations WHERE name IN ('9999_from_the_future', '0003_cli_process')")
    got = lines_by_check(doctor(tmp_path).stdout)["database"]
    assert got[0] == "warn" and "1 migration(s) pending (0003_cli_process)" in got[1]
    db.unlink()
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    db.write_bytes(b"this is not sqlite" * 100)
    out = doctor(tmp_path)
    got = lines_by_check(out.stdout)["database"]
    assert got[0] == "fail" and "not a database" in got[1] and "Traceback" not in out.stderr


def test_an_invalid_setting_fails_the_settings_check_in_one_line(tmp_path):
    out = doctor(tmp_path, env={"TIEROPS_INTERVAL": "often", "TIEROPS_INTERVALL": "5"})
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stdout.splitlines() == [
        "fail  settings  TIEROPS_INTERVAL: Input should be a valid integer, unable to parse string as an integer "
        "(got 'often'); fix the variable (environment or .env)"]
    out = doctor(tmp_path, env={"TIEROPS_INTERVALL": "5"})
    got = lines_by_check(out.stdout)["settings"]
    assert got[0] == "warn" and "did you mean TIEROPS_INTERVAL?" in got[1]


def test_prompts_and_schema_are_checked(tmp_path):
    out = doctor(tmp_path, env={"TIEROPS_TIER2_PROMPT_FILE": str(tmp_path / "missing.md"),
                                "TIEROPS_SCHEMA_FILE": str(tmp_path / "nope.json")})
    checks = lines_by_check(out.stdout)
    assert checks["prompts"][0] == "fail" and f"tier 2 {tmp_path / 'missing.md'}" in checks["prompts"][1]
    assert checks["schema"][0] == "fail" and "nope.json" in checks["schema"][1]


def test_the_clock_check_catches_a_clock_that_went_backwards():
    now = 1_795_000_000.0  # 2026-11-18
    assert check_clock(None, lambda: now).status == "ok"
    assert check_clock("2026-11-18T09:00:00Z", lambda: now).status == "ok"
    ahead = check_clock("2027-01-01T00:00:00.000Z", lambda: now)
    assert ahead.status == "fail" and "went backwards" in ahead.detail
    assert check_clock(None, lambda: 0.0).status == "fail"  # 1970
    assert check_clock("not a time", lambda: now).status == "ok"


def test_the_checks_file_is_validated_and_makes_a_missing_cli_a_warning(tmp_path):
    """A usable checks file is ok (with its size); a broken one fails with the first
    problem; with a checks file, a missing CLI and credentials are warnings (tier 0 still runs)."""
    good = tmp_path / "checks.yaml"
    good.write_text("interval: 2m\nchecks:\n  - {name: port, service: db, tcp: '127.0.0.1:5432'}\n")
    env = {"TIEROPS_CHECKS": str(good), "TIEROPS_CLAUDE_BIN": str(tmp_path / "no-claude")}
    out = doctor(tmp_path, env=env)
    found = lines_by_check(out.stdout)
    assert found["checks file"][0] == "ok" and "1 check(s), 0 host(s), every 120 s" in found["checks file"][1]
    assert found["claude CLI"][0] == "warn" and "tier 0" in found["claude CLI"][1]
    assert found["credentials"][0] == "warn"
    assert out.returncode == 0, out.stdout + out.stderr

    bad = tmp_path / "bad.yaml"
    bad.write_text("checks:\n  - {name: port, service: db, tpc: '127.0.0.1:5432'}\n")
    out = doctor(tmp_path, env={**env, "TIEROPS_CHECKS": str(bad)})
    status, detail = lines_by_check(out.stdout)["checks file"]
    assert status == "fail" and f"{bad}:2:" in detail and "tierops checks validate" in detail
    assert out.returncode == 1


# -- what `serve --checks FILE` will run, the model tiers, --online ---------------------------------

def test_doctor_checks_judges_the_file_serve_will_run(tmp_path):
    """`doctor --checks FILE`: every FILE:LINE problem; a good file starts cycles at tier 0 on its
    interval (not "tier 1", which is what runs without one)."""
    exe = probe_cli(tmp_path / "bin")
    env = {"TIEROPS_CLAUDE_BIN": str(exe), "ANTHROPIC_API_KEY": SECRET}
    status, detail = lines_by_check(doctor(tmp_path, env=env).stdout)["checks file"]
    assert status == "skip" and "scheduled cycles start at tier 1, a billed language-model run every hour" in detail

    good = tmp_path / "checks.yaml"
    good.write_text("interval: 5m\nchecks:\n  - {name: self, service: t, http: '${TIEROPS_SERVE_URL}/healthz'}\n")
    out = doctor(tmp_path, "--checks", str(good), env=env)
    found = lines_by_check(out.stdout)
    assert found["checks file"][0] == "ok"
    assert "scheduled cycles start at tier 0 (the probe, no language model, $0) every 5 minutes (the file's " \
           "interval)" in found["checks file"][1]
    assert found["model tiers"] == ("ok", "an incident can escalate to tiers 1 to 3 (claude CLI found, credentials "
                                          "set, TIEROPS_MAX_TIER=3); tier 3 waits for an operator's approval")

    bad = tmp_path / "bad.yaml"
    bad.write_text("checks:\n  - {name: a, service: db, tpc: '127.0.0.1:5432'}\n"
                   "  - {name: b, service: db, tcp: '${TIEROPS_SERVE_PROT}'}\n")
    out = doctor(tmp_path, "--checks", str(bad), env=env)
    status, detail = lines_by_check(out.stdout)["checks file"]
    assert status == "fail" and out.returncode == 1
    assert f"{bad}:2: checks[0]" in detail and f"{bad}:3: checks[1].tcp: unknown variable ${{TIEROPS_SERVE_PROT}}" \
        in detail and "tierops checks validate" in detail


def test_model_tiers_say_what_an_incident_can_reach(tmp_path):
    checks = tmp_path / "checks.yaml"
    checks.write_text("checks:\n  - {name: port, service: db, tcp: '127.0.0.1:5432'}\n")
    env = {"TIEROPS_CHECKS": str(checks), "TIEROPS_CLAUDE_BIN": str(tmp_path / "no-claude")}
    status, detail = lines_by_check(doctor(tmp_path, env=env).stdout)["model tiers"]
    assert status == "warn" and detail.startswith("an incident can reach none of tiers 1 to 3: no claude CLI")
    assert "no credentials" in detail and "tier 0 still runs and a new incident flags a person instead" in detail
    out = doctor(tmp_path, env={**env, "TIEROPS_MAX_TIER": "0"})
    assert lines_by_check(out.stdout)["model tiers"] == ("ok", "none by design (TIEROPS_MAX_TIER=0): tier 0 alone; a "
                                                              "failing check flags a person (needs attention)")
    exe = probe_cli(tmp_path / "bin")
    out = doctor(tmp_path, env={**env, "TIEROPS_CLAUDE_BIN": str(exe), "ANTHROPIC_API_KEY": SECRET,
                                "TIEROPS_TIER2_APPROVAL": "manual", "TIEROPS_DAILY_BUDGET_USD": "5"})
    status, detail = lines_by_check(out.stdout)["model tiers"]
    assert status == "ok" and detail.endswith("; tiers 2 and 3 wait for an operator's approval; at most $5.00 a day "
                                              "(TIEROPS_DAILY_BUDGET_USD)")


def test_doctor_shows_a_pause_of_the_model_tiers(tmp_path):
    """The pause a rejected key left (app/supervisor/credentials.py), read without writing."""
    ingest(tmp_path)
    exe = probe_cli(tmp_path / "bin")
    env = {"TIEROPS_CLAUDE_BIN": str(exe), "ANTHROPIC_API_KEY": SECRET}
    pause = subprocess.run([sys.executable, "-c", PAUSE_NOW], capture_output=True, text=True, timeout=60, cwd=REPO,
                           env={**{k: v for k, v in os.environ.items() if not k.startswith(("TIEROPS_", "ANTHROPIC_"))},
                                **env, "PYTHONPATH": str(REPO), "TIEROPS_HOME": str(tmp_path / "home")})
    assert pause.returncode == 0, pause.stderr
    db = tmp_path / "home" / "tierops.db"
    before = db.stat().st_mtime_ns
    status, detail = lines_by_check(doctor(tmp_path, env=env).stdout)["model tiers"]
    assert status == "fail" and "model tiers paused: the API rejected the credentials (HTTP 401 " \
                                "authentication_failed)" in detail
    status, detail = lines_by_check(doctor(tmp_path, env={**env, "ANTHROPIC_API_KEY": SECRET + "-new"}).stdout)[
        "model tiers"]
    assert status == "ok" and "(the API rejected other credentials) lifts at the next cycle" in detail
    assert db.stat().st_mtime_ns == before  # the doctor lifted nothing


PAUSE_NOW = """
import asyncio
from app.config import get_settings
from app.store.db import Database
from app.supervisor.credentials import cli_home, pause_model_tiers
from app.supervisor.launch import child_env

async def main():
    settings = get_settings()
    db = await Database.open(settings.db_path)
    home = cli_home(settings)
    await pause_model_tiers(db, "HTTP 401 authentication_failed", child_env(home, settings.allowed_env()), home, 1)
    await db.close()

asyncio.run(main())
"""


def test_doctor_online_proves_the_key_against_the_api(tmp_path):
    exe = probe_cli(tmp_path / "bin")
    with FakeAnthropic(keys={SECRET}) as fake:
        env = {"TIEROPS_CLAUDE_BIN": str(exe), "ANTHROPIC_API_KEY": SECRET, "ANTHROPIC_BASE_URL": fake.url}
        out = doctor(tmp_path, "--online", env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        assert lines_by_check(out.stdout)["online"] == (
            "ok", f"ANTHROPIC_API_KEY accepted by {fake.url}: POST /v1/messages/count_tokens answered 200 (a token "
                  "count: no model ran, nothing billed)")
        [req] = [r for r in fake.requests if r["kind"] == "count_tokens"]
        assert req["headers"]["x-api-key"] == SECRET and req["body"]["messages"]

        out = doctor(tmp_path, "--online", env={**env, "ANTHROPIC_API_KEY": "sk-ant-wrong-wrong-wrong"})
        status, detail = lines_by_check(out.stdout)["online"]
        assert status == "fail" and out.returncode == 1
        assert detail.startswith(f"ANTHROPIC_API_KEY rejected by {fake.url}: HTTP 401 authentication_error: "
                                 "invalid x-api-key; set valid credentials")
        assert "sk-ant-wrong" not in out.stdout + out.stderr and SECRET not in out.stdout + out.stderr

        # the CLI's own rule: an OAuth token as a bearer token when no API key is set
        oauth = {k: v for k, v in env.items() if k != "ANTHROPIC_API_KEY"}
        out = doctor(tmp_path, "--online", env={**oauth, "CLAUDE_CODE_OAUTH_TOKEN": SECRET})
        assert lines_by_check(out.stdout)["online"][1].startswith("CLAUDE_CODE_OAUTH_TOKEN accepted by ")
    assert "online" not in lines_by_check(doctor(tmp_path, env=env).stdout)  # only when asked


def test_doctor_online_names_timeouts_and_unreachable_apis(tmp_path):
    settings = Settings(home=tmp_path / "home")
    with socket.socket() as silent:  # accepts, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        got = check_online(settings, {"ANTHROPIC_API_KEY": SECRET, "ANTHROPIC_BASE_URL": url}, timeout=0.5)
    assert got.status == "fail" and got.detail.startswith(f"no answer from {url} within 0.5 s; check "
                                                          "ANTHROPIC_BASE_URL")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"  # bound, not listening: refused
    got = check_online(settings, {"ANTHROPIC_API_KEY": SECRET, "ANTHROPIC_BASE_URL": url}, timeout=2)
    assert got.status == "fail" and got.detail.startswith(f"cannot reach {url}: ") and "Connection refused" in got.detail
    got = check_online(settings, {"ANTHROPIC_BASE_URL": url})
    assert got.status == "skip"
    assert SECRET not in got.detail


def test_notification_settings_are_checked_without_showing_a_url(tmp_path):
    secret = "doctor-hook-token-55"
    env = {"TIEROPS_NOTIFY_URLS": f"pager=json://127.0.0.1:9/{secret}",
           "TIEROPS_NOTIFY_ROUTES": "[{name: page, match: {severity: critical}, to: [pager, nobody]}]"}
    checks = lines_by_check(doctor(tmp_path, env=env).stdout)
    status, detail = checks["notifications"]
    assert status == "warn" and "no URL carries the tag(s) nobody" in detail and "routes: page" in detail
    broken = lines_by_check(doctor(tmp_path, env={**env, "TIEROPS_NOTIFY_ROUTES": "[{name: page}]"}).stdout)
    assert broken["notifications"][0] == "fail" and "$[0].to: required" in broken["notifications"][1]
    quiet = lines_by_check(doctor(tmp_path, env={**env, "TIEROPS_NOTIFY_QUIET_HOURS": "7-7"}).stdout)
    assert quiet["notifications"][0] == "fail" and "0-24 for all day" in quiet["notifications"][1]
    for c in (checks, broken, quiet):
        assert secret not in str(c)
