"""Stop a session wherever it runs: this process's, or one another process runs.

Why: ``tierops run`` and ``tierops supervise`` write to the same state directory as the server,
and their sessions show on the same pages. Such a session's row records its CLI's pid, process
group and start time (``store.processes``), which is what this module acts on:

1. refuse (:class:`StopRefused`, 404/409 with why) a session that does not exist, is not
   ``running``, has no CLI recorded yet, or whose recorded CLI cannot be verified: pid *and* start
   time must match (``process_groups.recorded_process``), so a recycled pid is never signalled;
2. record the request on the row *before* signalling, so the owning process, reading it when its
   CLI exits (``session._spawn``), ends the session ``interrupted`` "stopped by an operator (who)";
3. SIGTERM the recorded process group, then after ``TIEROPS_KILL_GRACE`` s SIGKILL what is left
   (``process_groups.kill_leftover``, which checks the identity again).

It never signals the owning process itself, and refuses ("try again") while the CLI is between two
attempts (an output-recovery resume starting): no process can be verified then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from app.store import processes
from app.store.processes import SessionProcess
from app.supervisor.process_groups import kill_leftover, recorded_process
from app.tasks import spawn
from app.vocab import SessionStatus, Trigger

if TYPE_CHECKING:
    from app.supervisor.scheduler import Supervisor

log = logging.getLogger(__name__)

GONE_POLL_S = 0.1  # how often the escalation looks whether the CLI has exited
_escalations: set[asyncio.Task[Any]] = set()  # strong references until each ends


class StopRefused(Exception):
    """The session cannot be stopped from here: ``status`` is the HTTP status to answer (404, 409)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class StopSent:
    """A Stop was sent: to this process's own session, or to the CLI ``pid`` of another process."""

    session_pk: int
    local: bool
    pid: int | None = None


async def _running(supervisor: Supervisor, pk: int) -> SessionProcess:
    row = await processes.session_process(supervisor.db, pk)
    if row is None:
        raise StopRefused(404, f"no session {pk}")
    if row.status != SessionStatus.RUNNING:
        raise StopRefused(409, f"session {pk} is not running (status {row.status})")
    return row


async def _verified(supervisor: Supervisor, pk: int) -> tuple[SessionProcess, psutil.Process]:
    """The session's row and its live, verified CLI, or :class:`StopRefused` saying why not."""
    row = await _running(supervisor, pk)
    if row.trigger == Trigger.INGEST:
        raise StopRefused(409, f"session {pk} is being ingested from a file: it has no process to stop")
    if row.cli_pid is None or row.cli_start_time is None:
        raise StopRefused(409, f"session {pk} has no CLI process recorded yet (it is starting); try again "
                               "in a moment")
    proc = await asyncio.to_thread(recorded_process, row.cli_pid, row.cli_start_time)
    if proc is None:
        raise StopRefused(409, f"session {pk}: its recorded CLI (pid {row.cli_pid}) is not running any more, or "
                               "that pid now belongs to another process (its start time differs); nothing was "
                               "signalled. If the session stays running, its supervisor is gone: the next "
                               "sweep marks it interrupted")
    return row, proc


async def _other_node(supervisor: Supervisor, pk: int) -> SessionProcess | None:
    """The running session's row when another node runs it (None: this node's, or no node's)."""
    if supervisor.node is None or pk in supervisor.handles or pk in supervisor.chat_handles:
        return None
    row = await processes.session_process(supervisor.db, pk)
    if row is None or row.status != SessionStatus.RUNNING or row.node_id in (None, supervisor.node.id):
        return None
    return row


async def refusal(supervisor: Supervisor, pk: int) -> str | None:
    """Why Stop cannot reach session ``pk`` from this process (None: it can). For the page's button."""
    if pk in supervisor.handles or pk in supervisor.chat_handles:
        return None
    if await _other_node(supervisor, pk) is not None:
        return None
    try:
        await _verified(supervisor, pk)
    except StopRefused as exc:
        return exc.message
    return None


