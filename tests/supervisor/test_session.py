"""app/supervisor/session.py: one tier session and its output recovery by ``--resume``; its prompt
on stdin and its system prompt in a file, whatever their size."""

from __future__ import annotations

import json
import os

import pytest

from app.output.validate import OutputValidator
from app.paths import DEFAULT_SCHEMA_PATH
from app.supervisor.chain import run_chain
from app.supervisor.credentials import ModelTiersPaused, current_fingerprint, read_pause
from app.supervisor.launch import MAX_ARG_STRLEN
from app.supervisor.session import SYSTEM_PROMPT_FILE
from tests.fakes import claude_control as cc
from tests.helpers import alive, escalating, healthy, invalid, kill_leftovers, run_session

pytestmark = pytest.mark.timeout(60)

SYSTEM = "You are a test tier.\n\n## Memories\n- [0.90] nginx:port: 8080"


def resumed(sid: str, output: dict, *, cost: float = 0.02) -> list[dict]:
    """What a resumed run prints: its own init, the StructuredOutput call, the result."""
    return cc.structured_stream(sid, output, text="", command=None, cost=cost)


async def attempts_of(db, pk: int) -> list[dict]:
    rows = await db.fetchall("SELECT * FROM output_attempts WHERE session_pk = ? ORDER BY attempt", (pk,))
    return [dict(r) for r in rows]


async def test_missing_output_is_recovered_by_resuming_the_same_session(db, make_settings, validator, tmp_path):
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(sid, healthy(), cost=0.01), "mode": "no_structured"},
        {"lines": resumed(cc.new_session_id(), healthy("Recovered summary.")), "delay": 0},
    ])
    settings = make_settings(fake)
    result, row = await run_session(db, settings, validator, system=SYSTEM)

    assert (row["status"], row["degraded"], row["attempts"], row["source"]) == ("completed", 0, 2, "structured_output")
    assert row["summary"] == "Recovered summary." and row["session_id"] == sid
    assert row["cost_usd"] == pytest.approx(0.03)  # both attempts are paid for
    assert not result.api_failure and result.attempts == 2

    first, again = fake.invocations()
    assert "--resume" not in first["argv"]
    assert again["argv"][again["argv"].index("--resume") + 1] == sid
    assert again["parsed"]["resume"] == sid and again["session_id"] == sid
    assert again["parsed"]["json_schema"] == validator.wire_schema() == first["parsed"]["json_schema"]
    assert again["parsed"]["append_system_prompt"] == SYSTEM == first["parsed"]["append_system_prompt"]
    assert again["parsed"]["model"] == first["parsed"]["model"]
    assert again["cwd"] == first["cwd"]
    assert again["env"] == first["env"] and again["env"]["HOME"] == first["env"]["HOME"]
    assert again["parsed"]["prompt_from"] == "stdin" and again["pgid"] == again["pid"]
    prompt = again["parsed"]["prompt"]
    assert prompt.startswith("Your previous answer did not call the StructuredOutput tool")
    assert "Call the StructuredOutput tool now, once" in prompt

    rows = await attempts_of(db, result.pk)
    assert [(a["attempt"], a["kind"], a["has_output"], a["valid"]) for a in rows] == [
        (1, "stream", 0, 0), (2, "resume", 1, 1)]
    assert json.loads(rows[0]["errors"])[0]["path"] == "$"
    assert "never called the StructuredOutput tool" in json.loads(rows[0]["errors"])[0]["message"]
    assert json.loads(rows[1]["output"]) == healthy("Recovered summary.")
    # the activity of both runs is kept, tagged with its attempt
    per_attempt = await db.fetchall("SELECT attempt, count(*) AS n FROM activity WHERE session_pk = ? GROUP BY attempt",
                                    (result.pk,))
    assert {r["attempt"]: r["n"] for r in per_attempt} == {1: 7, 2: 4}


async def test_invalid_output_recovery_prompt_lists_the_json_paths(db, make_settings, validator, tmp_path):
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(sid, invalid())},
        {"lines": resumed(sid, healthy())},
    ])
    result, row = await run_session(db, make_settings(fake), validator)
    assert (row["status"], row["degraded"], row["attempts"]) == ("completed", 0, 2)
    assert row["validation_valid"] == 1 and row["invalid_output"] is None
    prompt = fake.invocations()[1]["parsed"]["prompt"]
    assert prompt.startswith("Your StructuredOutput did not match the required schema.")
    assert "- $.events[0].level: 'bogus' is not one of ['info', 'warning', 'critical']" in prompt
    assert "- $.services_checked[0].status: 'fine' is not one of" in prompt
    # routed once, from the accepted attempt: no duplicate events from the rejected one
    events = await db.fetchall("SELECT level, service, message FROM events WHERE session_pk = ?", (result.pk,))
    assert [tuple(e) for e in events] == [("info", "nginx", "nginx active (running)")]
    rows = await attempts_of(db, result.pk)
    assert [(a["kind"], a["has_output"], a["valid"]) for a in rows] == [("stream", 1, 0), ("resume", 1, 1)]
    assert json.loads(rows[0]["output"]) == invalid()  # the rejected output, as received
    assert [e["path"] for e in json.loads(rows[0]["errors"])] == ["$.events[0].level", "$.services_checked[0].status"]
    assert json.loads(rows[1]["errors"]) == []


