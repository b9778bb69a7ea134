"""Findings' evidence checked when a session is routed: hand-made streams through the real recorder
and a real SQLite file (``app/engine/evidence_check.py``, stored by ``app/store/findings.py``)."""

from __future__ import annotations

import json
from pathlib import Path

from app.engine.evidence import tool_calls_of
from app.engine.ingest import ingest_path
from app.store import findings, sessions
from app.store.evidence import session_tool_lines
from tests.helpers import fixture_stream

SIDS = iter(f"22222222-3333-4444-8555-{n:012d}" for n in range(1000))
COMMAND = "systemctl status nginx --no-pager"
OUTPUT = "● nginx.service - web\n   \x1b[31mActive: failed\x1b[0m (Result: exit-code) since 03:12\nmain PID gone"


def line(kind: str, content: list[dict], sid: str) -> str:
    role = "assistant" if kind == "assistant" else "user"
    return json.dumps({"type": kind, "message": {"id": "m", "role": role, "model": "m", "content": content},
                       "session_id": sid})


def stream(output: dict) -> list[str]:
    sid = next(SIDS)
    return [
        json.dumps({"type": "system", "subtype": "init", "cwd": "/nonexistent", "session_id": sid, "model": "m",
                    "tools": ["Bash", "StructuredOutput"], "claude_code_version": "2.1.197"}),
        line("assistant", [{"type": "tool_use", "id": "toolu_A", "name": "Bash", "input": {"command": COMMAND}}], sid),
        line("user", [{"type": "tool_result", "tool_use_id": "toolu_A", "content": OUTPUT, "is_error": False}], sid),
        json.dumps({"type": "result", "subtype": "success", "is_error": False, "num_turns": 2, "result": "done",
                    "session_id": sid, "total_cost_usd": 0.01, "usage": {"input_tokens": 1, "output_tokens": 1},
                    "structured_output": output}),
    ]


async def ingest(tmp_path: Path, db, validator, settings, output: dict, *, tier: int | None = 1) -> int:
    path = tmp_path / f"s{len(list(tmp_path.iterdir()))}.jsonl"
    path.write_text("\n".join(stream(output)) + "\n")
    report, stored = await ingest_path(db, path, validator, settings, tier=tier)
    assert stored
    return int(report["id"])


def output(foreign_id: str) -> dict:
    return {
        "summary": "nginx down",
        "events": [
            {"level": "critical", "service": "nginx", "message": "nginx failed at 03:12",
             "evidence": [{"quote": "Active: failed (Result: exit-code) since 03:12", "tool_use_id": "toolu_A"}]},
            {"level": "warning", "service": "postgres", "message": "lag 45 s",
             "evidence": [{"quote": "replication lag 45 s"}]},
            {"level": "warning", "message": "from elsewhere", "evidence": [{"quote": "ok", "tool_use_id": foreign_id}]},
            {"level": "info", "message": "nothing cited"},
        ],
        "escalation": {"needed": True, "reason": "nginx down", "evidence": [{"quote": "main PID gone"}]},
        "services_checked": [{"name": "nginx", "status": "down", "evidence": [{"quote": "ACTIVE: FAILED"}]}],
        "actions": [{"kind": "restart", "service": "nginx", "result": "proposed",
                     "evidence": [{"quote": "systemctl status nginx", "tool_use_id": "toolu_A"}]}],
    }


async def test_each_finding_is_stored_with_its_status(tmp_path, db, validator, settings):
    report, _ = await ingest_path(db, fixture_stream("c_structured"), validator, settings, tier=1)
    other = int(report["id"])
    foreign_id = tool_calls_of(await session_tool_lines(db, other))[0].tool_use_id  # a real call, elsewhere
    pk = await ingest(tmp_path, db, validator, settings, output(foreign_id))
    events = sorted(await findings.list_events(db, session=pk), key=lambda e: e["id"])
    assert [e["evidence_status"] for e in events] == ["verified", "unsupported", "unsupported", "uncited"]
    first = events[0]["evidence"]
    assert first == [{"quote": "Active: failed (Result: exit-code) since 03:12", "tool_use_id": "toolu_A",
                      "holds": True, "found_in": "toolu_A", "why": None}]  # ANSI colour codes do not count
    assert events[1]["evidence"][0]["why"] == "the quote is not in any tool result of this session"
    assert events[2]["evidence"][0]["why"] == f"no tool call {foreign_id} in this session"  # another session's call
    assert events[3]["evidence"] == []
    checks = await findings.session_checks(db, pk)
    assert [(c["evidence_status"], c["evidence"][0]["found_in"]) for c in checks] == [("verified", "toolu_A")]
    actions = await findings.session_cooldowns(db, pk)
    assert [(a["outcome"], a["evidence_status"]) for a in actions] == [("proposed", "verified")]  # the command
    row = await sessions.get_session(db, pk)
    assert (row["findings_verified"], row["findings_unsupported"], row["findings_uncited"]) == (3, 2, 1)
    assert row["escalation_evidence_status"] == "verified"
    assert row["escalation_evidence"][0]["found_in"] == "toolu_A"


async def test_an_action_quote_is_looked_for_in_commands_and_a_finding_quote_in_results(tmp_path, db, validator,
                                                                                        settings):
    doc = {"summary": "", "events": [{"level": "warning", "message": "x", "evidence": [{"quote": COMMAND}]}],
           "escalation": {"needed": False}, "services_checked": [],
           "actions": [{"kind": "restart", "result": "proposed", "evidence": [{"quote": "Active: failed"}]}]}
    pk = await ingest(tmp_path, db, validator, settings, doc)
    assert [e["evidence_status"] for e in await findings.list_events(db, session=pk)] == ["unsupported"]
    assert [a["evidence_status"] for a in await findings.session_cooldowns(db, pk)] == ["unsupported"]
    row = await sessions.get_session(db, pk)
    assert row["escalation_evidence_status"] == "uncited"


async def test_policy_off_checks_nothing_and_tier_0_is_verified_by_construction(tmp_path, db, validator, settings):
    off = await ingest(tmp_path, db, validator, settings.model_copy(update={"evidence_policy": "off"}),
                       output("toolu_elsewhere"))
    assert {e["evidence_status"] for e in await findings.list_events(db, session=off)} == {None}
    row = await sessions.get_session(db, off)
    assert (row["findings_verified"], row["escalation_evidence_status"]) == (None, None)
    probe = await ingest(tmp_path, db, validator, settings, output("toolu_elsewhere"), tier=0)
    assert {e["evidence_status"] for e in await findings.list_events(db, session=probe)} == {"verified"}
    row = await sessions.get_session(db, probe)
    assert (row["findings_verified"], row["findings_unsupported"], row["findings_uncited"]) == (6, 0, 0)


async def test_captured_sessions_route_without_false_alarms(tmp_path, db, validator, settings):
    # A real capture's output cites nothing: every finding is uncited, none unsupported.
    report, _ = await ingest_path(db, fixture_stream("c_structured"), validator, settings, tier=1)
    row = await sessions.get_session(db, int(report["id"]))
    assert row["findings_unsupported"] == 0 and row["findings_verified"] == 0
    assert row["findings_uncited"] == len(report["events"]) + len(report["services_checked"])
