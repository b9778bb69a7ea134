"""Findings' evidence through the real chain, with the fake ``claude`` executable and a real SQLite
file: the statuses stored at routing, and ``TIEROPS_EVIDENCE_POLICY=hold`` keeping an escalation that
rests on no verified evidence from starting the next tier."""

from __future__ import annotations

import pytest

from app.store import findings, sessions
from app.supervisor.chain import run_chain
from tests.fakes import claude_control as cc
from tests.helpers import healthy

pytestmark = pytest.mark.timeout(60)

COMMAND = "systemctl status nginx --no-pager"
OUTPUT = "● nginx.service - web server\n     Active: failed (Result: exit-code) since Thu 03:12:09 UTC"
REAL = "Active: failed (Result: exit-code) since Thu 03:12:09 UTC"
INVENTED = "replication lag 45 s"


def cited_stage(output: dict, *, tool_id: str) -> dict:
    """One run: a Bash call (id ``tool_id``) printing OUTPUT, then the StructuredOutput ``output``."""
    sid = cc.new_session_id()
    lines = [cc.init_line(sid), cc.assistant_tool_use(sid, "Bash", {"command": COMMAND}, id=tool_id),
             cc.tool_result(sid, tool_id, OUTPUT)]
    so = cc.assistant_tool_use(sid, "StructuredOutput", output)
    lines += [so, cc.structured_output_ack(sid, so["message"]["content"][0]["id"]), cc.result_success(sid, output)]
    return {"lines": lines}


def escalation(*events: dict, cites: list[dict] | None = None) -> dict:
    return {"summary": "nginx down", "events": list(events),
            "escalation": {"needed": True, "reason": "nginx down", "failed_checks": ["nginx"],
                           **({"evidence": cites} if cites is not None else {})},
            "services_checked": []}


def event(level: str, message: str, *cites: dict) -> dict:
    return {"level": level, "service": "nginx", "message": message, "evidence": list(cites)}


async def test_statuses_stored_and_flag_escalates(db, make_settings, validator, tmp_path):
    elsewhere = cc.tool_use_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [
        cited_stage(healthy("An earlier run."), tool_id=elsewhere),
        cited_stage(escalation(event("critical", "nginx failed", {"quote": REAL, "tool_use_id": "toolu_ours1"}),
                               event("warning", "postgres lags", {"quote": INVENTED}),
                               event("warning", "from another session", {"quote": "nginx", "tool_use_id": elsewhere}),
                               cites=[{"quote": "Active: failed"}]), tool_id="toolu_ours1"),
        {"lines": cc.structured_stream(cc.new_session_id(), healthy("tier 2 ran"))},
    ])
    settings = make_settings(fake)  # the default policy: flag
    assert settings.evidence_policy == "flag"
    await run_chain(db, settings, validator, None)
    t1, t2 = await run_chain(db, settings, validator, None)
    assert (t1["tier"], t2["tier"], t1["attention"]) == (1, 2, None)  # flag: the escalation goes on
    events = sorted(await findings.list_events(db, session=t1["id"]), key=lambda e: e["id"])
    assert [(e["message"], e["evidence_status"]) for e in events] == [
        ("nginx failed", "verified"), ("postgres lags", "unsupported"), ("from another session", "unsupported")]
    assert events[0]["evidence"][0]["found_in"] == "toolu_ours1"
    assert events[1]["evidence"][0]["why"] == "the quote is not in any tool result of this session"
    assert events[2]["evidence"][0]["why"] == f"no tool call {elsewhere} in this session"
    row = await sessions.get_session(db, t1["id"])
    assert (row["findings_verified"], row["findings_unsupported"], row["findings_uncited"]) == (1, 2, 0)
    assert row["escalation_evidence_status"] == "verified"


async def test_hold_keeps_an_escalation_on_unsupported_findings_from_the_next_tier(db, make_settings, validator,
                                                                                  tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [
        cited_stage(escalation(event("critical", "postgres lags", {"quote": INVENTED}), event("warning", "no cite"),
                               cites=[{"quote": "disk full"}]), tool_id=cc.tool_use_id()),
        # the same escalation with one verified critical finding goes on to tier 2
        cited_stage(escalation(event("critical", "nginx failed", {"quote": REAL}),
                               event("warning", "postgres lags", {"quote": INVENTED})), tool_id=cc.tool_use_id()),
        {"lines": cc.structured_stream(cc.new_session_id(), healthy("tier 2 ran"))},
    ])
    settings = make_settings(fake, evidence_policy="hold")
    [held] = await run_chain(db, settings, validator, None)
    assert len(fake.invocations()) == 1  # tier 2 was not launched
    assert held["escalation_needed"] is True and held["escalated_to"] is None
    assert held["attention"] == (
        "escalation held (TIEROPS_EVIDENCE_POLICY=hold): it rests on no verified evidence — 1 warning/critical "
        "finding(s) cite tool output this session never got, 1 cite none, and the escalation's own citations are "
        "unsupported")
    t1, t2 = await run_chain(db, settings, validator, None)
    assert (t1["attention"], t2["tier"]) == (None, 2)
