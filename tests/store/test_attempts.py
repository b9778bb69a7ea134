"""``app/store/attempts.py`` against a real SQLite file: each CLI run of a session and its output."""

from __future__ import annotations

from app.store import attempts, sessions
from app.store.attempts import AttemptRecord

ERRORS = [{"path": "$.events[0].level", "message": "'bad' is not one of ['info', 'warning', 'critical']"}]


async def test_attempts_round_trip_in_order_with_flags_as_bools(db):
    pk = await sessions.create_session(db)
    await attempts.save_attempt(db, pk, AttemptRecord(2, "resume", "success", False, True, {"summary": "ok"}, True,
                                                      []))
    await attempts.save_attempt(db, pk, AttemptRecord(1, "stream", "success", False, True, {"bad": 1}, False,
                                                      ERRORS))
    rows = await attempts.list_attempts(db, pk)
    assert [r["attempt"] for r in rows] == [1, 2]
    first, second = rows
    assert (first["kind"], first["result_subtype"]) == ("stream", "success")
    assert first["is_error"] is False
    assert first["has_output"] is True
    assert first["valid"] is False
    assert first["errors"] == ERRORS
    assert second["valid"] is True
    assert second["errors"] == []
    assert first["created_at"].endswith("Z")


async def test_output_only_with_with_output(db):
    pk = await sessions.create_session(db)
    out = {"summary": "é ok", "events": [1, 2]}
    await attempts.save_attempt(db, pk, AttemptRecord(1, "stream", "success", False, True, out, True, []))
    (plain,) = await attempts.list_attempts(db, pk)
    assert "output" not in plain
    (full,) = await attempts.list_attempts(db, pk, with_output=True)
    assert full["output"] == out


async def test_attempt_without_result_or_output_keeps_nulls_and_errors_are_an_empty_list(db):
    pk = await sessions.create_session(db)
    await attempts.save_attempt(db, pk, AttemptRecord(1, "stream", None, None, False, None, None, None))
    assert await db.fetchval("SELECT errors FROM output_attempts WHERE session_pk = ?", (pk,)) is None
    (row,) = await attempts.list_attempts(db, pk, with_output=True)
    assert row["errors"] == []
    assert row["is_error"] is None
    assert row["valid"] is None
    assert row["has_output"] is False
    assert row["output"] is None
    assert row["result_subtype"] is None


async def test_saving_the_same_attempt_number_replaces_it(db):
    pk = await sessions.create_session(db)
    await attempts.save_attempt(db, pk, AttemptRecord(1, "stream", "success", False, True, {"v": 1}, False, ERRORS))
    await attempts.save_attempt(db, pk, AttemptRecord(1, "stream", "error_max_turns", True, False, None, None,
                                                      None))
    rows = await attempts.list_attempts(db, pk, with_output=True)
    assert len(rows) == 1
    (row,) = rows
    assert row["result_subtype"] == "error_max_turns"
    assert row["is_error"] is True
    assert row["has_output"] is False
    assert row["output"] is None
    assert row["errors"] == []


async def test_attempts_belong_to_their_session(db):
    pk = await sessions.create_session(db)
    other = await sessions.create_session(db)
    await attempts.save_attempt(db, pk, AttemptRecord(1, "stream", "success", False, True, {}, True, []))
    assert await attempts.list_attempts(db, other) == []
    assert len(await attempts.list_attempts(db, pk)) == 1


async def test_falsy_output_is_stored_as_json_not_as_no_output(db):
    pk = await sessions.create_session(db)
    await attempts.save_attempt(db, pk, AttemptRecord(1, "stream", "success", False, True, {}, False, ERRORS))
    await attempts.save_attempt(db, pk, AttemptRecord(2, "resume", "success", False, True, [], False, ERRORS))
    rows = await attempts.list_attempts(db, pk, with_output=True)
    assert [r["output"] for r in rows] == [{}, []]
