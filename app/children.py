"""Child processes: dying with their parent, and an exit wait that no inherited pipe can hold up.

Why a module of its own, in the foundation: both the supervisor's runner (the claude CLI) and the
probe's command checks start children that must not outlive them and whose exit must
be seen at once; the probe sits below the supervisor on the import line, so the shared code lives
here rather than being written twice.

* :func:`die_with_parent` is a ``preexec_fn``: on Linux ``PR_SET_PDEATHSIG = SIGKILL``, so a parent
  killed with SIGKILL (or by the OOM killer) takes its child along. It only calls a ``prctl``
  resolved through ctypes at import time and ``os.getppid`` — no import, no lock, no I/O — which
  is the accepted use of ``preexec_fn`` in a threaded process (aiosqlite runs threads). If the
  parent died between ``fork`` and this call, no signal will ever come: the child exits instead.
  The signal comes when the *thread* that forked exits (the event loop's, which lives as long as
  the process) and reaches only the direct child, not its own children.
* :func:`become_subreaper` (Linux ``PR_SET_CHILD_SUBREAPER``, the probe): orphaned descendants
  are re-parented to this process rather than to init, so that none escapes by leaving its parent.
* :func:`exited`: ``proc.wait()`` started before the exit also waits for every pipe asyncio owns
  to close (CPython 3.11), which a background grandchild can hold forever; so it races a poll of
  ``returncode`` (set at exit). The usual case returns with ``wait()``, at once.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
import os
import signal
import sys
from collections.abc import Callable

from app.tasks import spawn

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_SIGKILL = int(signal.SIGKILL)


def _load_prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, resolved once here so the forked child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
    prctl.restype = ctypes.c_int
    return prctl


_PRCTL = _load_prctl()


def _die_with_parent(parent: int) -> None:
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def die_with_parent() -> Callable[[], None] | None:
    """The ``preexec_fn`` for a child of this process (None where the platform has no
    parent-death signal: then nothing is run in the child)."""
    return functools.partial(_die_with_parent, os.getpid()) if _PRCTL is not None else None


def pdeathsig_supported() -> bool:
    return _PRCTL is not None


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): a descendant whose
    parent exits — a double fork, a ``setsid`` helper left behind — is re-parented to it instead
    of to init, so it can still be found and killed (and must be reaped here). False where the
    platform has no such thing (then orphans go to init, out of reach)."""
    return _PRCTL is not None and _PRCTL(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


async def exited(proc: asyncio.subprocess.Process) -> int:
    """The exit status, as soon as the child exited (see the module docstring)."""
    waiter = spawn(proc.wait(), f"child-{proc.pid}-wait")
    try:
        while proc.returncode is None:
            done, _ = await asyncio.wait({waiter}, timeout=0.05)
            if done:
                break
        return proc.returncode if proc.returncode is not None else waiter.result()
    finally:
        if not waiter.done():
            waiter.cancel()
