"""``app/engine/outcomes.py``: deciding attempts and summing a session, over real result-line shapes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.engine.outcomes import (
    NO_OUTPUT,
    AttemptOutcome,
    Recording,
    SessionFacts,
    accepted_outcome,
    decide_attempt,
    summarize,
    totals,
)
from app.output.validate import OutputValidator
from app.stream.parser import ResultLine, parse_line

VALID = {
    "summary": "All services healthy; disk at 71% on web-1.",
    "events": [{"level": "info", "service": "nginx", "message": "nginx active (running)"}],
    "escalation": {"needed": False},
    "services_checked": [{"name": "nginx", "status": "healthy", "detail": "echo ok returned ok"}],
    "memories": [{"key": "web-1.disk", "value": "71% used on 2026-11-22"}],
}
INVALID = {"summary": "bad", "events": [{"level": "bogus", "message": "x"}], "escalation": {"needed": False},
           "services_checked": []}
NOTHING = object()


def result(*, structured: Any = NOTHING, **fields: Any) -> ResultLine:
    """A result line shaped like the real CLI's (2.1.197 c_structured / d_invalid_max_retries_2)."""
    data: dict[str, Any] = {
        "type": "result", "subtype": "success", "is_error": False, "api_error_status": None, "duration_ms": 172,
        "duration_api_ms": 48, "ttft_ms": 104, "num_turns": 3, "result": "done", "stop_reason": "tool_use",
        "session_id": "dda04dfa-d3af-40df-bdc8-b3c9edee4b43", "total_cost_usd": 0.203025,
        "usage": {"input_tokens": 39760, "cache_creation_input_tokens": 11, "cache_read_input_tokens": 7,
                  "output_tokens": 169, "server_tool_use": {"web_search_requests": 0}, "service_tier": "standard"},
        "modelUsage": {"claude-opus-4-8[1m]": {"inputTokens": 39760, "outputTokens": 169, "costUSD": 0.203025}},
        "permission_denials": [], "terminal_reason": "completed", "fast_mode_state": "off",
        "uuid": "e7273581-b0c4-4994-a553-182bd47d024b",
    }
    if structured is not NOTHING:
        data["structured_output"] = structured
    data.update(fields)
    line = parse_line(json.dumps(data))
    assert isinstance(line, ResultLine)
    return line


def retries_exhausted() -> ResultLine:
    return result(subtype="error_max_structured_output_retries", is_error=True, num_turns=4,
                  errors=["Failed to provide valid structured output after 2 attempts"], result=None)


@pytest.fixture(scope="module")
def v() -> OutputValidator:
    return OutputValidator.from_file()


def decide(v: OutputValidator, res: ResultLine | None, *, attempt: int = 1, calls: list[Any] | None = None,
           exit_code: int | None = 0) -> AttemptOutcome:
    kind = "stream" if attempt == 1 else "resume"
    return decide_attempt(attempt, kind, Recording(result=res, structured_calls=calls or []), exit_code, v)


FACTS = SessionFacts(line_count=12, cli_model="claude-opus-4-8", cwd="/s/1", handoff_raw=None, notes=["n"],
                     exit_code=0, stderr_tail="warn")


# -- decide_attempt ------------------------------------------------------------------------------

def test_valid_structured_output_is_accepted(v):
    o = decide(v, result(structured=VALID))
    assert o.run.status == "completed"
    assert o.has_output
    assert o.output == VALID
    assert o.output_ok
    assert not o.needs_recovery
    assert accepted_outcome([o]) is o
    rec = o.record()
    assert (rec.attempt, rec.kind, rec.result_subtype, rec.is_error, rec.valid, rec.errors) == (
        1, "stream", "success", False, True, [])


def test_completed_without_output_is_invalid_and_needs_recovery(v):
    o = decide(v, result())
    assert o.run.status == "completed"
    assert not o.has_output
    assert o.output is None
    assert o.validation is not None
    assert not o.validation.valid
    assert [(e.path, e.message) for e in o.validation.errors] == [("$", NO_OUTPUT)]
    assert "no structured_output" in o.validation.errors[0].message
    assert o.needs_recovery
    assert accepted_outcome([o]) is None
    assert o.record().errors == [{"path": "$", "message": NO_OUTPUT}]


