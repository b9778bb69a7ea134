"""The follower: sessions another real process runs on the same database reach this
process's hub, in order, while they run; nothing is polled while nobody watches; a session whose
process died ends instead of staying "running" forever.

The other process is a real ``python -m app run`` with a fake claude CLI printing lines slowly
(tests/second_process.py); the hub, the supervisor and the database here are the real ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest

from app.store import activity
from app.supervisor.follow import CATCH_UP, Follower
from app.supervisor.hub import ACTIVITY, SESSION_FINISHED, SESSION_STARTED, Hub, HubItem, Subscription
from app.supervisor.scheduler import Supervisor
from app.tasks import spawn
from app.tasks import stop as stop_task
from tests.helpers import alive, wait_gone
from tests.second_process import SecondRun, sigkill, slow_stage, start_run, wait_exit, wait_running

pytestmark = pytest.mark.timeout(90)


@contextlib.asynccontextmanager
async def following(db, settings, validator) -> AsyncIterator[tuple[Hub, Supervisor, Follower]]:
    hub = Hub()
    sup = Supervisor(db, settings, validator, hub)
    follower = Follower(db, hub, sup, period=0.1)
    task = spawn(follower.run(), "test-follow")
    try:
        yield hub, sup, follower
    finally:
        await stop_task(task)


async def until_finished(sub: Subscription, timeout: float = 40) -> list[tuple[float, HubItem]]:
    items: list[tuple[float, HubItem]] = []
    async with asyncio.timeout(timeout):
        while True:
            item = await sub.get()
            items.append((time.monotonic(), item))
            if item.kind == SESSION_FINISHED:
                return items


async def running_row(run: SecondRun):
    return await asyncio.to_thread(wait_running, run)


async def test_another_process_session_is_published_live_in_order(db, make_settings, validator, tmp_path):
    settings = make_settings(None)
    async with following(db, settings, validator) as (hub, sup, follower):
        sub = hub.subscribe(None)  # before the other process starts: the session appears while watched
        run = start_run(tmp_path, settings.db_path, settings.state_dir, [slow_stage(20, 0.15)])
        try:
            row = await running_row(run)
            pk = row["id"]
            # "Cycle running": the other process holds the cycle lock, and is named
            assert sup.busy and f"pid {run.proc.pid}, manual cycle from tier 1" in (sup.cycle_holder or "")
            items = await until_finished(sub)
            assert await asyncio.to_thread(wait_exit, run) == 0, run.output()
        finally:
            run.cleanup()
    mine = [item for _, item in items if item.session_pk == pk]
    kinds = [i.kind for i in mine]
    assert kinds[:2] == [CATCH_UP, SESSION_STARTED] and mine[1].data == {"tier": 1}
    assert mine[-1].kind == SESSION_FINISHED and mine[-1].data == {"status": "completed"}
    seqs = [i.row["seq"] for i in mine if i.kind == ACTIVITY and i.row is not None]
    stored = [r["seq"] for r in await activity.lines_after(db, pk, 0, 1000)]
    assert stored == list(range(1, 25))  # init, 20 texts, StructuredOutput, its ack, the result
    # published in order, no duplicates, no gap, up to the last line; only the lines committed
    # before the follower first saw the session came from the stream's own replay (CATCH_UP)
    assert seqs == stored[len(stored) - len(seqs):] and len(seqs) >= 12, seqs
    assert all(i.sse is None for i in mine if i.kind == ACTIVITY)  # this hub has no prepare hook
    finished_at = items[-1][0]
    live = [t for t, i in items if i.kind == ACTIVITY and finished_at - t > 0.5]
    assert len(live) >= 8, "lines were not published while the session ran"
    assert not sup.busy and sup.cycle_holder is None and follower.following == []


async def test_nothing_is_polled_while_nobody_watches_then_a_late_watcher_catches_up(db, make_settings, validator,
                                                                                       tmp_path):
    settings = make_settings(None)
    async with following(db, settings, validator) as (hub, _sup, follower):
        run = start_run(tmp_path, settings.db_path, settings.state_dir, [slow_stage(30, 0.1)])
        try:
            pk = (await running_row(run))["id"]
            await asyncio.sleep(0.8)  # several periods with the session running and nobody watching
            assert follower.polls == 0
            sub = hub.subscribe(pk)  # a page opens mid-session
            items = [i for _, i in await until_finished(sub)]
            assert await asyncio.to_thread(wait_exit, run) == 0
        finally:
            run.cleanup()
        sub.close()
        polls = follower.polls
        assert polls > 0
        await asyncio.sleep(0.5)
        assert follower.polls == polls  # nobody watches again: no more queries
    assert items[0].kind == CATCH_UP  # the stream replays what it missed, then live lines follow
    assert SESSION_STARTED not in [i.kind for i in items]  # it was already running when watched
    seqs = [i.row["seq"] for i in items if i.kind == ACTIVITY and i.row is not None]
    assert seqs and seqs[0] > 1 and seqs == list(range(seqs[0], 35)), seqs


async def test_a_session_whose_process_was_killed_ends_interrupted(db, make_settings, validator, tmp_path):
    settings = make_settings(None)
    async with following(db, settings, validator) as (hub, sup, _follower):
        run = start_run(tmp_path, settings.db_path, settings.state_dir, [slow_stage(2, 0.05, hang=True)])
        try:
            row = await running_row(run)
            pk, cli = row["id"], row["cli_pid"]
            sub = hub.subscribe(pk)
            sigkill(run)  # tierops run dies at once; its CLI follows through the parent-death signal
            items = [i for _, i in await until_finished(sub, timeout=30)]
        finally:
            run.cleanup()
    assert items[-1].data == {"status": "interrupted"}
    reason = run.session(pk)["status_reason"]
    assert reason.startswith("the supervisor stopped while this session ran (its process is gone)"), reason
    assert await asyncio.to_thread(wait_gone, [cli]) == [] and not alive(cli)
    assert not sup.busy
