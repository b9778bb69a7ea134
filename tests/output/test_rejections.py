"""The CLI's own rejections of StructuredOutput calls, and the final text answer, read from the real
captures (every attempt counts).

The expected rejections are written out from the captures (reference §5.3, §5.5), not derived
from the code: which tool_use ids, on which lines, with which text."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from app.output.rejections import (
    MAX_KEPT,
    CliRejection,
    FinalText,
    RejectionTracker,
    find_rejections,
    parse_cli_errors,
    text_answer,
)
from app.stream.parser import ParsedLine, parse_line

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "claude-code" / "2.1.197"
# A scenario folder holds cmd.txt and meta.json (other folders, e.g. schema-rules/, are not captures).
SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if (p / "meta.json").is_file())

AJV_LEVEL = "Output does not match required schema: /events/0/level: must be equal to one of the allowed values"
LEVEL_ERRORS = [{"path": "$.events[0].level", "message": "must be equal to one of the allowed values"}]
NO_TOOL = "<tool_use_error>Error: No such tool available: StructuredOutput</tool_use_error>"

# scenario → [(tool_use_id, seq of the tool_use, seq of the rejecting tool_result, kind)]
REJECTED: dict[str, list[tuple[str, int, int, str]]] = {
    "d_invalid_structured": [
        ("toolu_fake_108fff86f3914dd5b188", 5, 6, "schema"),
        ("toolu_fake_a2f772c100524033a1be", 7, 8, "schema"),
        ("toolu_fake_e38c9c8233dd4026bf03", 9, 10, "schema"),
        ("toolu_fake_e4970e6fc76841a8af52", 11, 12, "schema"),
        ("toolu_fake_a6a3d2d4a8214db3bad8", 13, 14, "schema"),
    ],
    "d_invalid_max_retries_2": [
        ("toolu_fake_4417883f63dd452aa602", 5, 6, "schema"),
        ("toolu_fake_e41c3fe32717438b8e1d", 7, 8, "schema"),
    ],
    "d_invalid_then_valid": [("toolu_fake_f11647d0e6434a70a543", 5, 6, "schema")],
    # --resume without --json-schema: the tool is gone, the call refused (reference §5.5).
    "e_resume_without_schema": [("toolu_fake_da61b8cc3f38462a84f5", 2, 3, "unavailable")],
}
# StructuredOutput calls the CLI accepted ("Structured output provided successfully", no is_error).
ACCEPTED = {"c_structured": 1, "d_invalid_then_valid": 1, "e_resume": 1, "h_json_output_verbose": 1}


def lines_of(scenario: str) -> list[ParsedLine | None]:
    path = FIXTURES / scenario / "stdout.jsonl"
    if not path.exists():
        return []
    return [parse_line(raw) for raw in path.read_bytes().splitlines()]


def raw_lines(scenario: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in (FIXTURES / scenario / "stdout.jsonl").read_bytes().splitlines()]


def test_there_are_58_captures():
    assert len(SCENARIOS) == 58


# --- rejections in the captures -------------------------------------------------------------------

@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rejections_in_every_capture(scenario):
    tracker = RejectionTracker()
    for line in lines_of(scenario):
        tracker.feed(line)
    found = [(r.tool_use_id, r.call_seq, r.seq, r.kind) for r in tracker.rejections]
    assert found == REJECTED.get(scenario, [])
    assert tracker.rejected_count == len(found)
    assert len(tracker.accepted) == ACCEPTED.get(scenario, 0)
    assert find_rejections(lines_of(scenario)) == tracker.rejections


@pytest.mark.parametrize("scenario", sorted(REJECTED))
def test_rejection_details_match_the_raw_lines(scenario):
    raws = raw_lines(scenario)
    for rejection in find_rejections(lines_of(scenario)):
        assert rejection.call_seq is not None and rejection.seq is not None
        call = raws[rejection.call_seq - 1]["message"]["content"][0]  # seq is 1-based, like the recorder's
        result = raws[rejection.seq - 1]["message"]["content"][0]
        assert call["type"] == "tool_use" and call["name"] == "StructuredOutput" and call["id"] == rejection.tool_use_id
        assert result == {"type": "tool_result", "content": rejection.error_text, "is_error": True,
                          "tool_use_id": rejection.tool_use_id}
        assert rejection.input == call["input"]
        if rejection.kind == "schema":
            assert rejection.error_text == AJV_LEVEL
            assert rejection.errors == LEVEL_ERRORS
            assert rejection.input["events"][0]["level"] == "warnig"  # the fake model's typo
        else:
            assert rejection.error_text == NO_TOOL
            assert rejection.errors == [{"path": "$", "message": "No such tool available: StructuredOutput"}]


@pytest.mark.parametrize("scenario", ["d_invalid_structured", "d_invalid_max_retries_2"])
def test_rejections_match_the_clis_own_count(scenario):
    result = raw_lines(scenario)[-1]
    assert result["subtype"] == "error_max_structured_output_retries"
    n = int(re.fullmatch(r"Failed to provide valid structured output after (\d+) attempts", result["errors"][0])[1])
    assert len(find_rejections(lines_of(scenario))) == n


def test_incremental_feed_reports_each_rejection_on_its_line():
    tracker = RejectionTracker()
    seen: dict[int, list[CliRejection]] = {}
    for i, line in enumerate(lines_of("d_invalid_structured"), start=1):
        new = tracker.feed(line)
        if new:
            seen[i] = new
    assert sorted(seen) == [6, 8, 10, 12, 14]
    assert [r for rs in seen.values() for r in rs] == tracker.rejections


def test_caller_numbering_and_empty_lines():
    lines = lines_of("d_invalid_then_valid")
    tracker = RejectionTracker()
    for i, line in enumerate(lines):
        tracker.feed(None)  # an empty line: not counted, as the recorder does not count it
        tracker.feed(line, seq=100 + i)
    assert [(r.call_seq, r.seq) for r in tracker.rejections] == [(104, 105)]
    counting = RejectionTracker()
    for line in lines:
        counting.feed(None)
        counting.feed(line)
    assert [(r.call_seq, r.seq) for r in counting.rejections] == [(5, 6)]


def test_verbose_json_array_line():
    """``--output-format json --verbose`` prints every message in one array line (reference §3)."""
    messages = raw_lines("d_invalid_then_valid")
    line = parse_line(json.dumps(messages))
    tracker = RejectionTracker()
    tracker.feed(line)
    assert [(r.tool_use_id, r.call_seq, r.seq) for r in tracker.rejections] == [
        ("toolu_fake_f11647d0e6434a70a543", 1, 1)]
    assert len(tracker.accepted) == 1


def _tool_use(tool_id: str, output: Any, *, name: str = "StructuredOutput", parent: str | None = None) -> ParsedLine:
    line = parse_line(json.dumps({"type": "assistant", "parent_tool_use_id": parent, "message": {
        "id": f"msg_{tool_id}", "content": [{"type": "tool_use", "id": tool_id, "name": name, "input": output}]}}))
    assert line is not None
    return line


def _tool_result(tool_id: str, content: Any, *, is_error: Any = True, parent: str | None = None) -> ParsedLine:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id, "content": content}
    if is_error is not None:
        block["is_error"] = is_error
    line = parse_line(json.dumps({"type": "user", "parent_tool_use_id": parent,
                                  "message": {"role": "user", "content": [block]}}))
    assert line is not None
    return line


def _run(*lines: ParsedLine | None) -> RejectionTracker:
    tracker = RejectionTracker()
    for line in lines:
        tracker.feed(line)
    return tracker


def test_only_failed_structured_output_calls_count():
    t = _run(_tool_use("a", {"x": 1}, name="Bash"), _tool_result("a", "Error: Exit code 3"),  # another tool
             _tool_use("b", {"x": 2}), _tool_result("b", "Structured output provided successfully", is_error=None),
             _tool_use("c", {"x": 3}), _tool_result("c", "fine", is_error=False),
             _tool_result("zzz", AJV_LEVEL),  # a result for a call never seen
             _tool_use("d", {"x": 4}), _tool_result("d", AJV_LEVEL), _tool_result("d", AJV_LEVEL))  # answered twice
    assert [r.tool_use_id for r in t.rejections] == ["d"]
    assert t.accepted == ["b", "c"]
    assert t.rejections[0].input == {"x": 4}


def test_subagent_lines_are_not_the_agents_output():
    t = _run(_tool_use("a", {}, parent="toolu_task"), _tool_result("a", AJV_LEVEL, parent="toolu_task"))
    assert t.rejections == []


def test_a_new_run_forgets_unanswered_calls():
    init = parse_line('{"type":"system","subtype":"init","session_id":"s"}')
    t = _run(_tool_use("a", {}), init, _tool_result("a", AJV_LEVEL))
    assert t.rejections == []


def test_content_blocks_and_odd_values():
    t = _run(_tool_use("a", {"n": 10**30, "f": 1e999}), _tool_result("a", [{"type": "text", "text": AJV_LEVEL}]))
    (r,) = t.rejections
    assert r.error_text == AJV_LEVEL and r.errors == LEVEL_ERRORS
    assert r.input == {"n": None, "f": None}  # values.json_safe: storable as is
    t = _run(_tool_use("b", None), _tool_result("b", "x" * 50_000))
    assert len(t.rejections[0].error_text) == 10_000 and t.rejections[0].kind == "error"


def test_rejections_kept_are_capped_but_all_counted():
    lines: list[ParsedLine | None] = []
    for i in range(MAX_KEPT + 7):
        lines += [_tool_use(f"t{i}", {"i": i}), _tool_result(f"t{i}", AJV_LEVEL)]
    t = _run(*lines)
    assert len(t.rejections) == MAX_KEPT and t.rejected_count == MAX_KEPT + 7


# --- the CLI's error text -------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "kind", "errors"), [
    (AJV_LEVEL, "schema", LEVEL_ERRORS),
    ("Output does not match required schema: root: must have required property 'summary', "
     "/events/0: must have required property 'message', /escalation/needed: must be boolean", "schema",
     [{"path": "$", "message": "must have required property 'summary'"},
      {"path": "$.events[0]", "message": "must have required property 'message'"},
      {"path": "$.escalation.needed", "message": "must be boolean"}]),
    ("Output does not match required schema: /a~1b/c~0d/my key: must be string", "schema",
     [{"path": '$["a/b"]["c~d"]["my key"]', "message": "must be string"}]),
    ("Output does not match required schema: something else", "schema",
     [{"path": "$", "message": "something else"}]),
    (NO_TOOL, "unavailable", [{"path": "$", "message": "No such tool available: StructuredOutput"}]),
    ("Error: boom", "error", [{"path": "$", "message": "boom"}]),
])
def test_parse_cli_errors(text, kind, errors):
    assert parse_cli_errors(text) == (kind, errors)


# --- the final text answer ------------------------------------------------------------------------

FINAL_TEXT = {
    "a_plain": "Hi there! This is the fake model.",
    "d_text_only": "Everything looks healthy (plain text, no structured output).",
    "e_resume_without_schema": "Follow-up report submitted.",
    "j_stream_json_input_two_turns": "Hello again (turn 2).",
    # The run ended on a StructuredOutput call, an API error (synthetic message) or no line at all.
    "c_structured": None, "d_invalid_structured": None, "e_resume": None, "f_api_500": None,
    "f_api_529": None, "g_max_turns_1": None, "h_json_output_verbose": None, "n_sigterm_while_api_hangs": None,
    "l_schema_not_json": None,
}


@pytest.mark.parametrize("scenario", sorted(FINAL_TEXT))
def test_final_text_of_captures(scenario):
    final = FinalText()
    for line in lines_of(scenario):
        final.feed(line)
    assert final.text == FINAL_TEXT[scenario]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_no_capture_answers_in_json_text(scenario):
    answer = text_answer(lines_of(scenario))
    assert answer is None or (not answer.ok and answer.error == "no JSON object found in the answer")


def _with_final_text(scenario: str, text: str) -> list[ParsedLine | None]:
    """The capture with its last assistant text block replaced by ``text``."""
    raws = raw_lines(scenario)
    last = max(i for i, r in enumerate(raws) if r["type"] == "assistant" and r["message"]["content"][0]["type"] == "text")
    raws[last]["message"]["content"][0]["text"] = text
    return [parse_line(json.dumps(r)) for r in raws]


REPORT = {"summary": "ok", "events": [], "escalation": {"needed": False}, "services_checked": []}


def test_json_text_instead_of_the_tool_is_found():
    lines = _with_final_text("d_text_only", json.dumps(REPORT))
    answer = text_answer(lines)
    assert answer is not None and answer.ok and answer.how == "whole" and answer.value == REPORT
    fenced = text_answer(_with_final_text("d_text_only", f"Report:\n```json\n{json.dumps(REPORT)}\n```"))
    assert fenced is not None and fenced.how == "fenced"
    strict = text_answer(_with_final_text("d_text_only", f"Report: {json.dumps(REPORT)}"), strict=True)
    assert strict is not None and not strict.ok and "strict mode" in (strict.error or "")


def test_text_before_the_nudge_is_not_the_final_answer():
    # d_text_only: text, then the CLI's synthetic nudge (a user line), then text again.
    raws = raw_lines("d_text_only")
    first_text = next(i for i, r in enumerate(raws) if r["type"] == "assistant" and
                      r["message"]["content"][0]["type"] == "text" and "plain text" in r["message"]["content"][0]["text"])
    raws[first_text]["message"]["content"][0]["text"] = json.dumps(REPORT)
    final = FinalText()
    for raw in raws:
        final.feed(parse_line(json.dumps(raw)))
    assert final.text == "Everything looks healthy (plain text, no structured output)."
    assert final.seq == len(raws) - 1  # the last assistant line, just before result


def _assistant(msg_id: str, *blocks: dict[str, Any], model: str = "m", **extra: Any) -> ParsedLine:
    line = parse_line(json.dumps({"type": "assistant", "parent_tool_use_id": None, **extra,
                                  "message": {"id": msg_id, "model": model, "content": list(blocks)}}))
    assert line is not None
    return line


def test_final_message_split_over_lines_is_joined():
    final = FinalText()
    for line in (_assistant("m1", {"type": "text", "text": "Report:"}),
                 _assistant("m1", {"type": "thinking", "thinking": "hmm", "signature": "s"}),
                 _assistant("m1", {"type": "text", "text": json.dumps(REPORT)})):
        final.feed(line)
    assert final.text == "Report:\n" + json.dumps(REPORT)
    answer = final.answer()
    assert answer is not None and answer.how == "balanced"


def test_a_message_that_calls_a_tool_is_not_an_answer():
    final = FinalText()
    final.feed(_assistant("m1", {"type": "text", "text": json.dumps(REPORT)}))
    final.feed(_assistant("m1", {"type": "tool_use", "id": "t", "name": "Bash", "input": {}}))
    assert final.text is None and final.answer() is None
    final.feed(_assistant("m2", {"type": "text", "text": "done"}))  # a new message starts afresh
    assert final.text == "done"


def test_api_error_text_and_subagents_are_not_answers():
    final = FinalText()
    final.feed(_assistant("m1", {"type": "text", "text": json.dumps(REPORT)}))
    final.feed(_assistant("m2", {"type": "text", "text": '{"a": 1}'}, parent_tool_use_id="toolu_task"))
    assert final.text == json.dumps(REPORT)
    final.feed(_assistant("uuid", {"type": "text", "text": "API Error: 500"}, model="<synthetic>",
                          error="server_error"))
    assert final.text is None
