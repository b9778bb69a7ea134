"""``app/engine/retention.py``: what a prune deletes and keeps, in what batches, the
space it gives back, the report, and the server's daily prune, against real SQLite files and
real session folders."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

import pytest

from app.config import Settings
from app.engine import retention as engine
from app.engine.cli_transcripts import slug
from app.engine.ingest import ingest_path
from app.store import activity, findings, processes, retention, sessions
from app.store.db import Database
from app.store.sessions import SessionIdentity
from app.web.app import create_app
from tests.helpers import fixture_stream, wait_until
from tests.store.test_retention import age, make_chain, make_old_database, make_session, table_counts


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "state", schedule=False)


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "PAUSE", 0)


def folder(settings: Settings, pk: int, size: int = 1000) -> Path:
    """A session folder as the supervisor leaves it: files, a subfolder."""
    path = settings.state_dir / "sessions" / str(pk)
    (path / "sub").mkdir(parents=True)
    (path / "handoff.json").write_bytes(b"x" * size)
    (path / "sub" / "notes.txt").write_bytes(b"y" * size)
    return path


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


async def test_prune_deletes_old_sessions_with_their_rows_and_folders_and_keeps_events_and_memories(db, settings):
    chain = await make_chain(db, [40, 39])
    alone = await make_session(db, days=35, lines=4)
    recent = await make_session(db, days=5)
    running = await make_session(db, days=50, status="running")
    for pk in (*chain, alone, recent, running):
        folder(settings, pk)
    before = await table_counts(db)

    report = await engine.prune(db, settings)

    assert report["dry_run"] is False and report["keep_days"] == 30 and report["cutoff"] is not None
    assert report["sessions"] == 3 and report["chains"] == 1
    assert sorted(report["session_ids"]) == sorted([*chain, alone])
    assert report["deleted"] == {"activity": 10, "output_attempts": 3, "check_results": 3, "cooldowns": 3,
                                 "maintenance_windows": 0}
    assert report["kept"] == {"events": 3, "memories": 3, "old_sessions": 1}  # the running one
    assert report["folders"] == {"removed": 3, "bytes": 6000, "missing": 0, "errors": []}
    assert report["skipped"] == 0

    after = await table_counts(db)
    assert after["sessions"] == before["sessions"] - 3
    assert after["events"] == before["events"] and after["memories"] == before["memories"]
    assert after["activity"] == before["activity"] - 10
    assert {e["session_pk"] for e in await findings.list_events(db)} == {None, recent}
    assert sorted(os.listdir(settings.state_dir / "sessions")) == sorted([str(recent), str(running)])
    assert await sessions.session_status(db, running) == "running"


async def test_a_dry_run_changes_nothing_and_reports_what_the_prune_then_does(db, settings):
    chain = await make_chain(db, [40, 39, 38])
    old = await make_session(db, days=31)
    await make_session(db, days=3)
    for pk in (*chain, old):
        folder(settings, pk, size=10)
    counts, files = await table_counts(db), listing(settings.state_dir)
    ids = [r.id for r in await retention.retention_rows(db)]

    dry = await engine.prune(db, settings, dry_run=True)

    assert await table_counts(db) == counts and listing(settings.state_dir) == files
    assert [r.id for r in await retention.retention_rows(db)] == ids
    assert dry["dry_run"] is True and dry["sessions"] == 4 and dry["chains"] == 1
    assert dry["space"] is not None and dry["space"]["vacuum"] is None and dry["space"]["pages_reclaimed"] == 0

    real = await engine.prune(db, settings)
    for key in ("sessions", "chains", "deleted", "kept", "folders", "cutoff", "keep_days"):
        if key == "cutoff":
            assert dry[key] is not None and real[key] is not None
            continue
        assert dry[key] == real[key], key  # type: ignore[literal-required]
    assert sorted(dry["session_ids"]) == sorted(real["session_ids"])


async def test_chains_go_whole_and_only_when_every_member_is_finished_and_old(db, settings):
    with_recent = await make_chain(db, [40, 5])
    with_running = await make_chain(db, [40, 39], statuses=["completed", "running"])
    old_chain = await make_chain(db, [45, 44, 43])
    stuck = await make_session(db, days=90, status="running")
    failed = await make_session(db, days=60, status="failed")
    interrupted = await make_session(db, days=60, status="interrupted")

    report = await engine.prune(db, settings)

    assert sorted(report["session_ids"]) == sorted([*old_chain, failed, interrupted])
    assert report["chains"] == 1
    kept = {r.id for r in await retention.retention_rows(db)}
    assert kept == {*with_recent, *with_running, stuck}
    # older than the cutoff but kept: the old half of both chains, both old-enough members of
    # the chain with a running one, and the stuck running session
    assert report["kept"]["old_sessions"] == 1 + 2 + 1
    assert await db.fetchval("PRAGMA foreign_key_check") is None


async def test_keep_days_overrides_the_setting_and_zero_prunes_nothing(db, settings):
    pk = await make_session(db, days=10)
    report = await engine.prune(db, settings.model_copy(update={"retention_days": 0}))
    assert report["keep_days"] == 0 and report["sessions"] == 0 and report["cutoff"] is None
    assert (await engine.prune(db, settings))["sessions"] == 0  # 30 days: too young
    assert (await engine.prune(db, settings, keep_days=0))["sessions"] == 0
    assert (await engine.prune(db, settings, keep_days=10**9))["sessions"] == 0  # no overflow
    assert (await engine.prune(db, settings, keep_days=7))["session_ids"] == [pk]


async def test_folders_are_removed_only_inside_the_sessions_folder(db, settings, tmp_path):
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    linked = await make_session(db, days=40)
    holder = await make_session(db, days=40)
    ingested = await make_session(db, days=40, trigger="ingest")
    root = settings.state_dir / "sessions"
    root.mkdir(parents=True)
    (root / str(linked)).symlink_to(outside)                    # the folder is a symlink: left alone
    folder(settings, holder)
    (root / str(holder) / "link").symlink_to(outside)           # a symlink inside: removed, not followed
    await sessions.set_launch(db, ingested, cwd=str(outside), chain_id=ingested, argv=[], system_prompt="")

    report = await engine.prune(db, settings)

    assert report["sessions"] == 3
    assert (outside / "keep.txt").read_text() == "mine"
    assert (root / str(linked)).is_symlink() and not (root / str(holder)).exists()
    assert report["folders"]["removed"] == 1 and report["folders"]["missing"] == 1
    assert len(report["folders"]["errors"]) == 1 and str(linked) in report["folders"]["errors"][0]


async def test_without_a_sessions_folder_every_session_counts_as_missing(db, settings):
    await make_session(db, days=40)
    report = await engine.prune(db, settings)
    assert report["folders"] == {"removed": 0, "bytes": 0, "missing": 1, "errors": []}


async def test_an_ingested_capture_is_pruned_and_its_events_kept(db, settings, validator):
    report, stored = await ingest_path(db, fixture_stream("c_structured"), validator, settings)
    assert stored and report["events"]
    await age(db, report["id"], 31)
    result = await engine.prune(db, settings)
    assert result["session_ids"] == [report["id"]] and result["deleted"]["activity"] == report["activity_count"]
    events = await findings.list_events(db)
    assert len(events) == len(report["events"]) and {e["session_pk"] for e in events} == {None}


async def test_batches_keep_each_write_short_and_let_other_writers_in(db, settings, monkeypatch):
    monkeypatch.setattr(engine, "BATCH_SESSIONS", 2)
    monkeypatch.setattr(engine, "BATCH_LINES", 50)
    monkeypatch.setattr(engine, "MIN_LINES", 50)  # a fixed budget: the calls below are exact
    monkeypatch.setattr(engine, "MAX_LINES", 50)
    monkeypatch.setattr(engine, "PAUSE", 0.01)
    small = [await make_session(db, days=40) for _ in range(5)]
    big = await make_session(db, days=40, lines=120)
    calls: list[tuple[str, object]] = []
    real_delete, real_activity = retention.delete_sessions, retention.delete_activity

    async def spy_delete(db_, units, cutoff):
        calls.append(("sessions", [list(u) for u in units]))
        return await real_delete(db_, units, cutoff)

    async def spy_activity(db_, ids, cutoff, limit):
        n = await real_activity(db_, ids, cutoff, limit)
        calls.append(("activity", n))
        return n

    monkeypatch.setattr(retention, "delete_sessions", spy_delete)
    monkeypatch.setattr(retention, "delete_activity", spy_activity)
    writes: list[int] = []
    done = asyncio.Event()

    async def other_writer() -> None:  # the server's own writes, meanwhile
        while not done.is_set():
            writes.append(await sessions.create_session(db, trigger="manual"))
            await asyncio.sleep(0.002)

    writer = asyncio.create_task(other_writer())
    await asyncio.sleep(0.01)
    before = len(writes)
    report = await engine.prune(db, settings)
    during = len(writes) - before
    done.set()
    await writer

    assert report["sessions"] == 6 and report["deleted"]["activity"] == 5 * 3 + 120
    assert calls == [("sessions", [[small[0]], [small[1]]]), ("sessions", [[small[2]], [small[3]]]),
                     ("sessions", [[small[4]]]), ("activity", 50), ("activity", 50), ("activity", 20),
                     ("sessions", [[big]])]
    assert during >= 5, "the other writer was held up for the whole prune"


def test_the_line_budget_adapts_to_how_long_a_write_took(monkeypatch):
    monkeypatch.setattr(engine, "BATCH_LINES", 400)
    pace = engine._Pace()
    assert pace.lines == 400
    pace.took(engine.TARGET_WRITE * 4, 400)   # too long: halve
    assert pace.lines == 200
    pace.took(engine.TARGET_WRITE / 4, 10)    # quick, but the budget was hardly used: keep
    assert pace.lines == 200
    pace.took(engine.TARGET_WRITE / 4, 200)   # quick with the budget used: double
    assert pace.lines == 400
    for _ in range(20):
        pace.took(10.0, 1)
    assert pace.lines == engine.MIN_LINES
    for _ in range(20):
        pace.took(0.0, pace.lines)
    assert pace.lines == engine.MAX_LINES


async def test_space_is_given_back_in_incremental_steps(db, settings, monkeypatch):
    monkeypatch.setattr(engine, "VACUUM_PAGES", 8)
    for _ in range(4):
        await make_session(db, days=40, lines=100, line_bytes=3000)
    await make_session(db, days=1, lines=10)
    report = await engine.prune(db, settings)
    space = report["space"]
    assert space is not None and space["auto_vacuum"] == "incremental" and space["vacuum"] == "incremental"
    assert space["free_pages"] > 16 and space["pages_reclaimed"] >= space["free_pages"]
    assert space["bytes_reclaimed"] == space["pages_reclaimed"] * space["page_size"] and space["note"] is None
    assert (await retention.space_info(db)).free_pages == 0
    assert any("returned to the file system" in line for line in engine.describe(report))


async def test_an_old_database_is_told_about_vacuum_and_vacuum_converts_it(settings):
    settings.state_dir.mkdir(parents=True)
    make_old_database(settings.db_path)
    async with await Database.open(settings.db_path) as db:
        await make_session(db, days=40, lines=100, line_bytes=3000)
        await make_session(db, days=20, lines=100, line_bytes=3000)
        first = await engine.prune(db, settings)
        assert first["sessions"] == 1
        space = first["space"]
        assert space is not None and space["auto_vacuum"] == "none" and space["vacuum"] is None
        assert space["free_pages"] > 0 and space["pages_reclaimed"] == 0
        assert "tierops prune --vacuum" in (space["note"] or "")
        assert any("tierops prune --vacuum" in line for line in engine.describe(first))

        second = await engine.prune(db, settings, keep_days=10, vacuum=True)
        space = second["space"]
        assert second["sessions"] == 1 and space is not None
        assert space["vacuum"] == "full" and space["auto_vacuum"] == "incremental" and space["pages_reclaimed"] > 0
        assert space["file_bytes_after"] < space["file_bytes_before"]
        assert (await retention.space_info(db)).auto_vacuum == "incremental"


def test_describe_and_summary_line_read_well():
    report = engine._empty_report(30, "2026-01-01T00:00:00.000Z", False)
    report["sessions"], report["chains"] = 3, 1
    report["deleted"]["activity"] = 1234
    report["kept"]["events"] = 5
    text = "\n".join(engine.describe(report))
    assert text.startswith("pruned 3 sessions (1 chain) last active before 2026-01-01T00:00:00.000Z")
    assert "1234 activity lines" in text and "kept: 5 events" in text
    assert "pruned 3 sessions" in engine.summary_line(report)
    assert engine.describe(engine._empty_report(0, None, False)) == [
        "retention is off (TIEROPS_RETENTION_DAYS=0, or --keep-days 0): nothing pruned"]


# -- the server's daily prune --------------------------------------------------------------------

async def test_the_daily_prune_survives_a_failure_and_stops_when_cancelled(db, settings, monkeypatch, caplog):
    calls: list[int] = []
    real = engine.prune

    async def flaky(db_, settings_):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return await real(db_, settings_)

    monkeypatch.setattr(engine, "prune", flaky)
    old = await make_session(db, days=40)
    caplog.set_level(logging.INFO, logger="app.engine.retention")
    task = asyncio.create_task(engine.prune_daily(db, settings, start_delay=0, interval=0.05))
    await wait_until(lambda: len(calls) >= 3, what="three daily prunes")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await sessions.get_session(db, old, fresh=True) is None
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("daily prune failed") for m in messages)
    assert any(m.startswith("daily prune: pruned 1 session (0 chains)") for m in messages)


async def test_the_server_prunes_shortly_after_start_and_stops_at_shutdown(settings, monkeypatch):
    monkeypatch.setattr(engine, "START_DELAY", 0.0)
    async with await Database.open(settings.db_path) as db:
        old = await make_session(db, days=40)
        young = await make_session(db, days=1)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        store = app.state.tierops.db
        assert [t for t in asyncio.all_tasks() if t.get_name() == "tierops-prune"]

        async def pruned() -> bool:
            return await sessions.get_session(store, old, fresh=True) is None

        for _ in range(200):
            if await pruned():
                break
            await asyncio.sleep(0.02)
        assert await pruned()
        assert await sessions.get_session(store, young, fresh=True) is not None
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "tierops-prune" and not t.done()]


async def test_with_retention_off_the_server_removes_only_what_the_cli_left_behind(settings, monkeypatch):
    monkeypatch.setattr(engine, "START_DELAY", 0.0)
    async with await Database.open(settings.db_path) as db:
        old = await make_session(db, days=40)
    left = cli_files(settings, str(settings.state_dir / "sessions" / str(old)), SID_OLD, age_s=3600)
    app = create_app(settings.model_copy(update={"retention_days": 0}))
    async with app.router.lifespan_context(app):
        await wait_until(lambda: not left.exists(), what="the CLI's leftover removed")
        assert await sessions.get_session(app.state.tierops.db, old, fresh=True) is not None  # no session pruned


# -- the claude CLI's own transcripts --------------------------------------------------------------

SID_OLD, SID_RUNNING, SID_NEW = ("0b7e1c2a-0000-4000-8000-00000000000a", "0b7e1c2a-0000-4000-8000-00000000000b",
                                 "0b7e1c2a-0000-4000-8000-00000000000c")


def cli_files(settings: Settings, cwd: str, sid: str, age_s: float = 0.0) -> Path:
    """What the claude CLI leaves under the state's HOME for a session run in ``cwd``
    (``HOME/.claude/projects/<cwd slug>/<id>.jsonl``, app/engine/cli_transcripts.py), ``age_s`` old."""
    projects = settings.state_dir / "home" / ".claude" / "projects"
    folder = projects / slug(str(Path(cwd).resolve()))
    folder.mkdir(parents=True)
    (folder / f"{sid}.jsonl").write_text('{"type":"user","message":{"content":"DB_PASSWORD=hunter22"}}\n')
    history = settings.state_dir / "home" / ".claude" / "file-history" / sid
    history.mkdir(parents=True)
    (history / "backup@v1").write_text("password: hunter22\n")
    when = time.time() - age_s
    for path in (folder / f"{sid}.jsonl", folder, history / "backup@v1", history):
        os.utime(path, (when, when))
    return folder


async def test_prune_removes_the_cli_transcripts_no_running_session_can_resume(db, settings):
    """Whatever the retention: the transcript of a finished session and one without a row go; the
    running session's stays (a resume may follow), and so does one newer than the newest running
    session (it may be a session that started while the prune read the rows)."""
    sessions_dir = settings.state_dir / "sessions"
    done = await make_session(db, days=0.1)
    running = await make_session(db, days=1 / 24, status="running")  # started an hour ago
    # its stream said its CLI session id, as a recorder stores it
    await activity.append_lines(db, running, [], line_count=3, identity=SessionIdentity(SID_RUNNING, None, None, None))
    finished = cli_files(settings, str(sessions_dir / str(done)), SID_OLD, age_s=2 * 3600)
    orphan = cli_files(settings, str(sessions_dir / "999"), "0b7e1c2a-0000-4000-8000-0000000000ff", age_s=2 * 3600)
    mine = cli_files(settings, str(sessions_dir / str(running)), SID_RUNNING, age_s=2 * 3600)
    newer = cli_files(settings, str(sessions_dir / "1000"), SID_NEW)

    dry = await engine.prune(db, settings, dry_run=True)
    assert dry["transcripts"]["removed"] == 4 and finished.exists()  # two folders and two file histories
    report = await engine.prune(db, settings, keep_days=0)
    assert report["transcripts"]["removed"] == 4 and report["transcripts"]["errors"] == []
    assert not finished.exists() and not orphan.exists() and mine.exists() and newer.exists()
    home = settings.state_dir / "home" / ".claude"
    assert sorted(p.name for p in (home / "file-history").iterdir()) == [SID_RUNNING, SID_NEW]
    assert "removed 4 files the claude CLI left behind" in "\n".join(engine.describe(report))

    await processes.mark_interrupted(db, running, "test: its supervisor died")
    await engine.prune(db, settings)  # nothing runs now: all of them go
    assert not mine.exists() and not newer.exists() and list((home / "projects").iterdir()) == []


async def test_a_conversations_cli_session_stays_while_a_next_turn_may_resume_it(db, settings):
    """TIEROPS_CHAT_RESUME_DAYS: an active conversation keeps its CLI copy; an idle one loses it."""
    from app.clock import shift, utcnow
    from app.store import chats

    chat_dir = settings.state_dir.resolve() / "chats"
    active = await chats.create_conversation(db, public_id="active", title="q", model="tierops", tier=1,
                                             client="page", cwd=str(chat_dir / "active"))
    idle = await chats.create_conversation(db, public_id="idle", title="q", model="tierops", tier=1,
                                           client="page", cwd=str(chat_dir / "idle"))
    async with db.write() as conn:  # its last turn was 8 days ago
        await conn.execute("UPDATE chat_conversations SET updated_at = ? WHERE id = ?",
                           (shift(utcnow(), -8 * 86400), idle["id"]))
    kept = cli_files(settings, active["cwd"], SID_OLD, age_s=2 * 3600)
    gone = cli_files(settings, idle["cwd"], SID_NEW, age_s=2 * 3600)
    await engine.prune(db, settings)
    assert kept.exists() and not gone.exists()
    await engine.prune(db, settings.model_copy(update={"chat_resume_days": 0}))
    assert not kept.exists()
