"""``app/store/evidence.py`` against a real SQLite file holding sessions ingested from real captures."""

from __future__ import annotations

import json
from pathlib import Path

from app.engine.evidence import check, tool_calls_of
from app.engine.ingest import ingest_path
from app.redact import MASK, redactor_for
from app.store import activity
from app.store.evidence import session_tool_lines
from tests.helpers import fixture_stream

EVIDENCE = Path(__file__).resolve().parents[1] / "fixtures" / "evidence" / "cli_tool_outputs.jsonl"


async def ingested(db, path, validator, settings) -> int:
    report, stored = await ingest_path(db, path, validator, settings, tier=1)
    assert stored
    return int(report["id"])


async def test_the_tool_lines_of_one_session_in_order(db, validator, settings):
    pk = await ingested(db, EVIDENCE, validator, settings)
    other = await ingested(db, fixture_stream("c_structured"), validator, settings)
    lines = await session_tool_lines(db, pk)
    types = {r["seq"]: r["type"] for r in await db.fetchall("SELECT seq, type FROM activity WHERE session_pk = ?",
                                                           (pk,))}
    assert [seq for seq, _, _ in lines] == sorted(seq for seq, t in types.items() if t in ("assistant", "user"))
    assert {t for t in types.values()} - {"assistant", "user"}  # init and result lines exist, and are left out
    calls = tool_calls_of(lines)
    assert [c.name for c in calls] == ["Bash", "Bash", "Bash", "Bash", "Read", "Bash"]
    # the stored line is redacted; the model quotes what it saw, the secret included
    redact = redactor_for(settings)
    config = calls[5]
    assert config.result_text == f"db_password={MASK} host=db-1"
    quote = "db_password=correcthorsebatterystaple host=db-1"
    assert check({"quote": quote, "tool_use_id": config.tool_use_id}, calls, redact).holds
    assert check({"quote": "status: FAILED (exit 1)"}, calls, redact).holds
    # another session's call is not evidence here, nor are its lines read
    theirs = tool_calls_of(await session_tool_lines(db, other))
    assert [c.name for c in theirs] == ["Bash", "StructuredOutput"]
    foreign = check({"quote": "ok", "tool_use_id": theirs[0].tool_use_id}, calls, redact)
    assert (foreign.holds, foreign.why) == (False, f"no tool call {theirs[0].tool_use_id} in this session")
    assert not {c.tool_use_id for c in calls} & {c.tool_use_id for c in theirs}


async def test_every_attempt_and_the_array_line_are_read(db, validator, settings):
    pk = await ingested(db, fixture_stream("h_json_output_verbose"), validator, settings)
    calls = tool_calls_of(await session_tool_lines(db, pk))
    assert [c.name for c in calls] == ["Bash", "StructuredOutput"]  # from the one array line
    # a resumed run's lines, as the recorder appends them: attempt 2
    count = await activity.count_lines(db, pk)
    resumed = [raw for raw in fixture_stream("e_resume").read_text().split("\n") if raw]
    batch = [(pk, count + i, 2, "2026-11-26T10:00:00.000Z", json.loads(raw)["type"], None, "line", raw)
             for i, raw in enumerate(resumed, start=1)]
    await activity.append_lines(db, pk, batch, line_count=count + len(batch))
    calls = tool_calls_of(await session_tool_lines(db, pk))
    assert [(c.name, c.attempt) for c in calls] == [("Bash", 1), ("StructuredOutput", 1), ("StructuredOutput", 2)]


async def test_a_line_over_the_cap_is_left_out(db, validator, settings):
    pk = await ingested(db, EVIDENCE, validator, settings)
    whole = await session_tool_lines(db, pk)
    capped = await session_tool_lines(db, pk, raw_limit=8_000)
    long_lines = {seq for seq, _, raw in whole if len(raw) > 8_000}
    assert long_lines and [line for line in whole if line[0] not in long_lines] == capped
    calls = tool_calls_of(capped)
    failing = next(c for c in calls if c.input_text.startswith("seq 1 30000"))
    assert failing.result_text == "" and failing.result_seq is None
    assert not check({"quote": "Exit code 3", "tool_use_id": failing.tool_use_id}, calls, redactor_for(settings)).holds
    assert await session_tool_lines(db, 10_000) == []
