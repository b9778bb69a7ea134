"""The cycle lock: one process running cycles at a time per state directory (``tierops run``
beside ``tierops supervise``; within it, up to ``TIEROPS_MAX_CONCURRENT``), and a probe that never
takes it.

Why a module of its own: a claim must be refused at once with :class:`~app.errors.CycleBusy`
naming the holder (it never waits), while asking whether a cycle runs — ``/healthz``, ``/metrics``,
the overview, the sweep — must never make a claim fail: see :class:`CycleLock`.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import struct
from pathlib import Path

from app.clock import utcnow
from app.errors import CycleBusy

log = logging.getLogger(__name__)

# ``struct flock`` (Linux): l_type, l_whence, l_start, l_len, l_pid and the padding to 32 bytes.
_FLOCK = struct.Struct("hhqqi4x")
_OFD_LOCKS = hasattr(fcntl, "F_OFD_GETLK") and _FLOCK.size == 32


class CycleLock:
    """The cycle's ``flock`` on ``cycle.lock``, plus a probe that never takes it.

    The claim is the ``flock`` (refused at once while another open file holds it). Beside it the
    holder keeps an open-file-description record lock (``F_OFD_SETLK``, Linux) on the whole file:
    a probe (``/healthz``, ``/metrics``, the overview, the sweep's "is anyone running?") asks the
    kernel with ``F_OFD_GETLK`` whether that lock is held, which takes nothing. A probe that took
    the ``flock`` itself, even for an instant, made a claim in another process at that moment
    fail with :class:`CycleBusy` and its scheduled cycle be skipped. The two kinds of lock do not
    interact on Linux, and both end when the holder's file is closed (or the holder dies). Where
    OFD locks are missing the probe falls back to trying the ``flock``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, what: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise CycleBusy(f"a cycle is already running ({holder}); try again when it has finished") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "started_at": utcnow(), "what": what}).encode())
        if _OFD_LOCKS:
            try:  # the probes' beacon; the flock alone still excludes every other claim
                fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
            except OSError as exc:
                log.warning("cycle lock %s: no probe lock (%s); probes try the flock instead", self.path,
                            exc.strerror or exc)
        self._fd = fd

    def holder(self) -> str | None:
        """Who runs a cycle (the holder the lock file records: this process's own when it holds the
        lock, another's when its probe finds it taken), or None when none runs. Takes no lock (see
        the class)."""
        if self._fd is not None:
            return _read_holder(self._fd)
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None  # no process ever claimed a cycle here
        try:
            held = _probe(fd)
            if held is None:  # no OFD locks here: try the flock, as a claim would
                fallback = os.open(self.path, os.O_RDWR)
                try:
                    fcntl.flock(fallback, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    held = False
                except BlockingIOError:
                    held = True
                finally:
                    os.close(fallback)
            return _read_holder(fd) if held else None
        finally:
            os.close(fd)

    def held_elsewhere(self) -> bool:
        return self.holder() is not None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _probe(fd: int) -> bool | None:
    """Whether another open file holds the cycle's probe lock (``F_OFD_GETLK``: nothing is taken);
    None when this system cannot tell (no OFD locks)."""
    if not _OFD_LOCKS:
        return None
    try:
        answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
    except OSError:
        return None
    return bool(_FLOCK.unpack(answer)[0] != fcntl.F_UNLCK)


def _read_holder(fd: int) -> str:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {data.get('pid')}, {data.get('what')}, started {data.get('started_at')}"
    except (OSError, ValueError):
        return "holder unknown"
