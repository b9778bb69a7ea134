"""``Database`` (``app/store/db.py``): the reader pool, fresh reads and a closed database."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from app.errors import StoreError
from app.store.db import READERS, Database
from tests.conftest import sqlite_only


async def make_counter(db: Database) -> None:
    async with db.write() as conn:
        await conn.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
        await conn.execute("INSERT INTO counter (id, n) VALUES (1, 0)")
        await conn.executemany("INSERT INTO counter (id, n) VALUES (?, ?)", [(i, i) for i in range(2, 52)])


async def bump(db: Database, n: int) -> None:
    async with db.write() as conn:
        await conn.execute("UPDATE counter SET n = ? WHERE id = 1", (n,))


async def test_pool_has_the_configured_readers():
    assert READERS == 3


async def test_concurrent_reads_all_succeed_on_at_most_three_connections(db):
    await make_counter(db)
    active = 0
    peak = 0
    used: set[int] = set()

    async def one(i: int) -> int:
        nonlocal active, peak
        async with db.read() as conn:
            active += 1
            peak = max(peak, active)
            used.add(id(conn))
            await asyncio.sleep(0.005)  # hold the connection so the reads overlap
            async with conn.execute("SELECT n FROM counter WHERE id = ?", (i % 50 + 2,)) as cur:
                (value,) = await cur.fetchone()
            active -= 1
        return value

    results = await asyncio.gather(*(one(i) for i in range(20)))
    assert results == [i % 50 + 2 for i in range(20)]
    assert peak == 3
    assert len(used) == 3
    # every connection went back to the pool
    assert await asyncio.gather(*(db.fetchval("SELECT count(*) FROM counter") for _ in range(20))) == [51] * 20


async def test_a_read_sees_every_write_committed_before_it(db):
    await make_counter(db)
    stop = asyncio.Event()

    async def slow_reader() -> int:
        """Keeps pooled connections busy, each holding a read snapshot across awaits."""
        reads = 0
        while not stop.is_set():
            async with db.read() as conn, conn.execute("SELECT n FROM counter ORDER BY id") as cur:
                for _ in range(5):
                    await cur.fetchone()
                    await asyncio.sleep(0)
            reads += 1
        return reads

    background = [asyncio.create_task(slow_reader()) for _ in range(2)]
    stale = []
    try:
        for i in range(1, 151):
            await bump(db, i)
            seen = await db.fetchval("SELECT n FROM counter WHERE id = 1")
            if seen != i:
                stale.append((i, seen))
    finally:
        stop.set()
        reads = await asyncio.gather(*background)
    assert stale == [], f"{len(stale)} stale reads, first: {stale[:3]}"
    assert all(r > 0 for r in reads)  # the readers really ran alongside


async def test_read_fresh_waits_for_the_write_in_progress_and_sees_it(db):
    await make_counter(db)
    started, release = asyncio.Event(), asyncio.Event()

    async def long_write() -> None:
        async with db.write() as conn:
            await conn.execute("UPDATE counter SET n = 7 WHERE id = 1")
            started.set()
            await release.wait()

    writer = asyncio.create_task(long_write())
    await started.wait()
    fresh = asyncio.create_task(db.fetchval("SELECT n FROM counter WHERE id = 1", fresh=True))
    await asyncio.sleep(0.02)
    assert not fresh.done()  # behind the write lock
    assert await db.fetchval("SELECT n FROM counter WHERE id = 1") == 0  # a reader sees committed data only
    release.set()
    await writer
    assert await fresh == 7
    async with db.read_fresh() as conn, conn.execute("SELECT n FROM counter WHERE id = 1") as cur:
        assert (await cur.fetchone())[0] == 7


async def test_fetch_helpers(db):
    await make_counter(db)
    rows = await db.fetchall("SELECT id, n FROM counter WHERE id <= 3 ORDER BY id")
    assert [tuple(r) for r in rows] == [(1, 0), (2, 2), (3, 3)]
    assert rows[1]["n"] == 2
    assert (await db.fetchone("SELECT n FROM counter WHERE id = 2"))["n"] == 2
    assert await db.fetchone("SELECT n FROM counter WHERE id = 999") is None
    assert await db.fetchval("SELECT n FROM counter WHERE id = 999") is None
    assert await db.fetchval("SELECT n FROM counter WHERE id = 3", fresh=True) == 3


async def test_a_closed_database_raises_store_error_naming_the_file(tmp_path):
    store = await Database.open(tmp_path / "closed-one.db")
    await store.close()
    await store.close()  # closing twice is harmless
    with pytest.raises(StoreError, match=r"closed-one\.db.*closed"):
        await store.fetchval("SELECT 1")
    with pytest.raises(StoreError, match=r"closed-one\.db"):
        await store.fetchval("SELECT 1", fresh=True)
    with pytest.raises(StoreError, match=r"closed-one\.db"):
        async with store.write():
            pass
    with pytest.raises(StoreError, match=r"closed-one\.db"):
        async with store.read():
            pass
    with pytest.raises(StoreError, match=r"closed-one\.db"):
        async with store.read_fresh():
            pass


async def test_async_with_closes_the_database(tmp_path):
    async with await Database.open(tmp_path / "ctx.db", readers=1) as store:
        assert await store.fetchval("SELECT 1") == 1
    with pytest.raises(StoreError, match=r"ctx\.db"):
        await store.fetchval("SELECT 1")


async def test_a_failed_commit_leaves_the_writer_usable(db):
    sqlite_only(db, 'a deferred foreign key (PRAGMA defer_foreign_keys)')
    # A deferred foreign key is only checked at COMMIT: the COMMIT itself fails.
    with pytest.raises(sqlite3.IntegrityError):
        async with db.write() as conn:
            await conn.execute("PRAGMA defer_foreign_keys = ON")
            await conn.execute("INSERT INTO activity (session_pk, seq, ts, type, display, raw)"
                               " VALUES (999, 1, 'ts', 'system', 'd', '{}')")
    async with db.write() as conn:  # fails today: "cannot start a transaction within a transaction"
        await conn.execute("INSERT INTO sessions (status, started_at) VALUES ('running', 'now')")
    assert await db.fetchval("SELECT count(*) FROM sessions") == 1
    assert await db.fetchval("SELECT count(*) FROM activity") == 0
