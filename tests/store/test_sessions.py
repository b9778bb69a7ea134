"""``app/store/sessions.py`` against a real SQLite file: the session row from ``running`` to final."""

from __future__ import annotations

import dataclasses
import re
import sqlite3

import pytest

from app.output.route import Routed
from app.store import activity, attempts, findings, sessions
from app.store.attempts import AttemptRecord
from app.store.sessions import SessionIdentity, SessionSummary

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def summary(**changes: object) -> SessionSummary:
    base = SessionSummary(
        status="completed", status_reason=None, degraded=False, exit_code=0, ended_at="2026-01-01T00:00:00.000Z",
        duration_ms=1200, duration_api_ms=900, cost_usd=0.25, input_tokens=100, output_tokens=20,
        cache_read_tokens=5, cache_creation_tokens=6, num_turns=3, result_subtype="success", is_error=False,
        api_error_status=None, stop_reason="end_turn", terminal_reason="completed", result_text="done",
        result_errors=[], permission_denials=[], model_usage={"m": {"costUSD": 0.25}}, validation_valid=True,
        validation_errors=[], structured_output={"summary": "ok"}, invalid_output=None, attempts=1,
        handoff_raw=None, notes=["a note"], stderr_tail="tail", line_count=7, cli_model="cli-model", cwd="/cwd",
    )
    return dataclasses.replace(base, **changes)


def routed(**changes: object) -> Routed:
    base = Routed(
        source="structured_output", summary="all fine",
        events=[("warning", None, "nginx", "slow")],
        memories=[("postgres", "disk", "grows 2%/day")],
        checks=[("nginx", "healthy", None)],
        cooldowns=[("restart", "nginx", "success", "ok")],
        escalation={"needed": False, "reason": None, "context": None, "failed_checks": []},
    )
    return dataclasses.replace(base, **changes)


async def finish(db, pk: int, s: SessionSummary | None = None, r: Routed | None = None) -> None:
    await sessions.finish_session(db, pk, s or summary(), r or routed(), initial_confidence=0.7, reinforce=0.3)


async def count(db, table: str) -> int:
    return await db.fetchval(f"SELECT count(*) FROM {table}", fresh=True)


# -- writes --------------------------------------------------------------------------------------

async def test_create_session_stores_a_running_row_with_started_at(db):
    pk = await sessions.create_session(db, tier=2, model="sonnet", prompt="check", cwd="/w", trigger="manual",
                                       stream_sha256="abc")
    row = await sessions.get_session(db, pk)
    assert row is not None
    assert row["status"] == "running"
    assert ISO.match(row["started_at"])
    assert row["ended_at"] is None
    assert (row["tier"], row["model"], row["prompt"], row["cwd"], row["trigger"], row["stream_sha256"]) == (
        2, "sonnet", "check", "/w", "manual", "abc")
    assert row["degraded"] is False
    assert row["line_count"] == 0
    assert await sessions.session_status(db, pk) == "running"


async def test_session_status_is_none_for_an_unknown_session(db):
    assert await sessions.session_status(db, 999) is None
    assert await sessions.get_session(db, 999) is None


async def test_create_session_defaults_to_ingest_trigger(db):
    pk = await sessions.create_session(db)
    row = await sessions.get_session(db, pk)
    assert row["trigger"] == "ingest"
    assert row["tier"] is None


async def test_set_launch_stores_argv_as_json_and_get_session_decodes_it(db):
    pk = await sessions.create_session(db, trigger="manual")
    argv = ["claude", "-p", "héllo \"quoted\"", "--model", "m"]
    await sessions.set_launch(db, pk, cwd="/state/sessions/1", chain_id=pk, argv=argv, system_prompt="be careful")
    stored = await db.fetchval("SELECT argv FROM sessions WHERE id = ?", (pk,))
    assert isinstance(stored, str)
    assert stored.startswith("[")
    row = await sessions.get_session(db, pk)
    assert row["argv"] == argv
    assert (row["cwd"], row["chain_id"], row["system_prompt"]) == ("/state/sessions/1", pk, "be careful")


async def test_set_stream_sha256(db):
    pk = await sessions.create_session(db)
    await sessions.set_stream_sha256(db, pk, "f" * 64)
    assert (await sessions.get_session(db, pk))["stream_sha256"] == "f" * 64


async def test_finish_session_writes_summary_and_routed_findings(db):
    pk = await sessions.create_session(db, trigger="manual")
    await finish(db, pk)
    row = await sessions.get_session(db, pk, fresh=True)
    assert row["status"] == "completed"
    assert row["ended_at"] == "2026-01-01T00:00:00.000Z"
    assert row["cost_usd"] == 0.25
    assert row["is_error"] is False
    assert row["validation_valid"] is True
    assert row["structured_output"] == {"summary": "ok"}
    assert row["model_usage"] == {"m": {"costUSD": 0.25}}
    assert row["notes"] == ["a note"]
    assert row["line_count"] == 7
    # from the routed findings, in the same row
    assert row["source"] == "structured_output"
    assert row["summary"] == "all fine"
    assert row["escalation_needed"] is False
    assert await count(db, "events") == 1
    assert await count(db, "memories") == 1
    assert await count(db, "check_results") == 1
    assert await count(db, "cooldowns") == 1


