"""A look at a database file without changing it, for ``tierops doctor``.

Why not :meth:`Database.open`: opening applies migrations and creates a missing file; the doctor
must report what is there (which migrations are pending, whether the file is writable) and never
create or upgrade anything. So this module uses a plain ``sqlite3`` connection opened with
``mode=rw`` (``mode=ro`` when the file is not writable), and proves writability with
``BEGIN IMMEDIATE`` + ``ROLLBACK``: the write lock is taken and released, nothing is written.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from app.store.migrations import MIGRATIONS

log = logging.getLogger(__name__)

__all__ = ["DatabaseInfo", "inspect_database"]


@dataclass(frozen=True)
class DatabaseInfo:
    path: Path
    exists: bool
    size_bytes: int = 0  # the file plus its -wal
    writable: bool = False
    write_error: str | None = None
    applied: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # applied by a newer TierOps
    sessions: int = 0
    newest_timestamp: str | None = None  # the latest started_at/ended_at stored (clock check)
    journal_mode: str | None = None
    error: str | None = None  # the file could not be read as a TierOps database


def inspect_database(path: Path, busy_timeout_ms: int = 2000) -> DatabaseInfo:
    """What ``path`` holds. Never creates, migrates or writes it."""
    if not path.is_file():
        return DatabaseInfo(path=path, exists=False)
    size = path.stat().st_size
    wal = path.with_name(path.name + "-wal")
    if wal.is_file():
        size += wal.stat().st_size
    mode = "rw" if os.access(path, os.W_OK) else "ro"
    try:
        conn = sqlite3.connect(f"file:{path}?mode={mode}", uri=True, isolation_level=None,
                               timeout=busy_timeout_ms / 1000)
    except sqlite3.Error as exc:
        return DatabaseInfo(path=path, exists=True, size_bytes=size, error=str(exc))
    try:
        return _inspect(conn, path, size, mode)
    except sqlite3.Error as exc:
        return DatabaseInfo(path=path, exists=True, size_bytes=size, error=str(exc))
    finally:
        conn.close()


def _inspect(conn: sqlite3.Connection, path: Path, size: int, mode: str) -> DatabaseInfo:
    journal = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    has_table = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'migrations'").fetchone() is not None
    applied = [str(r[0]) for r in conn.execute("SELECT name FROM migrations ORDER BY name")] if has_table else []
    known = [name for name, _ in MIGRATIONS]
    sessions = 0
    newest = None
    if "0001_engine" in applied:
        sessions = int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])
        newest = conn.execute(
            "SELECT max(max(started_at), coalesce(max(ended_at), '')) FROM sessions").fetchone()[0] or None
    writable, write_error = False, None
    if mode == "rw":
        try:
            conn.execute("BEGIN IMMEDIATE")  # takes the write lock; nothing is written
            conn.execute("ROLLBACK")
            writable = True
        except sqlite3.Error as exc:
            write_error = str(exc)
    else:
        write_error = "the file is not writable by this user"
    return DatabaseInfo(
        path=path, exists=True, size_bytes=size, writable=writable, write_error=write_error,
        applied=applied, pending=[n for n in known if n not in applied],
        unknown=[n for n in applied if n not in known], sessions=sessions,
        newest_timestamp=str(newest) if newest else None, journal_mode=journal,
    )