def test_completed_with_invalid_output_keeps_it_with_json_path_errors(v):
    o = decide(v, result(structured=INVALID))
    assert o.has_output
    assert o.output == INVALID
    assert not o.output_ok
    assert o.needs_recovery
    assert "$.events[0].level" in [e.path for e in o.validation.errors]
    assert accepted_outcome([o]) is None


def test_failed_run_keeps_the_last_structured_output_call(v):
    o = decide(v, retries_exhausted(), calls=[VALID, INVALID], exit_code=1)
    assert o.run.status == "failed"
    assert o.run.reason.startswith("error_max_structured_output_retries")
    assert not o.has_output
    assert o.output == INVALID
    assert o.validation is not None
    assert not o.validation.valid
    assert not o.needs_recovery  # failed runs are not resumed for output
    rec = o.record()
    assert rec.output == INVALID
    assert rec.has_output is False
    assert rec.is_error is True


def test_failed_run_without_calls_has_no_verdict(v):
    o = decide(v, retries_exhausted())
    assert o.run.status == "failed"
    assert o.output is None
    assert o.validation is None
    assert o.record().valid is None
    assert o.record().errors is None


def test_completed_run_ignores_tool_calls_when_the_result_has_output(v):
    o = decide(v, result(structured=VALID), calls=[INVALID])
    assert o.output == VALID
    assert o.output_ok


def test_no_result_line_is_a_failed_attempt(v):
    o = decide(v, None, exit_code=137, calls=[VALID])
    assert o.run.status == "failed"
    assert "exit code 137" in o.run.reason
    assert o.output == VALID  # the model's last call, validated
    assert o.output_ok
    assert not o.has_output
    assert accepted_outcome([o]) is None  # only a result's structured_output is routed
    assert o.record().result_subtype is None
    assert o.record().is_error is None


def test_api_failure_is_failed_without_verdict(v):
    o = decide(v, result(is_error=True, api_error_status=529, result="Overloaded"))
    assert o.run.status == "failed"
    assert o.run.api_failure
    assert o.validation is None


def test_accepted_outcome_is_the_newest_valid_one(v):
    first = decide(v, result(structured=VALID), attempt=1)
    second = decide(v, result(structured={**VALID, "summary": "second"}), attempt=2)
    third = decide(v, result(structured=INVALID), attempt=3)
    assert accepted_outcome([first, second, third]) is second
    assert accepted_outcome([third]) is None
    assert accepted_outcome([]) is None


# -- totals --------------------------------------------------------------------------------------

def test_totals_sum_each_attempts_last_result(v):
    a = decide(v, result(), attempt=1)
    b = decide(v, result(structured=VALID, duration_ms=28, duration_api_ms=2, total_cost_usd=0.5, num_turns=1,
                         usage={"input_tokens": 40, "output_tokens": 31, "cache_read_input_tokens": 3,
                                "cache_creation_input_tokens": 9}), attempt=2)
    dead = decide(v, None, attempt=3, exit_code=9)
    sums = totals([a, b, dead])
    assert sums == {"duration_ms": 200, "duration_api_ms": 50, "cost_usd": pytest.approx(0.703025),
                    "input_tokens": 39800, "output_tokens": 200, "cache_read_tokens": 10,
                    "cache_creation_tokens": 20, "num_turns": 4}


def test_totals_skip_bools_and_non_numbers(v):
    o = decide(v, result(duration_ms=True, duration_api_ms="48", total_cost_usd=False, num_turns=None,
                         usage={"input_tokens": True, "output_tokens": 5, "cache_read_input_tokens": "7",
                                "cache_creation_input_tokens": False}))
    sums = totals([o, o])
    assert sums == {"duration_ms": None, "duration_api_ms": None, "cost_usd": None, "input_tokens": None,
                    "output_tokens": 10, "cache_read_tokens": None, "cache_creation_tokens": None,
                    "num_turns": None}


def test_totals_of_attempts_without_results_are_none(v):
    sums = totals([decide(v, None)])
    assert set(sums.values()) == {None}
    assert len(sums) == 8


# -- summarize -----------------------------------------------------------------------------------

