"""``app/store/locks.py``: the service locks a run holds while a tier that may act works, taken
all or none in one write transaction, against the database's clock (runs on SQLite and, with
TIEROPS_TEST_STORE=postgresql, on PostgreSQL)."""

from __future__ import annotations

import asyncio

from app.store import locks


def test_a_run_without_a_named_service_takes_the_whole_inventory():
    assert locks.service_lock_names(["db", None, "web", "db"]) == ["service:db", "service:web"]
    assert locks.service_lock_names([None]) == locks.service_lock_names([]) == ["service:*"]


async def test_a_lock_is_one_holders_until_released(db):
    assert await locks.take_locks(db, ["service:db", "service:web"], "a/cycle-1", 30) is None
    assert await locks.take_locks(db, ["service:db"], "b/cycle-1", 30) == "a/cycle-1"
    assert await locks.take_locks(db, ["service:cache", "service:web"], "b/cycle-1", 30) == "a/cycle-1"
    assert await locks.take_locks(db, ["service:cache"], "b/cycle-1", 30) is None  # all or none: cache is free
    assert await locks.take_locks(db, ["service:db"], "a/cycle-1", 30) is None  # its own again: renewed
    await locks.release_locks(db, "a/cycle-1")
    assert await locks.take_locks(db, ["service:db", "service:web"], "b/cycle-1", 30) is None
    assert await db.fetchval("SELECT COUNT(*) FROM leases WHERE holder = 'b/cycle-1'") == 3


async def test_the_whole_inventory_excludes_every_service_and_the_reverse(db):
    assert await locks.take_locks(db, ["service:db"], "a", 30) is None
    assert await locks.take_locks(db, ["service:*"], "b", 30) == "a"
    await locks.release_locks(db, "a")
    assert await locks.take_locks(db, ["service:*"], "b", 30) is None
    assert await locks.take_locks(db, ["service:web"], "c", 30) == "b"


async def test_an_expired_lock_is_taken_over_and_renewal_keeps_it(db):
    assert await locks.take_locks(db, ["service:db"], "dead-node/cycle-1", 0.3) is None
    assert await locks.take_locks(db, ["service:web"], "live/cycle-1", 0.3) is None
    await asyncio.sleep(0.15)
    assert await locks.renew_locks(db, "live/cycle-1", 30) == 1
    await asyncio.sleep(0.3)
    assert await locks.take_locks(db, ["service:db"], "b/cycle-1", 30) is None  # its holder died: expired
    assert await locks.take_locks(db, ["service:web"], "b/cycle-1", 30) == "live/cycle-1"  # renewed in time


async def test_concurrent_takers_get_a_lock_once(db):
    results = await asyncio.gather(*(locks.take_locks(db, ["service:db"], f"n{i}/cycle-1", 30) for i in range(8)))
    assert results.count(None) == 1
