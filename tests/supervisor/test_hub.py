"""app/supervisor/hub.py: live activity fan-out with bounded queues that never block the writer."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.supervisor.hub import RESYNC, Hub, HubItem
from tests.fakes import claude_control as cc
from tests.helpers import healthy, run_session

pytestmark = pytest.mark.timeout(60)


def drain(sub) -> list[HubItem]:
    items = []
    while not sub.queue.empty():
        items.append(sub.queue.get_nowait())
    return items


def rows(session_pk: int, *seqs: int) -> list[dict]:
    return [{"session_pk": session_pk, "seq": s, "display": f"line {s}"} for s in seqs]


def seq(item: HubItem) -> int | None:
    return item.row["seq"] if item.row is not None else None


async def test_publish_reaches_session_and_all_session_subscribers():
    hub = Hub()
    one, two, every = hub.subscribe(1), hub.subscribe(2), hub.subscribe()
    assert hub.subscriber_count == 3
    hub.publish(1, rows(1, 1, 2))
    hub.publish(2, rows(2, 1))
    hub.notify(1, "session_finished", status="completed")
    assert [(i.kind, seq(i)) for i in drain(one)] == [("activity", 1), ("activity", 2),
                                                      ("session_finished", None)]
    [item] = drain(two)
    assert (item.kind, item.session_pk, seq(item), item.row["display"]) == ("activity", 2, 1, "line 1")
    got = drain(every)
    assert [(i.session_pk, seq(i)) for i in got] == [(1, 1), (1, 2), (2, 1), (1, None)]
    assert got[-1] == HubItem("session_finished", 1, data={"status": "completed"})
    hub.publish(1, rows(1, 3))
    assert seq(await asyncio.wait_for(one.get(), 1)) == 3


async def test_a_full_queue_gives_one_resync_and_counts_the_lag():
    hub = Hub(queue_size=3)
    slow, fast = hub.subscribe(7), hub.subscribe(7)
    hub.publish(7, rows(7, 1, 2, 3))
    drain(fast)
    hub.publish(7, rows(7, 4))  # slow's queue is full
    assert slow.lagged == 1 and fast.lagged == 0
    assert drain(slow) == [RESYNC]  # exactly one marker; what it missed is replayed from the database
    assert [(i.kind, seq(i)) for i in drain(fast)] == [("activity", 4)]
    hub.publish(7, rows(7, *range(5, 50)))  # a long burst: still never more than one RESYNC queued
    items = drain(slow)
    assert items.count(RESYNC) == 1 and items[0] == RESYNC and len(items) <= 3
    assert slow.lagged > 1
    assert [seq(i) for i in items[1:]] == list(range(50 - len(items) + 1, 50))  # the newest rows follow it


async def test_close_unsubscribes():
    hub = Hub()
    sub, other = hub.subscribe(1), hub.subscribe()
    sub.close()
    sub.close()  # twice is harmless
    assert hub.subscriber_count == 1
    hub.publish(1, rows(1, 1))
    assert drain(sub) == [] and len(drain(other)) == 1
    other.close()
    assert hub.subscriber_count == 0
    hub.publish(1, rows(1, 2))  # nobody listening: nothing happens, nothing fails


async def test_publish_never_blocks_on_a_subscriber_that_does_not_read():
    hub = Hub(queue_size=10)
    stuck = [hub.subscribe() for _ in range(20)]
    started = time.perf_counter()
    for seq in range(2000):
        hub.publish(1, rows(1, seq))  # a plain call: no await, no waiting for readers
    assert time.perf_counter() - started < 2
    assert all(s.queue.qsize() <= 10 and s.lagged > 0 for s in stuck)


async def test_a_live_session_is_published_as_it_runs(db, make_settings, validator, tmp_path):
    sid = cc.new_session_id()
    lines = cc.structured_stream(sid, healthy())
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": lines}])
    hub = Hub()
    every = hub.subscribe()
    result, _row = await run_session(db, make_settings(fake), validator, hub=hub)
    items = drain(every)
    assert items[0] == HubItem("session_started", result.pk, data={"tier": 1})
    assert items[-1] == HubItem("session_finished", result.pk, data={"status": "completed"})
    activity = items[1:-1]
    assert [seq(i) for i in activity] == list(range(1, len(lines) + 1))
    assert all(i.session_pk == result.pk and i.row["session_pk"] == result.pk and i.row["attempt"] == 1
               for i in activity)
    stored = await db.fetchall("SELECT seq, raw FROM activity WHERE session_pk = ? ORDER BY seq", (result.pk,))
    assert [i.row["raw"] for i in activity] == [r["raw"] for r in stored]


async def test_published_activity_items_are_tagged_activity(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    hub = Hub()
    every = hub.subscribe()
    await run_session(db, make_settings(fake), validator, hub=hub)
    kinds = [i.kind for i in drain(every)]
    assert kinds[0] == "session_started" and kinds[-1] == "session_finished"
    assert set(kinds[1:-1]) == {"activity"}


async def test_prepare_runs_once_per_row_however_many_subscribe():
    calls: list[int] = []

    def prepare(row: dict) -> bytes:
        calls.append(row["seq"])
        return f"frame {row['seq']}".encode()

    hub = Hub(prepare=prepare)
    subs = [hub.subscribe(1) for _ in range(5)]
    hub.publish(1, rows(1, 1, 2))
    assert calls == [1, 2]
    for sub in subs:
        assert [(i.sse, seq(i)) for i in drain(sub)] == [(b"frame 1", 1), (b"frame 2", 2)]


async def test_a_failing_prepare_is_logged_and_never_reaches_the_publisher(caplog):
    def prepare(row: dict) -> bytes:
        raise ValueError("render bug")

    hub = Hub(prepare=prepare)
    sub = hub.subscribe()
    hub.publish(1, rows(1, 1))  # does not raise into the recorder
    [item] = drain(sub)
    assert item.kind == "activity" and item.sse is None and seq(item) == 1  # each stream encodes it instead
    assert "render bug" in caplog.text
