"""The one owner of SQLite connections.

Why: the supervisor ingests stream lines while pages read them, so writes and reads must not
trip over each other. Rules, following datasette's ``Database``:

* one writer connection; every write goes through :meth:`Database.write`, which serialises
  writers with an asyncio lock and wraps the block in ``BEGIN IMMEDIATE`` … ``COMMIT``
  (``ROLLBACK`` on any exception, so a failed ingest loses nothing already stored);
* a small pool of reader connections (:meth:`Database.read`): a read borrows one connection for
  its whole statement, so concurrent requests never interleave cursors on a shared connection
  (one shared reader let a request see a snapshot older than a write it had just made).
  :meth:`Database.read_fresh` reads on the writer, behind the write lock, for answers that
  must include the caller's own last write;
* WAL, ``busy_timeout``, foreign keys on; named, ordered migrations applied at :meth:`open`.

Only modules under ``app/store/`` use this class's connections; the rest of TierOps calls the
named functions of those modules (``tests/test_layers.py`` enforces it).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import sqlite3
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from app.errors import StoreError
from app.redact import Redactor
from app.store.migrations import MIGRATIONS

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 10_000
READERS = 3  # 2 cores: more readers only add threads (bench/pages.py)

__all__ = ["BUSY_TIMEOUT_MS", "READERS", "Database", "StoreError", "describe_storage_error", "is_transient"]

# SQLite's result codes for faults that may pass: another process holds the lock beyond the busy
# timeout, the disk is full, an I/O error (a network filesystem hiccup, a volume remounted).
_TRANSIENT = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_FULL", "SQLITE_IOERR", "SQLITE_PROTOCOL", "SQLITE_CANTOPEN")


def is_transient(exc: BaseException) -> bool:
    """A storage fault worth retrying, as opposed to a bug (a constraint, bad SQL)."""
    if isinstance(exc, sqlite3.OperationalError):
        name = getattr(exc, "sqlite_errorname", "") or ""
        text = str(exc).lower()
        return name.startswith(_TRANSIENT) or any(
            s in text for s in ("locked", "disk is full", "disk i/o error", "unable to open"))
    # PostgreSQL (app/store/pg.py): a lost or refused connection, the server shutting down or in
    # recovery, a lock or statement timeout, a serialization failure: psycopg's OperationalError
    # (its SQLSTATE classes 08, 53, 57, 40 and 55P03 all raise one).
    if type(exc).__module__.startswith("psycopg") and any(
            cls.__name__ == "OperationalError" for cls in type(exc).__mro__):
        return True
    return isinstance(exc, OSError)


def describe_storage_error(exc: BaseException) -> str:
    """One line for a storage fault: what failed and what to do."""
    if (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or "disk is full" in str(exc).lower():
        return f"the disk is full ({exc}); free some space and run the same command again"
    return f"{type(exc).__name__}: {exc}"


async def _connect(path: str, busy_timeout_ms: int) -> aiosqlite.Connection:
    conn = await aiosqlite.connect(path, isolation_level=None)  # we issue BEGIN ourselves
    try:
        conn.row_factory = sqlite3.Row
        await conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        await conn.execute("PRAGMA foreign_keys = ON")
        await conn.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        await conn.close()  # an unclosed aiosqlite connection's thread keeps the process alive
        raise
    return conn


class Database:
    """``redact`` masks secrets in every free text a store function writes: argv,
    prompts, stderr, summaries, routed findings, memories, attempts. Stream lines are redacted by
    the recorder before they are parsed (the parsed values must not hold secrets either). The
    default knows the environment's secret-named variables and the common key shapes; the server
    and the CLI replace it with one that also knows the dashboard token."""

    dialect = "sqlite"  # app/store/pg.py: "postgresql"

    def __init__(self, path: str | Path, readers: int = READERS, redact: Redactor | None = None,
                 busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        self.path = str(path)
        self.busy_timeout_ms = busy_timeout_ms
        self.redact: Redactor = redact if redact is not None else Redactor.from_environment()
        self._writer: aiosqlite.Connection | None = None
        self._readers: list[aiosqlite.Connection] = []
        self._idle: asyncio.Queue[aiosqlite.Connection] = asyncio.Queue()
        self._reader_count = max(1, readers)
        self._write_lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: str | Path, readers: int = READERS, redact: Redactor | None = None,
                   busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> Database:
        db = cls(path, readers, redact, busy_timeout_ms)
        try:
            if db.path != ":memory:":
                Path(db.path).parent.mkdir(parents=True, exist_ok=True)
            db._writer = await _connect(db.path, busy_timeout_ms)
            # 16 KiB pages: activity rows carry whole stream lines (often KBs, sometimes MBs);
            # larger pages cut overflow chains and made bulk ingest ~25 % faster (bench/ingest.py).
            # Only takes effect when the file is new.
            await db._writer.execute("PRAGMA page_size = 16384")
            # Pruned space can be given back in small steps (PRAGMA incremental_vacuum,
            # app/store/retention.py). Like page_size, only a new file takes it (before its first table).
            await db._writer.execute("PRAGMA auto_vacuum = INCREMENTAL")
            await db._writer.execute("PRAGMA journal_mode = WAL")
            await db._writer.execute("PRAGMA wal_autocheckpoint = 2000")  # ~32 MiB of WAL between checkpoints
            await db._migrate(db._writer)
            for _ in range(db._reader_count):
                conn = await _connect(db.path, busy_timeout_ms)
                db._readers.append(conn)
                db._idle.put_nowait(conn)
        except (sqlite3.Error, OSError) as exc:
            await db.close()
            raise StoreError(f"cannot open database {db.path}: {exc}") from None
        log.debug("opened %s with %d readers", db.path, len(db._readers))
        return db

    async def close(self) -> None:
        for conn in (*self._readers, self._writer):
            if conn is not None:
                await conn.close()
        self._readers = []
        self._idle = asyncio.Queue()
        self._writer = None

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _migrate(self, writer: aiosqlite.Connection) -> None:
        await writer.execute(
            "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
        )
        async with writer.execute("SELECT name FROM migrations") as cur:
            done = {row[0] for row in await cur.fetchall()}
        for name, sql in MIGRATIONS:
            if name in done:
                continue
            # One script per migration, in one transaction with its row: a statement at a time
            # through aiosqlite's thread was ~300 round trips and most of the cost of a new file.
            script = (f"BEGIN IMMEDIATE;\n{sql.strip().rstrip(';')};\n"
                      f"INSERT INTO migrations (name, applied_at) VALUES ({_sql_text(name)}, "
                      "strftime('%Y-%m-%dT%H:%M:%fZ','now'));\nCOMMIT;")
            async with self._write_lock:
                try:
                    await writer.executescript(script)
                except BaseException:
                    if writer.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            await writer.execute("ROLLBACK")
                    raise
            log.info("database %s: applied migration %s", self.path, name)

    # -- writing -----------------------------------------------------------------------------

    @asynccontextmanager
    async def write(self) -> AsyncIterator[aiosqlite.Connection]:
        """One serialised write transaction (``BEGIN IMMEDIATE``)."""
        if self._writer is None:
            raise StoreError(f"database {self.path} is closed")
        async with self._write_lock:
            try:
                await self._settle("BEGIN IMMEDIATE")
                yield self._writer
                await self._settle("COMMIT")
            except BaseException:
                # Also when COMMIT itself failed (a deferred constraint, a full disk), or the task
                # was cancelled: otherwise the connection stays inside the transaction and every
                # later write fails. A failing ROLLBACK never replaces why we roll back (a
                # CancelledError replaced by an sqlite3 error is a cancellation a caller's
                # ``except Exception`` swallows, and a shutdown waiting for that task hangs).
                if self._writer.in_transaction:
                    try:
                        await self._settle("ROLLBACK")
                    except sqlite3.Error as exc:
                        log.warning("database %s: ROLLBACK failed: %s", self.path, exc)
                raise

    async def _settle(self, sql: str) -> None:
        """Run a transaction statement on the writer to its end, even when the task is cancelled
        meanwhile (then :class:`asyncio.CancelledError` is raised once it has ended).

        Why: aiosqlite runs the statement in its thread; a cancelled ``await`` leaves it running.
        A BEGIN that completes after its task gave up left the writer inside a transaction nobody
        would end, and the next write failed with "cannot start a transaction within a
        transaction" (tests/store/test_db.py). Waiting for it keeps what the connection is in
        and what this code believes the same."""
        assert self._writer is not None  # noqa: S101 (write() checked it)
        done = asyncio.ensure_future(self._writer.execute(sql))
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):  # the statement's own failure: in_transaction says
                await done
            raise

    # -- reading -----------------------------------------------------------------------------

    @asynccontextmanager
    async def read(self) -> AsyncIterator[aiosqlite.Connection]:
        """Borrow a reader connection for the block (waits while all are busy)."""
        if not self._readers:
            raise StoreError(f"database {self.path} is closed")
        conn = await self._idle.get()
        try:
            yield conn
        finally:
            self._idle.put_nowait(conn)

    @asynccontextmanager
    async def read_fresh(self) -> AsyncIterator[aiosqlite.Connection]:
        """Read on the writer connection, after every write this process has committed."""
        if self._writer is None:
            raise StoreError(f"database {self.path} is closed")
        async with self._write_lock:
            yield self._writer

    async def fetchall(self, sql: str, params: Iterable[Any] = (), *, fresh: bool = False) -> list[sqlite3.Row]:
        ctx = self.read_fresh() if fresh else self.read()
        async with ctx as conn, conn.execute(sql, tuple(params)) as cur:
            return list(await cur.fetchall())

    async def fetchone(self, sql: str, params: Iterable[Any] = (), *, fresh: bool = False) -> sqlite3.Row | None:
        rows = await self.fetchall(sql, params, fresh=fresh)
        return rows[0] if rows else None

    async def fetchval(self, sql: str, params: Iterable[Any] = (), *, fresh: bool = False) -> Any:
        row = await self.fetchone(sql, params, fresh=fresh)
        return row[0] if row else None


def _sql_text(value: str) -> str:
    """A string literal in SQL (a migration's name inside its script)."""
    return "'" + value.replace("'", "''") + "'"
