"""The one owner of SQLite connections.

Why: the supervisor ingests stream lines while pages read them, so writes and reads must not
trip over each other. Rules, following datasette's ``Database``:

* one writer connection; every write goes through :meth:`Database.write`, which serialises
  writers with an asyncio lock and wraps the block in ``BEGIN IMMEDIATE`` … ``COMMIT``
  (``ROLLBACK`` on any exception, so a failed ingest loses nothing already stored);
* a separate reader connection for queries (WAL lets it read while the writer writes);
* WAL, ``busy_timeout``, foreign keys on; named, ordered migrations applied at :meth:`open`.

Callers never hold a connection outside these context managers.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from app.store.migrations import MIGRATIONS

BUSY_TIMEOUT_MS = 10_000


class StoreError(Exception):
    """The database could not be opened or migrated. The message names the file and the cause."""


async def _connect(path: str) -> aiosqlite.Connection:
    conn = await aiosqlite.connect(path, isolation_level=None)  # we issue BEGIN ourselves
    try:
        conn.row_factory = sqlite3.Row
        await conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        await conn.execute("PRAGMA foreign_keys = ON")
        await conn.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        await conn.close()  # an unclosed aiosqlite connection's thread keeps the process alive
        raise
    return conn


class Database:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._write_lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: str | Path) -> Database:
        db = cls(path)
        try:
            if db.path != ":memory:":
                Path(db.path).parent.mkdir(parents=True, exist_ok=True)
            db._writer = await _connect(db.path)
            # 16 KiB pages: activity rows carry whole stream lines (often KBs, sometimes MBs);
            # larger pages cut overflow chains and made bulk ingest ~25 % faster (bench/ingest.py).
            # Only takes effect when the file is new.
            await db._writer.execute("PRAGMA page_size = 16384")
            await db._writer.execute("PRAGMA journal_mode = WAL")
            await db._writer.execute("PRAGMA wal_autocheckpoint = 2000")  # ~32 MiB of WAL between checkpoints
            await db._migrate()
            db._reader = await _connect(db.path)
        except (sqlite3.Error, OSError) as exc:
            await db.close()
            raise StoreError(f"cannot open database {db.path}: {exc}") from None
        return db

    async def close(self) -> None:
        for conn in (self._reader, self._writer):
            if conn is not None:
                await conn.close()
        self._reader = self._writer = None

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _migrate(self) -> None:
        assert self._writer is not None
        await self._writer.execute(
            "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
        )
        async with self._writer.execute("SELECT name FROM migrations") as cur:
            done = {row[0] for row in await cur.fetchall()}
        for name, sql in MIGRATIONS:
            if name in done:
                continue
            async with self.write() as conn:
                for statement in _split_sql(sql):
                    await conn.execute(statement)
                await conn.execute(
                    "INSERT INTO migrations (name, applied_at) VALUES (?, strftime('%Y-%m-%dT%H:%M:%fZ','now'))",
                    (name,),
                )

    @asynccontextmanager
    async def write(self) -> AsyncIterator[aiosqlite.Connection]:
        """One serialised write transaction (``BEGIN IMMEDIATE``)."""
        if self._writer is None:
            raise StoreError("database is closed")
        async with self._write_lock:
            await self._writer.execute("BEGIN IMMEDIATE")
            try:
                yield self._writer
            except BaseException:
                await self._writer.execute("ROLLBACK")
                raise
            else:
                await self._writer.execute("COMMIT")

    async def fetchall(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        if self._reader is None:
            raise StoreError("database is closed")
        async with self._reader.execute(sql, tuple(params)) as cur:
            return list(await cur.fetchall())

    async def fetchone(self, sql: str, params: Iterable[Any] = ()) -> sqlite3.Row | None:
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    async def fetchval(self, sql: str, params: Iterable[Any] = ()) -> Any:
        row = await self.fetchone(sql, params)
        return row[0] if row else None


def _split_sql(sql: str) -> list[str]:
    """Split a migration into statements (migrations contain no semicolons inside literals)."""
    return [s.strip() for s in sql.split(";") if s.strip()]
