"""Which CLI process runs (or ran) a session: its pid, process group and start time.

Why (issue #9 §4): a supervisor killed with SIGKILL (or by the OOM killer) cannot finalize its
sessions, and on a platform without a parent-death signal its CLI may keep running unrecorded.
The supervisor stores the CLI's identity on the session row as soon as it is started
(:func:`record_process`); at the next start, and at the start of every cycle, the sweep
(``Supervisor.recover_interrupted``) reads the rows still ``running``
(:func:`running_sessions_with_process`), kills a CLI that is still alive — only when both the pid
and the start time match, so a recycled pid is never killed — and then marks the row
(:func:`mark_interrupted`). The start time is psutil's ``create_time()`` (seconds since the epoch).
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
        "SELECT id, cwd, cli_pid, cli_pgid, cli_start_time FROM sessions WHERE status = ? AND trigger != ?"
        " ORDER BY id", (SessionStatus.RUNNING, Trigger.INGEST), fresh=True)
    return [RunningSession(**dict(r)) for r in rows]


async def mark_interrupted(db: Database, pk: int, reason: str) -> bool:
    """Mark one session ``interrupted`` with why, if it is still ``running``; True when it was."""
    async with db.write() as conn:
        cur = await conn.execute(
            "UPDATE sessions SET status = ?, status_reason = ?, ended_at = ? WHERE id = ? AND status = ?",
            (SessionStatus.INTERRUPTED, reason, utcnow(), pk, SessionStatus.RUNNING))
        return cur.rowcount > 0