def test_summarize_a_valid_session(v):
    o = decide(v, result(structured=VALID))
    s = summarize([o], FACTS)
    assert (s.status, s.status_reason, s.degraded) == ("completed", None, False)
    assert s.structured_output == VALID
    assert s.invalid_output is None
    assert s.validation_valid is True
    assert s.validation_errors == []
    assert s.attempts == 1
    assert (s.result_subtype, s.is_error, s.stop_reason, s.terminal_reason, s.result_text) == (
        "success", False, "tool_use", "completed", "done")
    assert s.model_usage == {"claude-opus-4-8[1m]": {"inputTokens": 39760, "outputTokens": 169,
                                                      "costUSD": 0.203025}}
    assert (s.cost_usd, s.input_tokens, s.num_turns) == (0.203025, 39760, 3)
    assert (s.line_count, s.cli_model, s.cwd, s.notes, s.exit_code, s.stderr_tail) == (
        12, "claude-opus-4-8", "/s/1", ["n"], 0, "warn")
    assert s.ended_at.endswith("Z")


def test_summarize_override_status_and_reason(v):
    o = decide(v, result(structured=VALID))
    s = summarize([o], FACTS, status="interrupted", reason="supervisor stopped")
    assert (s.status, s.status_reason) == ("interrupted", "supervisor stopped")
    failed = decide(v, retries_exhausted())
    s = summarize([failed], FACTS, status="failed")
    assert (s.status, s.status_reason) == ("failed", None)  # the override's (absent) reason, not the run's
    s = summarize([failed], FACTS, reason="ignored without a status")
    assert s.status == "failed"
    assert s.status_reason.startswith("error_max_structured_output_retries")


def test_summarize_degraded_only_when_completed_without_accepted_output(v):
    no_output = decide(v, result())
    assert summarize([no_output], FACTS).degraded is True
    assert summarize([decide(v, result(structured=INVALID))], FACTS).degraded is True
    assert summarize([no_output], FACTS, status="interrupted", reason="stop").degraded is False
    assert summarize([decide(v, retries_exhausted())], FACTS).degraded is False
    assert summarize([decide(v, result(structured=VALID))], FACTS).degraded is False
    # a valid earlier attempt is accepted even when the last one has no output
    assert summarize([decide(v, result(structured=VALID)), decide(v, result(), attempt=2)], FACTS).degraded is False


def test_summarize_recovered_session_routes_the_valid_output_and_keeps_no_invalid_output(v):
    bad = decide(v, result(structured=INVALID), attempt=1)
    good = decide(v, result(structured=VALID, total_cost_usd=0.1), attempt=2)
    s = summarize([bad, good], FACTS)
    assert s.attempts == 2
    assert s.structured_output == VALID
    assert s.invalid_output is None
    assert s.validation_valid is True
    assert s.degraded is False
    assert s.cost_usd == pytest.approx(0.303025)


def test_summarize_keeps_invalid_output_only_when_nothing_was_accepted(v):
    bad = decide(v, result(structured=INVALID), attempt=1)
    silent = decide(v, result(), attempt=2)
    s = summarize([bad, silent], FACTS)
    assert s.structured_output is None
    assert s.invalid_output == INVALID  # the newest attempt that had output is shown
    assert s.validation_valid is False
    assert any(e["path"] == "$.events[0].level" for e in s.validation_errors)

    s = summarize([silent], FACTS)
    assert s.invalid_output is None
    assert s.validation_errors == [{"path": "$", "message": NO_OUTPUT}]


def test_summarize_failed_run_shows_the_rejected_tool_call(v):
    failed = decide(v, retries_exhausted(), calls=[INVALID])
    s = summarize([failed], FACTS)
    assert s.status == "failed"
    assert s.invalid_output == INVALID
    assert s.structured_output is None
    assert s.result_errors == ["Failed to provide valid structured output after 2 attempts"]
    assert s.is_error is True


def test_summarize_without_any_result_line(v):
    dead = decide(v, None, exit_code=137)
    s = summarize([dead], FACTS)
    assert s.status == "failed"
    assert "exit code 137" in s.status_reason
    assert (s.result_subtype, s.is_error, s.model_usage, s.cost_usd) == (None, None, None, None)
    assert s.validation_valid is None
    assert s.validation_errors is None
    assert s.degraded is False


# -- whatever the stream held, the decision is storable ------------------------------------------

