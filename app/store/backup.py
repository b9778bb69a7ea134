"""``tierops backup FILE``: a consistent copy of the live database, safe while the server writes.

Why not ``cp``: a file copy taken while the server writes can catch pages mid-update, and misses
whatever still sits in ``tierops.db-wal``. SQLite's online backup API copies the pages through
SQLite's own locking, WAL included.

What it deliberately does differently from the plain backup API: one read transaction is held on
the source across every step. A step that opens its own restarts the copy from page 1 whenever
another connection wrote since the previous step, and under a busy writer may never finish; one
read transaction pins one snapshot (in WAL mode a reader never blocks the writer). The copy is
written to a hidden temporary file beside ``FILE``, switched to a rollback journal (one
self-contained file), checked with ``PRAGMA integrity_check``, synced, and only then renamed to
``FILE``: an interrupted backup never leaves a half-written ``FILE``, and an existing one is
replaced only when asked (``overwrite``). The copy runs in a thread on its own ``sqlite3``
connections, so the event loop goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from app.errors import InputError, StoreError
from app.store.db import BUSY_TIMEOUT_MS

log = logging.getLogger(__name__)

__all__ = ["STEP_PAGES", "BackupError", "BackupResult", "backup_database"]

STEP_PAGES = 1024  # pages per backup step (16 MiB at 16 KiB pages)
STEP_SLEEP = 0.05  # seconds to wait before retrying a step the source's lock refused


class BackupError(StoreError):
    """The copy could not be made or failed its check; nothing was written to FILE."""


@dataclass(frozen=True)
class BackupResult:
    path: Path         # FILE
    source: Path       # the live database
    bytes: int         # size of FILE
    pages: int
    page_size: int
    sessions: int | None  # sessions in the copy (None: not a TierOps database)
    integrity: str     # "ok"
    seconds: float


def _check_target(source: Path, target: Path, overwrite: bool) -> None:
    live = {source.resolve(), *(source.resolve().with_name(source.resolve().name + s) for s in ("-wal", "-shm"))}
    if target.resolve() in live:
        raise InputError(f"{target} is the live database itself; back up to another file")
    if target.is_dir():
        raise InputError(f"{target} is a directory; give the backup's file name")
    if not target.parent.is_dir():
        raise InputError(f"directory {target.parent} does not exist")
    if target.exists() and not overwrite:
        raise InputError(f"{target} already exists; use --force to replace it")


async def backup_database(source: Path, target: Path, *, overwrite: bool = False, pages: int = STEP_PAGES,
                          sleep: float = STEP_SLEEP, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> BackupResult:
    """Copy the database ``source`` to ``target`` (see the module's docstring).

    Raises :class:`~app.errors.InputError` for an unusable ``target`` (exists without
    ``overwrite``, is the live file, no such directory) and :class:`BackupError` when the copy
    fails (the source is not a database, disk full, the integrity check fails).
    """
    source, target = Path(source).absolute(), Path(target).absolute()
    _check_target(source, target, overwrite)
    return await asyncio.to_thread(_backup, source, target, overwrite, pages, sleep, busy_timeout_ms)


def _backup(source: Path, target: Path, overwrite: bool, pages: int, sleep: float,
            busy_timeout_ms: int) -> BackupResult:
    started = time.monotonic()
    tmp: Path | None = None
    try:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
        os.close(fd)
        tmp = Path(name)
        try:
            _copy(source, tmp, pages, sleep, busy_timeout_ms)
            page_size, page_count, sessions, integrity = _check(tmp)
        except sqlite3.Error as exc:
            raise BackupError(f"cannot back up {source}: {exc}") from None
        if integrity != "ok":
            raise BackupError(f"the copy of {source} failed its integrity check: {integrity}")
        _fsync(tmp)
        _place(tmp, target, overwrite)
        _fsync_dir(target.parent)
    except OSError as exc:
        raise BackupError(f"cannot write {target}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:  # gone already unless something failed
            for suffix in ("", "-journal", "-wal", "-shm"):
                with contextlib.suppress(OSError):
                    Path(f"{tmp}{suffix}").unlink()
    result = BackupResult(path=target, source=source, bytes=target.stat().st_size, pages=page_count,
                          page_size=page_size, sessions=sessions, integrity=integrity,
                          seconds=round(time.monotonic() - started, 3))
    log.debug("backed up %s to %s: %d pages, %d bytes in %.2f s", source, target, page_count, result.bytes,
             result.seconds)
    return result


def _copy(source: Path, tmp: Path, pages: int, sleep: float, busy_timeout_ms: int) -> None:
    mode = "rw" if os.access(source, os.W_OK) else "ro"  # never creates the source (mode=rw[c])
    src = sqlite3.connect(f"file:{source}?mode={mode}", uri=True, isolation_level=None,
                          timeout=busy_timeout_ms / 1000)
    try:
        # One read transaction for the whole copy: the snapshot (see the module's docstring).
        src.execute("BEGIN")
        src.execute("SELECT count(*) FROM sqlite_master").fetchone()
        dst = sqlite3.connect(tmp, isolation_level=None)
        try:
            src.backup(dst, pages=max(1, pages), sleep=sleep)
        finally:
            dst.close()
        src.execute("COMMIT")
    finally:
        src.close()


def _check(tmp: Path) -> tuple[int, int, int | None, str]:
    """Page size, page count, sessions and the integrity check of the copy, as a fresh connection
    reads it from disk; the copy is switched to a rollback journal (one self-contained file)."""
    conn = sqlite3.connect(tmp, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = DELETE").fetchall()
        problems = [str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall()]
        integrity = "ok" if problems == ["ok"] else "; ".join(problems[:5])
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        page_count = int(conn.execute("PRAGMA page_count").fetchone()[0])
        has_sessions = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sessions'").fetchone() is not None
        sessions = int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0]) if has_sessions else None
    finally:
        conn.close()
    return page_size, page_count, sessions, integrity


def _place(tmp: Path, target: Path, overwrite: bool) -> None:
    """Rename the finished copy to ``target``; without ``overwrite`` never replace a file that
    appeared meanwhile (a hard link fails if the name exists; without hard links, check first)."""
    if overwrite:
        os.replace(tmp, target)
        return
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise InputError(f"{target} already exists; use --force to replace it") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EXDEV, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        if target.exists():
            raise InputError(f"{target} already exists; use --force to replace it") from None
        os.replace(tmp, target)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system can sync a directory
        _fsync(path)
