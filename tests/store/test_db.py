from __future__ import annotations

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