async def stop_anywhere(supervisor: Supervisor, pk: int, by: str) -> StopSent:
    """Stop session ``pk``: this process's own through its handle; another process's by signalling
    its verified CLI's process group. ``by`` says who asked (stored on the row, shown in its
    reason). Raises :class:`StopRefused`."""
    if pk in supervisor.chat_handles:  # a chat turn of this process: its CLI alone (no chain to halt)
        await _running(supervisor, pk)
        supervisor.chat_handles[pk].stop()
        return StopSent(pk, local=True)
    if (row := await _other_node(supervisor, pk)) is not None:
        # Another node runs it: the request is recorded, that node stops its CLI within a second
        # (``Supervisor.watch_stop_requests``); the session's reason names who asked.
        if not await processes.request_stop(supervisor.db, pk, by):
            raise StopRefused(409, f"session {pk} ended before the stop could be recorded")
        log.warning("session %d runs on node %s: stop requested by %s", pk, row.node_id, by, extra={"session": pk})
        return StopSent(pk, local=False)
    if pk in supervisor.handles:
        await _running(supervisor, pk)  # a finished session of the running chain has nothing to stop
        if not supervisor.stop_session(pk):  # its cycle ended meanwhile
            raise StopRefused(409, f"session {pk} ended before the stop could be sent")
        return StopSent(pk, local=True)
    row, proc = await _verified(supervisor, pk)
    assert row.cli_pid is not None and row.cli_start_time is not None  # noqa: S101 (checked by _verified)
    if not await processes.request_stop(supervisor.db, pk, by):
        raise StopRefused(409, f"session {pk} ended before the stop could be recorded")
    pid, start_time = row.cli_pid, row.cli_start_time
    pgid = row.cli_pgid if row.cli_pgid is not None and _pgid(pid) == row.cli_pgid else None
    try:
        if pgid is not None:
            os.killpg(pgid, signal.SIGTERM)
        else:
            proc.terminate()
    except (ProcessLookupError, psutil.NoSuchProcess):
        pass  # it exited meanwhile: the request is recorded, the owner reads it
    except (PermissionError, psutil.AccessDenied) as exc:
        raise StopRefused(409, f"session {pk}: its CLI (pid {pid}) cannot be signalled from this process: "
                               f"{exc}") from None
    grace = supervisor.settings.kill_grace
    log.warning("session %d of another process: SIGTERM sent to its CLI (pid %d, process group %s) by %s; "
                "SIGKILL in %g s if it does not exit", pk, pid, pgid, by, grace, extra={"session": pk})
    home = supervisor.settings.state_dir.resolve() / "home"
    task = spawn(_escalate(pk, pid, pgid, start_time, grace, home), f"session-{pk}-remote-stop")
    _escalations.add(task)
    task.add_done_callback(_escalations.discard)
    return StopSent(pk, local=False, pid=pid)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


async def _escalate(pk: int, pid: int, pgid: int | None, start_time: float, grace: float, home: Path) -> None:
    """SIGKILL the CLI (and its group) still alive ``grace`` s after the SIGTERM."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if await asyncio.to_thread(recorded_process, pid, start_time) is None:
            return
        await asyncio.sleep(GONE_POLL_S)
    with contextlib.suppress(psutil.Error):
        killed = await asyncio.to_thread(kill_leftover, pid, pgid, start_time, home)
        if killed:
            log.warning("session %d of another process: SIGKILL sent after %g s to %s", pk, grace, killed,
                        extra={"session": pk})


async def watch_stop_requests(supervisor: Supervisor, every: float = 1.0) -> None:
    """Stop this node's sessions another node was asked to stop (its Stop button recorded the
    request: :func:`stop_anywhere`), within ``every`` s. Runs until cancelled (the server's lifespan)."""
    while True:
        await asyncio.sleep(every)
        mine = [*supervisor.handles, *supervisor.chat_handles]
        try:
            asked = await processes.stop_requests(supervisor.db, mine)
        except Exception as exc:  # storage trouble: the next look
            log.debug("reading stop requests failed: %s", exc)
            continue
        for pk in asked:
            if pk in supervisor.chat_handles:
                supervisor.chat_handles[pk].stop()
            elif supervisor.stop_session(pk):
                log.warning("session %d stopped: another node asked", pk, extra={"session": pk})
