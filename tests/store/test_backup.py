"""``app/store/backup.py``: a consistent copy of a live database, while another process
writes to it, checked with ``PRAGMA integrity_check``; never a half-written or clobbered FILE."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from app.errors import InputError
from app.store import sessions
from app.store.backup import BackupError, backup_database
from app.store.db import Database
from app.store.migrations import MIGRATIONS
from tests.store.test_retention import make_chain, make_session

# A writer in another process: each transaction adds a session with line_count = k and exactly k
# activity rows, so in any consistent snapshot every session's line_count equals its rows.
WRITER = r"""
import os, sqlite3, sys
path, stop = sys.argv[1], sys.argv[2]
conn = sqlite3.connect(path, isolation_level=None, timeout=30)
conn.execute("PRAGMA foreign_keys = ON")
n = 0
while not os.path.exists(stop):
    k = 1 + n % 7
    conn.execute("BEGIN IMMEDIATE")
    pk = conn.execute("INSERT INTO sessions (status, trigger, started_at, line_count)"
                      " VALUES ('completed', 'manual', '2026-01-01T00:00:00.000Z', ?)", (k,)).lastrowid
    conn.executemany("INSERT INTO activity (session_pk, seq, ts, type, display, raw)"
                     " VALUES (?, ?, '2026-01-01T00:00:00.000Z', 'assistant', 'x', ?)",
                     [(pk, i, "r" * 3000) for i in range(1, k + 1)])
    conn.execute("COMMIT")
    n += 1
"""

INCONSISTENT = ("SELECT count(*) FROM sessions s"
                " WHERE line_count != (SELECT count(*) FROM activity a WHERE a.session_pk = s.id)")


def session_count(path: Path) -> int:
    conn = sqlite3.connect(path, timeout=30)
    try:
        return int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])
    finally:
        conn.close()


@contextmanager
def concurrent_writer(path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The WRITER script running against ``path`` until the block ends (it has written by then)."""
    stop = path.with_name("stop-writer")
    start = session_count(path)
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(stop)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while session_count(path) < start + 5:  # it is writing
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the writer never wrote"
            time.sleep(0.01)
        yield proc
    finally:
        stop.touch()
        _, err = proc.communicate(timeout=30)
        stop.unlink()
    assert proc.returncode == 0, err.decode()


async def fill(db: Database) -> None:
    """~40 MB of real sessions (a chain among them): a copy of 2 pages per step takes ~1500 steps."""
    await make_chain(db, [3, 2], lines=50)
    for _ in range(4):
        await make_session(db, days=1, lines=100, line_bytes=2000)
    await make_session(db, days=1, lines=2000, line_bytes=20_000)


async def test_a_copy_of_a_database_being_written_is_one_consistent_snapshot(tmp_path):
    live = tmp_path / "tierops.db"
    async with await Database.open(live) as db:
        await fill(db)
    target = tmp_path / "backup.db"

    with concurrent_writer(live):
        before = session_count(live)
        # Many small steps while it writes. Without the snapshot held across the steps, every
        # write in between restarts the copy from page 1 and it never ends (measured: 29,000
        # restarts in 10 s against this writer); hence the time limit.
        result = await asyncio.wait_for(backup_database(live, target, pages=2), timeout=60)
        after = session_count(live)

    assert after > before, "the writer did not write during the copy"
    assert result.integrity == "ok" and result.path == target and result.source == live
    assert result.pages > 2000 and result.page_size == 16384 and result.bytes == target.stat().st_size
    conn = sqlite3.connect(target)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute(INCONSISTENT).fetchone()[0] == 0  # no transaction is half in the copy
        copied = int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])
        assert before <= copied <= after and result.sessions == copied
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # one self-contained file
    finally:
        conn.close()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("backup", ".backup"))) == ["backup.db"]


async def test_the_copy_opens_as_a_tierops_database_with_the_same_sessions(tmp_path):
    live = tmp_path / "tierops.db"
    async with await Database.open(live) as db:
        chain = await make_chain(db, [3, 2])
        # the server is open and has unflushed WAL pages while the copy is made
        result = await backup_database(live, tmp_path / "copy.db")
        assert result.sessions == 2
    async with await Database.open(tmp_path / "copy.db") as copy:
        assert [n for (n,) in await copy.fetchall("SELECT name FROM migrations ORDER BY name")] == [
            n for n, _ in MIGRATIONS]
        row = await sessions.get_session(copy, chain[0])
        assert row is not None and row["escalated_to"] == chain[1]


async def test_an_existing_file_is_replaced_only_when_asked(tmp_path):
    live = tmp_path / "tierops.db"
    async with await Database.open(live) as db:
        await make_session(db, days=1)
    target = tmp_path / "b.db"
    target.write_bytes(b"an older backup")
    with pytest.raises(InputError, match="already exists; use --force"):
        await backup_database(live, target)
    assert target.read_bytes() == b"an older backup"
    result = await backup_database(live, target, overwrite=True)
    assert result.sessions == 1 and target.read_bytes()[:16] == b"SQLite format 3\x00"


@pytest.mark.parametrize("name, message", [
    ("tierops.db", "is the live database itself"),
    ("tierops.db-wal", "is the live database itself"),
    ("missing/b.db", "does not exist"),
    (".", "is a directory"),
])
async def test_unusable_targets_are_refused_before_anything_is_written(tmp_path, name, message):
    live = tmp_path / "tierops.db"
    async with await Database.open(live) as db:
        await make_session(db, days=1)
    files = sorted(tmp_path.iterdir())
    with pytest.raises(InputError, match=message):
        await backup_database(live, tmp_path / name)
    assert sorted(tmp_path.iterdir()) == files


async def test_a_source_that_is_not_a_database_fails_cleanly(tmp_path):
    live = tmp_path / "tierops.db"
    live.write_bytes(b"not sqlite at all " * 100)
    with pytest.raises(BackupError, match="cannot back up"):
        await backup_database(live, tmp_path / "b.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tierops.db"]  # no temporary file left
