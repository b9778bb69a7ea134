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
    # A list as "type" must not raise "unhashable type" out of the parser.
    line = json.dumps({"type": value, "session_id": "s"})
    parsed = parse_line(line)
    assert parsed is not None and parsed.raw == line
    assert isinstance(parsed, UnknownLine) or parsed.type == "unknown"


# -- any JSON value in any field ------------------------------------------------------------------

def test_lines_json_cannot_decode_are_text_with_a_note():
    deep = parse_line("[" * 50_000 + "]" * 50_000)
    assert isinstance(deep, TextLine) and deep.subtype == "too_deep"
    assert deep.display().startswith("(JSON nested too deeply to parse) [[[")
    cut = parse_line('{"type": "assistant", "message": {"content": [{"type": "te')
    assert isinstance(cut, TextLine) and cut.subtype == "bad_json" and cut.display().startswith("(invalid JSON: ")
    binary = parse_line(b"\xff\xfe{")
    assert isinstance(binary, TextLine) and binary.subtype == "not_utf8" and binary.raw == "\\xff\\xfe{"
    plain = parse_line("just a warning")
    assert isinstance(plain, TextLine) and plain.subtype is None and plain.display() == "just a warning"


def test_an_array_nested_in_an_array_is_not_parsed_recursively():
    line = "[" + "[" * 900 + "]" * 900 + ', {"type": "result", "subtype": "success"}]'
    parsed = parse_line(line)
    if isinstance(parsed, ArrayLine):  # decoded (the stack allowed it): the inner array is one unknown item
        assert [type(i) for i in parsed.items] == [UnknownLine, ResultLine]
        assert parsed.items[0].raw == "(nested too deeply)" or parsed.items[0].raw.startswith("[[")
    else:
        assert isinstance(parsed, TextLine) and parsed.subtype == "too_deep"


def test_result_accessors_are_storable_whatever_the_line_holds():
    r = parse_line('{"type": "result", "subtype": "success", "num_turns": 99999999999999999999999,'
                   ' "api_error_status": -9223372036854775809, "duration_ms": 9223372036854775807,'
                   ' "total_cost_usd": 1e999, "duration_api_ms": NaN, "usage": {"input_tokens": Infinity,'
                   ' "deep": ' + "[" * 100 + "]" * 100 + '}, "result": "cut \\ud83d", "stop_reason": {"x": 1},'
                   ' "errors": "not a list", "permission_denials": [NaN], "session_id": "s\\udc00"}')
    assert isinstance(r, ResultLine)
    assert (r.num_turns, r.api_error_status, r.duration_ms, r.total_cost_usd, r.duration_api_ms) == (
        None, None, 2**63 - 1, None, None)
    assert r.usage["input_tokens"] is None and "(nested too deeply)" in json.dumps(r.usage)
    assert (r.result_text, r.stop_reason, r.errors, r.permission_denials) == ("cut \ufffd", None, [], [None])
    assert r.session_id == "s\ufffd"
    assert parse_line('{"type": "result", "total_cost_usd": 10e400}').total_cost_usd is None
    assert parse_line('{"type": "result", "total_cost_usd": ' + "9" * 400 + "}").total_cost_usd is None
    r.display().encode("utf-8")


@pytest.mark.parametrize("value", ['{"a": [1]}', "[1, 2]", "1e999", "NaN", "99999999999999999999999", '"\\ud83d"',
                                   "[" * 300 + "]" * 300, "null", "true"])
def test_any_value_in_a_display_field_displays(value):
    lines = [
        '{"type": "system", "subtype": "init", "model": V, "cwd": V, "tools": V, "claude_code_version": V}',
        '{"type": "system", "subtype": "api_retry", "attempt": V, "max_retries": V, "error_status": V,'
        ' "error": V, "retry_delay_ms": V}',
        '{"type": "system", "subtype": "status", "status": V}',
        '{"type": "system", "subtype": V, "x": V}',
        '{"type": "assistant", "message": {"content": [{"type": "text", "text": V},'
        ' {"type": "tool_use", "name": V, "input": V}, {"type": "thinking", "thinking": V}, {"type": V}]}, "error": V}',
        '{"type": "assistant", "message": {"content": V}}',
        '{"type": "user", "message": {"content": [{"type": "tool_result", "content": V, "is_error": V},'
        ' {"type": "tool_result", "content": [{"text": V}]}, {"type": "text", "text": V}, {"type": V}]}}',
        '{"type": "stream_event", "event": {"type": V, "delta": {"type": V, "text": V}}}',
        '{"type": "result", "subtype": V, "is_error": V, "errors": [V], "result": V}',
        '{"type": V, "subtype": V, "session_id": V}',
    ]
    for template in lines:
        parsed = parse_line(template.replace("V", value))
        assert parsed is not None
        for text in (parsed.display(), parsed.type, parsed.subtype or "", parsed.session_id or ""):
            text.encode("utf-8")
        assert len(parsed.display()) <= 240
        if isinstance(parsed, SystemLine):
            assert all(v is None or isinstance(v, str) for v in (parsed.model, parsed.cli_version, parsed.cwd))
        if isinstance(parsed, AssistantLine):
            for text in parsed.texts():
                text.encode("utf-8")


