"""Process groups and the identity of a recorded CLI: who is in a group, signalling it, and
killing what a supervisor that died left running.

Why a module of its own: a CLI is recognised across a restart by its pid, process group and start
time (psutil ``create_time()``, :class:`ProcessIdentity`), stored on its session row. The runner
signals the group of the CLI it runs; the sweep (:func:`kill_leftover`) and a Stop from another
process (``remote_stop``, :func:`recorded_process`) act only on a process whose pid *and* start
time match, so a recycled pid — someone else's process, and the group it leads — is never killed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

# psutil create_time() is boot time (whole seconds, re-read from /proc/stat, which moves when the
# clock is stepped) + start ticks: two readings of one process may differ by up to a second.
START_TIME_TOLERANCE = 1.0


@dataclass(frozen=True)
class ProcessIdentity:
    """What identifies a started CLI across a supervisor restart: pid, process group, and start
    time (psutil ``create_time()``; None if the process was gone before it could be read)."""

    pid: int
    pgid: int
    start_time: float | None


def identity(pid: int) -> ProcessIdentity:
    """The identity of ``pid``, a CLI started in a group of its own (``start_new_session``)."""
    try:
        start: float | None = psutil.Process(pid).create_time()
    except psutil.Error:
        start = None  # already gone (and reaped): nothing left to recognise
    return ProcessIdentity(pid=pid, pgid=pid, start_time=start)


def group_members(pgid: int) -> list[int]:
    members = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(p.pid) == pgid:
                members.append(p.pid)
    return members


def signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def kill_leftover(pid: int, pgid: int | None, start_time: float | None, home: Path | None = None) -> list[int]:
    """Kill a CLI a dead supervisor left running, and its process group; return the pids killed.
    Blocking (psutil): call it in a thread.

    Only when the process with ``pid`` started at ``start_time`` (within START_TIME_TOLERANCE): a
    recycled pid is someone else's, and so is the group it leads. When the CLI itself is gone (the
    parent-death signal reaches only the CLI), the members of its recorded group that started after
    it and carry the HOME the supervisor gives its CLIs are its orphaned tool processes: killed too.
    """
    if start_time is None:
        return []
    targets: dict[int, psutil.Process] = {}
    try:
        leader: psutil.Process | None = psutil.Process(pid)
    except psutil.Error:
        leader = None
    if leader is not None:
        try:
            if not _started_at(leader, start_time):
                return []  # the pid was recycled: not ours
            targets[pid] = leader
            for child in leader.children(recursive=True):
                targets[child.pid] = child
        except psutil.Error:
            leader = None
    if pgid is not None:
        for member_pid in group_members(pgid):
            if member_pid in targets:
                continue
            with contextlib.suppress(psutil.Error):
                member = psutil.Process(member_pid)
                if leader is not None or (home is not None and _orphan_of(member, start_time, home)):
                    targets[member_pid] = member
    killed = []
    for p in targets.values():
        with contextlib.suppress(psutil.Error):
            p.kill()
            killed.append(p.pid)
            what = "CLI" if p.pid == pid else f"process of CLI pid {pid}"
            log.warning("killed pid %d: a leftover %s of a session a stopped supervisor left running", p.pid, what)
    _wait_dead([targets[k] for k in killed], timeout=2)
    return killed


def recorded_process(pid: int, start_time: float | None) -> psutil.Process | None:
    """The live process ``pid`` when it is the one recorded with ``start_time``, else None (gone,
    a zombie, or a recycled pid: someone else's). The one rule :func:`kill_leftover` and a Stop
    from another process (``remote_stop``) apply before signalling a recorded CLI."""
    if start_time is None:
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or not _started_at(proc, start_time):
            return None
    except psutil.Error:
        return None
    return proc


def _started_at(proc: psutil.Process, start_time: float) -> bool:
    return abs(proc.create_time() - start_time) <= START_TIME_TOLERANCE


def _wait_dead(procs: list[psutil.Process], timeout: float) -> None:
    """Until each process is gone or a zombie. Never ``waitpid`` (``psutil.wait_procs`` reaps our
    own children, whose exit status asyncio's child watcher must get)."""
    deadline = time.monotonic() + timeout
    for p in procs:
        while time.monotonic() < deadline:
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.Error:
                break
            time.sleep(0.02)


def _orphan_of(member: psutil.Process, start_time: float, home: Path) -> bool:
    if member.create_time() < start_time - START_TIME_TOLERANCE:
        return False
    try:
        return member.environ().get("HOME") == str(home)
    except psutil.Error:
        return False
