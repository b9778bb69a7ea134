"""Processes: nothing orphaned, nothing hangs — with the fake CLI as a real subprocess.

* a descendant that left the CLI's process group (``setsid``, or daemonized by a double fork)
  and still holds its stdout never holds a session open: the drain is bounded and the holder is
  killed;
* the CLI dies with its supervisor (parent-death signal), and a CLI that outlived one anyway is
  killed at the next start, or at the next cycle's start, before its row is marked
  ``interrupted`` — never a process whose pid was recycled.

Prompts of any size are tests/supervisor/test_session.py; an escalation whose child cannot start,
tests/supervisor/test_chain.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from app.output.validate import OutputValidator
from app.store import processes
from app.supervisor import runner
from app.supervisor.halt import Halt
from app.supervisor.launch import Launch, child_env
from app.supervisor.runner import DRAIN_AFTER_KILL, EOF_GRACE, RunningProcess
from app.supervisor.runs import Run
from app.supervisor.scheduler import Supervisor
from app.supervisor.session import SessionHandle
from app.supervisor.tier_gate import TierGate
from tests.fakes import claude_control as cc
from tests.helpers import alive, healthy, kill_leftovers, run_session, wait_gone

pytestmark = pytest.mark.timeout(90)

REPO = Path(__file__).resolve().parents[2]
TIEROPS = [sys.executable, "-m", "app.cli"]
SLACK = 2.5  # scheduling noise on a loaded 2-core runner


def _kill(*pids: int | None) -> None:
    for pid in pids:
        if pid and alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _cleanup(fake: cc.FakeClaude) -> None:
    """The fake's group (kill_leftovers) and the detached sleeps, which are in no group of ours."""
    kill_leftovers(fake)
    for inv in fake.invocations():
        _kill(inv.get("daemon_pid"), inv.get("pid"))


# --- 1. a descendant that left the group and holds stdout ---------------------------------------

@pytest.mark.parametrize("how", ["setsid_child", "daemon"])
async def test_detached_descendant_holding_stdout_does_not_hold_the_session_open(
        db, make_settings, validator, tmp_path, caplog, how):
    """The CLI finishes normally but left `sleep 1000` in a new session holding its stdout: the
    session completes within EOF_GRACE + DRAIN_AFTER_KILL and the holder is killed (and logged).
    Before: the reader waited for an EOF that never came; the session never ended."""
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(sid, healthy()), how: True}])
    caplog.set_level(logging.WARNING, logger="app.supervisor.runner")
    started = time.monotonic()
    try:
        _result, row = await asyncio.wait_for(run_session(db, make_settings(fake, tier1_timeout=30), validator),
                                              EOF_GRACE + DRAIN_AFTER_KILL + 10)
        elapsed = time.monotonic() - started
        [inv] = fake.invocations()
        daemon = inv["daemon_pid"]
        assert inv["pgid"] == inv["pid"] and inv["daemon_pgid"] != inv["pgid"]  # it really left the group
        assert wait_gone([daemon, inv["pid"]]) == []
        assert (row["status"], row["status_reason"], row["exit_code"]) == ("completed", None, 0)
        assert row["source"] == "structured_output" and not row["degraded"]
        assert row["line_count"] == len(cc.structured_stream(sid, healthy()))  # every line, despite the kill
        assert elapsed < EOF_GRACE + DRAIN_AFTER_KILL + SLACK, elapsed
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(m.startswith(f"killed pid {daemon}: it held the output pipe of CLI pid {inv['pid']}")
                   for m in warnings), warnings
    finally:
        _cleanup(fake)


