"""Retention: the SQL behind ``tierops prune`` and the server's daily prune.

Why a module of its own: pruning deletes whole escalation chains, in short write transactions,
then gives the space back in small steps. Each step is one function here; the engine
(``app/engine/retention.py``) decides *what* goes and *when*, this module only *how*.

What it deliberately does: a set of linked sessions is deleted by one ``DELETE`` statement, so
references inside the set never dangle, and every delete re-checks inside its own transaction that
no member is running or recent and that no session outside the set points into it (a new
escalation since the plan was made): a set that fails the check is left alone, never half
deleted. Cascades remove the activity, output attempts, check results and cooldowns; events and
memories stay, their session set to NULL. A big transcript goes first, in chunks of activity rows
(:func:`delete_activity`), each its own transaction. Space: :func:`incremental_vacuum` returns a
few hundred free pages per call on a file with incremental auto-vacuum; an older file reuses its
free pages but never shrinks until :func:`full_vacuum` (blocking) converts it. Lists of session
ids travel as one JSON parameter read with ``json_each``: one prepared statement whatever the
length.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict, cast

import aiosqlite

from app.store.db import Database
from app.vocab import SessionStatus

log = logging.getLogger(__name__)

__all__ = [
    "PruneCounts",
    "RetentionRow",
    "RunningCLI",
    "SpaceInfo",
    "checkpoint",
    "count_rows",
    "delete_activity",
    "delete_maintenance_windows",
    "delete_sessions",
    "existing_sessions",
    "full_vacuum",
    "incremental_vacuum",
    "retention_rows",
    "running_clis",
    "space_info",
]

AUTO_VACUUM_MODES = {0: "none", 1: "full", 2: "incremental"}


@dataclass(frozen=True, slots=True)
class RetentionRow:
    """What retention needs to know about one session."""

    id: int
    chain_id: int | None
    parent_session_id: int | None
    escalated_to: int | None
    running: bool
    last_at: str  # ended_at, else started_at: when the session last did something
    line_count: int


class PruneCounts(TypedDict):
    """Rows a set of sessions holds: deleted with them (``sessions`` … ``cooldowns``) or kept
    without their session reference (``events``, ``memories``)."""

    sessions: int
    activity: int
    output_attempts: int
    check_results: int
    cooldowns: int
    events: int
    memories: int


def _ids(ids: Sequence[int]) -> str:
    return json.dumps([int(i) for i in ids])


async def retention_rows(db: Database) -> list[RetentionRow]:
    """Every session, oldest first, with its links and age (one read, the engine groups them)."""
    rows = await db.fetchall(
        "SELECT id, chain_id, parent_session_id, escalated_to, status = ? AS running,"
        " coalesce(ended_at, started_at) AS last_at, line_count FROM sessions ORDER BY id",
        (SessionStatus.RUNNING,))
    return [RetentionRow(id=r["id"], chain_id=r["chain_id"], parent_session_id=r["parent_session_id"],
                         escalated_to=r["escalated_to"], running=bool(r["running"]), last_at=str(r["last_at"]),
                         line_count=int(r["line_count"] or 0)) for r in rows]


@dataclass(frozen=True)
class RunningCLI:
    """A session still ``running``: its CLI's files are kept (a resume may follow)."""

    id: int
    cwd: str | None  # None until the launch is recorded
    session_id: str | None  # the CLI's session id, once its first line said it
    started_at: str


async def running_clis(db: Database) -> list[RunningCLI]:
    """Every session still ``running`` (this process's own writes included), oldest first."""
    rows = await db.fetchall("SELECT id, cwd, session_id, started_at FROM sessions WHERE status = ? ORDER BY id",
                             (SessionStatus.RUNNING,), fresh=True)
    return [RunningCLI(id=r["id"], cwd=r["cwd"], session_id=r["session_id"], started_at=str(r["started_at"]))
            for r in rows]


_COUNTS = """
    WITH ids(id) AS (SELECT value FROM json_each(?))
    SELECT (SELECT count(*) FROM sessions WHERE id IN ids) AS sessions,
           (SELECT count(*) FROM activity WHERE session_pk IN ids) AS activity,
           (SELECT count(*) FROM output_attempts WHERE session_pk IN ids) AS output_attempts,
           (SELECT count(*) FROM check_results WHERE session_pk IN ids) AS check_results,
           (SELECT count(*) FROM cooldowns WHERE session_pk IN ids) AS cooldowns,
           (SELECT count(*) FROM events WHERE session_pk IN ids) AS events,
           (SELECT count(*) FROM memories WHERE created_by_session IN ids OR reinforced_by_session IN ids) AS memories
"""