def test_hostile_output_is_sanitised_before_it_is_validated_and_kept(v):
    hostile = dict(VALID, extra={"n": float("nan"), "big": 2**80, "s": "cut \ud83d"})
    o = decide(v, result(structured=hostile))
    assert o.output_ok and o.output["extra"] == {"n": None, "big": None, "s": "cut \ufffd"}
    json.dumps(o.record().output, allow_nan=False).encode("utf-8")
    call = decide(v, retries_exhausted(), calls=[{"summary": float("inf"), "events": "\udfff"}])
    assert call.output == {"summary": None, "events": "\ufffd"} and not call.output_ok
    for issue in call.validation.errors:
        issue.message.encode("utf-8")


def test_totals_are_null_when_out_of_range(v):
    big = decide(v, result(duration_ms=2**63 - 1, total_cost_usd=1e308, num_turns=2**70,
                           usage={"input_tokens": float("inf"), "output_tokens": 2**62}))
    sums = totals([big, big, big])
    # 64-bit overflow and float overflow are no figures; they stay NULL even if a later attempt is small
    assert (sums["duration_ms"], sums["cost_usd"], sums["num_turns"], sums["input_tokens"]) == (None, None, None, None)
    assert sums["output_tokens"] is None  # 3 * 2**62 > 2**63 - 1
    assert totals([big])["output_tokens"] == 2**62 and totals([big])["cost_usd"] == 1e308


def test_summarize_keeps_only_text_for_init_facts(v):
    facts = SessionFacts(line_count=1, cli_model={"a": 1}, cwd="/w\ud83d", handoff_raw=None,  # type: ignore[arg-type]
                         notes=[], exit_code=0, stderr_tail=None)
    s = summarize([decide(v, result(structured=VALID))], facts)
    assert (s.cli_model, s.cwd) == (None, "/w\ufffd")


# -- output modes ---------------------------------------------------------------------------------

def test_native_takes_a_valid_json_text_answer_before_spending_a_resume(v):
    text = "Here is my answer:\n```json\n" + json.dumps(VALID) + "\n```"
    o = decide(v, result(result=text))
    assert o.has_output and o.output == VALID and o.output_ok and o.via == "extracted"
    assert not o.needs_recovery
    s = summarize([o], FACTS)
    assert s.degraded is True and s.output_via == "extracted" and s.structured_output == VALID
    assert o.record().origin == "extracted"


def test_native_ignores_a_text_answer_that_does_not_validate(v):
    o = decide(v, result(result=json.dumps(INVALID)))
    assert not o.has_output and o.needs_recovery and o.via == "tool"
    assert o.validation.errors[0].message.startswith("no structured_output")


def test_the_tool_output_wins_over_text(v):
    o = decide(v, result(structured=VALID, result=json.dumps(INVALID)))
    assert o.via == "tool" and o.output == VALID
    assert summarize([o], FACTS).degraded is False and summarize([o], FACTS).output_via == "tool"


@pytest.mark.parametrize("text,ok", [
    (json.dumps(VALID), True),
    ("Checked.\n```json\n" + json.dumps(VALID) + "\n```\nDone.", True),
    ("Two answers: " + json.dumps(VALID) + " and " + json.dumps(INVALID), False),
    (json.dumps(VALID)[:-10], False),
    ("no JSON at all", False),
])
def test_prompted_reads_the_answer_from_the_final_text(v, text, ok):
    o = decide_attempt(1, "stream", Recording(result=result(result=text)), 0, v, "prompted")
    assert o.via == "prompted" and o.output_ok is ok
    if ok:
        assert o.output == VALID and o.record().origin == "prompted"
    else:
        assert o.needs_recovery


def test_prompted_validates_what_it_extracts(v):
    o = decide_attempt(1, "stream", Recording(result=result(result=json.dumps(INVALID))), 0, v, "prompted")
    assert o.has_output and not o.output_ok and o.output == INVALID
    assert "$.events[0].level" in {e.path for e in o.validation.errors}


def test_cli_rejections_count_as_attempts(v):
    o = decide(v, result(structured=VALID))
    facts = SessionFacts(line_count=1, cli_model=None, cwd=None, handoff_raw=None, notes=[], exit_code=0,
                         stderr_tail=None, cli_rejections=2)
    assert summarize([o], facts).attempts == 3
