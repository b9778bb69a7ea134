"""The recorder under storage faults: they lose nothing and never wedge a session.

The fault is real: another connection (as another process would) holds SQLite's write lock beyond
the busy timeout, so every write of the recorder fails with SQLITE_BUSY until it lets go.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from app.engine.recorder import RecorderOptions, SessionRecorder
from app.errors import StorageUnavailable
from app.store.db import Database, is_transient
from tests.helpers import fixture_stream

BUSY_MS = 30  # the recorder's connections give up on a held lock after this


@pytest.fixture
async def quick_db(tmp_path: Path):
    db = await Database.open(tmp_path / "faults.db", busy_timeout_ms=BUSY_MS)
    try:
        yield db
    finally:
        await db.close()


class Lock:
    """Another connection holding the write lock (BEGIN IMMEDIATE), like a second process."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=5)

    def __enter__(self) -> Lock:
        self.conn.execute("BEGIN IMMEDIATE")
        return self

    def release(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")

    def __exit__(self, *exc: object) -> None:
        self.release()
        self.conn.close()


def _lines(n: int) -> list[str]:
    return [json.dumps({"type": "assistant", "n": i, "message": {"content": [{"type": "text", "text": f"line {i}"}]}})
            for i in range(n)]


async def _stored(db: Database, pk: int) -> list[tuple[int, str]]:
    rows = await db.fetchall("SELECT seq, raw FROM activity WHERE session_pk = ? ORDER BY id", (pk,))
    return [(r["seq"], r["raw"]) for r in rows]


async def test_lines_fed_while_the_database_is_locked_are_all_stored_in_order_once(quick_db):
    rec = await SessionRecorder.begin(quick_db, None, RecorderOptions(storage_retry_limit=30))  # type: ignore[arg-type]
    lines = _lines(1200)  # more than two write batches
    with Lock(quick_db.path) as lock:
        for line in lines[:900]:
            await rec.feed(line)  # writes fail (SQLITE_BUSY) and are buffered; feeding goes on
        await rec.flush()
        assert rec._failing_since is not None and len(rec._rows) == 900
        lock.release()
        for line in lines[900:]:
            await rec.feed(line)
        await rec.flush(wait=True)
    assert await _stored(quick_db, rec.session_pk) == [(i + 1, line) for i, line in enumerate(lines)]
    assert rec._failing_since is None


async def test_storage_broken_past_the_limit_is_a_storage_error(quick_db):
    rec = await SessionRecorder.begin(quick_db, None, RecorderOptions(storage_retry_limit=0.3))  # type: ignore[arg-type]
    with Lock(quick_db.path):
        await rec.feed(_lines(1)[0])
        with pytest.raises(StorageUnavailable, match=r"^storage error: database is locked"):
            await rec.flush(wait=True)


async def test_a_full_buffer_waits_for_storage_instead_of_growing(quick_db):
    rec = await SessionRecorder.begin(quick_db, None,  # type: ignore[arg-type]
                                      RecorderOptions(storage_retry_limit=30, buffer_limit=20_000))
    lines = _lines(600)
    with Lock(quick_db.path) as lock:
        feeding = asyncio.create_task(_feed_all(rec, lines))
        await asyncio.sleep(0.5)
        assert not feeding.done(), "feed() kept accepting lines past the buffer limit"
        assert rec._bytes < 20_000 + 200  # bounded: at most one line past the limit
        lock.release()
        await asyncio.wait_for(feeding, 10)
    await rec.flush(wait=True)
    assert [seq for seq, _ in await _stored(quick_db, rec.session_pk)] == list(range(1, 601))


async def _feed_all(rec: SessionRecorder, lines: list[str]) -> None:
    for line in lines:
        await rec.feed(line)


async def test_finalize_after_a_locked_spell_records_the_session(quick_db, validator):
    rec = await SessionRecorder.begin(quick_db, validator, RecorderOptions(storage_retry_limit=30))
    lines = fixture_stream("c_structured").read_text().splitlines()
    with Lock(quick_db.path) as lock:
        for line in lines:
            await rec.feed(line)

        async def let_go() -> None:
            await asyncio.sleep(0.3)
            lock.release()

        releaser = asyncio.create_task(let_go())
        report = await asyncio.wait_for(rec.finalize(), 15)  # retries its writes until the lock is gone
        await releaser
    assert report["status"] == "completed" and report["source"] == "structured_output"
    assert report["activity_count"] == len(lines)


async def test_output_of_a_looser_operator_schema_routes_what_fits_and_names_the_rest(quick_db, validator):
    rec = await SessionRecorder.begin(quick_db, validator, RecorderOptions())
    for line in fixture_stream("c_structured").read_text().splitlines():
        await rec.feed(line)
    await rec.end_attempt(0)
    output = dict(rec.outcomes[-1].output)
    output["events"] = [{"level": "info", "service": "nginx", "message": "up"}, {"level": "loud", "message": "x"}]
    output["summary"] = 42
    rec.outcomes[-1].output = output  # valid for an operator's schema, looser than the contract
    report = await rec.finalize()
    assert report["status"] == "completed" and report["source"] == "structured_output"
    assert [e["message"] for e in report["events"]] == ["up"]
    assert any(n.startswith("events[1] not routed") for n in report["notes"])
    assert any(n.startswith("summary not routed") for n in report["notes"])


async def test_a_bug_in_finalize_ends_the_session_failed_with_the_exception_named(quick_db, validator):
    rec = await SessionRecorder.begin(quick_db, validator, RecorderOptions())
    for line in fixture_stream("a_plain").read_text().splitlines():
        await rec.feed(line)
    rec.markers = None  # type: ignore[assignment]  # a bug: routing the fallback raises
    report = await rec.finalize()
    assert report["status"] == "failed"
    assert report["status_reason"].startswith("internal error: AttributeError: ")
    assert report["activity_count"] > 0 and report["source"] == "none"


def test_transient_faults_are_told_from_bugs():
    assert is_transient(sqlite3.OperationalError("database is locked"))
    assert is_transient(sqlite3.OperationalError("database or disk is full"))
    assert is_transient(OSError(28, "No space left on device"))
    assert not is_transient(sqlite3.IntegrityError("UNIQUE constraint failed"))
    assert not is_transient(sqlite3.OperationalError("no such table: x"))
