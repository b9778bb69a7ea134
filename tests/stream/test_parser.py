from __future__ import annotations

import json

import pytest

from app.stream.parser import (
    ArrayLine,
    AssistantLine,
    ResultLine,
    StreamEventLine,
    SystemLine,
    TextLine,
    UnknownLine,
    UserLine,
    parse_line,
)
from tests.helpers import FIXTURES, fixture_stream

KINDS = {"system": SystemLine, "assistant": AssistantLine, "user": UserLine, "stream_event": StreamEventLine,
         "result": ResultLine}


def test_every_fixture_line_parses_to_its_type():
    seen = set()
    for path in sorted(FIXTURES.glob("*/stdout.jsonl")):
        for raw in path.read_bytes().splitlines():
            parsed = parse_line(raw)
            assert parsed is not None and parsed.raw == raw.decode()
            obj = json.loads(raw)
            expected = KINDS.get(obj.get("type")) if isinstance(obj, dict) else ArrayLine
            assert isinstance(parsed, expected or UnknownLine)
            assert parsed.display() and "\n" not in parsed.display() and len(parsed.display()) <= 240
            seen.add(type(parsed).__name__)
    assert seen == {"SystemLine", "AssistantLine", "UserLine", "StreamEventLine", "ResultLine", "ArrayLine",
                    "UnknownLine"}


def test_result_fields_of_an_api_failure():
    line = fixture_stream("f_api_500").read_text().splitlines()[-1]
    r = parse_line(line)
    assert isinstance(r, ResultLine)
    assert r.is_error and r.subtype == "success" and r.api_error_status == 500
    assert not r.has_structured_output and r.total_cost_usd == 0.0


def test_result_fields_of_structured_success():
    r = parse_line(fixture_stream("c_structured").read_text().splitlines()[-1])
    assert not r.is_error and r.num_turns == 3 and r.has_structured_output
    assert r.usage["output_tokens"] == 169 and "claude-opus-4-8[1m]" in r.model_usage
    assert r.permission_denials == [] and r.stop_reason == "tool_use" and r.terminal_reason == "completed"


def test_error_subtype_is_an_error_even_without_is_error():
    assert parse_line('{"type":"result","subtype":"error_max_turns"}').is_error


def test_synthetic_api_error_message_is_recognised():
    lines = fixture_stream("f_api_401").read_text().splitlines()
    synthetic = next(parse_line(x) for x in lines if '"<synthetic>"' in x)
    assert synthetic.is_synthetic_error
    assert "[authentication_failed]" in synthetic.display()


def test_thinking_and_tool_use_display():
    lines = [parse_line(x) for x in fixture_stream("a_thinking").read_text().splitlines()]
    assert any(p.display().startswith("(thinking)") for p in lines if isinstance(p, AssistantLine))
    tool = [parse_line(x) for x in fixture_stream("c_structured").read_text().splitlines()][2]
    assert tool.display() == "Bash: echo ok"


def test_partial_message_events():
    lines = [parse_line(x) for x in fixture_stream("i_partial_messages_tool").read_text().splitlines()]
    events = [p for p in lines if isinstance(p, StreamEventLine)]
    assert any("input_json_delta" in p.display() for p in events)


@pytest.mark.parametrize("raw,kind", [
    (b"plain text", TextLine), (b"\xff\xfe", TextLine), (b'{"type": "rate_limit_event"}', UnknownLine),
    (b'{"no_type": 1}', UnknownLine), (b"3", UnknownLine), (b"[1, {\"type\": \"result\"}]", ArrayLine),
    (b'{"type":"result","usage":"weird","num_turns":true}', ResultLine),
])
def test_odd_lines_never_raise(raw, kind):
    parsed = parse_line(raw)
    assert isinstance(parsed, kind)
    parsed.display()
    if isinstance(parsed, ResultLine):
        assert parsed.usage == {} and parsed.num_turns is None


def test_empty_lines_have_nothing_to_keep():
    assert parse_line(b"\n") is None and parse_line("") is None


def test_display_of_a_huge_line_is_short():
    big = json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": "y" * 5_000_000}]}})
    assert len(parse_line(big).display()) == 240


@pytest.mark.parametrize("value", [[1], {"a": 1}, 3, None, True])
def test_a_type_that_is_not_a_string_is_kept_as_unknown(value):
    # A list as "type" raised "unhashable type" out of the parser before issue #8's typing pass.
    line = json.dumps({"type": value, "session_id": "s"})
    parsed = parse_line(line)
    assert parsed is not None and parsed.raw == line
    assert isinstance(parsed, UnknownLine) or parsed.type == "unknown"
