from __future__ import annotations

import json

import pytest

from app.engine.ingest import ingest_path
from app.output.handoff import HandoffError, parse_handoff, read_handoff
from app.output.markers import MarkerSet
from app.output.route import from_fallback
from tests.helpers import fixture_stream


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


# -- the Go original's shape -----------------------------------------------------------------------

GO_HANDOFF = {
    "schema_version": 1,
    "recommended_tier": 2,
    "reason": "nginx returns 502",
    "context": "upstream app-1 refuses connections",
    "services_affected": ["nginx", "app-1"],
    "check_results": [
        {"name": "nginx_http", "status": "fail", "detail": "502 on /"},
        {"name": "app1_port", "status": "FAILED", "output": "connection refused"},
        {"name": "disk_root", "status": "ok", "output": "41% used"},
        {"check": "tls_expiry", "result": "warn", "message": "expires in 9 days"},
        {"service": "dns", "status": "timeout"},
        {"name": "cron", "status": "flaky"},
    ],
    "investigation_notes": "kept in handoff_raw only",
}


def test_go_shape_is_accepted_and_mapped():
    h = parse_handoff(json.dumps(GO_HANDOFF))
    assert (h.shape, h.needed, h.recommended_tier, h.schema_version) == ("go", True, 2, "1")
    assert (h.reason, h.context) == ("nginx returns 502", "upstream app-1 refuses connections")
    assert h.services == ["nginx", "app-1"]
    assert h.checks == [("nginx_http", "down", "502 on /"), ("app1_port", "down", "connection refused"),
                        ("disk_root", "healthy", "41% used"), ("tls_expiry", "degraded", "expires in 9 days"),
                        ("dns", "unreachable", None), ("cron", "flaky", None)]  # an unknown status: as written
    assert h.failed_checks == ["nginx_http", "app1_port", "tls_expiry", "dns", "cron"]  # all but the healthy one
    assert h.problems == []
    assert "investigation_notes" in h.raw


def test_go_shape_routes_to_the_same_escalation_as_tierops_own():
    routed = from_fallback(MarkerSet(), parse_handoff(json.dumps(GO_HANDOFF)))
    assert routed.source == "handoff"
    assert routed.escalation == {
        "needed": True, "reason": "nginx returns 502",
        "context": "upstream app-1 refuses connections\nRecommended tier: 2\nServices affected: nginx, app-1",
        "failed_checks": ["nginx_http", "app1_port", "tls_expiry", "dns", "cron"]}
    assert routed.checks[0] == ("nginx_http", "down", "502 on /") and len(routed.checks) == 6
    # TierOps' own shape: the same escalation keys, no checks
    own = from_fallback(MarkerSet(), parse_handoff('{"needed": true, "reason": "r", "context": "c", '
                                                   '"failed_checks": ["a"]}'))
    assert own.escalation == {"needed": True, "reason": "r", "context": "c", "failed_checks": ["a"]}
    assert own.checks == []


@pytest.mark.parametrize("tier,needed,parsed", [
    (2, True, 2), ("3", True, 3), ("tier 2", True, 2), ("Tier2", True, 2), (2.0, True, 2),
    (None, False, None), (0, False, 0),
])
def test_go_recommended_tier_decides_escalation(tier, needed, parsed):
    h = parse_handoff(json.dumps({"schema_version": 1, "recommended_tier": tier, "reason": "r"}))
    assert (h.needed, h.recommended_tier) == (needed, parsed)


def test_an_explicit_needed_wins_over_the_recommended_tier():
    h = parse_handoff('{"needed": false, "recommended_tier": 3}')
    assert (h.needed, h.recommended_tier, h.shape) == (False, 3, "go")
    h = parse_handoff('{"escalate": true, "recommended_tier": "soon"}')  # a bad tier is a problem, not fatal
    assert h.needed is True and h.recommended_tier is None
    assert h.problems == ["handoff.json: recommended_tier 'soon' is not a tier number"]


@pytest.mark.parametrize("raw", [
    '{"schema_version": 1, "reason": "no tier, no needed"}',
    '{"schema_version": 1, "recommended_tier": "soon"}',
    '{"recommended_tier": true}',
    '{"recommended_tier": -1}',
    '{"recommended_tier": [2]}',
])
def test_go_shape_without_a_usable_decision_is_a_problem(raw):
    with pytest.raises(HandoffError, match=r"no boolean 'needed' .* nor a usable 'recommended_tier'"):
        parse_handoff(raw)


def test_go_check_results_as_an_object_and_unusable_items():
    h = parse_handoff(json.dumps({"recommended_tier": 2, "check_results": {
        "nginx": "ok", "db": {"status": "error", "detail": "refused"}}}))
    assert h.checks == [("nginx", "healthy", None), ("db", "down", "refused")]
    assert h.failed_checks == ["db"]
    h = parse_handoff(json.dumps({"recommended_tier": 2, "failed_checks": ["db"],
                                  "check_results": ["db down", {"name": "db", "status": "down"}, {"name": "x"}]}))
    assert h.checks == [("db", "down", None)] and h.failed_checks == ["db"]  # not listed twice
    assert h.problems == ["handoff.json: check_results[0] ignored: not an object",
                          "handoff.json: check_results[2] ignored: it needs a name and a status"]
    h = parse_handoff('{"recommended_tier": 2, "check_results": "all fine", "services_affected": "nginx"}')
    assert h.checks == [] and h.services == ["nginx"]
    assert h.problems == ["handoff.json: check_results ignored: neither a list nor an object"]


def test_read_handoff_uses_a_partly_readable_go_file_and_names_what_it_left_out(tmp_path):
    (tmp_path / "handoff.json").write_text(json.dumps({"recommended_tier": 2, "check_results": [1]}))
    handoff, problem = read_handoff("handoff.json", str(tmp_path))
    assert handoff is not None and handoff.needed is True
    assert problem == f"{tmp_path / 'handoff.json'}: check_results[0] ignored: not an object"


async def test_a_go_handoff_next_to_a_real_text_only_session_escalates(tmp_path, db, validator, settings):
    """The real d_text_only capture (no structured output) run in a folder holding a Go handoff.json."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "handoff.json").write_text(json.dumps(GO_HANDOFF))
    lines = [json.loads(raw) for raw in fixture_stream("d_text_only").read_text().splitlines()]
    for line in lines:
        if line.get("type") == "system" and line.get("subtype") == "init":
            line["cwd"] = str(cwd)
    stream = tmp_path / "stream.jsonl"
    stream.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report, _ = await ingest_path(db, stream, validator, settings)
    assert (report["source"], report["degraded"]) == ("handoff", True)
    assert report["escalation"]["needed"] is True
    assert report["escalation"]["reason"] == "nginx returns 502"
    assert "Recommended tier: 2" in report["escalation"]["context"]
    assert report["escalation"]["failed_checks"] == ["nginx_http", "app1_port", "tls_expiry", "dns", "cron"]
    assert [(c["name"], c["status"]) for c in report["services_checked"]][:3] == [
        ("nginx_http", "down"), ("app1_port", "down"), ("disk_root", "healthy")]
