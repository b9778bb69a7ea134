"""`tierops run` and `tierops supervise`, run as real subprocesses against the fake CLI and a SQLite file."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli import forkserver
from tests.fakes import claude_control as cc
from tests.helpers import escalating, healthy, kill_leftovers, wait_gone

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]
TIEROPS = [sys.executable, "-m", "app.cli"]


def cli_env(tmp_path: Path, claude_bin: Path | str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIEROPS_")}
    env.update({
        "PYTHONPATH": str(REPO), "TIEROPS_CLAUDE_BIN": str(claude_bin),
        "TIEROPS_HOME": str(tmp_path / "state"), "TIEROPS_DB": str(tmp_path / "tierops.db"),
        "TIEROPS_KILL_GRACE": "1", "TIEROPS_TIER1_TIMEOUT": "30", "TIEROPS_TIER2_TIMEOUT": "30",
    })
    env.update(extra)
    return env


def tierops(tmp_path: Path, env: dict[str, str], *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return forkserver.run("app.cli", args, env=env, cwd=tmp_path, timeout=timeout, text=True)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start_tierops(tmp_path: Path, env: dict[str, str], *args: str, sigint_ignored: bool = False) -> subprocess.Popen:
    # sigint_ignored: started as a background job of a non-interactive shell is (CI, `cmd &`)
    return subprocess.Popen([*TIEROPS, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=tmp_path, preexec_fn=_ignore_sigint if sigint_ignored else None)


def wait_for_invocation(fake: cc.FakeClaude, proc: subprocess.Popen, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while not fake.invocations():
        if proc.poll() is not None or time.monotonic() > deadline:
            out, err = proc.communicate()
            raise AssertionError(f"the CLI never ran (exit {proc.returncode}): {out}\n{err}")
        time.sleep(0.05)
    return fake.invocations()[0]


def db_rows(tmp_path: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(tmp_path / "tierops.db") as conn:
        return conn.execute(sql).fetchall()


def test_run_json_prints_the_chain(tmp_path):
    sids = [cc.new_session_id(), cc.new_session_id()]
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(sids[0], escalating(), cost=0.02)},
        {"lines": cc.structured_stream(sids[1], healthy(), cost=0.03)},
    ])
    out = tierops(tmp_path, cli_env(tmp_path, fake.path), "run", "--json")
    assert out.returncode == 0, out.stderr
    chain = json.loads(out.stdout)
    assert isinstance(chain, list) and len(chain) == 2
    for s in chain:
        for key in ("session_id", "tier", "model", "status", "source", "attempts", "escalated_to", "cost_usd"):
            assert key in s
    first, second = chain
    assert (first["tier"], first["model"], first["status"], first["source"], first["attempts"]) == (
        1, "haiku", "completed", "structured_output", 1)
    assert first["escalated_to"] == second["id"] and second["escalated_to"] is None
    assert (second["tier"], second["model"]) == (2, "sonnet")
    assert [s["session_id"] for s in chain] == sids and len(fake.invocations()) == 2
    assert [s["cost_usd"] for s in chain] == [0.02, 0.03]
    assert (tmp_path / "state" / "sessions" / str(first["id"])).is_dir()
    assert (tmp_path / "state" / "home").is_dir()


def test_run_text_output(tmp_path):
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(sid, healthy(), cost=0.0125)}])
    out = tierops(tmp_path, cli_env(tmp_path, fake.path), "run", "--prompt", "only nginx")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"tier 1 (haiku) session 1 [{sid}]: completed, source structured_output, attempts 1, $0.0125",
        "chain: 1 session(s), $0.0125"]
    assert fake.last()["parsed"]["prompt"].endswith("\n\n## Operator request for this run\nonly nginx")


@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["terminal", "sigint-ignored"])
def test_run_refused_at_once_while_a_cycle_holds_the_lock(tmp_path, sigint_ignored):
    """The same when the whole test run started with SIGINT ignored (a background job
    of a non-interactive shell): the holder still stops on Ctrl-C through the loop's handler."""
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), healthy()), "mode": "hang", "after": 1}])
    env = cli_env(tmp_path, fake.path)
    holder = start_tierops(tmp_path, env, "run", sigint_ignored=sigint_ignored)
    try:
        inv = wait_for_invocation(fake, holder)
        started = time.monotonic()
        out = tierops(tmp_path, env, "run", "--json")
        elapsed = time.monotonic() - started
        assert out.returncode == 2, (out.stdout, out.stderr)
        assert elapsed < 5
        lines = out.stderr.splitlines()
        assert len(lines) == 1, out.stderr
        assert lines[0].startswith(f"tierops: error: a cycle is already running (pid {holder.pid}, "
                                   "manual cycle from tier 1, started ")
        assert out.stdout == "" and len(fake.invocations()) == 1
        # Ctrl-C on the holder: its session is recorded interrupted and its CLI is gone.
        holder.send_signal(signal.SIGINT)
        holder.communicate(timeout=15)
        assert wait_gone([inv["pid"]]) == []
        assert db_rows(tmp_path, "SELECT status FROM sessions") == [("interrupted",)]
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
        kill_leftovers(fake)