async def test_finish_session_is_atomic_when_the_routed_write_fails(db):
    pk = await sessions.create_session(db, trigger="manual")
    bad = routed(events=[("info", None, "nginx", "fine"), ("bogus", None, "nginx", "violates CHECK")])
    with pytest.raises(sqlite3.IntegrityError):
        await finish(db, pk, r=bad)
    row = await sessions.get_session(db, pk, fresh=True)
    assert row["status"] == "running"
    assert row["ended_at"] is None
    assert row["source"] is None
    assert row["summary"] is None
    assert row["cost_usd"] is None
    assert await count(db, "events") == 0


async def test_finish_session_is_atomic_when_a_later_routed_write_fails(db):
    # events, memories and checks are written before the cooldown with no service fails
    pk = await sessions.create_session(db, trigger="manual")
    bad = routed(cooldowns=[("restart", None, "success", "no service")])
    with pytest.raises(sqlite3.IntegrityError):
        await finish(db, pk, r=bad)
    for table in ("events", "memories", "check_results", "cooldowns"):
        assert await count(db, table) == 0, table
    assert (await sessions.get_session(db, pk, fresh=True))["status"] == "running"


async def test_finish_session_is_atomic_when_the_summary_write_fails(db):
    # the routed findings are written first; a summary violating the status CHECK undoes them
    pk = await sessions.create_session(db, trigger="manual")
    with pytest.raises(sqlite3.IntegrityError):
        await finish(db, pk, s=summary(status="bogus"))
    row = await sessions.get_session(db, pk, fresh=True)
    assert row["status"] == "running"
    assert row["source"] is None
    for table in ("events", "memories", "check_results", "cooldowns"):
        assert await count(db, table) == 0, table


async def test_finish_session_none_exit_code_and_stderr_keep_the_stored_value(db):
    pk = await sessions.create_session(db, trigger="manual")
    await finish(db, pk, s=summary(exit_code=3, stderr_tail="first"))
    await finish(db, pk, s=summary(exit_code=None, stderr_tail=None), r=routed(events=[], memories=[], checks=[],
                                                                                 cooldowns=[]))
    row = await sessions.get_session(db, pk, fresh=True)
    assert (row["exit_code"], row["stderr_tail"]) == (3, "first")
    await finish(db, pk, s=summary(exit_code=0, stderr_tail="second"), r=routed(events=[], memories=[], checks=[],
                                                                                cooldowns=[]))
    row = await sessions.get_session(db, pk, fresh=True)
    assert (row["exit_code"], row["stderr_tail"]) == (0, "second")


async def test_finish_session_cli_model_and_cwd_only_fill_when_null(db):
    kept = await sessions.create_session(db, cwd="/launch", trigger="manual")
    await activity.append_lines(db, kept, [], line_count=0,
                                identity=SessionIdentity("sid-kept", "init-model", "2.1", "/init-cwd"))
    await finish(db, kept, s=summary(cli_model="late-model", cwd="/late"))
    row = await sessions.get_session(db, kept, fresh=True)
    assert (row["cli_model"], row["cwd"]) == ("init-model", "/launch")

    filled = await sessions.create_session(db, trigger="manual")
    await finish(db, filled, s=summary(cli_model="late-model", cwd="/late"))
    row = await sessions.get_session(db, filled, fresh=True)
    assert (row["cli_model"], row["cwd"]) == ("late-model", "/late")


async def test_finish_session_stores_empty_notes_as_null(db):
    pk = await sessions.create_session(db, trigger="manual")
    await finish(db, pk, s=summary(notes=[]))
    assert await db.fetchval("SELECT notes FROM sessions WHERE id = ?", (pk,)) is None
    assert (await sessions.get_session(db, pk))["notes"] is None


async def test_finish_session_keeps_invalid_output_as_json_text(db):
    # the rejected output is stored verbatim as JSON; unlike structured_output it is not decoded on read
    pk = await sessions.create_session(db, trigger="manual")
    await finish(db, pk, s=summary(structured_output=None, invalid_output={"events": [{"level": "bad"}]},
                                   validation_valid=False))
    row = await sessions.get_session(db, pk)
    assert row["structured_output"] is None
    assert row["invalid_output"] == '{"events":[{"level":"bad"}]}'


async def test_interrupt_running_marks_only_supervised_running_sessions(db):
    sched = await sessions.create_session(db, trigger="schedule")
    manual = await sessions.create_session(db, trigger="manual")
    ingest = await sessions.create_session(db, trigger="ingest")
    done = await sessions.create_session(db, trigger="schedule")
    await finish(db, done)
    assert await sessions.interrupt_running(db, "supervisor restarted") == 2
    for pk in (sched, manual):
        row = await sessions.get_session(db, pk, fresh=True)
        assert row["status"] == "interrupted"
        assert row["status_reason"] == "supervisor restarted"
        assert ISO.match(row["ended_at"])
    assert await sessions.session_status(db, ingest) == "running"
    assert await sessions.session_status(db, done) == "completed"
    assert await sessions.interrupt_running(db, "again") == 0


