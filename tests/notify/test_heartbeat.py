"""app/notify/heartbeat.py: the dead-man pings of real Supervisor cycles (the fake
CLI as a subprocess, a real SQLite file) reaching a real HTTP receiver on 127.0.0.1, in order,
and a receiver that hangs or is gone costing the cycle nothing."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import pytest

from app.config import Settings
from app.notify.heartbeat import Heartbeat
from app.supervisor.scheduler import Supervisor
from tests.fakes import claude_control as cc
from tests.helpers import healthy, wait_until
from tests.receiver import Receiver

pytestmark = pytest.mark.timeout(60)

CHECK = "/ping/7f3c1d2e-secret-check-uuid"  # the path is the secret of a healthchecks.io check


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def quick(tmp_path) -> cc.FakeClaude:
    return cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])


async def test_a_completed_cycle_pings_start_then_the_url(db, make_settings, validator, tmp_path, receiver):
    sup = Supervisor(db, make_settings(quick(tmp_path), heartbeat_url=f"http://{receiver.address}{CHECK}"), validator)
    try:
        chain = await sup.run_cycle()
    finally:
        await sup.shutdown()  # waits (briefly) for the queued pings
    assert [s["status"] for s in chain] == ["completed"]
    assert receiver.paths() == [f"{CHECK}/start", CHECK]
    assert {r.method for r in receiver.requests} == {"GET"}
    assert sup.consecutive_failures == 0 and sup.last_cycle_status == "completed" and sup.last_cycle_at


async def test_a_failed_cycle_pings_fail(db, make_settings, validator, tmp_path, receiver):
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": [], "mode": "crash"}])
    sup = Supervisor(db, make_settings(fake, heartbeat_url=f"http://{receiver.address}{CHECK}/"), validator)
    try:
        chain = await sup.run_cycle()
    finally:
        await sup.shutdown()
    assert chain[0]["status"] == "failed"  # the check itself did not run: the cycle failed
    assert receiver.paths() == [f"{CHECK}/start", f"{CHECK}/fail"]
    assert sup.consecutive_failures == 1


async def test_a_cycle_that_raises_pings_fail(db, make_settings, validator, tmp_path, receiver):
    settings = make_settings(quick(tmp_path), heartbeat_url=f"http://{receiver.address}{CHECK}",
                             tier1_prompt_file=tmp_path / "missing.md")
    sup = Supervisor(db, settings, validator)
    try:
        with pytest.raises(Exception, match="cannot read the tier 1 prompt file"):
            await sup.run_cycle()
    finally:
        await sup.shutdown()
    assert receiver.paths() == [f"{CHECK}/start", f"{CHECK}/fail"]
    assert sup.last_cycle_status == "error" and sup.consecutive_failures == 1


async def test_a_hanging_receiver_does_not_delay_the_cycle(db, make_settings, validator, tmp_path, caplog):
    hanging = Receiver(hang=30)
    try:
        sup = Supervisor(db, make_settings(quick(tmp_path), heartbeat_url=f"http://{hanging.address}{CHECK}"),
                         validator)
        started = time.monotonic()
        chain = await sup.run_cycle()
        took = time.monotonic() - started
        await wait_until(lambda: hanging.paths(), what="the start ping to arrive")
        closing = time.monotonic()
        await sup.shutdown()
        closed_in = time.monotonic() - closing
    finally:
        hanging.close()
    assert [s["status"] for s in chain] == ["completed"]
    assert took < 8, f"the cycle took {took:.1f} s with a hanging heartbeat receiver"  # its 10 s timeout unused
    assert closed_in < 6  # shutdown waits at most a few seconds for pings in flight
    assert hanging.paths() == [f"{CHECK}/start"]  # the completion ping was still queued behind it


async def test_failures_are_retried_and_logged_without_the_url(caplog):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    url = f"http://127.0.0.1:{dead}{CHECK}"
    beat = Heartbeat(Settings(heartbeat_url=url), timeout=0.5, retries=2, retry_delay=0.01)
    await beat.start_cycle()
    await wait_until(lambda: beat.last_error, what="the ping to give up")
    await beat.close()
    assert "heartbeat /start failed after 3 tries" in caplog.text
    assert "ConnectionRefusedError" in (beat.last_error or "")
    assert CHECK not in caplog.text and str(dead) not in caplog.text


async def test_a_timeout_is_reported_and_nothing_without_a_url(caplog):
    caplog.set_level(logging.DEBUG)
    hanging = Receiver(hang=10)
    try:
        beat = Heartbeat(Settings(heartbeat_url=f"http://{hanging.address}{CHECK}"), timeout=0.3, retries=1,
                         retry_delay=0.01)
        started = time.monotonic()
        await beat.cycle_ok()  # returns at once: the GET happens in the background
        assert time.monotonic() - started < 0.2
        await wait_until(lambda: beat.last_error, what="the ping to time out")
        await beat.close()
    finally:
        hanging.close()
    assert len(hanging.paths()) == 2 and "timed out" in (beat.last_error or "")
    assert CHECK not in caplog.text
    idle = Heartbeat(Settings())
    await idle.start_cycle()
    await idle.cycle_failed()
    await idle.close()
    assert not idle.configured and idle.last_error is None