async def test_retries_exhausted_fall_back_to_markers_and_degrade(db, make_settings, validator, tmp_path):
    sid = cc.new_session_id()
    marker_text = "[EVENT:warning:nginx] nginx answers slowly\n[MEMORY:latency:nginx] p99 is 2 s at peak"
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(sid, healthy(), text=marker_text), "mode": "no_structured"},
        {"lines": cc.structured_stream(sid, healthy(), text="Sorry.", command=None), "mode": "no_structured"},
    ])
    settings = make_settings(fake, output_max_retries=2)
    result, row = await run_session(db, settings, validator)
    invs = fake.invocations()
    assert len(invs) == 3  # the first run + output_max_retries resumes
    assert ["--resume" in inv["argv"] for inv in invs] == [False, True, True]
    assert (row["status"], row["degraded"], row["attempts"], row["source"]) == ("completed", 1, 3, "markers")
    assert row["escalation_needed"] is None  # markers carry no escalation decision
    events = await db.fetchall("SELECT level, service, message, source FROM events WHERE session_pk = ?", (result.pk,))
    assert [tuple(e) for e in events] == [("warning", "nginx", "nginx answers slowly", "markers")]
    memories = await db.fetchall("SELECT service, category, value FROM memories WHERE created_by_session = ?",
                                 (result.pk,))
    assert [tuple(m) for m in memories] == [("nginx", "latency", "p99 is 2 s at peak")]
    rows = await attempts_of(db, result.pk)
    assert [(a["attempt"], a["kind"], a["valid"]) for a in rows] == [(1, "stream", 0), (2, "resume", 0), (3, "resume", 0)]
    assert all(json.loads(a["errors"]) for a in rows)


async def test_retries_exhausted_with_invalid_output_keeps_the_last_rejected_output(db, make_settings, validator,
                                                                                   tmp_path):
    sid = cc.new_session_id()
    still_bad = invalid()
    still_bad["summary"] = 42
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(sid, invalid())},
        {"lines": resumed(sid, still_bad)},
    ])
    result, row = await run_session(db, make_settings(fake, output_max_retries=1), validator)
    assert len(fake.invocations()) == 2
    assert (row["status"], row["degraded"], row["attempts"], row["source"]) == ("completed", 1, 2, "none")
    assert json.loads(row["invalid_output"]) == still_bad and row["structured_output"] is None
    assert "$.summary" in [e["path"] for e in json.loads(row["validation_errors"])]
    rows = await attempts_of(db, result.pk)
    assert [json.loads(a["output"]) for a in rows] == [invalid(), still_bad]
    assert [len(json.loads(a["errors"])) for a in rows] == [2, 3]


async def test_no_resume_when_output_max_retries_is_zero(db, make_settings, validator, tmp_path):
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(sid, healthy()), "mode": "no_structured"},
        {"lines": resumed(sid, healthy())},
    ])
    result, row = await run_session(db, make_settings(fake, output_max_retries=0), validator)
    assert len(fake.invocations()) == 1
    assert (row["status"], row["degraded"], row["attempts"], row["source"]) == ("completed", 1, 1, "none")
    assert len(await attempts_of(db, result.pk)) == 1


def _max_turns(sid):
    return [cc.init_line(sid), cc.assistant_text(sid, "Looking."),
            cc.result_error(sid, "error_max_turns", "Reached maximum number of turns (1)")]


def _max_so_retries(sid):
    use = cc.assistant_tool_use(sid, "StructuredOutput", invalid())
    return [cc.init_line(sid), use,
            cc.tool_result(sid, use["message"]["content"][0]["id"], "Output does not match required schema", True),
            cc.result_error(sid, "error_max_structured_output_retries",
                            "Failed to provide valid structured output after 5 attempts")]


