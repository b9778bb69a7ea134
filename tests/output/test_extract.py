"""extract_json, format_section, recovery_section and validation_failure (prompted mode, text
answers in native mode, the failure record).

No timing asserts: hostile inputs are checked against the caps that bound the work (size, depth,
number of candidates), and each must end in an error rather than a value."""

from __future__ import annotations

import json

import pytest

from app.output.extract import (
    MAX_CANDIDATES,
    MAX_DEPTH,
    MAX_TEXT_CHARS,
    Extraction,
    extract_json,
    format_section,
    recovery_section,
)
from app.output.failure import OUTPUT_SCHEMA_VALIDATION_FAILED, validation_failure
from app.output.validate import OutputValidator, ValidationIssue

REPORT = {"summary": "All healthy.", "events": [], "escalation": {"needed": False}, "services_checked": []}
REPORT_TEXT = json.dumps(REPORT, indent=2)
OTHER = {"summary": "Other.", "events": [], "escalation": {"needed": True}, "services_checked": []}


def ok(text: str, how: str, value: object = REPORT, *, strict: bool = False, candidates: int = 1) -> None:
    got = extract_json(text, strict=strict)
    assert got == Extraction(value=value, how=how, error=None, candidates=candidates), got
    assert got.ok


def fails(text: str, match: str, *, strict: bool = False, candidates: int | None = None) -> Extraction:
    got = extract_json(text, strict=strict)
    assert got.value is None and got.how is None and not got.ok, got
    assert got.error is not None and match in got.error, got.error
    if candidates is not None:
        assert got.candidates == candidates, got
    return got


# --- whole ----------------------------------------------------------------------------------------

def test_plain_json_is_whole():
    ok(REPORT_TEXT, "whole")
    ok(json.dumps(REPORT, separators=(",", ":")), "whole")


def test_whitespace_around_is_not_text():
    ok(f"\n\n  {REPORT_TEXT}  \n", "whole")
    ok(f"\n{REPORT_TEXT}\n", "whole", strict=True)


def test_arrays_are_answers_too():
    ok("[1, 2, 3]", "whole", [1, 2, 3])
    ok('Here: ```json\n[{"a": 1}]\n``` done', "balanced", [{"a": 1}])  # inline ``` is not a fence line
    ok("Here:\n```json\n[1]\n```", "fenced", [1])
    ok('result: [1, {"a": 2}]', "balanced", [1, {"a": 2}])


def test_scalars_are_not_answers():
    # value None must always mean "no answer", so JSON null/numbers/strings are not taken.
    for text in ("42", "null", '"just a string"', "true"):
        fails(text, "no JSON object found", candidates=0)


def test_empty_text():
    fails("", "the answer is empty", candidates=0)
    fails(" \n\t ", "the answer is empty", candidates=0)
    fails("", "the answer is empty", strict=True)


# --- fenced ---------------------------------------------------------------------------------------

def test_json_fence():
    ok(f"Here is my report:\n```json\n{REPORT_TEXT}\n```\nThanks.", "fenced")


def test_bare_fence():
    ok(f"Report:\n```\n{REPORT_TEXT}\n```", "fenced")


def test_fence_variants():
    ok(f"~~~json\n{REPORT_TEXT}\n~~~", "fenced")
    ok(f"````JSON\n{REPORT_TEXT}\n````", "fenced")  # info string is case-insensitive
    ok(f"  ```json\n{REPORT_TEXT}\n  ```", "fenced")  # up to 3 spaces of indent
    ok(f"```json\r\n{REPORT_TEXT}\r\n```\r\n", "fenced")


def test_fence_of_another_language_is_not_the_answer():
    # The python block holds a dict literal that is also JSON; only json/bare fences count, and
    # the balanced scan then finds two different objects: an error, not a guess.
    text = f'```python\nx = {{"a": 1}}\n```\n```json\n{REPORT_TEXT}\n```'
    ok(text, "fenced")
    fails(f'```python\nx = {{"a": 1}}\n```\nand {json.dumps(REPORT)}', "2 JSON objects in the answer")


