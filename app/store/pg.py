"""The store on PostgreSQL: the same :class:`~app.store.db.Database` rules, on psycopg 3.

Why the same shape: every store module talks to a connection that executes SQL and yields rows
indexable by position and by name. This module gives the store that connection on PostgreSQL
(:class:`PgConnection`), with the statements translated once (``dialect.py``), so each store
function works on both backends. What it keeps of SQLite's rules, and how:

* one writer per process (an asyncio lock), and every write transaction takes the same
  transaction-scoped advisory lock first: writers of every node are serialised exactly as
  ``BEGIN IMMEDIATE`` serialises SQLite's (a read-then-write, such as claiming the last cooldown
  slot, cannot interleave with another node's);
* a small pool of reader connections (autocommit: each statement sees what was committed);
* ``lastrowid`` after an ``INSERT`` into a table with an ``id`` column (``RETURNING id`` is added);
* sums and averages come back as ``int``/``float``, never ``Decimal``;
* migrations: the same named list, each with its row in one transaction (``dialect.ddl``).

The connection URL is shown with its password removed (``safe_url``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import sqlite3
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from app.errors import StoreError
from app.redact import Redactor
from app.store.db import Database
from app.store.dialect import ddl, translate
from app.store.migrations import MIGRATIONS

log = logging.getLogger(__name__)

__all__ = ["PgConnection", "PgDatabase", "PgInfo", "PgRow", "inspect_postgres", "safe_url"]

READERS = 3
WRITE_LOCK_KEY = 0x7469_6572_6F70  # "tierop": the advisory lock every write transaction takes
_INSERT = re.compile(r"^\s*INSERT\s+(?:OR\s+\w+\s+)?INTO\s+([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)


def safe_url(url: str) -> str:
    """``url`` without its password (for messages and logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "postgresql://(unreadable URL)"
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.split(':', 1)[0]}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


class PgRow(tuple[Any, ...]):
    """A row by position and by name, like ``sqlite3.Row`` (``dict(row)`` works)."""

    _names: tuple[str, ...]
    _index: dict[str, int]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def _row_factory(cursor: Any) -> Any:
    names = tuple(d.name for d in cursor.description or ())
    index = {n: i for i, n in enumerate(names)}

    def make(values: Sequence[Any]) -> PgRow:
        row = PgRow(_plain(v) for v in values)
        row._names, row._index = names, index
        return row

    return make


def _params(params: Any) -> Any:
    """SQLite's parameters as PostgreSQL takes them: booleans as 0/1 (the columns are integers)."""
    if isinstance(params, dict):
        return {k: int(v) if isinstance(v, bool) else v for k, v in params.items()}
    return tuple(int(v) if isinstance(v, bool) else v for v in params or ())


@contextlib.asynccontextmanager
async def _as_sqlite_errors() -> AsyncIterator[None]:
    """A constraint PostgreSQL refused raises what SQLite's would (``sqlite3.IntegrityError``):
    the store's callers catch that one, whichever backend is below."""
    import psycopg

    try:
        yield
    except psycopg.errors.IntegrityError as exc:
        raise sqlite3.IntegrityError(" ".join(str(exc).split())) from exc


class PgCursor:
    """What ``conn.execute`` returns: awaitable, and an async context manager, like aiosqlite's."""

    def __init__(self, conn: PgConnection, sql: str, params: Any) -> None:
        self._conn, self._sql, self._params = conn, sql, params
        self._rows: list[PgRow] = []
        self.rowcount = -1
        self.lastrowid: int | None = None
        self._done = False

    async def _run(self) -> PgCursor:
        if not self._done:
            self._done = True
            sql = translate(self._sql)
            table = _INSERT.match(self._sql)
            wants_id = (table is not None and table.group(1).lower() in self._conn.id_tables
                        and not re.search(r"\bRETURNING\b", sql, re.IGNORECASE))
            if wants_id:
                sql = sql.rstrip().rstrip(";") + " RETURNING id"
            async with self._conn.raw.cursor(row_factory=_row_factory) as cur, _as_sqlite_errors():
                await cur.execute(sql, _params(self._params))
                self.rowcount = cur.rowcount
                if cur.description is not None:
                    self._rows = list(await cur.fetchall())
            if wants_id:
                self.lastrowid = int(self._rows[0][0]) if self._rows else None
                self._rows = []
        return self

    def __await__(self) -> Any:
        return self._run().__await__()

    async def __aenter__(self) -> PgCursor:
        return await self._run()

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def fetchall(self) -> list[PgRow]:
        await self._run()
        rows, self._rows = self._rows, []
        return rows

    async def fetchone(self) -> PgRow | None:
        await self._run()
        return self._rows.pop(0) if self._rows else None

    async def close(self) -> None:
        self._rows = []