async def test_set_escalated_to_and_set_attention(db):
    parent = await sessions.create_session(db, tier=1, trigger="schedule")
    child = await sessions.create_session(db, tier=2, trigger="escalation", parent_session_id=parent)
    await sessions.set_escalated_to(db, parent, child)
    await sessions.set_attention(db, child, "max tier reached")
    p = await sessions.get_session(db, parent)
    c = await sessions.get_session(db, child)
    assert p["escalated_to"] == child
    assert p["attention"] is None
    assert c["parent_session_id"] == parent
    assert c["attention"] == "max tier reached"


async def test_get_session_fresh_reads_the_last_write(db):
    pk = await sessions.create_session(db)
    await sessions.set_attention(db, pk, "look")
    row = await sessions.get_session(db, pk, fresh=True)
    assert row["attention"] == "look"


async def test_delete_session_cascades_to_lines_attempts_and_findings(db):
    pk = await sessions.create_session(db)
    other = await sessions.create_session(db)
    lines = [(pk, i, 1, "ts", "assistant", None, f"line {i}", "{}") for i in range(1, 4)]
    await activity.append_lines(db, pk, lines, line_count=3)
    await activity.append_lines(db, other, [(other, 1, 1, "ts", "system", "init", "x", "{}")], line_count=1)
    await attempts.save_attempt(db, pk, AttemptRecord(1, "stream", "success", False, True, {"a": 1}, True, []))
    await finish(db, pk)
    await finish(db, other, r=routed(memories=[]))
    assert await count(db, "events") == 2

    await sessions.delete_session(db, pk)

    assert await sessions.get_session(db, pk, fresh=True) is None
    assert await activity.count_lines(db, pk) == 0
    assert await activity.count_lines(db, other) == 1
    assert await attempts.list_attempts(db, pk) == []
    assert await findings.list_events(db, session=pk) == []
    assert len(await findings.list_events(db, session=other)) == 1
    assert await findings.session_checks(db, pk) == []
    assert await findings.session_cooldowns(db, pk) == []
    # the memory the session taught stays, without its provenance
    assert await db.fetchval("SELECT created_by_session FROM memories") is None


# -- reads ---------------------------------------------------------------------------------------

async def test_list_sessions_newest_first_with_filters_and_paging(db):
    ids = []
    for tier, status in [(1, "completed"), (2, "completed"), (1, "failed"), (1, "completed"), (None, "running")]:
        pk = await sessions.create_session(db, tier=tier, trigger="manual")
        if status != "running":
            await finish(db, pk, s=summary(status=status), r=routed(events=[], memories=[], checks=[], cooldowns=[]))
        ids.append(pk)

    assert [r["id"] for r in await sessions.list_sessions(db)] == ids[::-1]
    assert [r["id"] for r in await sessions.list_sessions(db, status="completed")] == [ids[3], ids[1], ids[0]]
    assert [r["id"] for r in await sessions.list_sessions(db, tier=1)] == [ids[3], ids[2], ids[0]]
    assert [r["id"] for r in await sessions.list_sessions(db, status="completed", tier=1)] == [ids[3], ids[0]]
    assert [r["id"] for r in await sessions.list_sessions(db, limit=2)] == [ids[4], ids[3]]
    assert [r["id"] for r in await sessions.list_sessions(db, limit=2, offset=2)] == [ids[2], ids[1]]
    assert await sessions.list_sessions(db, offset=10) == []


async def test_list_sessions_rows_have_list_columns_decoded(db):
    pk = await sessions.create_session(db, tier=1, trigger="manual")
    await finish(db, pk, s=summary(degraded=True, validation_valid=False))
    (row,) = await sessions.list_sessions(db)
    assert set(row) == set(sessions.LIST_COLUMNS.replace(" ", "").split(","))
    assert row["degraded"] is True
    assert row["validation_valid"] is False
    assert "prompt" not in row


async def test_find_by_cli_session_id(db):
    pk = await sessions.create_session(db, stream_sha256="sha-1")
    await activity.append_lines(db, pk, [], line_count=0, identity=SessionIdentity("cli-sid", None, None, None))
    found = await sessions.find_by_cli_session_id(db, "cli-sid")
    assert found == sessions.StoredStream(id=pk, stream_sha256="sha-1", status="running", trigger="ingest")
    assert await sessions.find_by_cli_session_id(db, "other") is None


async def test_find_anonymous_stream_ignores_sessions_with_a_cli_id(db):
    named = await sessions.create_session(db, stream_sha256="same")
    await activity.append_lines(db, named, [], line_count=0, identity=SessionIdentity("cli-sid", None, None, None))
    assert await sessions.find_anonymous_stream(db, "same") is None
    anon = await sessions.create_session(db, stream_sha256="same")
    found = await sessions.find_anonymous_stream(db, "same")
    assert found is not None
    assert found.id == anon
    assert await sessions.find_anonymous_stream(db, "unknown") is None