async def test_hung_cli_with_a_daemon_ends_within_timeout_grace_and_drain(db, make_settings, validator, tmp_path):
    """A hung CLI that daemonized a helper holding stdout: the session ends within tier timeout +
    kill grace + the drain bound, so the cycle lock is released in time for the next cycle."""
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), healthy()), "mode": "hang", "after": 1,
         "ignore_sigterm": True, "daemon": True}])
    settings = make_settings(fake, tier1_timeout=1, kill_grace=1)
    sup = Supervisor(db, settings, validator)
    bound = 1 + 1 + EOF_GRACE + DRAIN_AFTER_KILL
    started = time.monotonic()
    try:
        [s] = await asyncio.wait_for(sup.run_cycle(), bound + 10)
        elapsed = time.monotonic() - started
        [inv] = fake.invocations()
        assert wait_gone([inv["pid"], inv["daemon_pid"]]) == []
        assert s["status"] == "failed" and s["status_reason"] == "timed out after 1 s; the process group was killed"
        assert elapsed < bound + SLACK, elapsed
        assert not sup.busy
        fake.set_stages([{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
        assert [x["status"] for x in await sup.run_cycle()] == ["completed"]  # the next cycle runs
    finally:
        _cleanup(fake)


async def test_a_holder_that_cannot_be_killed_still_ends_the_drain(db, make_settings, validator, tmp_path,
                                                                   monkeypatch, caplog):
    """A holder the supervisor cannot see in /proc or kill (another user's process): reading
    stops DRAIN_AFTER_KILL after the kill attempt, every line read so far is kept. Simulated by
    hiding /proc from the runner (the one thing a test cannot arrange for real: we run as root)."""
    monkeypatch.setattr(runner, "pipe_writers", lambda inodes: None)
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(sid, healthy()), "daemon": True}])
    caplog.set_level(logging.WARNING, logger="app.supervisor.runner")
    started = time.monotonic()
    try:
        _result, row = await asyncio.wait_for(run_session(db, make_settings(fake, tier1_timeout=30), validator),
                                              EOF_GRACE + DRAIN_AFTER_KILL + 10)
        elapsed = time.monotonic() - started
        [inv] = fake.invocations()
        assert alive(inv["daemon_pid"])  # not found, so not killed ...
        assert (row["status"], row["exit_code"]) == ("completed", 0)  # ... and the session ended anyway
        assert row["line_count"] == len(cc.structured_stream(sid, healthy()))
        assert elapsed < EOF_GRACE + 2 * DRAIN_AFTER_KILL + SLACK, elapsed
        assert any("still held open by a process not visible to us" in r.getMessage() for r in caplog.records)
    finally:
        _cleanup(fake)


async def test_output_that_cannot_be_stored_kills_the_cli_at_once(tmp_path):
    """If the sink fails (storage), nothing reads stdout any more: the CLI is killed at once
    instead of blocking until its timeout and being reported as timed out."""
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), healthy()), "mode": "hang", "after": 1}],
        check_argv=False)
    argv = [str(fake.path), "-p", "x", "--output-format", "stream-json", "--verbose"]
    proc = RunningProcess(Launch(argv, tmp_path, child_env(tmp_path / "home", []), timeout=20))

    async def sink(batch: list[bytes]) -> None:
        raise RuntimeError("disk I/O error")

    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match="disk I/O error"):
            await proc.run(sink, kill_grace=1)
        assert time.monotonic() - started < 5
        assert wait_gone([fake.last()["pid"]]) == []
    finally:
        _cleanup(fake)


# --- 2. parent death, and the sweep -------------------------------------------------------------

