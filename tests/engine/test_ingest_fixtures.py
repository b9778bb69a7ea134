"""Every real capture in tests/fixtures/claude-code/2.1.197 (copied from ../shared) ingested, with its outcome asserted.

The expectations are written out per scenario from the reference (not derived from our code);
line counts are cross-checked against each capture's meta.json.
"""

from __future__ import annotations

import json

import pytest

from app.engine.ingest import IngestError, ingest_path
from tests.helpers import FIXTURES, SCENARIOS, fixture_stream

# scenario: (status, source, degraded, events, memories, checks, result_subtype)
OK = ("completed", "structured_output", False, 1, 1, 2, "success")
NO_OUTPUT = ("completed", "none", True, 0, 0, 0, "success")
API_FAIL = ("failed", "none", False, 0, 0, 0, "success")
NO_RESULT = ("failed", "none", False, 0, 0, 0, None)
MAX_TURNS = ("failed", "none", False, 0, 0, 0, "error_max_turns")
BAD_OUTPUT = ("failed", "none", False, 0, 0, 0, "error_max_structured_output_retries")
NO_SESSION = ("failed", "none", False, 0, 0, 0, "error_during_execution")
BUDGET = ("failed", "none", False, 0, 0, 0, "error_max_budget_usd")  # our own capture
# Not stream-json at all: the CLI printed nothing (it refused its flags or died
# before its first line), or text output. `tierops ingest` refuses these and stores nothing.
EMPTY = "is empty"
NOT_STREAM = "is not a Claude Code stream-json file"

EXPECTED = {
    "a_plain": NO_OUTPUT, "a_thinking": NO_OUTPUT, "a_thinking_partial": NO_OUTPUT,
    "b_tool_denied_disallowed": NO_OUTPUT, "b_tool_denied_no_flags": NO_OUTPUT, "b_tool_fails": NO_OUTPUT,
    "b_tool_use_allowedtools": NO_OUTPUT, "b_tool_use_bypass_mode_as_root": EMPTY,
    "b_tool_use_dsp_as_root": EMPTY, "b_tool_use_dsp_is_sandbox": NO_OUTPUT,
    "b_tool_use_no_permission_flags": NO_OUTPUT,
    "c_structured": OK,
    "d_invalid_max_retries_2": BAD_OUTPUT, "d_invalid_structured": BAD_OUTPUT, "d_invalid_then_valid": OK,
    "d_text_only": NO_OUTPUT,
    "e_resume": OK,
    "e_resume_other_cwd": NO_SESSION, "e_resume_unknown_id": NO_SESSION, "e_resume_without_schema": NO_OUTPUT,
    "f_api_400": API_FAIL, "f_api_401": API_FAIL, "f_api_500": API_FAIL, "f_api_500_default_retries": NO_RESULT,
    "f_api_500_transient": NO_OUTPUT, "f_api_529": API_FAIL, "f_api_529_default_retries": API_FAIL,
    "g_max_turns_1": MAX_TURNS,
    "h_json_output": OK, "h_json_output_error": MAX_TURNS, "h_json_output_verbose": OK, "h_text_output": NOT_STREAM,
    "i_partial_messages": NO_OUTPUT, "i_partial_messages_tool": NO_OUTPUT,
    "j_stream_json_input": NO_OUTPUT, "j_stream_json_input_file_redirect": EMPTY,
    "j_stream_json_input_two_turns": NO_OUTPUT,
    "k_mcp_strict_missing_server": NO_OUTPUT, "k_model_alias_sonnet": NO_OUTPUT, "k_session_id": NO_OUTPUT,
    "k_stdin_open_pipe": NO_OUTPUT, "k_tools_restricted": NO_OUTPUT,
    "l_schema_file_path": EMPTY, "l_schema_invalid_jsonschema": NO_OUTPUT, "l_schema_not_json": EMPTY,
    "l_schema_not_object": EMPTY, "l_stream_json_without_verbose": EMPTY,
    "l_variadic_option_eats_prompt": EMPTY,
    "m_nonessential_traffic_on": NO_OUTPUT, "n_sigterm_while_api_hangs": NO_RESULT,
    "o_max_budget_usd": BUDGET,
    # PreToolUse hooks (reference §11a): the hook_started/hook_response lines are stored like any line
    "o_pretooluse_hook_allow": NO_OUTPUT, "o_pretooluse_hook_crash": NO_OUTPUT,
    "o_pretooluse_hook_deny_json": NO_OUTPUT, "o_pretooluse_hook_exit2": NO_OUTPUT,
    "o_pretooluse_hook_timeout": NO_OUTPUT,
    "p_mcp_server_failed": NO_OUTPUT, "p_mcp_stdio_server": NO_OUTPUT,
}