class PgConnection:
    """One psycopg connection with the interface the store uses of aiosqlite's. A connection the
    server dropped (a restart, a network cut) is opened again before its next use
    (:meth:`alive`): the statement that met the failure raised (a transient fault its caller
    retries), the next one works once the server answers."""

    def __init__(self, raw: Any, id_tables: set[str], url: str = "") -> None:
        self.raw = raw
        self.id_tables = id_tables
        self.url = url
        self.in_transaction = False

    async def alive(self) -> None:
        if self.raw.closed or self.raw.broken:
            import psycopg

            with contextlib.suppress(Exception):
                await self.raw.close()
            self.raw = await psycopg.AsyncConnection.connect(self.url, autocommit=True, connect_timeout=5)
            log.info("reconnected to %s", safe_url(self.url))

    def execute(self, sql: str, params: Any = ()) -> PgCursor:
        return PgCursor(self, sql, params)

    async def executemany(self, sql: str, seq: Iterable[Any]) -> None:
        async with self.raw.cursor() as cur, _as_sqlite_errors():
            await cur.executemany(translate(sql), [_params(p) for p in seq])

    async def executescript(self, script: str) -> None:
        await self.raw.execute(translate(script).replace("%%", "%"))

    async def close(self) -> None:
        await self.raw.close()


class PgDatabase(Database):
    """The :class:`~app.store.db.Database` interface on PostgreSQL (``open(url)``): every store
    function takes either."""

    dialect = "postgresql"

    def __init__(self, url: str, readers: int = READERS, redact: Redactor | None = None) -> None:
        self.url = url
        self.path = safe_url(url)  # what messages name
        self.redact: Redactor = redact if redact is not None else Redactor.from_environment()
        self._writer: PgConnection | None = None  # type: ignore[assignment]
        self._readers: list[PgConnection] = []  # type: ignore[assignment]
        self._idle: asyncio.Queue[PgConnection] = asyncio.Queue()  # type: ignore[assignment]
        self._reader_count = max(1, readers)
        self._write_lock = asyncio.Lock()
        self.id_tables: set[str] = set()

    @classmethod
    async def open(cls, url: str, readers: int = READERS, redact: Redactor | None = None) -> PgDatabase:  # type: ignore[override]
        db = cls(url, readers, redact)
        try:
            import psycopg
        except ImportError:
            raise StoreError("PostgreSQL needs the psycopg package: pip install 'tierops[postgres]'") from None
        try:
            writer = await psycopg.AsyncConnection.connect(url, autocommit=True)
            db._writer = PgConnection(writer, db.id_tables, url)
            await db._migrate(db._writer)
            await db._load_id_tables()
            for _ in range(db._reader_count):
                raw = await psycopg.AsyncConnection.connect(url, autocommit=True)
                conn = PgConnection(raw, db.id_tables, url)
                db._readers.append(conn)
                db._idle.put_nowait(conn)
        except psycopg.Error as exc:
            await db.close()
            raise StoreError(f"cannot open database {db.path}: {' '.join(str(exc).split())}") from None
        log.debug("opened %s with %d readers", db.path, len(db._readers))
        return db

    async def _load_id_tables(self) -> None:
        assert self._writer is not None  # noqa: S101
        async with self._writer.execute(
                "SELECT table_name FROM information_schema.columns WHERE table_schema = current_schema()"
                " AND column_name = 'id' AND data_type IN ('bigint', 'integer')") as cur:
            self.id_tables.clear()
            self.id_tables.update(r[0] for r in await cur.fetchall())

    async def close(self) -> None:
        for conn in (*self._readers, self._writer):
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
        self._readers = []
        self._idle = asyncio.Queue()
        self._writer = None

    async def __aenter__(self) -> PgDatabase:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _migrate(self, writer: PgConnection) -> None:  # type: ignore[override]
        raw = writer.raw
        async with self._write_lock:
            await raw.execute("BEGIN")
            try:
                # Nodes starting at once: one migrates, the others wait here and find it done (the
                # table too: CREATE … IF NOT EXISTS is not safe against a concurrent one).
                await raw.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK_KEY,))
                await raw.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY,"
                                  " applied_at TEXT NOT NULL)")
                cur = await raw.execute("SELECT name FROM migrations")
                done = {row[0] for row in await cur.fetchall()}
                for name, sql in MIGRATIONS:
                    if name in done:
                        continue
                    await raw.execute(ddl(sql))
                    await raw.execute("INSERT INTO migrations (name, applied_at) VALUES (%s, to_char(now() AT TIME"
                                      " ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'))", (name,))
                    log.info("database %s: applied migration %s", self.path, name)
                await raw.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(Exception):
                    await raw.execute("ROLLBACK")
                raise

    # -- writing -----------------------------------------------------------------------------

    @asynccontextmanager
    async def write(self) -> AsyncIterator[PgConnection]:  # type: ignore[override]
        """One serialised write transaction (this process's lock, then every node's)."""
        if self._writer is None:
            raise StoreError(f"database {self.path} is closed")
        writer = self._writer
        async with self._write_lock:
            await writer.alive()
            await writer.raw.execute("BEGIN")
            writer.in_transaction = True
            try:
                await writer.raw.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK_KEY,))
                yield writer
                await writer.raw.execute("COMMIT")
            except BaseException:
                try:
                    await writer.raw.execute("ROLLBACK")
                except Exception as exc:
                    log.warning("database %s: ROLLBACK failed: %s", self.path, exc)
                raise
            finally:
                writer.in_transaction = False

    async def write_problem(self, timeout: float) -> str | None:
        """Why the database cannot be written now (None: it can): a write transaction of a
        connection of its own (a read-only server, a lost connection, the write lock held past
        ``timeout`` show), rolled back; the writer is never held up by a health check."""
        import psycopg

        try:
            async with await psycopg.AsyncConnection.connect(self.url, autocommit=True,
                                                             connect_timeout=max(1, int(timeout))) as conn:
                await conn.execute(f"SET statement_timeout = {int(timeout * 1000)}")
                await conn.execute("BEGIN READ WRITE")
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK_KEY,))
                await conn.execute("CREATE TEMP TABLE tierops_write_probe (x int) ON COMMIT DROP")
                await conn.execute("ROLLBACK")
        except (psycopg.Error, OSError) as exc:
            return " ".join(str(exc).split()) or type(exc).__name__
        return None

    # -- reading -----------------------------------------------------------------------------

    @asynccontextmanager
    async def read(self) -> AsyncIterator[PgConnection]:  # type: ignore[override]
        if not self._readers:
            raise StoreError(f"database {self.path} is closed")
        conn = await self._idle.get()
        try:
            await conn.alive()
            yield conn
        finally:
            self._idle.put_nowait(conn)

    @asynccontextmanager
    async def read_fresh(self) -> AsyncIterator[PgConnection]:  # type: ignore[override]
        if self._writer is None:
            raise StoreError(f"database {self.path} is closed")
        async with self._write_lock:
            await self._writer.alive()
            yield self._writer

    async def fetchall(self, sql: str, params: Iterable[Any] = (), *, fresh: bool = False) -> list[PgRow]:  # type: ignore[override]
        ctx = self.read_fresh() if fresh else self.read()
        async with ctx as conn, conn.execute(sql, params if isinstance(params, dict) else tuple(params)) as cur:
            return list(await cur.fetchall())

    async def fetchone(self, sql: str, params: Iterable[Any] = (), *, fresh: bool = False) -> PgRow | None:  # type: ignore[override]
        rows = await self.fetchall(sql, params, fresh=fresh)
        return rows[0] if rows else None

    async def fetchval(self, sql: str, params: Iterable[Any] = (), *, fresh: bool = False) -> Any:
        row = await self.fetchone(sql, params, fresh=fresh)
        return row[0] if row else None


