"""``store/nodes.py``: the leader lease against the database's clock, the node list, abandoned sessions.

(On both backends: the store's tests run on PostgreSQL too.)
"""

from __future__ import annotations

import asyncio

from app.clock import shift
from app.store import nodes, sessions


async def test_one_holder_at_a_time_until_the_lease_ends_or_is_given_up(db) -> None:
    first = await nodes.take_lease(db, "leader", "a", 30)
    assert first.held and first.holder == "a" and first.expires_at > first.now
    assert (await nodes.take_lease(db, "leader", "b", 30)) .held is False
    renewed = await nodes.take_lease(db, "leader", "a", 30)
    assert renewed.held and renewed.expires_at >= first.expires_at
    await nodes.release_lease(db, "leader", "b")  # not b's: nothing changes
    assert not (await nodes.take_lease(db, "leader", "b", 30)).held
    await nodes.release_lease(db, "leader", "a")
    assert (await nodes.take_lease(db, "leader", "b", 0.2)).held
    await asyncio.sleep(0.3)  # b's lease ran out without a renewal
    taken = await nodes.take_lease(db, "leader", "a", 30)
    assert taken.held and taken.holder == "a"


async def test_concurrent_takers_get_one_lease(db) -> None:
    results = await asyncio.gather(*(nodes.take_lease(db, "leader", f"n{i}", 30) for i in range(8)))
    assert sum(r.held for r in results) == 1


async def test_the_node_list_and_the_sessions_a_dead_node_left(db) -> None:
    await nodes.register(db, "a", host="h1", pid=1, version="0.1.0", labels="dc-1")
    await nodes.register(db, "b", host="h2", pid=2, version="0.1.0", labels="")
    await nodes.take_lease(db, "leader", "a", 30)
    await nodes.heartbeat(db, "a", running=1)
    listed = {n["id"]: n for n in await nodes.list_nodes(db)}
    assert listed["a"]["leader"] and not listed["b"]["leader"] and listed["a"]["running"] == 1
    assert listed["a"]["labels"] == "dc-1" and listed["b"]["seen_s"] >= 0
    mine = await sessions.create_session(db, tier=1, model="m", trigger="schedule")
    theirs = await sessions.create_session(db, tier=1, model="m", trigger="schedule")
    await nodes.set_session_node(db, mine, "a")
    await nodes.set_session_node(db, theirs, "b")
    now = await nodes.db_now(db)
    assert await nodes.abandoned_sessions(db, shift(now, -60)) == []
    assert await nodes.abandoned_sessions(db, shift(now, 60)) == [(mine, "a"), (theirs, "b")]  # nobody seen since
    await nodes.mark_stopped(db, "b")
    assert await nodes.abandoned_sessions(db, shift(now, -60)) == [(theirs, "b")]


async def test_claims_name_their_node_and_a_dead_nodes_claims_go_back_to_the_queue(db) -> None:
    from app.store import run_queue

    ids = [(await run_queue.enqueue(db, source="alert", tier=1, prompt=f"p{i}", incident_id=None, limit=10))["id"]
           for i in range(3)]
    a = await run_queue.claim_next(db, node_id="a")
    b = await run_queue.claim_next(db, node_id="b")
    assert (a["id"], b["id"]) == (ids[0], ids[1])
    assert await run_queue.fail_unfinished_claims(db, "left by a killed server", node_id="a") == 1  # a's own only
    assert (await run_queue.get_run(db, ids[1], fresh=True))["status"] == "started"
    assert await run_queue.requeue_claims_of(db, ["b"]) == 1
    again = await run_queue.claim_next(db, node_id="c")
    assert again["id"] == ids[1]  # back in its place, before the third
