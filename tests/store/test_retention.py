"""``app/store/retention.py`` and migration ``0004_retention`` against real SQLite files.

The builders here (:func:`make_session`, :func:`make_chain`, :func:`age`) are shared by the
engine and CLI retention tests: sessions are made through the real store functions (lines,
attempts, routed findings with events, memories, checks and cooldowns), then aged with SQL.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from app.output.route import Routed
from app.store import activity, attempts, findings, retention, sessions
from app.store.attempts import AttemptRecord
from app.store.db import Database
from app.store.migrations import MIGRATIONS
from app.store.sessions import SessionSummary
from tests.conftest import sqlite_only

# -- builders ------------------------------------------------------------------------------------


def ago(days: float, now: datetime | None = None) -> str:
    when = (now or datetime.now(UTC)) - timedelta(days=days)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def summary(status: str = "completed", lines: int = 3) -> SessionSummary:
    return SessionSummary(
        status=status, status_reason=None, degraded=False, exit_code=0, ended_at=ago(0), duration_ms=1200,
        duration_api_ms=900, cost_usd=0.25, input_tokens=100, output_tokens=20, cache_read_tokens=5,
        cache_creation_tokens=6, num_turns=3, result_subtype="success", is_error=False, api_error_status=None,
        stop_reason="end_turn", terminal_reason="completed", result_text="done", result_errors=[],
        permission_denials=[], model_usage={}, validation_valid=True, validation_errors=[],
        structured_output={"summary": "ok"}, invalid_output=None, attempts=1, handoff_raw=None, notes=None,
        stderr_tail=None, line_count=lines, cli_model="m", cwd=None)


def routed(pk: int) -> Routed:
    """One event, one memory of its own, one check and one cooldown per session."""
    return Routed(source="structured_output", summary=f"session {pk}",
                  events=[("warning", None, "nginx", f"slow in session {pk}")],
                  memories=[("nginx", "fact", f"learned in session {pk}")],
                  checks=[("nginx", "degraded", None)],
                  cooldowns=[("restart", "nginx", "success", None)],
                  escalation={"needed": False, "reason": None, "context": None, "failed_checks": []})


async def make_session(db: Database, *, days: float, status: str = "completed", lines: int = 3,
                       parent: int | None = None, chain: int | None = None, trigger: str = "manual",
                       line_bytes: int = 0) -> int:
    """A session as the supervisor leaves it, last active ``days`` ago. ``chain``: its chain's
    root (the root itself passes ``chain=0``, meaning its own id); ``parent``: escalated from."""
    pk = await sessions.create_session(db, tier=1, trigger=trigger, parent_session_id=parent)
    if chain is not None:
        await sessions.set_launch(db, pk, cwd=f"/state/sessions/{pk}", chain_id=chain or pk, argv=["claude"],
                                  system_prompt="")
    if parent is not None:
        await sessions.set_escalated_to(db, parent, pk)
    filler = "x" * line_bytes
    for start in range(0, lines, 500):
        batch = [(pk, i, 1, "2026-01-01T00:00:00.000Z", "assistant", None, f"line {i}", f'{{"n": {i}, "f": "{filler}"}}')
                 for i in range(start + 1, min(lines, start + 500) + 1)]
        await activity.append_lines(db, pk, batch, line_count=batch[-1][1])
    await attempts.save_attempt(db, pk, AttemptRecord(1, "stream", "success", False, True, {"a": 1}, True, []))
    if status != "running":
        await sessions.finish_session(db, pk, summary(status, lines), routed(pk), initial_confidence=0.7,
                                      reinforce=0.3)
    await age(db, pk, days)
    return pk


async def make_chain(db: Database, days: list[float], statuses: list[str] | None = None, lines: int = 3) -> list[int]:
    """An escalation chain, one session per entry of ``days`` (tier 1 first)."""
    statuses = statuses or ["completed"] * len(days)
    ids: list[int] = []
    for d, status in zip(days, statuses, strict=True):
        ids.append(await make_session(db, days=d, status=status, lines=lines, parent=ids[-1] if ids else None,
                                      chain=ids[0] if ids else 0))
    return ids


async def age(db: Database, pk: int, days: float) -> None:
    """Move the session's start (and end, if it ended) ``days`` into the past."""
    async with db.write() as conn:
        await conn.execute("UPDATE sessions SET started_at = ?, ended_at = CASE WHEN ended_at IS NULL THEN NULL"
                           " ELSE ? END WHERE id = ?", (ago(days + 0.01), ago(days), pk))


async def count(db: Database, table: str, where: str = "") -> int:
    return int(await db.fetchval(f"SELECT count(*) FROM {table} {where}", fresh=True))