@pytest.mark.parametrize("build,reason_start,api", [
    (_max_turns, "error_max_turns: the CLI stopped at --max-turns (Reached maximum number of turns (1))", False),
    (_max_so_retries, "error_max_structured_output_retries: the model never produced schema-valid structured output",
     False),
    (lambda sid: cc.api_error_stream(sid, 500), "API failure (HTTP 500): API Error: 500 Internal server error", True),
    (lambda sid: cc.api_error_stream(sid, 529), "API failure (no HTTP status; 529 overload reports none)", True),
], ids=["max_turns", "max_structured_output_retries", "api_500", "api_529"])
async def test_failures_are_recorded_and_not_resumed(db, make_settings, validator, tmp_path, build, reason_start, api):
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": build(sid)}, {"lines": resumed(sid, healthy())}])
    result, row = await run_session(db, make_settings(fake, output_max_retries=2), validator)
    assert len(fake.invocations()) == 1
    assert row["status"] == "failed" and row["status_reason"].startswith(reason_start)
    # the CLI's own rejection of the StructuredOutput call is an attempt too
    rejected = 1 if build is _max_so_retries else 0
    assert row["attempts"] == 1 + rejected and row["degraded"] == 0 and row["is_error"] == 1
    assert result.api_failure is api
    *rejections, attempt = await attempts_of(db, result.pk)
    assert [r["origin"] for r in rejections] == ["cli_rejected"] * rejected
    assert attempt["is_error"] == 1
    if build is _max_so_retries:
        # the model's last rejected output and TierOps' verdict on it are kept
        assert json.loads(attempt["output"]) == invalid() and attempt["valid"] == 0
        assert "$.events[0].level" in [e["path"] for e in json.loads(attempt["errors"])]
        assert json.loads(row["invalid_output"]) == invalid()


# -- rejected credentials: the CLI is stopped at once, the model tiers pause --------------------------

def _rejected(sid: str, retries: int = 2) -> list[dict]:
    """What the pinned CLI prints for a key the API refuses (f_api_401), before it would go on
    retrying for minutes: init, then api_retry lines with error_status 401."""
    return [cc.init_line(sid)] + [cc.api_retry(sid, i + 1, 10, 401, "authentication_failed") for i in range(retries)]


async def test_a_401_retry_stops_the_cli_at_once_and_fails_the_session(db, make_settings, validator, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-rejected-0000")
    sid = cc.new_session_id()
    # the fake hangs after the retry lines, as the real CLI waits to retry: only our stop ends it
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": _rejected(sid), "mode": "hang", "after": 2},
                                                  {"lines": resumed(sid, healthy())}])
    settings = make_settings(fake, tier1_timeout=600, output_max_retries=2)
    try:
        result, row = await run_session(db, settings, validator)
        [inv] = fake.invocations()  # stopped, not resumed, not retried
        assert not alive(inv["pid"])
    finally:
        kill_leftovers(fake)
    assert row["status"] == "failed" and not result.api_failure
    assert row["status_reason"].startswith("API key rejected (HTTP 401 authentication_failed): the API refused the "
                                           "credentials the claude CLI was given")
    assert "restart it (`tierops doctor --online` checks them)" in row["status_reason"]
    assert "timed out" not in row["status_reason"]
    # the model tiers are paused, with a fingerprint of the credentials, never the key itself
    stored = await db.fetchone("SELECT value FROM monitor_state WHERE name = 'model_tiers_paused'")
    pause = json.loads(stored["value"])
    assert pause["reason"] == "HTTP 401 authentication_failed" and pause["session"] == result.pk
    assert pause["fingerprint"] == current_fingerprint(settings) and "sk-ant" not in stored["value"]
    # no session of tier >= 1 starts now: refused before its row exists
    with pytest.raises(ModelTiersPaused, match=r"^model tiers paused: the API rejected the credentials \(HTTP 401 "):
        await run_session(db, settings, validator)
    assert await db.fetchval("SELECT COUNT(*) FROM sessions") == 1 and len(fake.invocations()) == 1


async def test_a_result_with_api_error_status_403_fails_the_session_the_same_way(db, make_settings, validator,
                                                                                 tmp_path):
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.api_error_stream(sid, 403, "Forbidden", retries=0)}])
    result, row = await run_session(db, make_settings(fake), validator)
    assert row["status"] == "failed" and row["status_reason"].startswith("API key rejected (HTTP 403 permission_error)")
    assert (await read_pause(db)).session == result.pk


async def test_api_failure_fails_the_session_and_never_escalates(db, make_settings, validator, tmp_path):
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.api_error_stream(sid, 529)},
        {"lines": cc.structured_stream(cc.new_session_id(), escalating())},
    ])
    chain = await run_chain(db, make_settings(fake), validator, None)
    assert len(chain) == 1 and len(fake.invocations()) == 1
    [s] = chain
    assert s["status"] == "failed" and s["escalated_to"] is None
    assert s["attention"].startswith("tier 1 could not reach the model (API failure")
    assert s["attention"].endswith("; not escalated")


