"""app/supervisor/scheduler.py: one cycle at a time (in this process and across processes),
recovery of sessions a killed supervisor left running, the schedule, Stop, skips."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.clock import seconds_between
from app.engine.recorder import SessionRecorder
from app.supervisor.scheduler import CycleBusy, Supervisor, status
from tests.fakes import claude_control as cc
from tests.helpers import alive, escalating, healthy, kill_leftovers, wait_until

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]


def hanging(tmp_path: Path, **extra) -> cc.FakeClaude:
    return cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), healthy()), "mode": "hang", "after": 1, **extra}])


def quick(tmp_path: Path) -> cc.FakeClaude:
    return cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), healthy())}])


async def test_second_cycle_in_the_same_process_is_refused_at_once(db, make_settings, validator, tmp_path):
    fake = hanging(tmp_path)
    sup = Supervisor(db, make_settings(fake), validator)
    first = asyncio.create_task(sup.run_cycle())
    try:
        await wait_until(lambda: fake.invocations() and sup.handles, what="the first cycle's session")
        assert sup.busy and status(sup)["busy"] is True
        started = time.monotonic()
        with pytest.raises(CycleBusy, match="already running in this process"):
            await sup.run_cycle(trigger="schedule")
        with pytest.raises(CycleBusy):
            await sup.start_cycle()
        # A second Supervisor on the same state dir (a new open file) meets the flock.
        other = Supervisor(db, make_settings(fake), validator)
        with pytest.raises(CycleBusy) as info:
            await other.run_cycle()
        assert time.monotonic() - started < 1.0
        assert f"(pid {os.getpid()}, manual cycle from tier 1, started " in str(info.value)
        sup.stop_all()
        chain = await asyncio.wait_for(first, 10)
        assert [s["status"] for s in chain] == ["interrupted"]
        assert len(fake.invocations()) == 1  # the refused cycles started nothing
    finally:
        kill_leftovers(fake)
    assert not sup.busy
    # the lock is released: a new cycle runs
    fake.set_stages([{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    assert [s["status"] for s in await sup.run_cycle()] == ["completed"]


HOLDER = """
import sys, time
from pathlib import Path
from app.supervisor.cycle_lock import CycleLock
lock = CycleLock(Path(sys.argv[1]))
lock.acquire("schedule cycle from tier 1 (another process)")
print("locked", flush=True)
sys.stdin.read()  # hold until the test closes our stdin
"""


def _start_holder(lock_path: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert holder.stdout.readline() == b"locked\n"
    return holder


def _stop_holder(holder: subprocess.Popen) -> None:
    holder.stdin.close()
    holder.wait(10)
    holder.stdout.close()


async def test_cycle_held_by_another_process_is_refused_at_once(db, make_settings, validator, tmp_path):
    fake = quick(tmp_path)
    settings = make_settings(fake)
    holder = _start_holder(settings.state_dir / "cycle.lock")
    try:
        sup = Supervisor(db, settings, validator)
        started = time.monotonic()
        with pytest.raises(CycleBusy) as info:
            await sup.run_cycle()
        assert time.monotonic() - started < 1.0
        message = str(info.value)
        assert message.startswith(f"a cycle is already running (pid {holder.pid}, schedule cycle from tier 1 "
                                  "(another process), started 20")
        assert message.endswith("); try again when it has finished")
        # "Cycle running" is true while another process holds the lock, and names it
        assert sup.busy and fake.invocations() == []
        assert (sup.cycle_holder or "").startswith(f"pid {holder.pid}, schedule cycle from tier 1 (another process)")
        # a scheduled cycle is skipped, not stacked, and the schedule goes on
        await sup.run_forever(cycles=1)
        assert fake.invocations() == [] and await db.fetchval("SELECT count(*) FROM sessions") == 0
    finally:
        _stop_holder(holder)
    assert [s["status"] for s in await sup.run_cycle()] == ["completed"]


async def _running_row(db, validator, trigger: str) -> int:
    rec = await SessionRecorder.begin(db, validator, tier=1, trigger=trigger)
    return rec.session_pk


async def test_recover_interrupted_marks_left_running_sessions(db, make_settings, validator, tmp_path):
    sched = await _running_row(db, validator, "schedule")
    manual = await _running_row(db, validator, "manual")
    ingest = await _running_row(db, validator, "ingest")
    sup = Supervisor(db, make_settings(quick(tmp_path)), validator)
    assert await sup.recover_interrupted() == 2
    rows = {r["id"]: dict(r) for r in await db.fetchall("SELECT id, status, status_reason, ended_at FROM sessions")}
    for pk in (sched, manual):
        assert rows[pk]["status"] == "interrupted" and rows[pk]["ended_at"]
        assert rows[pk]["status_reason"] == "the supervisor stopped while this session ran (found at restart)"
    assert rows[ingest]["status"] == "running"  # an ingest is not the supervisor's
    assert await sup.recover_interrupted() == 0


async def test_recover_interrupted_leaves_a_live_cycle_alone(db, make_settings, validator, tmp_path):
    settings = make_settings(quick(tmp_path))
    pk = await _running_row(db, validator, "manual")  # e.g. a `tierops run` that is still working
    holder = _start_holder(settings.state_dir / "cycle.lock")
    try:
        assert await Supervisor(db, settings, validator).recover_interrupted() == 0
        assert await db.fetchval("SELECT status FROM sessions WHERE id = ?", (pk,)) == "running"
    finally:
        _stop_holder(holder)


async def test_run_forever_one_cycle_at_a_time(db, make_settings, validator, tmp_path):
    fake = quick(tmp_path)
    sup = Supervisor(db, make_settings(fake), validator)
    await sup.run_forever(cycles=1)
    await sup.run_forever(cycles=1)
    rows = await db.fetchall("SELECT tier, trigger, status FROM sessions ORDER BY id")
    assert [tuple(r) for r in rows] == [(1, "schedule", "completed"), (1, "schedule", "completed")]
    assert len(fake.invocations()) == 2 and len(sup.last_chain) == 1 and not sup.busy


async def test_next_run_at_interval_and_cron(db, make_settings, validator, tmp_path):
    sup = Supervisor(db, make_settings(None, interval=600), validator)
    started = time.monotonic() - 100  # a cycle that started 100 s ago
    delay = sup._next_delay(started)
    assert 499 <= delay <= 500.5
    assert abs((sup.next_run_at - datetime.now(UTC)).total_seconds() - delay) < 1
    assert status(sup)["next_run_at"] == sup.next_run_at.isoformat()
    assert sup._next_delay(time.monotonic() - 10_000) == 0  # an overrun: the next cycle at once, none stacked

    cron = Supervisor(db, make_settings(None, cron="*/5 * * * *"), validator)
    delay = cron._next_delay(time.monotonic())
    assert 0 <= delay <= 300
    nxt = cron.next_run_at
    assert nxt.minute % 5 == 0 and nxt.second == 0 and nxt - datetime.now(UTC) <= timedelta(seconds=300)


async def test_run_forever_two_cycles_measured_start_to_start(db, make_settings, validator, tmp_path):
    fake = quick(tmp_path)
    settings = make_settings(fake)
    # TIEROPS_INTERVAL is at least 10 s; a test cannot wait that long, so the validated value is
    # shortened on the instance (the supervisor reads it at each cycle).
    settings.interval = 1
    sup = Supervisor(db, settings, validator)
    started = time.monotonic()
    await sup.run_forever(cycles=2)
    elapsed = time.monotonic() - started
    invs = fake.invocations()
    assert len(invs) == 2 and 1.0 <= elapsed < 5
    # start to start, not end to start + interval: the sessions' own start times (the fake CLI's
    # logged start adds its interpreter's start-up, which varies by a second on a loaded machine)
    starts = [r["started_at"] for r in await db.fetchall("SELECT started_at FROM sessions ORDER BY id")]
    assert 0.9 <= seconds_between(starts[0], starts[1]) < 3, starts
    assert sup.next_run_at is not None
    assert await db.fetchval("SELECT count(*) FROM sessions WHERE trigger = 'schedule'") == 2


async def test_a_broken_cycle_does_not_stop_the_schedule(db, make_settings, validator, tmp_path, caplog):
    fake = quick(tmp_path)
    settings = make_settings(fake, tier1_prompt_file=tmp_path / "missing.md")
    settings.interval = 0  # see above
    sup = Supervisor(db, settings, validator)
    await sup.run_forever(cycles=2)
    failures = [r for r in caplog.records if r.getMessage() == "scheduled cycle failed"]
    assert len(failures) == 2 and not sup.busy
    assert fake.invocations() == []


async def test_start_cycle_returns_the_first_session_and_refuses_a_second(db, make_settings, validator, tmp_path):
    fake = quick(tmp_path)
    fake.set_stages([{"lines": cc.structured_stream(cc.new_session_id(), healthy()), "start_delay": 0.3}])
    sup = Supervisor(db, make_settings(fake), validator)
    start = await sup.start_cycle(prompt="from the API")
    task = start.task
    assert isinstance(task, asyncio.Task) and sup.current_task is task and sup.busy
    assert start.session_pk is not None and start.session_pk in sup.handles  # answered while it runs
    with pytest.raises(CycleBusy):
        await sup.start_cycle()
    chain = await asyncio.wait_for(task, 10)
    assert [s["id"] for s in chain] == [start.session_pk]
    assert [s["status"] for s in chain] == ["completed"] and sup.last_chain == chain
    assert not sup.busy
    assert fake.last()["parsed"]["prompt"].endswith("## Operator request for this run\nfrom the API")
    task2 = (await sup.start_cycle()).task
    await asyncio.wait_for(task2, 10)


async def test_stop_session_interrupts_a_running_session(db, make_settings, validator, tmp_path):
    fake = hanging(tmp_path, spawn_child=True)
    sup = Supervisor(db, make_settings(fake), validator)
    task = (await sup.start_cycle()).task
    try:
        await wait_until(lambda: fake.invocations() and sup.handles, what="the session")
        [pk] = list(sup.handles)
        assert status(sup)["running_sessions"] == [pk]
        assert sup.stop_session(pk + 100) is False
        assert sup.stop_session(pk) is True
        chain = await asyncio.wait_for(task, 10)
        [inv] = fake.invocations()
        assert [(s["id"], s["status"], s["status_reason"]) for s in chain] == [
            (pk, "interrupted", "stopped by an operator")]
        assert chain[0]["attention"] is None  # an operator's stop is not a problem to flag
        assert not alive(inv["pid"])
        await wait_until(lambda: not alive(inv["child_pid"]), 5, "the grandchild to go")
        assert sup.handles == {} and not sup.busy
    finally:
        kill_leftovers(fake)


async def test_shutdown_stops_the_running_cycle(db, make_settings, validator, tmp_path):
    fake = hanging(tmp_path)
    sup = Supervisor(db, make_settings(fake), validator)
    task = (await sup.start_cycle()).task
    try:
        await wait_until(lambda: fake.invocations() and sup.handles, what="the session")
        started = time.monotonic()
        await sup.shutdown()
        assert task.done() and time.monotonic() - started < 5
        assert [(s["status"], s["status_reason"]) for s in task.result()] == [
            ("interrupted", "the supervisor shut down while the session ran")]  # not "an operator"
        assert not alive(fake.last()["pid"])
    finally:
        kill_leftovers(fake)


HANDOFF = {"escalate": True, "reason": "nginx keeps crashing", "failed_checks": ["nginx"]}


def writes_handoff_then_hangs(tmp_path: Path, *later: dict) -> cc.FakeClaude:
    """Tier 1 writes the legacy handoff.json (escalate!) in its cwd, prints its init line and hangs;
    ``later`` stages are what a next tier would run."""
    return cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), healthy()), "mode": "hang", "after": 1,
         "write_files": {"handoff.json": HANDOFF}}, *later])


async def test_a_stopped_session_never_escalates_on_the_handoff_it_wrote(db, make_settings, validator, tmp_path):
    """Stop through the real Supervisor.stop_session while the CLI runs, after it wrote handoff.json
    asking to escalate: the session is interrupted, its escalation decision is not routed (a note
    says why), no next tier starts and no approval is asked for."""
    from app.output.route import STOPPED_ESCALATION_NOTE

    fake = writes_handoff_then_hangs(tmp_path, {"lines": cc.structured_stream(cc.new_session_id(), healthy())})
    sup = Supervisor(db, make_settings(fake, tier2_approval="manual"), validator)
    start = await sup.start_cycle()
    try:
        await wait_until(lambda: fake.invocations() and sup.handles, what="tier 1's CLI")
        assert (Path(fake.last()["cwd"]) / "handoff.json").is_file()
        assert sup.stop_session(start.session_pk) is True
        chain = await asyncio.wait_for(start.task, 10)
    finally:
        kill_leftovers(fake)
    assert len(fake.invocations()) == 1  # tier 2 never started
    [row] = [dict(r) for r in await db.fetchall("SELECT * FROM sessions")]
    assert [(link["id"], link["status"]) for link in chain] == [(start.session_pk, "interrupted")]
    assert (row["status_reason"], row["source"], row["escalation_needed"], row["escalation_reason"]) == (
        "stopped by an operator", "handoff", None, None)
    assert json.loads(row["handoff_raw"]) == HANDOFF  # what the model wrote is kept, not acted on
    assert STOPPED_ESCALATION_NOTE in json.loads(row["notes"])
    assert row["attention"] is None and row["escalated_to"] is None and row["escalation_gate"] is None
    assert await db.fetchval("SELECT count(*) FROM approvals") == 0


async def test_a_shutdown_between_two_tiers_starts_no_new_cli(db, make_settings, validator, tmp_path):
    """Tier 1 finished asking to escalate; the shutdown lands before tier 2 starts (the moment the
    hub announces tier 1's end): tier 2's CLI never starts, tier 1 needs attention with why, and
    the supervisor claims no new cycle."""
    from app.supervisor.halt import StopRequested

    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), escalating())},
        {"lines": cc.structured_stream(cc.new_session_id(), healthy()), "mode": "hang", "after": 1}])
    sup = Supervisor(db, make_settings(fake), validator)
    sub = sup.hub.subscribe()
    start = await sup.start_cycle()
    try:
        while (item := await asyncio.wait_for(sub.get(), 20)).kind != "session_finished":
            pass
        assert item.session_pk == start.session_pk
        await sup.shutdown()
        chain = start.task.result()
        with pytest.raises(StopRequested, match="no cycle starts: the supervisor is shutting down"):
            await sup.start_cycle()
    finally:
        sub.close()
        kill_leftovers(fake)
    assert len(fake.invocations()) == 1, "tier 2's CLI started after the shutdown"
    assert [(link["tier"], link["status"]) for link in chain] == [(1, "completed")]
    assert chain[0]["attention"] == "escalation to tier 2 not started: the supervisor is shutting down"
    assert chain[0]["escalated_to"] is None
    assert await db.fetchval("SELECT count(*) FROM sessions") == 1


async def test_a_stop_while_the_next_tier_is_being_prepared_starts_no_cli(db, make_settings, validator, tmp_path):
    """The operator's Stop reaches the running cycle (Supervisor.stop_all) after tier 1 finished:
    the chain is stopped, not only the session that happened to be running."""
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), escalating())},
        {"lines": cc.structured_stream(cc.new_session_id(), healthy()), "mode": "hang", "after": 1}])
    sup = Supervisor(db, make_settings(fake), validator)
    sub = sup.hub.subscribe()
    start = await sup.start_cycle()
    try:
        while (await asyncio.wait_for(sub.get(), 20)).kind != "session_finished":
            pass
        sup.stop_all()
        chain = await asyncio.wait_for(start.task, 10)
    finally:
        sub.close()
        kill_leftovers(fake)
    assert len(fake.invocations()) == 1
    assert chain[0]["attention"] == "escalation to tier 2 not started: stopped by an operator"
    fake.set_stages([{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    assert [s["status"] for s in await sup.run_cycle()] == ["completed"]  # the next cycle runs as ever


async def test_cancelling_a_started_cycle_before_it_runs_releases_the_cycle(db, make_settings, validator, tmp_path):
    fake = quick(tmp_path)
    sup = Supervisor(db, make_settings(fake), validator)
    starting = asyncio.create_task(sup.start_cycle())
    await asyncio.sleep(0)  # start_cycle has created the cycle's task; it has not run a step yet
    task = sup.current_task
    assert task is not None and not task.done()
    task.cancel()  # e.g. the loop shutting down right after POST /runs
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await starting).session_pk is None
    try:
        assert not sup.busy
        assert [s["status"] for s in await sup.run_cycle()] == ["completed"]
    finally:
        sup._file_lock.release()  # let the other tests' state go even while the bug is there


# -- skips are not failures --------------------------------------------------------------------------

async def test_a_cycle_skipped_for_the_daily_budget_is_not_a_failure(db, make_settings, validator, tmp_path, caplog):
    """A scheduled cycle that may not start tier 1 (daily budget spent): no /fail ping, no count
    towards TIEROPS_UNHEALTHY_AFTER, no "monitor unhealthy"; its status says it was skipped."""
    from app.store import notifications
    from app.store import sessions as session_store
    from tests.receiver import Receiver

    receiver = Receiver()
    fake = quick(tmp_path)
    settings = make_settings(fake, daily_budget_usd=0.10, unhealthy_after=1, heartbeat_url=f"http://{receiver.address}/hb")
    pk = await session_store.create_session(db, tier=1)
    async with db.write() as conn:
        await conn.execute("UPDATE sessions SET status = 'completed', cost_usd = 0.25 WHERE id = ?", (pk,))
    sup = Supervisor(db, settings, validator)
    try:
        with caplog.at_level(logging.INFO, logger="app.supervisor.scheduler"):
            for _ in range(2):  # two scheduled cycles, both skipped; the schedule goes on
                await sup.run_forever(cycles=1)
    finally:
        await sup.shutdown()
        receiver.close()
    assert fake.invocations() == []
    assert sup.consecutive_failures == 0
    assert sup.last_cycle_status == ("skipped: daily budget spent: $0.25 of $0.10 (TIEROPS_DAILY_BUDGET_USD); "
                                     "tier 1 not started")
    assert sup.health(scheduled=True)["problems"] == []
    assert receiver.paths() == ["/hb/start", "/hb", "/hb/start", "/hb"]  # alive, never /fail
    skipped = [r for r in caplog.records if r.getMessage().startswith("cycle ") and " skipped: " in r.getMessage()]
    assert len(skipped) == 2 and all(r.levelno == logging.WARNING for r in skipped)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [n for n in await notifications.recent(db, 10) if n["kind"] == "monitor"] == []


