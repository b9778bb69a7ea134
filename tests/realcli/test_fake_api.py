"""End-to-end: the real claude CLI (2.1.197) against tests/fakes/fake_anthropic.py."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from tests.fakes.fake_anthropic import FakeAnthropic, bash, error, hang, structured, text

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(60)]

SCHEMA = {
    "type": "object",
    "properties": {
        "summary": {"type": "string"},
        "escalation": {
            "type": "object",
            "properties": {"needed": {"type": "boolean"}, "reason": {"type": "string"}},
            "required": ["needed"],
        },
        "services_checked": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "status": {"type": "string", "enum": ["healthy", "degraded", "down", "unreachable"]},
                },
                "required": ["name", "status"],
            },
        },
    },
    "required": ["summary", "escalation", "services_checked"],
}
SCHEMA_ARG = json.dumps(SCHEMA, separators=(",", ":"))

REPORT = {
    "summary": "All services healthy.",
    "escalation": {"needed": False},
    "services_checked": [{"name": "nginx", "status": "healthy"}],
}


def base_args(prompt: str, *extra: str) -> list[str]:
    # prompt right after -p; the variadic --allowedTools is followed by another option
    return [
        "-p",
        prompt,
        "--output-format",
        "stream-json",
        "--verbose",
        "--allowedTools",
        "Bash",
        "--model",
        "sonnet",
        *extra,
    ]


def test_bash_then_structured_output(fake_api: FakeAnthropic, run_claude) -> None:
    fake_api.script("TIEROPS-CASE-A", [bash("echo ok", text="Checking services."), structured(REPORT)])

    run = run_claude(
        base_args("TIEROPS-CASE-A: run the health check (echo ok) and report.", "--json-schema", SCHEMA_ARG)
    )

    assert run.returncode == 0, run.explain()
    result = run.result
    assert result is not None, run.explain()
    assert result["subtype"] == "success" and result["is_error"] is False
    assert result["structured_output"] == REPORT
    assert json.loads(result["result"]) == REPORT
    # the Bash tool really ran and its output went back to the "model"
    tool_results = [m for m in run.of_type("user") if isinstance(m.get("tool_use_result"), dict)]
    assert tool_results and tool_results[0]["tool_use_result"]["stdout"] == "ok"

    reqs = fake_api.message_requests
    assert len(reqs) == 2  # a valid StructuredOutput ends the turn: no third call
    assert all(r["path"] == "/v1/messages?beta=true" and r["body"]["stream"] is True for r in reqs)
    assert {r["session_id"] for r in reqs} == {run.session_id}
    assert [r["turn_index"] for r in reqs] == [0, 1]
    assert "StructuredOutput" in FakeAnthropic.tool_names(reqs[0])
    assert FakeAnthropic.prompt_text(reqs[0]) == "TIEROPS-CASE-A: run the health check (echo ok) and report."
    assert [tr["content"] for tr in FakeAnthropic.tool_results(reqs[1])] == ["ok"]
    assert reqs[0]["body"]["model"].startswith("claude-sonnet")
    assert reqs[0]["headers"]["x-api-key"] == "sk-test-dummy"


def test_text_only_without_schema(fake_api: FakeAnthropic, run_claude) -> None:
    fake_api.script("TIEROPS-CASE-B1", [text("Everything looks fine.")])

    run = run_claude(base_args("TIEROPS-CASE-B1: say something"))

    assert run.returncode == 0, run.explain()
    result = run.result
    assert result["subtype"] == "success" and result["is_error"] is False
    assert result["result"] == "Everything looks fine."
    assert "structured_output" not in result
    assert len(fake_api.message_requests) == 1


def test_text_only_with_schema_gets_one_nudge_and_no_structured_output(
    fake_api: FakeAnthropic, run_claude
) -> None:
    fake_api.script("TIEROPS-CASE-B2", [text("I checked: fine."), text("Still only text.")])

    run = run_claude(base_args("TIEROPS-CASE-B2: report", "--json-schema", SCHEMA_ARG))

    assert run.returncode == 0, run.explain()
    result = run.result
    assert result["subtype"] == "success" and result["is_error"] is False
    assert "structured_output" not in result
    assert result["result"] == "Still only text."
    reqs = fake_api.message_requests
    assert len(reqs) == 2
    assert "[structured-output-enforce]" in FakeAnthropic.last_prompt_text(reqs[1])


def test_append_system_prompt_reaches_system_blocks(fake_api: FakeAnthropic, run_claude) -> None:
    marker = "APPEND-MARKER-TIEROPS-C: you are the tier-1 ops agent."
    fake_api.script("TIEROPS-CASE-C", [text("ack")])

    run = run_claude(base_args("TIEROPS-CASE-C: hello", "--append-system-prompt", marker))

    assert run.returncode == 0, run.explain()
    req = fake_api.message_requests[0]
    system = FakeAnthropic.system_text(req)
    assert system.endswith("\n\n" + marker)
    assert marker not in FakeAnthropic.prompt_text(req)
    assert req["script"] == "TIEROPS-CASE-C"


def test_script_matched_by_system_text(fake_api: FakeAnthropic, run_claude) -> None:
    fake_api.script("SYSTEM-ONLY-MARKER-C2", [text("matched by system")])

    run = run_claude(base_args("plain prompt", "--append-system-prompt", "SYSTEM-ONLY-MARKER-C2"))

    assert run.returncode == 0, run.explain()
    assert run.result["result"] == "matched by system"


def test_unmatched_prompt_gets_default_script(fake_api: FakeAnthropic, run_claude) -> None:
    fake_api.script("NEVER-SENT-MARKER", [text("wrong")])

    run = run_claude(base_args("TIEROPS-CASE-UNMATCHED"))

    assert run.returncode == 0, run.explain()
    assert run.result["result"] == "No script matched."
    assert fake_api.message_requests[0]["script"] is None


def test_resume_continues_scripted_conversation(fake_api: FakeAnthropic, run_claude) -> None:
    fake_api.script("TIEROPS-CASE-D", [text("first answer"), text("second answer")])

    first = run_claude(base_args("TIEROPS-CASE-D: first"))
    assert first.returncode == 0, first.explain()
    assert first.result["result"] == "first answer"
    sid = first.session_id
    assert sid

    second = run_claude(base_args("follow up", "--resume", sid))  # same cwd and HOME (fixtures)

    assert second.returncode == 0, second.explain()
    assert second.result["result"] == "second answer"
    assert second.session_id == sid
    reqs = fake_api.message_requests
    assert [r["turn_index"] for r in reqs] == [0, 1]
    assert reqs[1]["headers"]["x-claude-code-session-id"] == sid
    assert FakeAnthropic.last_prompt_text(reqs[1]) == "follow up"
    assert "TIEROPS-CASE-D: first" in FakeAnthropic.prompt_text(reqs[1])  # history replayed


def test_api_500_every_call_gives_is_error(fake_api: FakeAnthropic, run_claude, claude_env) -> None:
    assert claude_env["CLAUDE_CODE_MAX_RETRIES"] == "1"
    fake_api.script("TIEROPS-CASE-E", [], exhausted=error(500))

    run = run_claude(base_args("TIEROPS-CASE-E: fail"))

    assert run.returncode == 1, run.explain()
    result = run.result
    assert result is not None, run.explain()
    assert result["is_error"] is True
    assert result["api_error_status"] == 500
    assert "structured_output" not in result
    assert len(run.of_type("system", "api_retry")) == 1
    assert len(fake_api.message_requests) == 2  # first try + one retry


def test_transient_500_then_success(fake_api: FakeAnthropic, run_claude) -> None:
    fake_api.script("TIEROPS-CASE-E2", [error(500), text("recovered")])

    run = run_claude(base_args("TIEROPS-CASE-E2: go"))

    assert run.returncode == 0, run.explain()
    assert run.result["is_error"] is False and run.result["result"] == "recovered"
    assert len(run.of_type("system", "api_retry")) == 1


def test_hang_then_kill_leaves_fake_clean(
    fake_api: FakeAnthropic, claude_bin, claude_env, claude_cwd
) -> None:
    fake_api.script("TIEROPS-CASE-HANG", [hang(30)])
    proc = subprocess.Popen(
        [claude_bin, *base_args("TIEROPS-CASE-HANG: wait")],
        cwd=claude_cwd,
        env=claude_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 15
        while not fake_api.message_requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake_api.message_requests, "the CLI never called the fake API"
        proc.terminate()
        out, _err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
    assert not [m for m in lines if m.get("type") == "result"]  # killed mid-call: no result line


def test_fake_serves_plain_json_and_404_without_cli(fake_api: FakeAnthropic) -> None:
    fake_api.script("PLAIN-JSON", [structured({"a": 1}, text="here")])
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "PLAIN-JSON please"}]}
    req = urllib.request.Request(
        fake_api.url + "/v1/messages",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-claude-code-session-id": "s-1"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["request-id"].startswith("req_fake_")
        msg = json.loads(resp.read())
    assert msg["type"] == "message" and msg["stop_reason"] == "tool_use"
    assert [b["type"] for b in msg["content"]] == ["text", "tool_use"]
    assert msg["content"][1]["name"] == "StructuredOutput" and msg["content"][1]["input"] == {"a": 1}
    assert msg["usage"]["input_tokens"] > 0

    with pytest.raises(urllib.error.HTTPError) as exc_info:
        urllib.request.urlopen(fake_api.url + "/v1/nope", timeout=10)
    with exc_info.value as err:
        assert err.code == 404
        assert json.loads(err.read())["type"] == "error"
    assert fake_api.session_ids == ["s-1"]