@dataclasses.dataclass(frozen=True)
class PgInfo:
    """What ``tierops doctor`` says of a PostgreSQL store (read only: nothing is created)."""

    url: str  # without its password
    error: str | None = None
    applied: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    sessions: int = 0
    version: str = ""


def inspect_postgres(url: str, timeout: float = 5.0) -> PgInfo:
    """Connect, read the migrations and the sessions count; never writes (blocking)."""
    shown = safe_url(url)
    try:
        import psycopg
    except ImportError:
        return PgInfo(shown, error="the psycopg package is not installed: pip install 'tierops[postgres]'")
    try:
        with psycopg.connect(url, connect_timeout=max(1, int(timeout)), autocommit=True) as conn:
            version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
            exists = conn.execute("SELECT to_regclass('migrations') IS NOT NULL").fetchone()
            applied: tuple[str, ...] = ()
            sessions = 0
            if exists and exists[0]:
                applied = tuple(str(r[0]) for r in conn.execute("SELECT name FROM migrations ORDER BY name"))
                counted = conn.execute("SELECT count(*) FROM sessions").fetchone() if "0001_initial" in applied \
                    else None
                sessions = int(counted[0]) if counted else 0
    except psycopg.Error as exc:
        return PgInfo(shown, error=" ".join(str(exc).split()))
    known = [name for name, _ in MIGRATIONS]
    return PgInfo(shown, applied=applied, pending=tuple(n for n in known if n not in applied),
                  unknown=tuple(n for n in applied if n not in known), sessions=sessions, version=version)
