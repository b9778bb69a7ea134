"""Findings' evidence with the REAL claude CLI (2.1.197) against the fake Messages API: a tier runs a
Bash command, then cites its output (verified), a line no tool printed (unsupported) and a tool call
that is not in the session (unsupported); under ``TIEROPS_EVIDENCE_POLICY=hold`` its escalation,
resting on no verified warning+ finding, does not start tier 2 and the session needs attention.
One CLI run for all of it."""

from __future__ import annotations

import pytest

from app.store import findings, sessions
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
COMMAND = "printf 'nginx.service: \\033[31mActive: failed\\033[0m since 03:12\\nworkers: 0\\n'"
OUTPUT = {
    "summary": "nginx is down",
    "events": [
        {"level": "info", "service": "nginx", "message": "nginx failed at 03:12",
         "evidence": [{"quote": "nginx.service: Active: failed since 03:12", "tool_use_id": TOOL_ID}]},
        {"level": "critical", "service": "postgres", "message": "replication lag 45 s",
         "evidence": [{"quote": "replication lag 45 s"}]},
        {"level": "warning", "service": "nginx", "message": "no workers",
         "evidence": [{"quote": "workers: 0", "tool_use_id": "toolu_fake_not_this_session"}]},
    ],
    "escalation": {"needed": True, "reason": "postgres lags", "failed_checks": ["postgres"],
                   "evidence": [{"quote": "lag 45 s"}]},
    "services_checked": [{"name": "nginx", "status": "down", "evidence": [{"quote": "workers: 12"}]}],
}


@pytest.mark.usefixtures("child_env")
async def test_citations_checked_against_the_real_cli_transcript(claude_bin, fake_api, tmp_path):
    bash_call = message({"type": "tool_use", "id": TOOL_ID, "name": "Bash",
                         "input": {"command": COMMAND, "description": "nginx state"}})
    fake_api.script(TIER1_MATCH, [bash_call, structured(OUTPUT)])
    settings = make_settings(claude_bin, tmp_path, evidence_policy="hold")
    async with open_supervisor(settings) as (sup, db):
        chain = await sup.run_cycle(prompt=OPERATOR_PROMPT)
        assert [(s["tier"], s["status"], s["source"]) for s in chain] == [(1, "completed", "structured_output")]
        [t1] = chain
        events = sorted(await findings.list_events(db, session=t1["id"]), key=lambda e: e["id"])
        assert [e["evidence_status"] for e in events] == ["verified", "unsupported", "unsupported"]
        assert events[0]["evidence"][0]["found_in"] == TOOL_ID  # the CLI's own id, through ANSI colours
        assert events[2]["evidence"][0]["why"] == "no tool call toolu_fake_not_this_session in this session"
        [check] = await findings.session_checks(db, t1["id"])
        assert check["evidence_status"] == "unsupported"
        row = await sessions.get_session(db, t1["id"])
        assert (row["findings_verified"], row["findings_unsupported"], row["findings_uncited"]) == (1, 3, 0)
        assert row["escalation_evidence_status"] == "unsupported"
        # hold: the only verified finding is an info event, so the escalation rests on nothing verified
        assert t1["escalation_needed"] is True and t1["escalated_to"] is None
        assert t1["attention"].startswith("escalation held (TIEROPS_EVIDENCE_POLICY=hold): it rests on no verified")
    assert requests_of(fake_api, TIER2_MATCH) == []
