"""The `tierops` command, run as a real subprocess against a real SQLite file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import fixture_stream

TIEROPS = [sys.executable, "-m", "app.cli"]


def run(*args: str, db: Path | None = None, stdin: bytes | None = None, env: dict | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [*TIEROPS, *args] + (["--db", str(db)] if db else [])
    full_env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), **(env or {})}
    return subprocess.run(cmd, input=stdin, capture_output=True, env=full_env, cwd=cwd, timeout=60)


def test_ingest_json_report_fields(tmp_path):
    db = tmp_path / "t.db"
    out = run("ingest", str(fixture_stream("c_structured")), "--json", "--tier", "1", db=db)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    for key in ("session_id", "status", "is_error", "result_subtype", "source", "validation", "events", "memories",
                "escalation", "services_checked", "cost_usd", "num_turns", "activity_count"):
        assert key in report
    assert report["session_id"] == "dda04dfa-d3af-40df-bdc8-b3c9edee4b43"
    assert report["validation"] == {"valid": True, "errors": []}
    assert report["activity_count"] == 7 and report["tier"] == 1
    assert report["already_stored"] is False
    again = json.loads(run("ingest", str(fixture_stream("c_structured")), "--json", db=db).stdout)
    assert again["already_stored"] is True and again["id"] == report["id"]


def test_ingest_from_stdin_and_text_report(tmp_path):
    out = run("ingest", "-", db=tmp_path / "t.db", stdin=fixture_stream("d_invalid_structured").read_bytes())
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    assert "failed" in text and "$.events[0].level" in text and "error_max_structured_output_retries" in text


def test_listing_commands_json(tmp_path):
    db = tmp_path / "t.db"
    for scenario in ("c_structured", "f_api_500", "d_text_only"):
        assert run("ingest", str(fixture_stream(scenario)), "--tier", "2", db=db).returncode == 0
    sessions = json.loads(run("sessions", "--json", db=db).stdout)
    assert [s["status"] for s in sessions] == ["completed", "failed", "completed"]  # newest first
    for key in ("id", "session_id", "tier", "model", "status", "degraded", "source", "parent_session_id", "cost_usd"):
        assert key in sessions[0]
    assert [s["degraded"] for s in sessions] == [True, False, False]
    events = json.loads(run("events", "--json", "--level", "info", db=db).stdout)
    assert [(e["level"], e["service"], e["message"]) for e in events] == [("info", "nginx", "nginx active (running)")]
    assert events[0]["session_id"] == "dda04dfa-d3af-40df-bdc8-b3c9edee4b43"
    assert json.loads(run("events", "--json", "--level", "critical", db=db).stdout) == []
    memories = json.loads(run("memories", "--json", db=db).stdout)
    assert [(m["service"], m["category"], m["value"], m["confidence"], m["active"]) for m in memories] == [
        (None, "web-1.disk", "71% used on 2026-11-22", 0.7, True)]
    assert "no sessions stored" in run("sessions", db=tmp_path / "empty.db").stdout.decode()


def test_tierops_db_env_and_default_path(tmp_path):
    env_db = tmp_path / "env.db"
    assert run("ingest", str(fixture_stream("a_plain")), env={"TIEROPS_DB": str(env_db)}).returncode == 0
    assert env_db.exists()
    env = {k: v for k, v in os.environ.items() if k != "TIEROPS_DB"}
    out = subprocess.run([*TIEROPS, "ingest", str(fixture_stream("a_plain"))], cwd=tmp_path, capture_output=True,
                         env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "state" / "tierops.db").exists()


@pytest.mark.parametrize("setup,args,message", [
    (None, ["ingest", "{tmp}/missing.jsonl"], "stream file not found"),
    (None, ["ingest", "{tmp}"], "is a directory"),
    ("schema_missing", ["ingest", "{fixture}", "--schema", "{tmp}/nope.json"], "schema file not found"),
    ("schema_not_json", ["ingest", "{fixture}", "--schema", "{tmp}/s.json"], "is not valid JSON"),
    ("schema_invalid", ["ingest", "{fixture}", "--schema", "{tmp}/s.json"], "not a valid JSON Schema"),
])
def test_bad_input_is_one_line_exit_2_and_loses_nothing(tmp_path, setup, args, message):
    db = tmp_path / "t.db"
    assert run("ingest", str(fixture_stream("c_structured")), db=db).returncode == 0
    if setup == "schema_not_json":
        (tmp_path / "s.json").write_text("{nope")
    elif setup == "schema_invalid":
        (tmp_path / "s.json").write_text('{"type": "bogus"}')
    argv = [a.format(tmp=tmp_path, fixture=fixture_stream("a_plain")) for a in args]
    out = run(*argv, db=db)
    assert out.returncode == 2
    err = out.stderr.decode().strip()
    assert err.startswith("tierops: error:") and message in err and len(err.splitlines()) == 1
    sessions = json.loads(run("sessions", "--json", db=db).stdout)
    assert len(sessions) == 1 and sessions[0]["status"] == "completed"


def test_unusable_database_is_exit_2(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not a database" * 200)
    out = run("sessions", db=bad)
    assert out.returncode == 2 and "cannot open database" in out.stderr.decode()