async def table_counts(db: Database) -> dict[str, int]:
    return {t: await count(db, t) for t in ("sessions", "activity", "output_attempts", "check_results", "cooldowns",
                                            "events", "memories")}


def make_old_database(path: Path) -> None:
    """A database as TierOps made it before retention: migrations 0001-0003, auto_vacuum NONE."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA page_size = 16384")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    for name, sql in MIGRATIONS[:3]:
        for statement in (s for s in sql.split(";") if s.strip()):
            conn.execute(statement)
        conn.execute("INSERT INTO migrations VALUES (?, '2026-01-01T00:00:00.000Z')", (name,))
    conn.close()


# -- migration 0004 ------------------------------------------------------------------------------

async def test_migration_keeps_every_event_and_makes_the_session_reference_nullable(tmp_path):
    path = tmp_path / "old.db"
    make_old_database(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("INSERT INTO sessions (id, status, started_at) VALUES (7, 'completed', '2026-01-01T00:00:00.000Z')")
    conn.executemany("INSERT INTO events (id, session_pk, level, original_level, service, message, source, created_at)"
                     " VALUES (?, 7, ?, ?, ?, ?, 'markers', '2026-01-01T00:00:00.000Z')",
                     [(3, "critical", "urgent", "db", "down"), (9, "info", None, None, "fine")])
    conn.close()

    async with await Database.open(path) as db:
        rows = [tuple(r) for r in await db.fetchall(
            "SELECT id, session_pk, level, original_level, service, message FROM events ORDER BY id")]
        assert rows == [(3, 7, "critical", "urgent", "db", "down"), (9, 7, "info", None, None, "fine")]
        fk = [tuple(r) for r in await db.fetchall("PRAGMA foreign_key_list(events)")]
        assert [(f[2], f[3], f[6]) for f in fk] == [("sessions", "session_pk", "SET NULL")]
        notnull = {r["name"]: r["notnull"] for r in await db.fetchall("PRAGMA table_info(events)")}
        assert notnull["session_pk"] == 0 and notnull["level"] == 1
        indexes = {r[0] for r in await db.fetchall("SELECT name FROM sqlite_master WHERE type = 'index'"
                                                    " AND tbl_name = 'events'")}
        assert {"events_session", "events_level", "events_service"} <= indexes
        assert await db.fetchval("PRAGMA foreign_key_check") is None
        assert await db.fetchval("PRAGMA integrity_check") == "ok"
        # an old file keeps auto_vacuum NONE (only VACUUM can change it); the report says so
        assert (await retention.space_info(db)).auto_vacuum == "none"

        async with db.write() as conn:  # what a prune does (delete_session also drops the events)
            await conn.execute("DELETE FROM sessions WHERE id = 7")
        kept = await findings.list_events(db)
        assert [(e["id"], e["session_pk"], e["session_id"], e["tier"]) for e in kept] == [
            (9, None, None, None), (3, None, None, None)]


async def test_a_new_database_gives_space_back_incrementally(db):
    sqlite_only(db, 'auto_vacuum and the free list')
    info = await retention.space_info(db)
    assert info.auto_vacuum == "incremental" and info.page_size == 16384


async def test_event_readers_show_events_whose_session_was_pruned(db):
    gone = await make_session(db, days=40)
    kept = await make_session(db, days=1)
    await retention.delete_sessions(db, [[gone]], ago(30))
    rows = await findings.list_events(db)
    assert [(e["session_pk"], e["session_id"]) for e in rows] == [(kept, None), (None, None)]
    assert [e["session_pk"] for e in await findings.recent_alerts(db)] == [kept, None]
    assert [e["session_pk"] for e in await findings.events_after(db, 0, 10)] == [None, kept]
    assert await findings.list_events(db, session=gone) == []


# -- what a prune reads --------------------------------------------------------------------------

async def test_retention_rows_carry_links_status_and_age(db):
    chain = await make_chain(db, [40, 39])
    running = await make_session(db, days=50, status="running")
    rows = {r.id: r for r in await retention.retention_rows(db)}
    assert rows[chain[0]].chain_id == chain[0] and rows[chain[0]].escalated_to == chain[1]
    assert rows[chain[1]].parent_session_id == chain[0] and rows[chain[1]].chain_id == chain[0]
    assert rows[running].running and not rows[chain[0]].running
    assert rows[running].last_at < ago(49.9)  # no end: its start counts
    assert rows[chain[1]].line_count == 3


async def test_count_rows_says_what_goes_and_what_stays(db):
    chain = await make_chain(db, [40, 39], lines=5)
    await make_session(db, days=40)
    counts = await retention.count_rows(db, chain)
    assert counts == {"sessions": 2, "activity": 10, "output_attempts": 2, "check_results": 2, "cooldowns": 2,
                      "events": 2, "memories": 2}
    assert await count(db, "sessions") == 3  # reading changed nothing


# -- deleting ------------------------------------------------------------------------------------

async def test_delete_sessions_takes_a_whole_chain_and_keeps_events_and_memories(db):
    chain = await make_chain(db, [40, 39, 38])
    other = await make_session(db, days=40)
    before = await table_counts(db)

    done = await retention.delete_sessions(db, [chain], ago(30))

    assert done == [(chain, {"sessions": 3, "activity": 9, "output_attempts": 3, "check_results": 3,
                             "cooldowns": 3, "events": 3, "memories": 3})]
    after = await table_counts(db)
    assert after["sessions"] == before["sessions"] - 3
    assert after["activity"] == 3 and after["output_attempts"] == 1 and after["check_results"] == 1
    assert after["cooldowns"] == 1
    assert after["events"] == before["events"] and after["memories"] == before["memories"]
    assert await count(db, "events", "WHERE session_pk IS NULL") == 3
    assert await count(db, "memories", "WHERE created_by_session IS NULL") == 3
    assert await sessions.get_session(db, other, fresh=True) is not None
    if db.dialect == "sqlite":  # PostgreSQL checks every foreign key itself
        assert await db.fetchval("PRAGMA foreign_key_check") is None


async def test_delete_sessions_rechecks_inside_its_transaction(db):
    running = await make_session(db, days=40, status="running")
    recent = await make_session(db, days=2)
    referenced = await make_session(db, days=40)
    await make_session(db, days=1, parent=referenced)  # a newer session escalated from it
    ok = await make_session(db, days=40)

    done = await retention.delete_sessions(db, [[running], [recent], [referenced], [ok]], ago(30))

    assert [ids for ids, _ in done] == [[ok]]
    assert await retention.existing_sessions(db, [running, recent, referenced, ok]) == {running, recent, referenced}


async def test_delete_activity_goes_in_chunks_and_stops_when_the_set_is_no_longer_prunable(db):
    pk = await make_session(db, days=40, lines=25)
    assert await retention.delete_activity(db, [pk], ago(30), 10) == 10
    assert await retention.delete_activity(db, [pk], ago(30), 10) == 10
    assert await count(db, "activity") == 5
    assert await retention.delete_activity(db, [pk], ago(50), 10) is None  # not older than this cutoff
    assert await count(db, "activity") == 5
    assert await retention.delete_activity(db, [pk], ago(30), 10) == 5
    assert await retention.delete_activity(db, [pk], ago(30), 10) == 0


# -- space ---------------------------------------------------------------------------------------

async def test_incremental_vacuum_returns_free_pages_in_steps(db):
    sqlite_only(db, 'incremental vacuum')
    pks = [await make_session(db, days=40, lines=200, line_bytes=2000) for _ in range(3)]
    await retention.delete_sessions(db, [pks], ago(30))
    await retention.checkpoint(db)  # everything into the file, to measure it
    info = await retention.space_info(db)
    assert info.free_pages > 40 and info.file_bytes == info.page_count * info.page_size
    freed = await retention.incremental_vacuum(db, 16)
    assert freed == 16
    while await retention.incremental_vacuum(db, 64):
        pass
    await retention.checkpoint(db)
    after = await retention.space_info(db)
    assert after.free_pages == 0 and after.page_count == info.page_count - info.free_pages
    # the passive checkpoint carried the shrink into the file (no reader held an older snapshot)
    assert after.file_bytes == after.page_count * after.page_size < info.file_bytes


async def test_full_vacuum_shrinks_an_old_database_and_switches_it_to_incremental(tmp_path):
    path = tmp_path / "old.db"
    make_old_database(path)
    async with await Database.open(path) as db:
        pks = [await make_session(db, days=40, lines=100, line_bytes=2000) for _ in range(3)]
        await retention.delete_sessions(db, [pks], ago(30))
        await retention.checkpoint(db)  # everything into the file, to measure it
        info = await retention.space_info(db)
        assert info.auto_vacuum == "none" and info.free_pages > 20
        assert await retention.incremental_vacuum(db, 100) == 0  # nothing to do without auto_vacuum
        await retention.full_vacuum(db)
        after = await retention.space_info(db)
    assert after.auto_vacuum == "incremental" and after.free_pages == 0
    assert after.page_count <= info.page_count - info.free_pages + 1  # + a pointer-map page of auto-vacuum
    assert after.file_bytes == after.page_count * after.page_size < info.file_bytes and after.wal_bytes == 0

