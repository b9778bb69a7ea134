"""The log lines of cycles, sessions, escalations, attention, the sweep and storage retries.

``tierops --log-format json run`` runs as a real subprocess against the fake CLI: its stderr is
one JSON object per line, and the cycle's and sessions' lines carry their ids as fields. The
other facts are produced in process with the real supervisor, recorder and SQLite file, and read
from the records (``caplog``): one line per fact, with its fields.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.recorder import RecorderOptions, SessionRecorder
from app.store.db import Database
from app.supervisor.scheduler import Supervisor
from app.vocab import Trigger
from tests.fakes import claude_control as cc
from tests.helpers import escalating, healthy
from tests.supervisor.test_cli_run import cli_env

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]
API_KEY = "sk-ant-api03-" + "Qw3Er5Ty7Ui9Op1As2Df4Gh6Jk8" + "ZxCvBnMmLlKk"
TOKEN = "tierops-dash-" + "4c3b2a1908f7e6d5"


def records(caplog: pytest.LogCaptureFixture, logger: str, start: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger and r.getMessage().startswith(start)]


def fields(record: logging.LogRecord, *names: str) -> tuple:
    return tuple(getattr(record, n, None) for n in names)


def test_run_logs_json_lines_with_cycle_session_and_chain_ids(tmp_path):
    """cycle start → session 1 start/end → escalation → session 2 start/end → cycle end, once each;
    no secret in any line, although the tier 1 model is a key-shaped string (it is logged as a
    field) and the dashboard token is in the path of the CLI's binary (logged by the runner)."""
    sids = [cc.new_session_id(), cc.new_session_id()]
    fake = cc.make_fake_claude(tmp_path / f"bin-{TOKEN}", [
        {"lines": cc.structured_stream(sids[0], escalating("disk almost full on web-1"), cost=0.02)},
        {"lines": cc.structured_stream(sids[1], healthy(), cost=0.03)},
    ])
    env = cli_env(tmp_path, fake.path, TIEROPS_TOKEN=TOKEN, TIEROPS_TIER1_MODEL=API_KEY)
    out = subprocess.run([sys.executable, "-m", "app", "--log-format", "json", "run", "--prompt", f"use {API_KEY}"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=45)
    assert out.returncode == 0, out.stderr
    assert API_KEY not in out.stderr and TOKEN not in out.stderr
    lines = [json.loads(line) for line in out.stderr.splitlines()]  # every line is one JSON object
    assert all({"ts", "level", "logger", "message"} <= set(e) for e in lines)

    def find(logger: str, start: str) -> list[dict]:
        return [e for e in lines if e["logger"] == logger and e["message"].startswith(start)]

    [cycle_start] = find("app.supervisor.scheduler", "cycle 1 started")
    assert (cycle_start["level"], cycle_start["cycle"], cycle_start["trigger"], cycle_start["tier"]) == (
        "info", 1, "manual", 1)
    started = find("app.supervisor.session", "session ")
    assert [(e["session"], e["chain"], e["tier"], e["trigger"]) for e in started] == [
        (1, 1, 1, "manual"), (2, 1, 2, "escalation")]
    assert started[0]["model"] == "[REDACTED]" and started[1]["model"] == "sonnet"
    assert "parent" not in started[0] and started[1]["parent"] == 1
    assert started[1]["message"] == "session 2 started: tier 2 (sonnet), trigger escalation, parent session 1"
    [escalation] = find("app.supervisor.chain", "session 1 escalated")
    assert escalation["message"] == "session 1 escalated to tier 2: disk almost full on web-1"
    assert (escalation["session"], escalation["chain"], escalation["tier"], escalation["to_tier"]) == (1, 1, 1, 2)
    finished = find("app.engine.recorder", "session ")
    assert [(e["session"], e["chain"], e["tier"], e["status"], e["attempts"], e["cost_usd"], e["source"])
            for e in finished] == [(1, 1, 1, "completed", 1, 0.02, "structured_output"),
                                   (2, 1, 2, "completed", 1, 0.03, "structured_output")]
    assert finished[0]["message"].startswith("session 1 finished: completed (source structured_output, ")
    assert finished[0]["message"].endswith(", 1 attempt(s), $0.0200)")
    [cycle_end] = find("app.supervisor.scheduler", "cycle 1 finished")
    assert (cycle_end["status"], cycle_end["chain"], cycle_end["sessions"], cycle_end["cost_usd"]) == (
        "completed", 1, 2, 0.05)
    assert cycle_end["duration_s"] > 0 and cycle_end["message"].startswith("cycle 1 finished: completed, 2 session(s), $0.0500, ")
    order = [cycle_start, started[0], finished[0], escalation, started[1], finished[1], cycle_end]
    assert [lines.index(e) for e in order] == sorted(lines.index(e) for e in order)


async def test_a_failed_tier_logs_needs_attention_once(db, make_settings, validator, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), escalating()), "mode": "crash", "after": 3}])
    chain = await Supervisor(db, make_settings(fake), validator).run_cycle()
    assert [s["status"] for s in chain] == ["failed"]
    [attention] = [r for r in caplog.records if "needs attention" in r.getMessage()]
    assert attention.levelno == logging.WARNING and attention.name == "app.supervisor.chain"
    assert attention.getMessage().startswith("session 1 needs attention: tier 1 failed: stream ended without a result")
    assert fields(attention, "session", "chain", "tier") == (1, 1, 1)
    [end] = records(caplog, "app.engine.recorder", "session 1 finished: failed — ")
    assert fields(end, "status", "chain", "tier") == ("failed", 1, 1)
    [cycle] = records(caplog, "app.supervisor.scheduler", "cycle 1 finished")
    assert fields(cycle, "status", "sessions", "chain") == ("needs_attention", 1, 1)
    assert not records(caplog, "app.supervisor.chain", "session 1 escalated")


