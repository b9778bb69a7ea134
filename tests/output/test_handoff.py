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
