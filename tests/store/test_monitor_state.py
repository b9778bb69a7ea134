"""app/store/monitor_state.py: named JSON facts shared by every process on one database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from app.store import monitor_state
from tests.conftest import sqlite_only


async def test_put_get_replace_delete(db):
    assert await monitor_state.get(db, "x") is None
    first = await monitor_state.put(db, "x", {"reason": "HTTP 401", "n": 1}, now="2026-01-02T03:04:05Z")
    assert first == {"name": "x", "value": {"n": 1, "reason": "HTTP 401"}, "updated_at": "2026-01-02T03:04:05Z"}
    assert await monitor_state.get(db, "x") == first
    await monitor_state.put(db, "x", ["replaced"], now="2026-01-02T04:00:00Z")
    assert await monitor_state.get(db, "x", fresh=True) == {"name": "x", "value": ["replaced"],
                                                             "updated_at": "2026-01-02T04:00:00Z"}
    assert await db.fetchval("SELECT COUNT(*) FROM monitor_state") == 1
    assert await monitor_state.delete(db, "x") is True
    assert await monitor_state.delete(db, "x") is False
    assert await monitor_state.get(db, "x") is None


async def test_read_readonly_never_creates_or_writes(db, tmp_path):
    sqlite_only(db, 'a read-only open of the database file')
    await monitor_state.put(db, "y", {"a": 1})
    row = monitor_state.read_readonly(Path(db.path), "y")
    assert row is not None and row["value"] == {"a": 1}
    assert monitor_state.read_readonly(Path(db.path), "missing") is None
    missing = tmp_path / "none.db"
    assert monitor_state.read_readonly(missing, "y") is None and not missing.exists()
    old = tmp_path / "old.db"  # a database from before 0011_signal: no table, nothing to report
    sqlite3.connect(old).close()
    assert monitor_state.read_readonly(old, "y") is None