def test_two_fenced_blocks_are_an_error():
    text = f"```json\n{json.dumps(REPORT)}\n```\nor maybe\n```json\n{json.dumps(OTHER)}\n```"
    fails(text, "2 fenced JSON blocks; answer with exactly one", candidates=2)


def test_identical_fenced_blocks_count_as_one():
    # Decision (documented in the module): equal values are not competing; candidates counts both.
    compact = json.dumps(REPORT)
    reordered = json.dumps(dict(reversed(list(REPORT.items()))))
    ok(f"```json\n{compact}\n```\nagain:\n```json\n{reordered}\n```", "fenced", candidates=2)


def test_fenced_block_wins_over_an_object_in_prose():
    ok(f'I used {{"x": 1}} as a probe.\n```json\n{REPORT_TEXT}\n```', "fenced")


def test_json_fence_that_does_not_parse_is_an_error():
    fails(f'```json\n{{"summary": "draft",}}\n```\n```json\n{REPORT_TEXT}\n```',
          "2 fenced JSON blocks (1 not valid); answer with exactly one", candidates=2)
    ok(f"```\n$ df -h\n/var 91%\n```\n```json\n{REPORT_TEXT}\n```", "fenced")  # shell output is no candidate
    fails('```json\n{"summary": "x",}\n```\nand {"a": 1}', "the ```json block is not valid")
    fails("```json\nnot json at all\n```", "does not hold a JSON object")


def test_fence_lines_inside_a_fence_and_inline_code():
    ok(f"```json\n{REPORT_TEXT}\n```", "fenced")
    ok(f"```text\n```json\n```\n{json.dumps(REPORT)}", "balanced")  # the ```json line is content
    ok(f"```inline``` code\n{json.dumps(REPORT)}", "balanced")  # a backtick in the info: no fence


def test_unclosed_fence():
    ok(f"```json\n{REPORT_TEXT}", "fenced")  # the closing fence forgotten, the JSON complete
    fails('```json\n{"summary": "All', "looks cut off")  # cut off mid-answer


# --- balanced -------------------------------------------------------------------------------------

def test_prose_around():
    ok(f"Checked everything. Final report: {json.dumps(REPORT)} Let me know.", "balanced")
    ok(f"Report follows.\n{REPORT_TEXT}\n— end", "balanced")


def test_prose_brackets_are_not_json():
    ok(f"Use the {{placeholder}} form [see above] (a) {json.dumps(REPORT)} [done]", "balanced")


def test_two_competing_objects_are_an_error():
    got = fails(f"Draft: {json.dumps(OTHER)}\nFinal: {json.dumps(REPORT)}",
                "2 JSON objects in the answer (2 different); answer with exactly one", candidates=2)
    assert got.value is None  # never the last one, never a guess


def test_three_objects_two_alike():
    text = f"{json.dumps(REPORT)} x {json.dumps(REPORT)} y {json.dumps(OTHER)}"
    fails(text, "3 JSON objects in the answer (2 different)", candidates=3)


def test_identical_repeats_count_as_one():
    ok(f"Answer: {json.dumps(REPORT)}\nOnce more: {REPORT_TEXT}", "balanced", candidates=2)


def test_equal_in_python_is_not_identical():
    # 1 == 1.0 == True in Python; in JSON they are different answers.
    fails('{"a": 1} then {"a": true}', "2 different")
    fails('{"a": 1} then {"a": 1.0}', "2 different")


def test_objects_win_over_arrays():
    ok(f"steps [1] and [2] done: {json.dumps(REPORT)}", "balanced")
    fails("steps [1] and [2]", "2 JSON arrays in the answer")


def test_braces_inside_strings():
    value = {"summary": "a } b { c ] [ d", "events": [{"message": "{\"nested\": [1, 2}"}]}
    ok(f"prose {json.dumps(value)} prose", "balanced", value)