async def test_the_cli_is_started_with_a_parent_death_signal(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    result, row = await run_session(db, make_settings(fake), validator)
    [inv] = fake.invocations()
    assert inv["pdeathsig"] == signal.SIGKILL
    assert row["status"] == "completed"
    # the CLI's identity is on the row: pid, its own group, its start time
    stored = await db.fetchone("SELECT cli_pid, cli_pgid, cli_start_time FROM sessions WHERE id = ?", (result.pk,))
    assert (stored["cli_pid"], stored["cli_pgid"]) == (inv["pid"], inv["pid"])
    assert abs(stored["cli_start_time"] - inv["ts"]) < 5


def _cli_env(tmp_path: Path, fake: cc.FakeClaude) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIEROPS_")}
    env.update({"PYTHONPATH": str(REPO), "TIEROPS_CLAUDE_BIN": str(fake.path),
                "TIEROPS_HOME": str(tmp_path / "state"), "TIEROPS_DB": str(tmp_path / "tierops.db"),
                "TIEROPS_KILL_GRACE": "1", "TIEROPS_TIER1_TIMEOUT": "60"})
    return env


def _supervise(tmp_path: Path, fake: cc.FakeClaude, *args: str) -> subprocess.Popen:
    return subprocess.Popen([*TIEROPS, "supervise", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_cli_env(tmp_path, fake), cwd=tmp_path)


def _recorded(tmp_path: Path, proc: subprocess.Popen, fake: cc.FakeClaude, timeout: float = 20, *,
              lines: int = 0) -> sqlite3.Row:
    """The first session row once its CLI is recorded on it (and the fake has logged its run), with
    at least ``lines`` of its stream stored (a fake killed from under before it wrote them dies of
    SIGPIPE when it does)."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(sqlite3.Error), sqlite3.connect(tmp_path / "tierops.db") as conn:
            conn.row_factory = sqlite3.Row
            row = conn.execute("SELECT * FROM sessions WHERE id = 1 AND cli_pid IS NOT NULL").fetchone()
            stored = conn.execute("SELECT count(*) FROM activity WHERE session_pk = 1").fetchone()[0]
            if row is not None and fake.invocations() and stored >= lines:
                return row
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"no CLI recorded (exit {proc.returncode}):\n{out}\n{err}")
        time.sleep(0.05)


def _row(tmp_path: Path, pk: int) -> dict:
    with sqlite3.connect(tmp_path / "tierops.db") as conn:
        conn.row_factory = sqlite3.Row
        return dict(conn.execute("SELECT * FROM sessions WHERE id = ?", (pk,)).fetchone())


def test_a_killed_supervisor_takes_its_cli_with_it(tmp_path):
    """SIGKILL to `tierops supervise` while its CLI hangs: the CLI dies too (PR_SET_PDEATHSIG).
    Before: the CLI, in its own session, kept running unsupervised."""
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), healthy()), "mode": "hang", "after": 1}])
    sup = _supervise(tmp_path, fake)
    try:
        row = _recorded(tmp_path, sup, fake)
        [inv] = fake.invocations()
        assert row["cli_pid"] == inv["pid"] and row["cli_pgid"] == inv["pgid"] == inv["pid"]
        assert alive(inv["pid"])
        sup.kill()
        sup.wait(10)
        assert wait_gone([inv["pid"]]) == [], "the CLI outlived its supervisor"
    finally:
        sup.kill()
        sup.communicate()
        _cleanup(fake)


def test_the_next_start_kills_a_cli_that_outlived_its_supervisor(tmp_path):
    """A CLI the parent-death signal did not reach (reset by the fake, as on a platform without
    one) keeps running after its supervisor was SIGKILLed, with a tool process in its group. The
    next `tierops supervise` kills both before marking the row interrupted, then runs its cycle.
    Before: the row was marked, the CLI kept running."""
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), healthy()), "mode": "hang", "after": 1,
         "clear_pdeathsig": True, "spawn_child": True}])
    first = _supervise(tmp_path, fake)
    second: subprocess.Popen | None = None
    try:
        row = _recorded(tmp_path, first, fake, lines=1)
        [inv] = fake.invocations()
        assert inv["pdeathsig"] == signal.SIGKILL  # set by the supervisor (then reset by the fake)
        first.kill()
        first.wait(10)
        time.sleep(0.3)
        assert alive(inv["pid"]) and alive(inv["child_pid"])  # outlived its supervisor
        assert _row(tmp_path, 1)["status"] == "running"
        fake.set_stages([{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
        second = _supervise(tmp_path, fake, "--once")
        _out, err = second.communicate(timeout=60)
        assert second.returncode == 0, err
        assert wait_gone([inv["pid"], inv["child_pid"]]) == []
        old = _row(tmp_path, 1)
        assert old["status"] == "interrupted" and old["ended_at"]
        assert old["status_reason"] == (f"the supervisor stopped while this session ran (found at restart); "
                                        f"its CLI (pid {row['cli_pid']}) was still running and was killed")
        assert _row(tmp_path, 2)["status"] == "completed"
        assert f"killed pid {inv['pid']}: a leftover CLI" in err
        assert f"killed pid {inv['child_pid']}: a leftover process of CLI pid {inv['pid']}" in err
    finally:
        for proc in (first, second):
            if proc is not None:
                proc.kill()
                proc.communicate()  # also closes its pipes
        _cleanup(fake)


def _start_detached(tmp_path: Path, home: Path | None = None) -> subprocess.Popen:
    """A stand-in for a leftover CLI: `sleep` in its own session (like the supervisor's CLIs)."""
    env = {"PATH": os.environ.get("PATH", os.defpath)}
    if home is not None:
        env["HOME"] = str(home)
    return subprocess.Popen(["sleep", "1000"], start_new_session=True, env=env, cwd=tmp_path)


async def _leftover_row(db, validator: OutputValidator, sup: Supervisor, pid: int, start_time: float | None) -> int:
    from app.engine.recorder import SessionRecorder

    rec = await SessionRecorder.begin(db, validator, tier=1, trigger="schedule")
    await processes.record_process(db, rec.session_pk, pid, pid, start_time)
    return rec.session_pk


async def test_recover_kills_only_a_matching_pid_and_start_time(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    sup = Supervisor(db, make_settings(fake), validator)
    ours, recycled = _start_detached(tmp_path), _start_detached(tmp_path)
    try:
        mine = await _leftover_row(db, validator, sup, ours.pid, psutil.Process(ours.pid).create_time())
        # Same pid, another start time: the pid was recycled by a process that is not ours.
        other = await _leftover_row(db, validator, sup, recycled.pid,
                                    psutil.Process(recycled.pid).create_time() - 3600)
        unknown = await _leftover_row(db, validator, sup, recycled.pid, None)
        assert await sup.recover_interrupted() == 3
        assert ours.wait(5) == -signal.SIGKILL
        assert recycled.poll() is None  # never killed
        rows = {r["id"]: dict(r) for r in await db.fetchall("SELECT id, status, status_reason FROM sessions")}
        assert rows[mine]["status_reason"] == (f"the supervisor stopped while this session ran (found at restart); "
                                               f"its CLI (pid {ours.pid}) was still running and was killed")
        for pk in (other, unknown):
            assert rows[pk] == {"id": pk, "status": "interrupted",
                                "status_reason": "the supervisor stopped while this session ran (found at restart)"}
        assert await sup.recover_interrupted() == 0
    finally:
        for p in (ours, recycled):
            p.kill()
            p.wait()


async def test_recover_kills_the_orphaned_tool_processes_of_a_dead_cli(db, make_settings, validator, tmp_path):
    """The parent-death signal reaches only the CLI: its tool processes stay in its group. At the
    next start they are killed if they carry the HOME our CLIs get; others in that group are not."""
    settings = make_settings(None)
    home = settings.state_dir.resolve() / "home"
    # A group whose leader (the "CLI") exits at once, leaving two members: one of ours, one not.
    script = ("import os, subprocess, sys\n"
              "env = dict(os.environ)\n"
              "a = subprocess.Popen(['sleep', '1000'], env=env)\n"
              "env['HOME'] = '/somewhere/else'\n"
              "b = subprocess.Popen(['sleep', '1000'], env=env)\n"
              "print(a.pid, b.pid, flush=True)\n")
    leader = subprocess.Popen([sys.executable, "-c", script], start_new_session=True, stdout=subprocess.PIPE,
                              text=True, env={"PATH": os.environ["PATH"], "HOME": str(home)})
    ours, foreign = map(int, leader.stdout.readline().split())
    start = psutil.Process(leader.pid).create_time()
    leader.wait(5)
    try:
        sup = Supervisor(db, settings, validator)
        pk = await _leftover_row(db, validator, sup, leader.pid, start)
        assert await sup.recover_interrupted() == 1
        assert wait_gone([ours]) == [] and alive(foreign)
        reason = await db.fetchval("SELECT status_reason FROM sessions WHERE id = ?", (pk,))
        assert reason.endswith(f"; processes it left ({ours}) were killed")
    finally:
        _kill(ours, foreign)
        leader.stdout.close()


async def test_every_cycle_starts_with_the_sweep(db, make_settings, validator, tmp_path):
    """A row left running with its CLI alive (a finalize that storage failed, a supervisor on the
    same state dir that died): the next cycle kills the CLI and marks the row before it runs."""
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    sup = Supervisor(db, make_settings(fake), validator)
    leftover = _start_detached(tmp_path)
    try:
        pk = await _leftover_row(db, validator, sup, leftover.pid, psutil.Process(leftover.pid).create_time())
        chain = await sup.run_cycle()
        assert [s["status"] for s in chain] == ["completed"]
        assert leftover.wait(5) == -signal.SIGKILL
        row = await db.fetchone("SELECT status, status_reason FROM sessions WHERE id = ?", (pk,))
        assert row["status"] == "interrupted"
        assert row["status_reason"] == ("the supervisor stopped while this session ran (found at the start of a "
                                        f"later cycle); its CLI (pid {leftover.pid}) was still running and was killed")
    finally:
        leftover.kill()
        leftover.wait()


async def test_a_row_left_running_without_a_cli_is_swept_at_the_next_cycle(db, make_settings, validator, tmp_path):
    """No row stays running unless its CLI is alive: not only at start, at every cycle's start.
    Before: only `recover_interrupted` at start swept; such a row stayed running for good."""
    from app.engine.recorder import SessionRecorder

    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    sup = Supervisor(db, make_settings(fake), validator)
    rec = await SessionRecorder.begin(db, validator, tier=1, trigger="schedule")  # e.g. its finalize failed
    assert [s["status"] for s in await sup.run_cycle()] == ["completed"]
    row = await db.fetchone("SELECT status, status_reason FROM sessions WHERE id = ?", (rec.session_pk,))
    assert tuple(row) == ("interrupted",
                          "the supervisor stopped while this session ran (found at the start of a later cycle)")


async def test_the_sweep_skips_this_processs_live_sessions(db, make_settings, validator, tmp_path):
    sup = Supervisor(db, make_settings(None), validator)
    cli = _start_detached(tmp_path)  # stands for the CLI of a session this process runs
    try:
        live = await _leftover_row(db, validator, sup, cli.pid, psutil.Process(cli.pid).create_time())
        halt = Halt()  # a cycle of this process, running that session
        sup.runs[1] = Run(1, "a test cycle", False, asyncio.get_running_loop().create_future(),
                          TierGate(db, sup.settings, "test/cycle-1", halt), halt, {live: SessionHandle()})
        assert await sup.recover_interrupted() == 0
        assert await db.fetchval("SELECT status FROM sessions WHERE id = ?", (live,)) == "running"
        assert cli.poll() is None
    finally:
        cli.kill()
        cli.wait()


async def test_the_sweep_leaves_sessions_of_another_state_dir_alone(db, make_settings, validator, tmp_path):
    from app.engine.recorder import SessionRecorder
    from app.store import sessions

    sup = Supervisor(db, make_settings(None), validator)
    rec = await SessionRecorder.begin(db, validator, tier=1, trigger="schedule")
    await sessions.set_launch(db, rec.session_pk, cwd=str(tmp_path / "elsewhere" / "sessions" / "1"),
                              chain_id=rec.session_pk, argv=["claude"], system_prompt="s")
    assert await sup.recover_interrupted() == 0
    assert await db.fetchval("SELECT status FROM sessions WHERE id = ?", (rec.session_pk,)) == "running"
