"""Whether a chat turn still runs, as any process can tell: a lock on a file in its conversation's folder.

Why a file lock: chat turns never take the cycle lock, so the sweep of sessions a dead process left
``running`` (which waits for the cycle lock) could otherwise take a live turn of another
``tierops`` process for abandoned and kill its CLI. The turn holds an exclusive ``flock`` on
``<conversation folder>/.tierops-turn.lock`` from before its session row exists until it is final;
the kernel drops it when the process dies, so a held lock means a live turn, and a free one a dead
one (or none).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["LOCK_NAME", "held", "hold"]

LOCK_NAME = ".tierops-turn.lock"


@contextlib.contextmanager
def hold(folder: Path) -> Iterator[None]:
    """Hold the turn lock of ``folder`` (created if missing) until the block ends. Raises
    ``BlockingIOError`` when another turn holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def held(folder: str | Path) -> bool:
    """A live process holds ``folder``'s turn lock (a missing or unreadable file: no)."""
    try:
        fd = os.open(Path(folder) / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False
