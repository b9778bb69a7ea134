"""`tierops doctor` (issue #10): one line per check, exit 1 if any fails, changes nothing.

Run as a real subprocess; the CLI it probes is a small executable answering ``--version`` and
``--help`` with what the real 2.1.197 printed (tests/fixtures/claude-code/2.1.197).
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.doctor import REQUIRED_FLAGS, check_clock
from tests.fakes.claude_control import FIXTURES, REPO
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
    return subprocess.run([sys.executable, "-m", "app", "doctor", *args], capture_output=True, text=True,
                          env=full, cwd=tmp_path, timeout=120)


def lines_by_check(out: str) -> dict[str, tuple[str, str]]:
    found = {}
    for line in out.splitlines():
        status, rest = line.split(None, 1)
        for name in ("settings", "state dir", "database", "schema", "prompts", "claude CLI", "credentials",
                     "checks file", "disk", "clock"):
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
    assert len(out.stdout.splitlines()) == len(checks) == 10
    assert {name: status for name, (status, _) in checks.items()} == {
        "settings": "ok", "state dir": "ok", "database": "ok", "schema": "ok", "prompts": "ok",
        "claude CLI": "ok", "credentials": "ok", "checks file": "skip", "disk": "ok", "clock": "ok"}
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
    assert out.stderr.strip() == "tierops: warning: 2 check(s) failed: claude CLI, credentials"
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
    """Issue #12: a usable checks file is ok (with its size); a broken one fails with the first
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