async def _counts(conn: aiosqlite.Connection, ids_json: str) -> PruneCounts:
    async with conn.execute(_COUNTS, (ids_json,)) as cur:
        row = await cur.fetchone()
    if row is None:  # pragma: no cover - an aggregate always answers
        raise RuntimeError("count query returned no row")
    return cast(PruneCounts, {k: int(row[k]) for k in row.keys()})  # noqa: SIM118 (sqlite3.Row)


async def count_rows(db: Database, ids: Sequence[int]) -> PruneCounts:
    """What deleting ``ids`` would delete and unlink (the dry run; reads only)."""
    async with db.read() as conn:
        return await _counts(conn, _ids(ids))


_STILL_PRUNABLE = """
    WITH ids(id) AS (SELECT value FROM json_each(:ids))
    SELECT NOT EXISTS (SELECT 1 FROM sessions WHERE id IN ids
                       AND (status = :running OR coalesce(ended_at, started_at) >= :cutoff))
       AND NOT EXISTS (SELECT 1 FROM sessions WHERE chain_id IN ids AND id NOT IN ids)
       AND NOT EXISTS (SELECT 1 FROM sessions WHERE parent_session_id IN ids AND id NOT IN ids)
       AND NOT EXISTS (SELECT 1 FROM sessions WHERE escalated_to IN ids AND id NOT IN ids)
"""


async def _still_prunable(conn: aiosqlite.Connection, ids_json: str, cutoff: str) -> bool:
    """Inside the caller's write transaction: no member is running or as new as ``cutoff``, and no
    session outside the set refers to one of them. (The indexes of migration 0004 make the last
    three lookups cheap.)"""
    async with conn.execute(_STILL_PRUNABLE, {"ids": ids_json, "running": SessionStatus.RUNNING,
                                              "cutoff": cutoff}) as cur:
        row = await cur.fetchone()
    return bool(row and row[0])


async def delete_activity(db: Database, ids: Sequence[int], cutoff: str, limit: int) -> int | None:
    """Delete up to ``limit`` stored lines of the sessions ``ids``, in one short transaction.

    Returns how many went (0: none left), or None when the set is no longer prunable (see
    :func:`_still_prunable`); then nothing is deleted.
    """
    ids_json = _ids(ids)
    async with db.write() as conn:
        if not await _still_prunable(conn, ids_json, cutoff):
            return None
        cur = await conn.execute(
            "DELETE FROM activity WHERE id IN (SELECT id FROM activity"
            " WHERE session_pk IN (SELECT value FROM json_each(?)) LIMIT ?)", (ids_json, int(limit)))
        return max(cur.rowcount, 0)


async def delete_sessions(db: Database, units: Sequence[Sequence[int]],
                          cutoff: str) -> list[tuple[list[int], PruneCounts]]:
    """Delete each set of sessions in ``units`` whole, all in one write transaction.

    A set that is no longer prunable is skipped. Returns the sets deleted, each with what it held
    at the moment it went (counted in the same transaction).
    """
    done: list[tuple[list[int], PruneCounts]] = []
    async with db.write() as conn:
        for unit in units:
            ids_json = _ids(unit)
            if not await _still_prunable(conn, ids_json, cutoff):
                log.info("sessions %s are no longer prunable (a new reference or a status change); kept",
                         list(unit))
                continue
            counts = await _counts(conn, ids_json)
            # One statement for the whole set: its members may refer to each other, and SQLite
            # checks (immediate) foreign keys at the end of the statement.
            await conn.execute("DELETE FROM sessions WHERE id IN (SELECT value FROM json_each(?))", (ids_json,))
            done.append((list(unit), counts))
    return done


async def existing_sessions(db: Database, ids: Sequence[int]) -> set[int]:
    """Which of ``ids`` are stored (after a prune: an id taken again by a new session)."""
    rows = await db.fetchall("SELECT id FROM sessions WHERE id IN (SELECT value FROM json_each(?))", (_ids(ids),),
                             fresh=True)
    return {int(r[0]) for r in rows}


