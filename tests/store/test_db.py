from __future__ import annotations

import asyncio
import sqlite3

import pytest

from app.store.db import Database, StoreError
from app.store.migrations import MIGRATIONS


async def test_migrations_recorded_once_and_wal(tmp_path):
    path = tmp_path / "sub" / "x.db"
    async with await Database.open(path) as db:
        names = [r["name"] for r in await db.fetchall("SELECT name FROM migrations ORDER BY name")]
        assert names == [name for name, _ in MIGRATIONS]
        assert await db.fetchval("PRAGMA journal_mode") == "wal"
        assert await db.fetchval("PRAGMA busy_timeout") == 10000
    async with await Database.open(path) as db:  # reopening applies nothing twice
        assert await db.fetchval("SELECT count(*) FROM migrations") == len(MIGRATIONS)


async def test_failed_write_rolls_back_everything(db):
    with pytest.raises(sqlite3.IntegrityError):
        async with db.write() as conn:
            await conn.execute("INSERT INTO sessions (status, started_at) VALUES ('running', 'now')")
            await conn.execute("INSERT INTO sessions (status, started_at) VALUES ('bogus', 'now')")
    assert await db.fetchval("SELECT count(*) FROM sessions") == 0
    async with db.write() as conn:  # the writer is usable afterwards
        await conn.execute("INSERT INTO sessions (status, started_at) VALUES ('running', 'now')")
    assert await db.fetchval("SELECT count(*) FROM sessions") == 1


async def test_reader_sees_committed_writes_only(db):
    async with db.write() as conn:
        await conn.execute("INSERT INTO sessions (status, started_at) VALUES ('running', 'now')")
        assert await db.fetchval("SELECT count(*) FROM sessions") == 0  # reader: not yet committed
    assert await db.fetchval("SELECT count(*) FROM sessions") == 1


async def test_unopenable_database_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot open database"):
        await Database.open(blocker / "x.db")
    not_a_db = tmp_path / "garbage.db"
    not_a_db.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match=r"garbage\.db"):
        await Database.open(not_a_db)


async def _blocked_write_cancelled(path, db: Database) -> None:
    """Another connection holds SQLite's write lock, so ``db.write()`` waits inside BEGIN IMMEDIATE
    (the busy timeout); the task is cancelled there, then the other writer lets go."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")

    async def write() -> None:
        async with db.write() as conn:
            await conn.execute("INSERT INTO sessions (status, started_at) VALUES ('running', 'cancelled')")

    task = asyncio.create_task(write())
    await asyncio.sleep(0.3)  # blocked in BEGIN, in aiosqlite's thread
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    other.execute("ROLLBACK")
    other.close()


async def test_a_write_cancelled_inside_begin_leaves_no_transaction_behind(tmp_path):
    """The cancellation found behind a shutdown that hung on a "swallowed cancel": BEGIN
    still ran in aiosqlite's thread after the task had given up, leaving the writer inside a
    transaction nobody would end; the next write then failed ("cannot start a transaction within a
    transaction") and a loop catching Exception carried on — its cancellation lost."""
    path = tmp_path / "c.db"
    async with await Database.open(path, busy_timeout_ms=5000) as db:
        await _blocked_write_cancelled(path, db)
        async with db.write() as conn:  # the writer is usable, and the cancelled insert is not there
            await conn.execute("INSERT INTO sessions (status, started_at) VALUES ('running', 'after')")
        rows = await db.fetchall("SELECT started_at FROM sessions", fresh=True)
        assert [r["started_at"] for r in rows] == ["after"]


async def test_a_write_cancelled_at_commit_raises_cancelled_and_keeps_the_commit(tmp_path):
    """Cancelled while COMMIT runs: the task ends with CancelledError (never an error from a
    ROLLBACK that comes too late, which a caller's ``except Exception`` would swallow), and the
    commit that already ran stands."""
    path = tmp_path / "d.db"
    async with await Database.open(path) as db:
        committed = asyncio.Event()
        original = db._settle

        async def slow_commit(sql: str) -> None:
            await original(sql)
            if sql == "COMMIT":
                committed.set()
                await asyncio.sleep(0.5)  # the cancel lands here, right after the commit

        db._settle = slow_commit  # type: ignore[method-assign]

        async def write() -> None:
            async with db.write() as conn:
                await conn.execute("INSERT INTO sessions (status, started_at) VALUES ('running', 'kept')")

        task = asyncio.create_task(write())
        await committed.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        db._settle = original  # type: ignore[method-assign]
        assert await db.fetchval("SELECT count(*) FROM sessions", fresh=True) == 1
        async with db.write() as conn:
            await conn.execute("INSERT INTO sessions (status, started_at) VALUES ('running', 'next')")
