"""Output contracts end to end: the REAL claude CLI 2.1.197 against the fake Messages API, in both output
modes, with a schema other than the agent-response contract, and the CLI's own rejections of a
StructuredOutput call counted as attempts."""

from __future__ import annotations

import json

import pytest

from app.engine.contracts import resolve_spec
from app.store import attempts
from tests.fakes.fake_anthropic import FakeAnthropic, structured, text
from tests.realcli.test_supervisor_e2e import (
    HEALTHY,
    TIER1_MATCH,
    child_env,  # noqa: F401 (a fixture)
    make_settings,
    open_supervisor,
    session_row,
)

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(120)]

VERDICT = {"type": "object", "additionalProperties": False, "required": ["ok", "why"],
           "properties": {"ok": {"type": "boolean"}, "why": {"type": "string", "minLength": 1}}}


def messages_text(request: dict) -> str:
    """Everything the CLI sent as conversation (the prompt, tool results, resumes), as JSON text."""
    return json.dumps(request.get("body", {}).get("messages", []), ensure_ascii=False)


def sent_tools(fake: FakeAnthropic) -> list[list[str]]:
    return [[t.get("name") for t in r.get("body", {}).get("tools", [])] for r in fake.message_requests]


async def test_native_mode_with_a_custom_schema(claude_bin, fake_api, child_env, tmp_path) -> None:  # noqa: F811
    fake_api.script(TIER1_MATCH, [structured({"ok": True, "why": "disk at 40%"})])
    settings = make_settings(claude_bin, tmp_path)
    async with open_supervisor(settings) as (sup, db):
        spec = await resolve_spec(db, sup.validator, settings, inline=VERDICT)
        chain = await sup.run_cycle(spec=spec)
        row = await session_row(db, chain[0]["id"])
        assert row["status"] == "completed" and row["degraded"] == 0, row["status_reason"]
        assert json.loads(row["structured_output"]) == {"ok": True, "why": "disk at 40%"}
        assert (row["schema_source"], row["output_mode"], row["output_via"]) == ("inline", "native", "tool")
        assert json.loads(row["output_schema"]) == VERDICT
        # not routed: no events, no escalation decision
        assert await db.fetchval("SELECT count(*) FROM events WHERE session_pk = ?", (row["id"],)) == 0
        assert row["escalation_needed"] is None and len(chain) == 1


async def test_prompted_mode_reads_the_answer_from_the_text(claude_bin, fake_api, child_env, tmp_path) -> None:  # noqa: F811
    answer = "I checked.\n```json\n" + json.dumps(HEALTHY) + "\n```"
    fake_api.script(TIER1_MATCH, [text(answer)])
    settings = make_settings(claude_bin, tmp_path)
    async with open_supervisor(settings) as (sup, db):
        spec = await resolve_spec(db, sup.validator, settings, mode="prompted")
        chain = await sup.run_cycle(spec=spec)
        row = await session_row(db, chain[0]["id"])
        assert row["status"] == "completed" and row["degraded"] == 0, row["status_reason"]
        assert (row["output_mode"], row["output_via"], row["source"]) == ("prompted", "prompted", "structured_output")
        assert json.loads(row["structured_output"]) == HEALTHY
        argv = json.loads(row["argv"])
        assert "--json-schema" not in argv  # the schema travelled in the prompt
        prompt = messages_text(fake_api.message_requests[0])
        assert "Required output format" in prompt and "services_checked" in prompt
        assert "StructuredOutput" not in sent_tools(fake_api)[0]
        events = await db.fetchall("SELECT message FROM events WHERE session_pk = ?", (row["id"],))
        assert [e["message"] for e in events] == ["echo ok answered"]  # the agent-response contract is routed


async def test_prompted_mode_resumes_with_the_errors(claude_bin, fake_api, child_env, tmp_path) -> None:  # noqa: F811
    fake_api.script(TIER1_MATCH, [text('{"ok": "yes"}'), text(json.dumps({"ok": False, "why": "nginx down"}))])
    settings = make_settings(claude_bin, tmp_path)
    async with open_supervisor(settings) as (sup, db):
        spec = await resolve_spec(db, sup.validator, settings, inline=VERDICT, mode="prompted", max_retries=1)
        chain = await sup.run_cycle(spec=spec)
        row = await session_row(db, chain[0]["id"])
        assert row["status"] == "completed" and row["attempts"] == 2, row["status_reason"]
        assert json.loads(row["structured_output"]) == {"ok": False, "why": "nginx down"}
        tried = await attempts.list_attempts(db, row["id"])
        assert [(a["kind"], a["origin"], a["valid"]) for a in tried] == [
            ("stream", "prompted", False), ("resume", "prompted", True)]
        assert {e["path"] for e in tried[0]["errors"]} >= {"$.ok", "$"}
        assert "$.ok" in messages_text(fake_api.message_requests[-1])  # the errors were fed back


async def test_the_clis_own_rejections_are_attempts(claude_bin, fake_api, child_env, tmp_path) -> None:  # noqa: F811
    bad = {**HEALTHY, "events": [{"level": "bogus", "message": "x"}]}
    fake_api.script(TIER1_MATCH, [structured(bad), structured(HEALTHY)])
    settings = make_settings(claude_bin, tmp_path)
    async with open_supervisor(settings) as (sup, db):
        chain = await sup.run_cycle()
        row = await session_row(db, chain[0]["id"])
        assert row["status"] == "completed" and row["attempts"] == 2
        tried = await attempts.list_attempts(db, row["id"])
        assert [(a["attempt"], a["run"], a["origin"], a["valid"]) for a in tried] == [
            (1, 1, "cli_rejected", False), (2, 1, "tool", True)]
        assert tried[0]["errors"][0]["path"] == "$.events[0].level"