async def test_timeout_during_recovery_keeps_the_completed_run_degraded(db, make_settings, validator, tmp_path):
    """The check completed; only the recovery resume timed out: no further resume, and the
    session stays completed (degraded, no valid output) with the resume's failure as reason."""
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(sid, healthy()), "mode": "no_structured"},
        {"lines": resumed(sid, healthy()), "mode": "hang", "after": 1},
    ])
    try:
        _result, row = await run_session(db, make_settings(fake, tier1_timeout=1), validator)
        assert len(fake.invocations()) == 2
        assert (row["status"], row["degraded"]) == ("completed", 1)
        assert row["status_reason"].startswith("output recovery stopped: resume attempt 2 failed (timed out after 1 s")
        assert row["attempts"] == 2
    finally:
        kill_leftovers(fake)


# --- prompts and system prompts of any size: stdin and --append-system-prompt-file -------------

BIG = 300 * 1024


def _big(tag: str) -> str:
    body = "".join(f"{tag} line {i:06d}: é ünïcode ✓\n" for i in range(BIG // 30))
    return f"BEGIN-{tag}\n{body}END-{tag}"


async def test_large_prompt_and_system_prompt_start_a_session(db, make_settings, validator, tmp_path):
    """A 300 KiB prompt goes to stdin, a 300 KiB system prompt to --append-system-prompt-file;
    the resume of output recovery passes the file again. Before: execve failed with E2BIG."""
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(sid, healthy()), "mode": "no_structured"},
        {"lines": cc.structured_stream(sid, healthy(), text="", command=None)},
    ])
    prompt, system = _big("PROMPT"), _big("SYSTEM")
    assert len(prompt.encode()) > MAX_ARG_STRLEN and len(system.encode()) > MAX_ARG_STRLEN
    result, row = await run_session(db, make_settings(fake), validator, prompt=prompt, system=system)
    assert (row["status"], row["source"], row["attempts"]) == ("completed", "structured_output", 2)
    first, again = fake.invocations()
    sp_file = str((tmp_path / "state").resolve() / "sessions" / str(result.pk) / SYSTEM_PROMPT_FILE)
    assert first["stdin_kind"] == "pipe" and first["stdin_prompt"] == prompt
    assert first["parsed"]["prompt_from"] == "stdin" and first["usage_error"] is None
    for inv in (first, again):
        assert max(len(a.encode()) for a in inv["argv"]) < 64 * 1024
        assert inv["parsed"]["append_system_prompt_file"] == sp_file
        assert inv["system_prompt_file_text"] == system
    # the resume's prompt goes to stdin too
    assert again["stdin_prompt"].startswith("Your previous answer did not call") and again["stdin_kind"] == "pipe"
    assert again["parsed"]["resume"] == sid
    # the database keeps the full texts
    assert row["prompt"] == prompt and row["system_prompt"] == system
    assert json.loads(row["argv"])[1:3] == ["-p", "--add-dir"]  # no prompt argument
    assert oct(os.stat(sp_file).st_mode & 0o777) == "0o600"


async def test_small_texts_stay_off_the_command_line_too(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    result, row = await run_session(db, make_settings(fake), validator, prompt="p" * 10, system="s" * 10)
    [inv] = fake.invocations()
    assert (inv["stdin_prompt"], inv["system_prompt_file_text"]) == ("p" * 10, "s" * 10)
    assert not any("pppp" in a or "ssss" in a for a in inv["argv"]) and row["status"] == "completed"
    assert (tmp_path / "state" / "sessions" / str(result.pk) / SYSTEM_PROMPT_FILE).exists()


async def test_an_argument_over_the_kernel_limit_is_a_clear_failure(db, make_settings, validator, tmp_path):
    """The wire schema can only be passed inline (--json-schema takes JSON, not a path): an
    operator schema over 128 KiB fails the session with a reason naming it, not an OSError."""
    schema = json.loads(DEFAULT_SCHEMA_PATH.read_text())
    schema["description"] = "x" * (MAX_ARG_STRLEN + 10)
    big = tmp_path / "big-schema.json"
    big.write_text(json.dumps(schema))
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    big_validator = OutputValidator.from_file(big)
    _result, row = await run_session(db, make_settings(fake), big_validator)
    assert row["status"] == "failed"
    assert row["status_reason"].startswith("cannot start the CLI: the value of --json-schema is ")
    assert row["status_reason"].endswith("over the kernel's limit of 128 KiB per command-line argument")
    assert fake.invocations() == []