def test_every_capture_has_an_expectation():
    assert len(SCENARIOS) == 58, "the captures in tests/fixtures are expected to hold 58 captures"
    assert sorted(EXPECTED) == SCENARIOS


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_fixture_outcome(scenario, db, validator, settings):
    if isinstance(EXPECTED[scenario], str):  # refused, nothing stored
        with pytest.raises(IngestError, match=EXPECTED[scenario]):
            await ingest_path(db, fixture_stream(scenario), validator, settings, tier=1)
        assert await db.fetchval("SELECT count(*) FROM sessions") == 0
        return
    status, source, degraded, n_events, n_memories, n_checks, subtype = EXPECTED[scenario]
    report, stored = await ingest_path(db, fixture_stream(scenario), validator, settings, tier=1)
    assert stored
    assert report["status"] == status, report["status_reason"]
    assert report["source"] == source
    assert report["degraded"] is degraded
    assert (len(report["events"]), len(report["memories"]), len(report["services_checked"])) == (
        n_events, n_memories, n_checks)
    assert report["result_subtype"] == subtype
    meta = json.loads((FIXTURES / scenario / "meta.json").read_text())
    assert report["activity_count"] == meta["stdout_lines"]
    if status == "failed":
        assert report["status_reason"]
    if meta.get("result_is_error") is not None:
        assert report["is_error"] is meta["result_is_error"]
    # Every stored raw line is byte-identical to the capture (replayable transcript).
    rows = await db.fetchall("SELECT raw FROM activity WHERE session_pk = ? ORDER BY seq", (report["id"],))
    original = [line for line in fixture_stream(scenario).read_text().split("\n") if line]
    assert [r["raw"] for r in rows] == original


async def test_api_failures_carry_the_http_status(db, validator, settings):
    for scenario, code in (("f_api_500", 500), ("f_api_401", 401), ("f_api_400", 400), ("f_api_529", None)):
        report, _ = await ingest_path(db, fixture_stream(scenario), validator, settings)
        assert report["api_error_status"] == code
        assert report["is_error"] is True
        assert "API failure" in report["status_reason"]


async def test_schema_failures_keep_the_rejected_output_and_every_error(db, validator, settings):
    report, _ = await ingest_path(db, fixture_stream("d_invalid_structured"), validator, settings)
    assert report["validation"] == {
        "valid": False,
        "errors": [{"path": "$.events[0].level",
                    "message": "'warnig' is not one of ['info', 'warning', 'critical']"}],
    }
    row = await db.fetchone("SELECT invalid_output, structured_output FROM sessions WHERE id = ?", (report["id"],))
    assert json.loads(row["invalid_output"])["events"][0]["level"] == "warnig"
    assert row["structured_output"] is None


async def test_process_killed_mid_run_names_the_last_api_retry(db, validator, settings):
    report, _ = await ingest_path(db, fixture_stream("f_api_500_default_retries"), validator, settings)
    assert "without a result line" in report["status_reason"]
    assert "last API retry: attempt 9" in report["status_reason"]


async def test_two_turn_stream_counts_the_last_result_once(db, validator, settings):
    # stream-json input mode accumulates cost over turns in each result line (reference §4.4)
    report, _ = await ingest_path(db, fixture_stream("j_stream_json_input_two_turns"), validator, settings)
    last = [json.loads(line) for line in fixture_stream("j_stream_json_input_two_turns").read_text().splitlines()
            if '"type":"result"' in line][-1]
    assert report["cost_usd"] == pytest.approx(last["total_cost_usd"])


async def test_reingest_changes_nothing(db, validator, settings):
    first, stored = await ingest_path(db, fixture_stream("c_structured"), validator, settings)
    assert stored
    before = {t: await db.fetchval(f"SELECT count(*) FROM {t}") for t in
              ("sessions", "activity", "events", "memories", "check_results", "output_attempts")}
    conf = await db.fetchval("SELECT confidence FROM memories")
    again, stored = await ingest_path(db, fixture_stream("c_structured"), validator, settings)
    assert not stored
    assert again["id"] == first["id"]
    after = {t: await db.fetchval(f"SELECT count(*) FROM {t}") for t in before}
    assert after == before
    assert await db.fetchval("SELECT confidence FROM memories") == conf


async def test_a_run_stopped_at_its_budget_says_how_much_of_what(db, validator, settings):
    # ingested, the amount comes from the CLI's own error text ("Reached maximum budget ($0.15)")
    report, _ = await ingest_path(db, fixture_stream("o_max_budget_usd"), validator, settings)
    assert report["status_reason"] == "budget exceeded: $0.18 of $0.15 (--max-budget-usd)"
    assert report["is_error"] is True and report["api_error_status"] is None