def test_init_facts_are_typed():
    init = parse_line('{"type": "system", "subtype": "init", "model": "m", "claude_code_version": "2.1",'
                      ' "cwd": "/w\\ud83d", "tools": ["Bash"]}')
    assert isinstance(init, SystemLine)
    assert (init.model, init.cli_version, init.cwd, init.tools) == ("m", "2.1", "/w\ufffd", ["Bash"])
    odd = parse_line('{"type": "system", "subtype": "init", "model": {"a": 1}, "claude_code_version": 2,'
                     ' "cwd": "", "tools": 7}')
    assert (odd.model, odd.cli_version, odd.cwd, odd.tools) == (None, None, None, [])


# -- orjson on screened lines, json for whatever orjson refuses -----------------------------------

REFUSED_BY_ORJSON = [  # json accepts every one of these; orjson raises, so parse_line falls back
    '{"type":"result","total_cost_usd":NaN,"session_id":"s"}',
    '{"type":"result","total_cost_usd":Infinity,"num_turns":-Infinity}',
    '{"type":"result","total_cost_usd":1e999}',
    '{"type":"assistant","message":{"content":[{"type":"text","text":"cut \\ud83d"}]}}',
    '{"type":"user","message":{"content":"lone low \\udfff then pair \\ud83d\\ude00"}}',
    "[" * 1100 + "]" * 1100,  # past orjson's 1,024 levels: json decides (here: too deep)
]


def _same(a, b) -> bool:
    """Equal as decoded values, NaN included (nan != nan)."""
    return json.dumps(a, sort_keys=False) == json.dumps(b, sort_keys=False)


def test_lines_orjson_refuses_fall_back_to_json_with_the_same_value():
    import orjson

    for line in REFUSED_BY_ORJSON:
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(line)  # the fallback really is taken
        fast, slow = parse_line(line, screened=True), parse_line(line)
        assert type(fast) is type(slow) and fast.raw == slow.raw and fast.subtype == slow.subtype
        assert _same(fast.data, slow.data) and fast.display() == slow.display()
    nan = parse_line(REFUSED_BY_ORJSON[0], screened=True)
    assert isinstance(nan, ResultLine) and nan.data["total_cost_usd"] != nan.data["total_cost_usd"]
    assert nan.total_cost_usd is None
    cut = parse_line(REFUSED_BY_ORJSON[3], screened=True)
    assert cut.data["message"]["content"][0]["text"] == "cut \ud83d" and cut.texts() == ["cut \ufffd"]


def test_big_integers_are_what_the_screen_is_for():
    """orjson turns an integer beyond 64 bits into a float *without* an error: the screen pattern
    catches every such literal, and an unscreened parse keeps the int."""
    import re

    import orjson

    from app.stream.parser import SCREEN_PATTERN

    for number in (2**64, -(2**63) - 1, 10**30, -(10**40)):
        line = f'{{"type":"result","num_turns":{number}}}'
        assert isinstance(orjson.loads(line)["num_turns"], float)  # why lines are screened
        assert re.search(SCREEN_PATTERN, line)
        parsed = parse_line(line)
        assert parsed.data["num_turns"] == number and isinstance(parsed.data["num_turns"], int)
        assert parsed.num_turns is None  # beyond SQLite's 64 bits, as before
    for number in (2**63 - 1, -(2**63), 2**64 - 1):  # in range for orjson: same int either way
        line = f'{{"n":{number}}}'
        assert parse_line(line, screened=True).data == parse_line(line).data == {"n": number}


def test_screened_parse_equals_json_on_ordinary_values():
    import random

    rnd = random.Random(15)
    floats = [rnd.uniform(-1e6, 1e6) for _ in range(300)] + [rnd.random() * 10 ** rnd.randint(-300, 300)
                                                            for _ in range(300)]
    values = [
        {"type": "assistant", "a": 1, "b": 2, "a2": [True, False, None], "s": "é 😀 \u2028", "e": {}, "l": []},
        {"type": "x", "f": floats, "ints": [0, -0, 1, -1, 2**53, 2**63 - 1, -(2**63)], "neg0": -0.0},
    ]
    for value in values:
        line = json.dumps(value)
        assert parse_line(line, screened=True).data == parse_line(line).data == json.loads(line)
    dup = '{"type":"system","a":1,"subtype":"init","a":2}'  # duplicate keys: the last wins, first position
    assert list(parse_line(dup, screened=True).data.items()) == list(json.loads(dup).items())
    for text in ('{"a":1}x', '{"a":"\x01"}', "\ufeff{}", "{'a': 1}", "[1,]", "plain text"):  # refused by both
        fast, slow = parse_line(text, screened=True), parse_line(text)
        assert isinstance(fast, TextLine) and fast.subtype == slow.subtype and fast.raw == slow.raw
