"""The sweep: supervised sessions still ``running`` whose process is gone, ended ``interrupted``.

Why a module of its own: what may be swept is a rule with several exceptions, each a way a live
session looks abandoned from the database alone — a session of this process (its handle), another
node's (the leader ends a dead node's, ``node.py``), another state directory's (another cycle
lock), a chat turn another process answers (its turn lock). The caller (``scheduler.py``) decides
when it is safe to sweep at all (holding the cycle lock, or nobody holding it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from pathlib import Path

from app.config import Settings
from app.store import processes
from app.store.db import Database
from app.supervisor import turn_lock
from app.supervisor.process_groups import kill_leftover
from app.vocab import SessionStatus

log = logging.getLogger(__name__)

__all__ = ["sweep_left_running"]


async def sweep_left_running(db: Database, settings: Settings, node_id: str | None, mine: Collection[int],
                             when: str) -> int:
    """End every supervised session still ``running`` that is not in ``mine`` (this process's live
    sessions) and is this node's and this state directory's, killing its recorded CLI first (when
    pid and start time still match). Returns how many were marked."""
    state = settings.state_dir.resolve()
    home = state / "home"  # the HOME every CLI of ours gets
    count = 0
    for row in await processes.running_sessions_with_process(db):
        if row.id in mine:
            continue  # a live session of this process
        if row.node_id is not None and row.node_id != node_id:
            continue  # another node's: the leader ends a dead node's sessions (node.py)
        if row.cwd is not None and Path(row.cwd).parent not in (state / "sessions", state / "chats"):
            continue  # started with another state dir (another cycle lock): not ours to judge
        if row.cwd is not None and Path(row.cwd).parent == state / "chats" and turn_lock.held(row.cwd):
            continue  # a chat turn another process runs (it holds its turn lock)
        reason = f"the supervisor stopped while this session ran ({when})"
        if row.cli_pid is not None:
            killed = await asyncio.to_thread(kill_leftover, row.cli_pid, row.cli_pgid, row.cli_start_time, home)
            if row.cli_pid in killed:
                reason += f"; its CLI (pid {row.cli_pid}) was still running and was killed"
            elif killed:
                reason += f"; processes it left ({', '.join(map(str, killed))}) were killed"
        if await processes.mark_interrupted(db, row.id, reason):
            count += 1
            log.warning("session %d marked interrupted: %s", row.id, reason,
                        extra={"session": row.id, "status": SessionStatus.INTERRUPTED})
    log.log(logging.INFO if count else logging.DEBUG, "sweep (%s): %d session(s) left running marked interrupted",
            when, count, extra={"count": count})
    return count
