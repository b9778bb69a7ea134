"""What command checks leave behind: found, killed and reaped when the check ends, and at exit.

Why a module of its own: a command check's shell leads its own process group, killed when the
check ends (``command.py``); what leaves the group (``setsid``, a double fork) is out of that
kill's reach and outlived its check and the cycle. So, on Linux:

* the probe is a child subreaper (:func:`adopt_orphans`): a check's process whose parent exits is
  re-parented to the probe, so every escaped process is found among the probe's own children;
* every process of a check carries its tag (:data:`TAG` in its environment); when the check ends,
  :func:`sweep` kills each adopted process carrying the tag, or still in the check's process
  group, with everything below it (SIGKILL), and reaps it;
* when the probe exits, :func:`sweep_all` kills every descendant still alive and reaps it.

Reaping never steals a check's exit status from asyncio's child watcher (:func:`shell_started` …
:func:`shell_reaped`): while checks run, only pids this module killed and zombies of the ending
check's own process group are reaped; any other zombie only at the end. Elsewhere (no
subreaper) only the group and the descendants still attached are killed (docs/limits.md says so).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time

import psutil

from app import children

log = logging.getLogger(__name__)

__all__ = ["SWEEP_FOR", "TAG", "adopt_orphans", "adopting", "new_tag", "shell_reaped", "shell_started", "sweep",
           "sweep_all"]

TAG = "TIEROPS_PROBE_CHECK"  # in each command check's environment: which check a process belongs to
SWEEP_FOR = 2.0  # seconds a sweep keeps killing and reaping before it gives up (what is left is logged)
_POLL = 0.02

_adopting = False
_shells: set[int] = set()
_tags = itertools.count(1)


def adopt_orphans() -> bool:
    """Make the probe a child subreaper (Linux); False where it cannot be (nothing is adopted)."""
    global _adopting
    _adopting = children.become_subreaper()
    if not _adopting:
        log.info("not a child subreaper on this platform: processes a command check detaches are not killed")
    return _adopting


def adopting() -> bool:
    return _adopting


def new_tag() -> str:
    """A tag no other check of this probe carries."""
    return f"{os.getpid()}.{next(_tags)}"


def shell_started(pid: int) -> None:
    """A check's shell, which asyncio reaps: never to be reaped here."""
    _shells.add(pid)


def shell_reaped(pid: int) -> None:
    _shells.discard(pid)


def sweep(tag: str, pgid: int) -> list[int]:
    """Kill and reap what is left of one ended check (its shell already reaped): the adopted
    processes carrying ``tag`` or in process group ``pgid``, with everything below them. Returns
    the pids killed. Blocking (reads ``/proc``, waits up to :data:`SWEEP_FOR` s): call it in a
    thread. Does nothing unless the probe adopts orphans."""
    if not _adopting:
        return []
    killed: set[int] = set()
    reaped: set[int] = set()
    deadline = time.monotonic() + SWEEP_FOR
    while True:
        pending = False
        for pid in _children():
            if pid in _shells or pid in reaped:
                continue
            stat = _stat(pid)
            if stat is None:
                continue
            state, pgrp = stat
            ours = pid in killed or (pgrp == pgid and pid != pgid)  # pid == pgid: a new group's leader
            if state in ("Z", "X"):
                if ours and _reap(pid):
                    reaped.add(pid)
                continue
            if ours or _tag_of(pid) == tag:
                _kill_tree(pid, killed)
                pending = True
        pending = pending or any(_waiting(pid) for pid in killed - reaped)
        if not pending:
            break
        if time.monotonic() >= deadline:
            log.warning("processes of an ended command check are still not reaped after %g s: %s", SWEEP_FOR,
                        sorted(killed - reaped))
            break
        time.sleep(_POLL)
    return sorted(killed)


def sweep_all() -> list[int]:
    """At the probe's exit, when no check runs any more: kill every descendant still alive and
    reap the adopted ones. Returns the pids killed."""
    killed: set[int] = set()
    try:
        below = psutil.Process().children(recursive=True)
    except psutil.Error:
        below = []
    for proc in below:
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                proc.kill()
                killed.add(proc.pid)
    if _adopting:  # every zombie among the children is ours to reap now: no shell is left to asyncio
        deadline = time.monotonic() + SWEEP_FOR
        while True:
            for pid in _children():
                stat = _stat(pid)
                if stat is not None and stat[0] in ("Z", "X"):
                    _reap(pid)
            if not any(_waiting(pid) for pid in killed) or time.monotonic() >= deadline:
                break
            time.sleep(_POLL)
    if killed:
        log.warning("killed %d process(es) command checks left running: %s", len(killed), sorted(killed))
    return sorted(killed)


# --- /proc -----------------------------------------------------------------------------------------

def _children() -> list[int]:
    """The probe's direct children: its checks' shells and what it adopted (orphans are
    re-parented to the first live thread of the subreaper, its main thread)."""
    try:
        with open(f"/proc/self/task/{os.getpid()}/children", encoding="ascii") as fh:
            return [int(pid) for pid in fh.read().split()]
    except OSError:  # a kernel without CONFIG_PROC_CHILDREN: the slow way (every process's parent)
        try:
            return [p.pid for p in psutil.Process().children()]
        except psutil.Error:
            return []


def _stat(pid: int) -> tuple[str, int] | None:
    """A process's state letter and process group (from ``/proc/<pid>/stat``), None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()  # after "pid (comm) ": state ppid pgrp …
    try:
        return fields[0].decode("ascii"), int(fields[2])
    except (IndexError, ValueError, UnicodeDecodeError):
        return None


def _tag_of(pid: int) -> str | None:
    prefix = TAG.encode() + b"="
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    for item in data.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("ascii", "replace")
    return None


def _kill_tree(pid: int, killed: set[int]) -> None:
    """SIGKILL ``pid`` and everything below it (listed first: once the parent dies they move)."""
    try:
        top = psutil.Process(pid)
        tree = [top, *top.children(recursive=True)]
    except psutil.Error:
        return
    for proc in tree:
        with contextlib.suppress(psutil.Error):
            proc.kill()  # psutil refuses a pid that is no longer the process it listed
            killed.add(proc.pid)


def _reap(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == pid


def _waiting(pid: int) -> bool:
    """A killed process not gone yet: still dying, or a zombie whose parent (killed too) has not
    handed it over to the probe yet."""
    return _stat(pid) is not None
