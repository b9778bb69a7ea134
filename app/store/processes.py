"""Which CLI process runs (or ran) a session: its pid, process group and start time.

Why: a supervisor killed with SIGKILL (or by the OOM killer) cannot finalize its
sessions, and on a platform without a parent-death signal its CLI may keep running unrecorded.
The supervisor stores the CLI's identity on the session row as soon as it is started
(:func:`record_process`); at the next start, and at the start of every cycle, the sweep
(``Supervisor.recover_interrupted``) reads the rows still ``running``
(:func:`running_sessions_with_process`), kills a CLI that is still alive — only when both the pid
and the start time match, so a recycled pid is never killed — and then marks the row
(:func:`mark_interrupted`). The start time is psutil's ``create_time()`` (seconds since the epoch).

The same identity lets a server stop a session another process runs
(``supervisor/remote_stop.py``: :func:`session_process`, :func:`request_stop`, read back by the
owner with :func:`stop_requested_by`), and :func:`live_sessions` is what the follower of other
processes' sessions polls (``supervisor/follow.py``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from app.clock import utcnow
from app.store.db import Database
from app.vocab import SessionStatus, Trigger

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunningSession:
    """A supervised session still ``running``, with its CLI's identity when one was recorded."""

    id: int
    cwd: str | None
    cli_pid: int | None
    cli_pgid: int | None
    cli_start_time: float | None
    node_id: str | None = None  # the node that runs it (None: a process without one, as `tierops run`)


async def record_process(db: Database, pk: int, pid: int, pgid: int, start_time: float | None) -> None:
    """The CLI now running the session (a resume replaces the previous attempt's process). A start
    time of None (the process was gone before it could be read) means it is never killed later."""
    async with db.write() as conn:
        await conn.execute("UPDATE sessions SET cli_pid = ?, cli_pgid = ?, cli_start_time = ? WHERE id = ?",
                           (pid, pgid, start_time, pk))


async def running_sessions_with_process(db: Database) -> list[RunningSession]:
    """Every supervised session still ``running`` (not ingests: a file has no process), oldest first,
    read after this process's own writes."""
    rows = await db.fetchall(
        "SELECT id, cwd, cli_pid, cli_pgid, cli_start_time, node_id FROM sessions WHERE status = ? AND trigger != ?"
        " ORDER BY id", (SessionStatus.RUNNING, Trigger.INGEST), fresh=True)
    return [RunningSession(**dict(r)) for r in rows]


async def mark_interrupted(db: Database, pk: int, reason: str) -> bool:
    """Mark one session ``interrupted`` with why, if it is still ``running``; True when it was."""
    async with db.write() as conn:
        cur = await conn.execute(
            "UPDATE sessions SET status = ?, status_reason = ?, ended_at = ? WHERE id = ? AND status = ?",
            (SessionStatus.INTERRUPTED, reason, utcnow(), pk, SessionStatus.RUNNING))
        return cur.rowcount > 0


# --- sessions another process runs ----------------------------------------------------------

@dataclass(frozen=True)
class LiveSession:
    """A supervised session still ``running``, as the follower polls it: ``line_count`` is written
    in the same transaction as the lines (``activity.append_lines``), so a changed count means new
    lines to read and an unchanged one means none."""

    id: int
    tier: int | None
    line_count: int
    cli_pid: int | None


async def live_sessions(db: Database) -> list[LiveSession]:
    """Every supervised session still ``running`` (the ``sessions_status`` index), on a reader:
    what other processes committed is visible, this process's own uncommitted writes are not."""
    rows = await db.fetchall(
        "SELECT id, tier, line_count, cli_pid FROM sessions WHERE status = ? AND trigger != ? ORDER BY id",
        (SessionStatus.RUNNING, Trigger.INGEST))
    return [LiveSession(r["id"], r["tier"], r["line_count"] or 0, r["cli_pid"]) for r in rows]


@dataclass(frozen=True)
class SessionProcess:
    """What a Stop needs to know about a session's CLI, wherever it runs."""

    id: int
    status: str
    trigger: str
    cwd: str | None
    cli_pid: int | None
    cli_pgid: int | None
    cli_start_time: float | None
    stop_requested_at: str | None
    stop_requested_by: str | None
    node_id: str | None = None  # the node that runs it


async def session_process(db: Database, pk: int) -> SessionProcess | None:
    """The session's status and recorded CLI (None: no such session), read after this process's
    own writes."""
    row = await db.fetchone(
        "SELECT id, status, trigger, cwd, cli_pid, cli_pgid, cli_start_time, stop_requested_at, stop_requested_by,"
        " node_id FROM sessions WHERE id = ?", (pk,), fresh=True)
    return SessionProcess(**dict(row)) if row is not None else None


async def request_stop(db: Database, pk: int, by: str) -> bool:
    """Record that an operator asked to stop session ``pk`` (when, and ``by`` whom), if it is still
    ``running``; True when it was. The first request's time is kept; ``by`` names the latest."""
    async with db.write() as conn:
        cur = await conn.execute(
            "UPDATE sessions SET stop_requested_at = coalesce(stop_requested_at, ?), stop_requested_by = ?"
            " WHERE id = ? AND status = ?", (utcnow(), db.redact(by), pk, SessionStatus.RUNNING))
        return cur.rowcount > 0


async def stop_requests(db: Database, pks: list[int]) -> list[int]:
    """Which of the running sessions ``pks`` somebody asked to stop (another node's Stop button)."""
    if not pks:
        return []
    marks = ", ".join("?" * len(pks))
    rows = await db.fetchall(f"SELECT id FROM sessions WHERE id IN ({marks}) AND status = ?"  # noqa: S608 (placeholders)
                             " AND stop_requested_at IS NOT NULL", (*pks, SessionStatus.RUNNING), fresh=True)
    return [int(r[0]) for r in rows]


async def stop_requested_by(db: Database, pk: int) -> str | None:
    """Who asked another process to stop session ``pk`` (None: nobody did). Read on the writer,
    so a request committed by any process before this call is seen."""
    row = await db.fetchone("SELECT stop_requested_at, stop_requested_by FROM sessions WHERE id = ?", (pk,),
                            fresh=True)
    if row is None or row["stop_requested_at"] is None:
        return None
    return str(row["stop_requested_by"] or "an operator")
