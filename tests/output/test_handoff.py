from __future__ import annotations

import pytest

from app.output.handoff import HandoffError, parse_handoff, read_handoff


@pytest.mark.parametrize("raw", [
    '{"needed": true, "reason": "r", "failed_checks": ["a"]}',
    '{"escalate": true, "reason": "r", "failed_checks": ["a"]}',
    '{"escalation": {"needed": true, "reason": "r", "failed_checks": ["a"]}, "summary": "x"}',
])
def test_accepted_shapes(raw):
    h = parse_handoff(raw)
    assert (h.needed, h.reason, h.failed_checks) == (True, "r", ["a"])


@pytest.mark.parametrize("raw,msg", [("[]", "JSON object"), ("{}", "boolean"), ('{"needed": "yes"}', "boolean"),
                                     ("nope", "not valid JSON")])
def test_rejected_shapes(raw, msg):
    with pytest.raises(HandoffError, match=msg):
        parse_handoff(raw)


def test_read_relative_to_cwd_and_absolute(tmp_path):
    (tmp_path / "handoff.json").write_text('{"needed": false}')
    assert read_handoff("handoff.json", str(tmp_path))[0].needed is False
    assert read_handoff(str(tmp_path / "handoff.json"), None)[0].needed is False
    assert read_handoff("handoff.json", None) == (None, None)
    assert read_handoff("missing.json", str(tmp_path)) == (None, None)


def test_a_handoff_nested_too_deeply_is_a_problem():
    with pytest.raises(HandoffError, match="nested too deeply"):
        parse_handoff('{"needed": true, "context": ' + "[" * 100_000 + "]" * 100_000 + "}")


def test_any_value_in_a_handoff_field_is_storable_text():
    h = parse_handoff('{"needed": true, "reason": {"why": NaN}, "context": "cut \\ud83d",'
                      ' "failed_checks": [1, {"a": "\\udc00"}, null]}')
    assert h.reason == '{"why":NaN}' and h.context == "cut \ufffd"
    assert h.failed_checks == ["1", '{"a":"\ufffd"}', "null"]
    for text in (h.reason, h.context, *h.failed_checks):
        text.encode("utf-8")
    assert parse_handoff('{"needed": false, "failed_checks": "one"}').failed_checks == ["one"]
