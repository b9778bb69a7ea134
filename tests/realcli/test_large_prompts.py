"""Prompts and system prompts of any size start a session and reach the model whole: the REAL
claude CLI (2.1.197) against the fake Messages API.

A 300 KiB operator request makes the tier prompt too long for one command-line argument (the
kernel's MAX_ARG_STRLEN is 128 KiB): the supervisor writes it to the CLI's stdin. A 300 KiB
escalation context makes tier 2's appended system prompt (the handoff) too long too: the
supervisor passes it as ``--append-system-prompt-file``, again on tier 2's output-recovery
resume (the CLI forgets the appended system prompt on resume, reference §8). Two cycles, as one
request carrying both texts would exceed the model's context window ("Prompt is too long").
"""

from __future__ import annotations

import json

import pytest

from app.supervisor.launch import MAX_ARG_STRLEN
from app.supervisor.session import SYSTEM_PROMPT_FILE
from tests.fakes.fake_anthropic import FakeAnthropic, structured, text
from tests.realcli.test_supervisor_e2e import (
    ESCALATE,
    HEALTHY,
    OPERATOR_PROMPT,
    TIER1_MATCH,
    TIER2_MATCH,
    child_env,  # noqa: F401 (a fixture: the CLI's environment, pointed at the fake API)
    make_settings,
    open_supervisor,
    requests_of,
    session_row,
)

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(120), pytest.mark.usefixtures("child_env")]

SIZE = 300 * 1024


def _big(tag: str) -> str:
    body = "".join(f"{tag} {i:06d} é✓ " for i in range(SIZE // 16))
    return f"BEGIN-{tag} {body} END-{tag}"


async def test_300_kib_prompt_reaches_the_api(claude_bin, fake_api, tmp_path) -> None:
    operator = _big("OPERATOR")
    fake_api.script(TIER1_MATCH, [structured(HEALTHY)])
    async with open_supervisor(make_settings(claude_bin, tmp_path)) as (sup, db):
        [s] = await sup.run_cycle(prompt=operator)
        row = await session_row(db, s["id"])
    assert (s["status"], s["source"]) == ("completed", "structured_output"), (s, row["stderr_tail"])
    assert row["prompt"].endswith(operator)  # the database keeps the full text
    argv = json.loads(row["argv"])
    assert max(len(a.encode()) for a in argv) < MAX_ARG_STRLEN
    assert argv[1:3] == ["-p", "--add-dir"]  # no prompt argument: it went to stdin
    [req] = requests_of(fake_api, TIER1_MATCH)
    assert FakeAnthropic.prompt_text(req) == row["prompt"]  # the model got all of it


async def test_300_kib_system_prompt_reaches_the_api_and_again_on_resume(claude_bin, fake_api, tmp_path) -> None:
    context = _big("CONTEXT")
    escalate = {**ESCALATE, "escalation": {**ESCALATE["escalation"], "context": context}}
    fake_api.script(TIER1_MATCH, [structured(escalate)])
    # Tier 2 answers in text twice (the CLI nudges once in between), then is resumed: output recovery.
    fake_api.script(TIER2_MATCH, [text("TEXT-ONLY-T2"), text("TEXT-ONLY-T2 again"), structured(HEALTHY)])
    async with open_supervisor(make_settings(claude_bin, tmp_path)) as (sup, db):
        chain = await sup.run_cycle(prompt=OPERATOR_PROMPT)
        rows = [await session_row(db, s["id"]) for s in chain]
    assert [(s["tier"], s["status"], s["source"]) for s in chain] == [
        (1, "completed", "structured_output"), (2, "completed", "structured_output")], (chain, rows[-1]["stderr_tail"])
    t1, t2 = rows
    assert json.loads(t1["structured_output"])["escalation"]["context"] == context  # the 350 KB result line, whole
    assert chain[1]["attempts"] == 2  # tier 2 was resumed
    assert len(t2["system_prompt"].encode()) > SIZE and context in t2["system_prompt"]
    t2_argv = json.loads(t2["argv"])
    assert max(len(a.encode()) for a in t2_argv) < MAX_ARG_STRLEN
    assert t2_argv[t2_argv.index("--append-system-prompt-file") + 1].endswith(f"/{t2['id']}/{SYSTEM_PROMPT_FILE}")
    assert "--append-system-prompt" not in t2_argv

    t1_reqs, t2_reqs = requests_of(fake_api, TIER1_MATCH), requests_of(fake_api, TIER2_MATCH)
    assert len(t2_reqs) == 3, [r["script"] for r in fake_api.message_requests]
    for req in (t2_reqs[0], t2_reqs[2]):  # the first run, and the resume (the file flag passed again)
        system = FakeAnthropic.system_text(req)
        assert system.endswith(t2["system_prompt"]), system[-300:]
        assert "You are TierOps tier 2 (investigate)" in system
    assert "did not call the StructuredOutput tool" in FakeAnthropic.last_prompt_text(t2_reqs[2])
    assert context not in FakeAnthropic.system_text(t1_reqs[0])
