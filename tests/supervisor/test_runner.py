"""app/supervisor/runner.py: what the child gets, process group, timeouts and kills, long lines.

The fake CLI runs as a real subprocess; its invocation log shows what the child really got
(argv, cwd, environment block, stdin, process group).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path

import pytest

from app import errors
from app.supervisor.chain import run_chain
from app.supervisor.launch import Launch, child_env
from app.supervisor.runner import STDERR_TAIL_BYTES, RunningProcess
from app.supervisor.session import SessionHandle
from app.tasks import spawn
from tests.fakes import claude_control as cc
from tests.fakes.fake_claude import huge_assistant_line
from tests.helpers import alive, healthy, kill_leftovers, run_session, wait_gone, wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("prompt", ["--version", "- list every service"])
async def test_leading_dash_prompt_reaches_the_fake_as_a_prompt(db, make_settings, validator, tmp_path, prompt):
    """On stdin a prompt is never read as an option: it arrives as written."""
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(sid, healthy())}])
    _result, row = await run_session(db, make_settings(fake), validator, prompt=prompt)
    [inv] = fake.invocations()
    assert not inv["version_probe"] and inv["usage_error"] is None
    assert (inv["parsed"]["prompt"], inv["parsed"]["prompt_from"]) == (prompt, "stdin")
    assert row["status"] == "completed" and row["source"] == "structured_output"


async def test_child_gets_the_prompt_on_stdin_own_group_session_cwd_and_exact_env(db, make_settings, validator,
                                                                                 tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-key")
    monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "1")
    monkeypatch.setenv("TIEROPS_TEST_ALLOWED", "yes")  # not a setting: only passed because allow-listed
    monkeypatch.setenv("SUPER_SECRET_TOKEN", "must-not-leak")
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(sid, healthy())}])
    settings = make_settings(fake, child_env_allow="TIEROPS_TEST_ALLOWED")
    result, row = await run_session(db, settings, validator)
    [inv] = fake.invocations()
    state = (tmp_path / "state").resolve()
    assert (inv["stdin_kind"], inv["stdin_prompt"]) == ("pipe", "Check the services.")  # written, then closed
    assert "Check the services." not in inv["argv"]
    assert inv["pgid"] == inv["pid"] and inv["sid"] == inv["pid"]  # its own session and process group
    assert inv["pgid"] != os.getpgrp()
    assert Path(inv["cwd"]).resolve() == state / "sessions" / str(result.pk)
    assert row["cwd"] == str(state / "sessions" / str(result.pk))
    expected = child_env(state / "home", ["TIEROPS_TEST_ALLOWED"])
    assert inv["env"] == expected
    assert inv["env"]["HOME"] == str(state / "home")
    assert inv["env"]["TIEROPS_TEST_ALLOWED"] == "yes" and "SUPER_SECRET_TOKEN" not in inv["env"]
    assert inv["argv"] == json.loads(row["argv"])[1:]  # the stored argv is the one that ran
    assert row["status"] == "completed" and row["session_id"] == sid


# --- binary lookup ---------------------------------------------------------------------------


@pytest.mark.parametrize("binary", ["{tmp}/no-such-claude", "claude-does-not-exist-here"])
async def test_missing_cli_fails_the_session_and_stops_the_chain(db, make_settings, validator, tmp_path, binary):
    settings = make_settings(binary.format(tmp=tmp_path))
    chain = await run_chain(db, settings, validator, None)
    assert len(chain) == 1
    [s] = chain
    assert s["status"] == "failed" and s["escalated_to"] is None
    assert "claude CLI not found" in s["status_reason"]
    assert "npm install -g @anthropic-ai/claude-code" in s["status_reason"]
    assert "TIEROPS_CLAUDE_BIN" in s["status_reason"]
    assert s["attention"].startswith("tier 1 failed: claude CLI not found")
    assert await db.fetchval("SELECT count(*) FROM sessions") == 1


# --- how a run can end -----------------------------------------------------------------------

async def test_crash_mid_stream_is_a_failure_with_exit_code(db, make_settings, validator, tmp_path):
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(sid, healthy()), "mode": "crash", "after": 2, "partial_line": '{"type":"ass',
         "stderr": "fatal: segfault in tool runner\n"}])
    result, row = await run_session(db, make_settings(fake), validator)
    assert row["status"] == "failed" and row["exit_code"] == 139
    assert "without a result line" in row["status_reason"] and "exit code 139" in row["status_reason"]
    assert "segfault in tool runner" in row["stderr_tail"]
    assert row["attempts"] == 1 and len(fake.invocations()) == 1  # a failure is not resumed
    # the two complete lines are stored; the partial line too, verbatim, as whatever it parses to
    assert await db.fetchval("SELECT count(*) FROM activity WHERE session_pk = ? AND seq <= 2", (result.pk,)) == 2


async def test_exit_without_result_line(db, make_settings, validator, tmp_path):
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(sid, healthy()), "mode": "no_result"}])
    _result, row = await run_session(db, make_settings(fake), validator)
    assert row["status"] == "failed" and row["exit_code"] == 1
    assert row["status_reason"] == ("stream ended without a result line (the process died, was killed or timed out)"
                                    "; exit code 1")
    assert row["line_count"] == len(cc.structured_stream(sid, healthy())) - 1
    assert len(fake.invocations()) == 1


@pytest.mark.parametrize("ignore_sigterm", [False, True])
async def test_hang_times_out_and_leaves_no_process(db, make_settings, validator, tmp_path, ignore_sigterm):
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(sid, healthy()), "mode": "hang", "after": 1, "spawn_child": True,
         "ignore_sigterm": ignore_sigterm}])
    settings = make_settings(fake, tier1_timeout=1, kill_grace=1)
    started = time.monotonic()
    try:
        _result, row = await run_session(db, settings, validator)
        elapsed = time.monotonic() - started
        [inv] = fake.invocations()
        assert wait_gone([inv["pid"], inv["child_pid"]]) == []
        assert row["status"] == "failed"
        assert row["status_reason"] == "timed out after 1 s; the process group was killed"
        assert row["line_count"] == 1
        if ignore_sigterm:
            assert row["exit_code"] == -9 and elapsed >= 1.9  # SIGTERM ignored: SIGKILL after kill_grace
        else:
            assert row["exit_code"] == -15
        assert elapsed < 8
        assert len(fake.invocations()) == 1
    finally:
        kill_leftovers(fake)


async def test_grandchild_holding_stdout_does_not_keep_a_finished_session_open(db, make_settings, validator, tmp_path):
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(sid, healthy()), "spawn_child": True}])
    # EOF_GRACE is 2 s: a finished CLI whose helper keeps stdout open is done well within 4 s.
    settings = make_settings(fake, tier1_timeout=4)
    started = time.monotonic()
    try:
        _result, row = await run_session(db, settings, validator)
        elapsed = time.monotonic() - started
        [inv] = fake.invocations()
        assert wait_gone([inv["child_pid"]]) == []  # the helper is killed in any case
        assert (row["status"], row["status_reason"]) == ("completed", None)
        assert row["exit_code"] == 0 and not row["degraded"]
        assert elapsed < 3.8
    finally:
        kill_leftovers(fake)


async def test_20_mib_line_is_stored_whole_as_one_row(db, make_settings, validator, tmp_path):
    sid = cc.new_session_id()
    size = 20 * 1024 * 1024
    lines = cc.structured_stream(sid, healthy())
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": lines, "mode": "huge_line", "after": 1, "size": size}])
    result, row = await run_session(db, make_settings(fake), validator)
    assert row["status"] == "completed" and row["source"] == "structured_output"
    assert row["line_count"] == len(lines) + 1
    rows = await db.fetchall("SELECT seq, type, length(raw) AS n FROM activity WHERE session_pk = ? ORDER BY seq",
                             (result.pk,))
    assert [r["seq"] for r in rows] == list(range(1, len(lines) + 2))
    huge = rows[1]
    assert huge["type"] == "assistant"
    assert huge["n"] == len(huge_assistant_line(sid, size))
    raw = await db.fetchval("SELECT raw FROM activity WHERE session_pk = ? AND seq = 2", (result.pk,))
    text = json.loads(raw)["message"]["content"][0]["text"]
    assert len(text) == size and text.count("x") == size


async def test_stderr_tail_is_stored_on_the_session(db, make_settings, validator, tmp_path):
    sid = cc.new_session_id()
    noise = "".join(f"debug line {i:06d}\n" for i in range(10_000))  # ~190 KB
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(sid, healthy()), "stderr": noise + "LAST STDERR LINE\n"}])
    _result, row = await run_session(db, make_settings(fake), validator)
    assert row["status"] == "completed"
    tail = row["stderr_tail"]
    assert tail.endswith("debug line 009999\nLAST STDERR LINE\n")
    assert STDERR_TAIL_BYTES // 2 <= len(tail) <= STDERR_TAIL_BYTES + 8192  # a bounded tail, not all 190 KB


# --- stop ------------------------------------------------------------------------------------

async def test_running_process_stop_kills_the_group(tmp_path):
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(sid, healthy()), "mode": "hang", "after": 2, "spawn_child": True}])
    argv = [str(fake.path), "-p", "x", "--output-format", "stream-json", "--verbose"]
    proc = RunningProcess(Launch(argv, tmp_path, child_env(tmp_path / "home", []), timeout=30))
    got: list[bytes] = []

    async def sink(batch: list[bytes]) -> None:
        got.extend(batch)

    task = asyncio.create_task(proc.run(sink, kill_grace=1))
    try:
        await wait_until(lambda: len(got) >= 2, what="two lines")
        proc.stop()
        outcome = await asyncio.wait_for(task, 10)
        [inv] = fake.invocations()
        assert outcome.stopped and not outcome.timed_out and outcome.exit_code == -15
        assert inv["pid"] in outcome.killed_pids
        assert wait_gone([inv["pid"], inv["child_pid"]]) == []
        assert [json.loads(x)["type"] for x in got] == ["system", "assistant"]
    finally:
        kill_leftovers(fake)


async def test_stop_marks_the_session_interrupted(db, make_settings, validator, tmp_path):
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(sid, healthy()), "mode": "hang", "after": 1, "ignore_sigterm": True}])
    handle = SessionHandle()
    task = asyncio.create_task(run_session(db, make_settings(fake, kill_grace=1), validator, handle=handle))
    try:
        await wait_until(lambda: fake.invocations() and handle.process and handle.process.pid, what="the child")
        handle.process.stop()
        _result, row = await asyncio.wait_for(task, 10)
        [inv] = fake.invocations()
        assert row["status"] == "interrupted" and row["status_reason"] == "stopped by an operator"
        assert row["exit_code"] == -9  # SIGTERM ignored, SIGKILL after kill_grace
        assert not alive(inv["pid"])
        assert len(fake.invocations()) == 1  # an interrupted session is not resumed
    finally:
        kill_leftovers(fake)


# --- errors, logging, background tasks -------------------------------------------------------


async def test_unstartable_argv_raises_the_shared_cli_error(tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": []}])
    proc = RunningProcess(Launch([str(fake.path), "-p", "nul\0byte"], tmp_path, child_env(tmp_path, []), timeout=5))

    async def sink(batch: list[bytes]) -> None:
        pass

    with pytest.raises(errors.CLIError, match="cannot start the CLI"):
        await proc.run(sink, kill_grace=1)
    assert fake.invocations() == []


async def test_spawn_and_exit_are_logged_without_prompt_or_env_values(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-never-in-a-log")
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(sid, healthy())}],
                               check_argv=False)
    prompt = "PROMPT-TEXT-NEVER-LOGGED"
    argv = [str(fake.path), "-p", prompt, "--output-format", "stream-json", "--verbose"]
    proc = RunningProcess(Launch(argv, tmp_path, child_env(tmp_path / "home", []), timeout=30))
    got: list[bytes] = []

    async def sink(batch: list[bytes]) -> None:
        got.extend(batch)

    caplog.set_level(logging.DEBUG)
    outcome = await proc.run(sink, kill_grace=1)
    assert outcome.exit_code == 0 and len(got) == len(cc.structured_stream(sid, healthy()))
    mine = [r for r in caplog.records if r.name == "app.supervisor.runner"]
    messages = [r.getMessage() for r in mine]
    assert [r.levelno for r in mine] == [logging.INFO, logging.INFO], messages
    started, exited = messages
    assert f"pid {proc.pid}" in started and str(fake.path) in started and str(tmp_path) in started
    assert f"pid {proc.pid}" in exited and "exit code 0" in exited
    for r in caplog.records:
        text = r.getMessage()
        assert prompt not in text and "sk-never-in-a-log" not in text


async def test_timeout_kill_escalation_and_strays_are_logged(tmp_path, caplog):
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(sid, healthy()), "mode": "hang", "after": 1, "spawn_child": True,
         "ignore_sigterm": True}], check_argv=False)
    argv = [str(fake.path), "-p", "x", "--output-format", "stream-json", "--verbose"]
    proc = RunningProcess(Launch(argv, tmp_path, child_env(tmp_path / "home", []), timeout=1))

    async def sink(batch: list[bytes]) -> None:
        pass

    caplog.set_level(logging.INFO, logger="app.supervisor.runner")
    try:
        outcome = await proc.run(sink, kill_grace=0.5)
        [inv] = fake.invocations()
        assert outcome.timed_out and outcome.exit_code == -9
        warnings = [r.getMessage() for r in caplog.records
                    if r.name == "app.supervisor.runner" and r.levelno == logging.WARNING]
        assert any("timed out after 1 s" in m for m in warnings), warnings
        assert any(m.startswith(f"SIGTERM sent to process group {inv['pid']}") for m in warnings), warnings
        assert any(m.startswith(f"SIGKILL sent to process group {inv['pid']}") for m in warnings), warnings
        assert any("descendant" in m and str(inv["child_pid"]) in m for m in warnings), warnings
        assert "(timed out)" in caplog.records[-1].getMessage()
    finally:
        kill_leftovers(fake)


async def test_spawned_task_exception_is_logged_even_if_never_awaited(caplog):
    async def boom() -> None:
        raise RuntimeError("disk full")

    async def forever() -> None:
        await asyncio.Event().wait()

    caplog.set_level(logging.ERROR, logger="app.tasks")
    failed = spawn(boom(), "cli-test-boom")
    cancelled = spawn(forever(), "cli-test-cancelled")
    ok = spawn(asyncio.sleep(0, result=7), "cli-test-ok")
    await asyncio.sleep(0.01)
    cancelled.cancel()
    await asyncio.sleep(0.01)
    [record] = [r for r in caplog.records if r.name == "app.tasks"]
    assert "'cli-test-boom'" in record.getMessage() and "RuntimeError: disk full" in record.getMessage()
    assert record.exc_info and record.exc_info[0] is RuntimeError  # with its traceback
    assert failed.get_name() == "cli-test-boom"
    with pytest.raises(RuntimeError, match="disk full"):
        await failed  # awaiting still raises
    assert await ok == 7 and cancelled.cancelled()