def test_run_with_missing_cli_exits_1_and_says_how_to_install(tmp_path):
    env = cli_env(tmp_path, tmp_path / "no" / "claude")
    out = tierops(tmp_path, env, "run")
    assert out.returncode == 1
    assert f"claude CLI not found: '{tmp_path / 'no' / 'claude'}'" in out.stdout
    assert "npm install -g @anthropic-ai/claude-code" in out.stdout and "TIEROPS_CLAUDE_BIN" in out.stdout
    assert "NEEDS HUMAN ATTENTION: tier 1 failed" in out.stdout
    as_json = tierops(tmp_path, env, "run", "--json")
    assert as_json.returncode == 1
    [s] = json.loads(as_json.stdout)
    assert s["status"] == "failed" and "claude CLI not found" in s["status_reason"]


def test_run_tier_above_max_tier_is_refused(tmp_path):
    out = tierops(tmp_path, cli_env(tmp_path, "claude", TIEROPS_MAX_TIER="2"), "run", "--tier", "3")
    assert out.returncode == 2
    assert out.stderr.strip() == "tierops: error: --tier 3 is above TIEROPS_MAX_TIER=2"


def test_supervise_once_runs_one_cycle(tmp_path):
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(sid, healthy())}])
    out = tierops(tmp_path, cli_env(tmp_path, fake.path), "supervise", "--once")
    assert out.returncode == 0, out.stderr
    assert len(fake.invocations()) == 1
    assert f"tier 1 (haiku) session 1 [{sid}]: completed" in out.stdout
    assert db_rows(tmp_path, "SELECT tier, trigger, status FROM sessions") == [(1, "schedule", "completed")]


def test_supervise_marks_sessions_left_running_as_interrupted(tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    env = cli_env(tmp_path, fake.path)
    assert tierops(tmp_path, env, "supervise", "--once").returncode == 0
    with sqlite3.connect(tmp_path / "tierops.db") as conn:  # as if a supervisor was killed mid-session
        conn.execute("UPDATE sessions SET status = 'running'")
    out = tierops(tmp_path, env, "supervise", "--once")
    assert out.returncode == 0, out.stderr
    assert "marked 1 session(s) left running by a stopped supervisor as interrupted" in out.stdout
    assert db_rows(tmp_path, "SELECT status FROM sessions ORDER BY id") == [("interrupted",), ("completed",)]


def test_run_with_missing_prompt_file_is_one_error_line(tmp_path):
    missing = tmp_path / "missing-tier1.md"
    env = cli_env(tmp_path, "claude", TIEROPS_TIER1_PROMPT_FILE=str(missing))
    out = tierops(tmp_path, env, "run")
    assert (out.returncode, out.stderr) == (
        2, f"tierops: error: cannot read the tier 1 prompt file {missing}: No such file or directory; "
           "set TIEROPS_TIER1_PROMPT_FILE\n")


def test_sigterm_to_supervise_leaves_no_cli_behind(tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), healthy()), "mode": "hang", "after": 1}])
    sup = start_tierops(tmp_path, cli_env(tmp_path, fake.path), "supervise", "--once")
    try:
        inv = wait_for_invocation(fake, sup)
        sup.send_signal(signal.SIGTERM)
        sup.communicate(timeout=15)
        left = wait_gone([inv["pid"]], timeout=3)
        assert left == [], f"claude (pid {inv['pid']}) outlived the supervisor"
        assert db_rows(tmp_path, "SELECT status FROM sessions") == [("interrupted",)]
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.communicate()
        kill_leftovers(fake)
