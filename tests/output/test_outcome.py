from __future__ import annotations

import json
from pathlib import Path

from app.output.outcome import Budget, RunStatus, decide_status, usd
from app.stream.parser import parse_line


def _result(**fields):
    base = {"type": "result", "subtype": "success", "is_error": False, "session_id": "s"}
    return parse_line(json.dumps(base | fields))


def test_success():
    assert decide_status(_result()).status == "completed"


def test_is_error_is_trusted_over_subtype():
    st = decide_status(_result(is_error=True, api_error_status=500, result="API Error: 500"))
    assert st.status == "failed" and st.api_failure and "HTTP 500" in st.reason


def test_error_subtypes_name_their_cause():
    st = decide_status(_result(subtype="error_max_turns", is_error=True, errors=["Reached maximum number of turns (1)"]))
    assert st.status == "failed" and not st.api_failure
    assert st.reason.startswith("error_max_turns") and "Reached maximum" in st.reason
    assert "unknown_future" in decide_status(_result(subtype="unknown_future")).reason


def test_missing_result_line():
    st = decide_status(None, exit_code=137, last_retry={"attempt": 3, "max_retries": 10, "error_status": 500,
                                                        "error": "server_error"})
    assert st.status == "failed" and "exit code 137" in st.reason and "attempt 3/10" in st.reason


def test_a_hostile_api_retry_line_still_gives_a_storable_reason():
    deep: list = []
    for _ in range(5_000):
        deep = [deep]
    retry = {"attempt": {"a": [1]}, "max_retries": float("inf"), "error_status": deep, "error": "x" * 10_000 + "\ud83d"}
    st = decide_status(None, exit_code=1, last_retry=retry)
    st.reason.encode("utf-8")
    assert 'attempt {"a":[1]}/Infinity' in st.reason and "(nested too deeply)" in st.reason
    assert len(st.reason) < 2_000


def test_a_hostile_result_line_still_gives_a_storable_reason():
    st = decide_status(_result(subtype="error_during_execution", errors=[{"e": [1]}, "\ud83d"], result=7))
    st.reason.encode("utf-8")
    assert '{"e":[1]}; \ufffd' in st.reason


# --- a run stopped at --max-budget-usd -----------------------------------------------------------

BUDGET_CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "claude-code" / "2.1.197" / "o_max_budget_usd"


def _budget_result():
    """The result line of the real CLI stopped at --max-budget-usd 0.15 (tests/realcli/test_budget.py)."""
    return parse_line(BUDGET_CAPTURE.joinpath("stdout.jsonl").read_text().splitlines()[-1])


def test_a_run_stopped_at_its_budget_failed_naming_the_setting():
    st = decide_status(_budget_result(), 1, budget=Budget(0.15, "TIEROPS_TIER2_MAX_BUDGET_USD"))
    assert st == RunStatus("failed", "budget exceeded: $0.18 of $0.15 (TIEROPS_TIER2_MAX_BUDGET_USD)",
                           api_failure=False)


def test_without_the_setting_the_amount_comes_from_the_cli_error():
    assert decide_status(_budget_result()).reason == "budget exceeded: $0.18 of $0.15 (--max-budget-usd)"
    # no amount in the errors, no cost: still a reason
    bare = _result(subtype="error_max_budget_usd", is_error=True, errors=["something else"])
    assert decide_status(bare).reason == "budget exceeded: an unknown amount (--max-budget-usd)"


def test_small_amounts_keep_their_digits():
    assert (usd(0.262578), usd(0.2), usd(0.00005), usd(0), usd(12.5)) == ("$0.26", "$0.20", "$0.00005", "$0.00",
                                                                          "$12.50")