_WINDOW_ENDED = "min(coalesce(cancelled_at, ends_at), ends_at) < ?"


async def delete_maintenance_windows(db: Database, cutoff: str, *, dry_run: bool = False) -> int:
    """Ad-hoc maintenance windows that ended (as planned or early) before ``cutoff``: deleted, or
    only counted with ``dry_run``."""
    if dry_run:
        return int(await db.fetchval(f"SELECT count(*) FROM maintenance_windows WHERE {_WINDOW_ENDED}",  # noqa: S608
                                     (cutoff,)) or 0)
    async with db.write() as conn:
        cur = await conn.execute(f"DELETE FROM maintenance_windows WHERE {_WINDOW_ENDED}", (cutoff,))  # noqa: S608
        return max(cur.rowcount, 0)


# -- space -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SpaceInfo:
    auto_vacuum: str  # none | full | incremental
    page_size: int
    page_count: int
    free_pages: int
    file_bytes: int  # the database file on disk now (the WAL is reused, not shrunk: not counted)
    wal_bytes: int


def _size(path: str) -> int:
    with contextlib.suppress(OSError):  # no -wal yet
        return os.stat(path).st_size
    return 0


async def space_info(db: Database) -> SpaceInfo:
    """Pages and free pages as this process's last write left them (PostgreSQL: its own
    autovacuum keeps the space; nothing is reported)."""
    if db.dialect == "postgresql":
        return SpaceInfo(auto_vacuum="postgresql", page_size=0, page_count=0, free_pages=0, file_bytes=0, wal_bytes=0)
    async with db.read_fresh() as conn:
        values = []
        for pragma in ("auto_vacuum", "page_size", "page_count", "freelist_count"):
            async with conn.execute(f"PRAGMA {pragma}") as cur:
                row = await cur.fetchone()
            values.append(int(row[0]) if row else 0)
    mode, page_size, page_count, free = values
    return SpaceInfo(auto_vacuum=AUTO_VACUUM_MODES.get(mode, str(mode)), page_size=page_size,
                     page_count=page_count, free_pages=free, file_bytes=_size(db.path), wal_bytes=_size(db.path + "-wal"))


async def incremental_vacuum(db: Database, pages: int) -> int:
    """Give up to ``pages`` free pages back to the file system, in one short write; returns how
    many were returned. Only does something when ``auto_vacuum = INCREMENTAL``.

    Runs on the writer behind the write lock but outside :meth:`Database.write`: the pragma frees
    one page per step of its statement, and only ``executescript`` steps it to the end (the
    ``execute`` of Python's sqlite3 stops after one page); ``executescript`` would also commit an
    open ``BEGIN``, so the pragma runs as its own (autocommit) transaction. PostgreSQL: 0 (its
    autovacuum reuses the space).
    """
    if db.dialect == "postgresql":
        return 0
    async with db.read_fresh() as conn:
        before = await _freelist(conn)
        await conn.executescript(f"PRAGMA incremental_vacuum({int(pages)})")
        after = await _freelist(conn)
    return max(before - after, 0)


async def _freelist(conn: aiosqlite.Connection) -> int:
    async with conn.execute("PRAGMA freelist_count") as cur:
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def checkpoint(db: Database) -> None:
    """A passive WAL checkpoint (never waits for readers or writers): lets the file shrink to
    what incremental vacuum left, once no reader still needs the older pages. (None on PostgreSQL.)"""
    if db.dialect == "postgresql":
        return
    async with db.read_fresh() as conn, conn.execute("PRAGMA wal_checkpoint(PASSIVE)") as cur:
        await cur.fetchall()


async def full_vacuum(db: Database) -> None:
    """Rebuild the whole file (``VACUUM``) and switch it to ``auto_vacuum = INCREMENTAL``.

    Blocks every other writer for the whole rebuild and needs free disk space about the size of
    the database: for ``tierops prune --vacuum`` with the server stopped.
    """
    async with db.read_fresh() as conn:  # VACUUM cannot run inside a transaction
        if db.dialect == "postgresql":
            await conn.execute("VACUUM")
            return
        await conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        await conn.execute("VACUUM")
        async with conn.execute("PRAGMA wal_checkpoint(TRUNCATE)") as cur:
            await cur.fetchall()