async def test_the_sweep_logs_each_session_and_how_many(db, make_settings, validator, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    left = [await SessionRecorder.begin(db, validator, tier=1, trigger=Trigger.SCHEDULE) for _ in range(2)]
    sup = Supervisor(db, make_settings(None), validator)
    assert await sup.recover_interrupted() == 2
    marked = records(caplog, "app.supervisor.sweep", "session ")
    assert [fields(r, "session", "status") for r in marked] == [(rec.session_pk, "interrupted") for rec in left]
    assert all(r.levelno == logging.WARNING for r in marked)
    [sweep] = records(caplog, "app.supervisor.sweep", "sweep ")
    assert sweep.getMessage() == "sweep (found at restart): 2 session(s) left running marked interrupted"
    assert (sweep.levelno, fields(sweep, "count")) == (logging.INFO, (2,))
    caplog.clear()
    assert await sup.recover_interrupted() == 0
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]  # nothing to say: nothing said


async def test_a_failed_scheduled_cycle_is_logged_once(db, make_settings, validator, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    sup = Supervisor(db, make_settings(None, tier1_prompt_file=tmp_path / "missing.md"), validator)
    await sup.run_forever(cycles=1)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [(r.getMessage(), fields(r, "cycle", "trigger")) for r in errors] == [
        ("scheduled cycle failed", (1, "schedule"))]
    assert "cannot read the tier 1 prompt file" in (errors[0].exc_text or "")
    assert len(records(caplog, "app.supervisor.scheduler", "cycle 1 started")) == 1
    assert not records(caplog, "app.supervisor.scheduler", "cycle 1 finished")


async def test_storage_retries_are_logged_with_attempt_and_backoff(tmp_path, validator, caplog):
    caplog.set_level(logging.INFO)
    db = await Database.open(tmp_path / "faults.db", busy_timeout_ms=30)
    try:
        rec = await SessionRecorder.begin(db, validator, RecorderOptions(storage_retry_limit=30), tier=2)
        rec.log_context["chain"] = 9
        locker = sqlite3.connect(tmp_path / "faults.db", isolation_level=None, timeout=5)
        locker.execute("BEGIN IMMEDIATE")  # another process holds the write lock: every write fails
        try:
            for i in range(5):
                await rec.feed(json.dumps({"type": "assistant", "message": {"content": [
                    {"type": "text", "text": f"line {i}"}]}}))
                rec._retry_at = 0  # the test does not wait out the backoff: the next flush writes again
                await rec.flush()
        finally:
            locker.execute("COMMIT")
            locker.close()
        await rec.flush(wait=True)
        await rec.finalize()
    finally:
        await db.close()
    failed = records(caplog, "app.engine.recorder", f"session {rec.session_pk}: storage write failed")
    # Five failed writes in a row: attempts 1, 2 and 4 are logged (1, 2, 4, 8…), not 3 and 5.
    assert [fields(r, "attempt") for r in failed] == [(1,), (2,), (4,)]
    assert all(r.levelno == logging.WARNING for r in failed)
    assert [r.backoff_s for r in failed] == [0.05, 0.1, 0.4]  # type: ignore[attr-defined]
    assert all(fields(r, "session", "chain", "tier") == (rec.session_pk, 9, 2) for r in failed)
    assert "retrying in 0.05 s" in failed[0].getMessage()
    [back] = records(caplog, "app.engine.recorder", f"session {rec.session_pk}: storage is back")
    assert fields(back, "attempt") == (5,)
    [end] = records(caplog, "app.engine.recorder", f"session {rec.session_pk} finished")
    assert fields(end, "lines", "chain") == (5, 9)