def test_escaped_quotes_and_backslashes():
    value = {"m": 'say "hi" \\"}', "path": "C:\\dir\\", "u": "\u00e9\u2603"}
    ok(f"x {json.dumps(value)} y", "balanced", value)
    ok(f"x {json.dumps(value, ensure_ascii=False)} y", "balanced", value)


def test_broken_object_alone_reports_the_decoder_message():
    fails('x {"summary": "a",} y', "the answer looks like JSON but it does not parse as JSON: Expecting", candidates=1)
    fails('x {"a": NaN} y', "NaN is not a JSON value")
    fails('x {"a": "line\nbreak"} y', "Invalid control character")
    fails('x {"a": [1, 2} y', "brackets do not match ('}' closes '[')")


def test_broken_object_next_to_a_good_one_is_an_error():
    fails(f'{{"summary": "draft",}} then {json.dumps(REPORT)}', "2 JSON objects in the answer (1 different, 1 not valid)")


def test_truncated():
    cut = REPORT_TEXT[: len(REPORT_TEXT) // 2]
    fails(cut, "the JSON looks cut off")
    fails(f"Here it is: {cut}", "looks cut off")
    fails('{"summary": "ok", "events": [{"level": "info", "mes', "ends inside a string with 3 brackets still open")
    fails('x {"a": "b\\', "inside a string")


def test_truncated_answer_never_yields_its_inner_object():
    fails('{"summary": "x", "escalation": {"needed": false}, "events": [', "looks cut off")
    fails(f'{json.dumps(OTHER)} and then {{"summary": "y", "events": [', "looks cut off")


# --- strict ---------------------------------------------------------------------------------------

def test_strict_accepts_the_bare_json():
    ok(REPORT_TEXT, "whole", strict=True)


def test_strict_refuses_text_around():
    fails(f"Report: {REPORT_TEXT}", "strict mode: the answer must be the JSON object alone, but it came with "
          "other text around it", strict=True, candidates=1)
    fails(f"{REPORT_TEXT}\nThanks!", "with other text around it", strict=True)


def test_strict_refuses_a_fence():
    fails(f"```json\n{REPORT_TEXT}\n```", "inside a code fence", strict=True)


def test_strict_keeps_the_specific_error():
    fails(f"{json.dumps(REPORT)} {json.dumps(OTHER)}", "2 JSON objects", strict=True)
    fails(REPORT_TEXT[:-3], "looks cut off", strict=True)
    fails('{"a": 1,}', "does not parse", strict=True)
    fails("no json", "no JSON object found", strict=True)


# --- hostile input: every cap ends in an error ----------------------------------------------------

def test_text_over_the_size_cap_is_refused_without_scanning():
    big = "x" * 9_000_000 + json.dumps(REPORT) + "x" * 1_000_000  # a 10 MB text
    fails(big, f"at most {MAX_TEXT_CHARS:,} are read", candidates=0)
    at_cap = json.dumps(REPORT) + " " * (MAX_TEXT_CHARS - len(json.dumps(REPORT)))
    ok(at_cap, "whole")
    fails(at_cap + " ", "characters long")


def test_depth_cap():
    def nested(depth: int) -> str:
        return '{"a": ' * (depth - 1) + "{}" + "}" * (depth - 1)

    assert extract_json(nested(MAX_DEPTH)).ok
    for text in (nested(MAX_DEPTH + 1), "x " + nested(MAX_DEPTH + 1), "[" * 500_000 + "]" * 500_000,
                 "x " + "[" * 900_000, "x " + "[" * (MAX_DEPTH + 1) + "}"):
        fails(text, f"nested more than {MAX_DEPTH} levels deep")
    fails(f"```json\n{nested(MAX_DEPTH + 1)}\n```", f"more than {MAX_DEPTH} levels")


def test_candidate_cap():
    fails("```\n" * 240_000, f"more than {MAX_CANDIDATES} code blocks")
    fails("```bash\nls\n```\n" * (MAX_CANDIDATES + 1) + REPORT_TEXT, "code blocks")
    assert extract_json("```bash\nls\n```\n" * MAX_CANDIDATES + REPORT_TEXT).ok
    fails("x " + '{"a": 1} ' * (MAX_CANDIDATES + 5), f"more than {MAX_CANDIDATES} JSON values")
    fails("x " + "[] " * 300_000, f"more than {MAX_CANDIDATES} JSON values")


@pytest.mark.parametrize("text", [
    "{" * 999_000,  # openers that never look like JSON
    '"' * 999_000,
    "x [" + "{}," * 330_000 + "]]",  # a long broken span walked bracket by bracket
    'x {"a": "' + '\\"' * 490_000,  # a string of escapes that never ends
    "x [" + '"a",' * 240_000 + "}",
    "x " + ("{ " + " " * 1000) * 990,
    "```\n" * 240_000,  # fences everywhere
])
def test_hostile_inputs_end_in_an_error(text):
    assert len(text) <= MAX_TEXT_CHARS
    got = extract_json(text)
    assert not got.ok and got.value is None


# --- the prompt sections --------------------------------------------------------------------------

def test_format_section_holds_the_schema_in_a_json_fence(validator: OutputValidator):
    section = format_section(validator.schema)
    assert section.startswith("## Required output format\n")
    body = section.split("```json\n", 1)[1].split("\n```\n", 1)[0]
    assert json.loads(body) == validator.schema
    assert "exactly one JSON object" in section
    assert "no text before or after" not in section
    # The section's own advice is something extract_json accepts.
    assert extract_json(f"Done.\n```json\n{REPORT_TEXT}\n```").ok


def test_format_section_strict():
    section = format_section({"type": "object"}, strict=True)
    assert "no text before or after it and no code fence" in section


def test_format_section_fence_cannot_be_closed_by_the_schema():
    schema = {"type": "object", "description": "example:\n```\n{}\n```"}
    section = format_section(schema)
    assert "````json\n" in section
    body = section.split("````json\n", 1)[1].split("\n````", 1)[0]
    assert json.loads(body) == schema


def test_recovery_section():
    with_output = recovery_section([{"path": "$.events[0].level", "message": "'warnig' is not one of [...]"}], True)
    assert "did not match the required schema" in with_output
    assert "- $.events[0].level: 'warnig' is not one of [...]" in with_output
    assert "alone or in a single ```json code block" in with_output
    no_output = recovery_section([{"path": "$", "message": "2 fenced JSON blocks; answer with exactly one"}], False,
                                 strict=True)
    assert "could not read a JSON answer" in no_output
    assert "- 2 fenced JSON blocks; answer with exactly one" in no_output
    assert "no text or code fence around it" in no_output
    many = recovery_section([{"path": f"$.x{i}", "message": "m"} for i in range(100)], True)
    assert many.count("\n- ") == 30


# --- the failure record ---------------------------------------------------------------------------

def test_validation_failure_shape():
    out = validation_failure([ValidationIssue("$.events[0].level", "bad"), {"path": "$", "message": "m"}],
                             {"summary": 1, "n": float("nan")}, 3)
    assert out == {"type": OUTPUT_SCHEMA_VALIDATION_FAILED, "validation_errors": [
        {"path": "$.events[0].level", "message": "bad"}, {"path": "$", "message": "m"}],
        "last_output": {"summary": 1, "n": None}, "attempts": 3}
    assert list(out) == ["type", "validation_errors", "last_output", "attempts"]
    assert out["type"] == "output_schema_validation_failed"
    json.dumps(out, allow_nan=False)  # storable as is


def test_validation_failure_without_output():
    assert validation_failure([], None, 1) == {"type": "output_schema_validation_failed", "validation_errors": [],
                                               "last_output": None, "attempts": 1}


@pytest.mark.parametrize("attempts", [0, -1, True, 1.5])
def test_validation_failure_needs_attempts(attempts):
    with pytest.raises(ValueError, match="attempts"):
        validation_failure([], None, attempts)
