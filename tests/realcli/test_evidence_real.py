"""Findings' evidence with the REAL claude CLI (2.1.197) against the fake Messages API: a tier runs a
Bash command, then cites its output (verified), a line no tool printed (unsupported) and a tool call
of an earlier session whose output holds the quote (unsupported); under
``TIEROPS_EVIDENCE_POLICY=hold`` its escalation, resting on no verified warning+ finding, does not
start tier 2 and the session needs attention. Two CLI runs: the earlier session, then this one."""

from __future__ import annotations

import pytest

from app.engine.evidence import tool_calls_of
from app.store import findings, sessions
from app.store.evidence import session_tool_lines
from tests.fakes.fake_anthropic import message, structured
from tests.realcli.test_supervisor_e2e import (  # noqa: F401 (child_env is a fixture)
    OPERATOR_PROMPT,
    TIER1_MATCH,
    TIER2_MATCH,
    child_env,
    make_settings,
    open_supervisor,
    requests_of,
)

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(90)]

TOOL_ID = "toolu_fake_evidence_1"
OTHER_ID = "toolu_fake_evidence_other"  # a call of an earlier session, whose output holds the quote too
EARLIER = "MARKER-EVIDENCE-EARLIER-SESSION-5c1e"
COMMAND = "printf 'nginx.service: \\033[31mActive: failed\\033[0m since 03:12\\nworkers: 0\\n'"
OUTPUT = {
    "summary": "nginx is down",
    "events": [
        {"level": "info", "service": "nginx", "message": "nginx failed at 03:12",
         "evidence": [{"quote": "nginx.service: Active: failed since 03:12", "tool_use_id": TOOL_ID}]},
        {"level": "critical", "service": "postgres", "message": "replication lag 45 s",
         "evidence": [{"quote": "replication lag 45 s"}]},
        {"level": "warning", "service": "nginx", "message": "no workers",
         "evidence": [{"quote": "workers: 0", "tool_use_id": OTHER_ID}]},
    ],
    "escalation": {"needed": True, "reason": "postgres lags", "failed_checks": ["postgres"],
                   "evidence": [{"quote": "lag 45 s"}]},
    "services_checked": [{"name": "nginx", "status": "down", "evidence": [{"quote": "workers: 12"}]}],
}


@pytest.mark.usefixtures("child_env")
async def test_citations_checked_against_the_real_cli_transcript(claude_bin, fake_api, tmp_path):
    def bash_call(tool_id: str) -> dict:
        return message({"type": "tool_use", "id": tool_id, "name": "Bash",
                        "input": {"command": COMMAND, "description": "nginx state"}})

    earlier = {"summary": "looked", "events": [], "services_checked": [],
               "escalation": {"needed": False, "reason": None, "context": None, "failed_checks": []}}
    fake_api.script(EARLIER, [bash_call(OTHER_ID), structured(earlier)])  # registered first: matched first
    fake_api.script(TIER1_MATCH, [bash_call(TOOL_ID), structured(OUTPUT)])
    settings = make_settings(claude_bin, tmp_path, evidence_policy="hold")
    async with open_supervisor(settings) as (sup, db):
        first = await sup.run_cycle(prompt=f"{EARLIER}: {OPERATOR_PROMPT}")  # the session whose call is cited
        assert [(s["status"], s["escalation_needed"]) for s in first] == [("completed", False)]
        earlier_calls = tool_calls_of(await session_tool_lines(db, first[0]["id"]))
        assert [(c.tool_use_id, "workers: 0" in c.result_text) for c in earlier_calls if c.name == "Bash"] == [
            (OTHER_ID, True)]
        chain = await sup.run_cycle(prompt=OPERATOR_PROMPT)
        assert [(s["tier"], s["status"], s["source"]) for s in chain] == [(1, "completed", "structured_output")]
        [t1] = chain
        events = sorted(await findings.list_events(db, session=t1["id"]), key=lambda e: e["id"])
        assert [e["evidence_status"] for e in events] == ["verified", "unsupported", "unsupported"]
        assert events[0]["evidence"][0]["found_in"] == TOOL_ID  # the CLI's own id, through ANSI colours
        assert events[2]["evidence"][0]["why"] == f"no tool call {OTHER_ID} in this session"  # the earlier one's
        [check] = await findings.session_checks(db, t1["id"])
        assert check["evidence_status"] == "unsupported"
        row = await sessions.get_session(db, t1["id"])
        assert (row["findings_verified"], row["findings_unsupported"], row["findings_uncited"]) == (1, 3, 0)
        assert row["escalation_evidence_status"] == "unsupported"
        # hold: the only verified finding is an info event, so the escalation rests on nothing verified
        assert t1["escalation_needed"] is True and t1["escalated_to"] is None
        assert t1["attention"].startswith("escalation held (TIEROPS_EVIDENCE_POLICY=hold): it rests on no verified")
    assert requests_of(fake_api, TIER2_MATCH) == []
