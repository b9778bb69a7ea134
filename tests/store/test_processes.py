"""app/store/processes.py: the CLI recorded on a session row, the rows the sweep reads, marking one."""

from __future__ import annotations

from app.store import processes, sessions


async def test_record_process_and_read_running_sessions(db):
    sched = await sessions.create_session(db, tier=1, trigger="schedule")
    manual = await sessions.create_session(db, tier=1, trigger="manual")
    await sessions.create_session(db, trigger="ingest")  # a file has no process: never swept
    await sessions.set_launch(db, sched, cwd="/state/sessions/1", chain_id=sched, argv=["claude"], system_prompt="s")
    await processes.record_process(db, sched, 4242, 4242, 1_700_000_000.25)
    await processes.record_process(db, sched, 4343, 4343, 1_700_000_001.5)  # a resume replaces it
    rows = await processes.running_sessions_with_process(db)
    assert rows == [
        processes.RunningSession(id=sched, cwd="/state/sessions/1", cli_pid=4343, cli_pgid=4343,
                                 cli_start_time=1_700_000_001.5),
        processes.RunningSession(id=manual, cwd=None, cli_pid=None, cli_pgid=None, cli_start_time=None),
    ]
    await processes.record_process(db, manual, 7, 7, None)  # start time unknown: kept as NULL
    assert (await processes.running_sessions_with_process(db))[1].cli_start_time is None


async def test_mark_interrupted_only_touches_a_running_row(db):
    pk = await sessions.create_session(db, tier=1, trigger="schedule")
    assert await processes.mark_interrupted(db, pk, "the supervisor stopped while this session ran") is True
    row = await sessions.get_session(db, pk)
    assert row is not None
    assert (row["status"], row["status_reason"]) == ("interrupted", "the supervisor stopped while this session ran")
    assert row["ended_at"]
    assert await processes.mark_interrupted(db, pk, "again") is False  # already ended: left as it is
    assert (await sessions.get_session(db, pk))["status_reason"] == "the supervisor stopped while this session ran"
    assert await processes.running_sessions_with_process(db) == []
