"""``app/output/route.py``: what a session's findings become, from structured output or the fallback."""

from __future__ import annotations

import pytest

from app.output.contract import AgentResponse
from app.output.handoff import Handoff, parse_handoff
from app.output.markers import MarkerSet, parse_markers
from app.output.route import (
    STOPPED_ESCALATION_NOTE,
    Routed,
    for_interrupted,
    from_fallback,
    from_output,
    from_structured,
    proposed_actions,
    split_memory_key,
)


@pytest.mark.parametrize(("key", "expected"), [
    ("postgres:disk", ("postgres", "disk")),
    (" postgres : disk ", ("postgres", "disk")),
    ("api.payments-v2:latency", ("api.payments-v2", "latency")),
    ("a:b:c", ("a", "b:c")),
    ("runbook", (None, "runbook")),
    ("  runbook  ", (None, "runbook")),
    ("web-1.disk", (None, "web-1.disk")),
    (":disk", (None, ":disk")),
    ("postgres:", (None, "postgres:")),
    (" : ", (None, ":")),
])
def test_split_memory_key(key, expected):
    assert split_memory_key(key) == expected


def test_from_structured_maps_every_finding():
    resp = AgentResponse.model_validate({
        "summary": "db slow",
        "events": [{"level": "critical", "service": "postgres", "message": "p99 4s"},
                   {"level": "info", "service": "", "message": "empty service"},
                   {"level": "warning", "message": "no service"}],
        "memories": [{"key": "postgres:disk", "value": "grows 2%/day"}, {"key": "runbook", "value": "db first"}],
        "escalation": {"needed": True, "reason": "db slow", "context": "p99", "failed_checks": ["pg_latency"]},
        "services_checked": [{"name": "postgres", "status": "degraded", "detail": "p99 4s"},
                             {"name": "nginx", "status": "healthy"}],
    })
    routed = from_structured(resp)
    assert routed == Routed(
        source="structured_output",
        summary="db slow",
        events=[("critical", None, "postgres", "p99 4s"), ("info", None, None, "empty service"),
                ("warning", None, None, "no service")],
        memories=[("postgres", "disk", "grows 2%/day"), (None, "runbook", "db first")],
        checks=[("postgres", "degraded", "p99 4s"), ("nginx", "healthy", None)],
        cooldowns=[],
        escalation={"needed": True, "reason": "db slow", "context": "p99", "failed_checks": ["pg_latency"]},
        event_cites=[[], [], []], check_cites=[[], []],  # aligned with the findings: none cites
    )


def test_citations_are_routed_aligned_with_their_findings():
    cite = {"quote": "lag 45 s", "tool_use_id": "toolu_1"}
    doc = {"summary": "s", "events": [{"level": "info", "message": "a"},
                                      {"level": "critical", "message": "b", "evidence": [cite]}],
           "escalation": {"needed": True, "evidence": [{"quote": "lag"}]},
           "services_checked": [{"name": "pg", "status": "down", "evidence": [cite, {"quote": "x"}]}],
           "actions": [{"kind": "restart", "result": "done", "evidence": [{"quote": "systemctl restart pg"}]}]}
    for routed in (from_structured(AgentResponse.model_validate(doc)), from_output(doc)[0]):
        assert routed.event_cites == [[], [cite]]
        assert routed.check_cites == [[cite, {"quote": "x", "tool_use_id": None}]]
        assert routed.action_cites == [[{"quote": "systemctl restart pg", "tool_use_id": None}]]
        assert routed.escalation_cites == [{"quote": "lag", "tool_use_id": None}]
        assert routed.verdicts is None  # the engine checks them
    # The loose path (another schema): an item with a malformed citation is not routed, the others are.
    loose = dict(doc, events=[{"level": "info", "message": "a", "evidence": [{"quote": ""}]},
                              {"level": "warning", "message": "c", "evidence": [cite]}], extra=1)
    loose["services_checked"] = "not a list"
    routed, notes = from_output(loose)
    assert routed.events == [("warning", None, None, "c")] and routed.event_cites == [[cite]]
    assert any(n.startswith("events[0] not routed") for n in notes)
    # A stopped session's escalation is not routed, nor its citations.
    stopped, _ = for_interrupted(from_output(doc)[0])
    assert stopped.escalation is None and stopped.escalation_cites == []


def test_from_structured_minimal_response_still_decides_escalation():
    resp = AgentResponse.model_validate({"summary": "ok", "events": [], "escalation": {"needed": False},
                                         "services_checked": []})
    routed = from_structured(resp)
    assert routed.escalation == {"needed": False, "reason": None, "context": None, "failed_checks": []}
    assert (routed.events, routed.memories, routed.checks, routed.cooldowns) == ([], [], [], [])


MARKED = """Checked things.
[EVENT:critical:postgres] replication lag 40s
[EVENT:urgent] odd level kept as written, stored as info
[MEMORY:disk:postgres] grows 2%/day
[COOLDOWN:restart:nginx] success — came back
"""


def test_from_fallback_markers_win_the_source_and_handoff_gives_the_escalation():
    handoff = parse_handoff('{"escalate": true, "reason": "lag", "failed_checks": "replication"}')
    routed = from_fallback(parse_markers(MARKED), handoff)
    assert routed.source == "markers"
    assert routed.summary is None
    assert routed.events == [("critical", None, "postgres", "replication lag 40s"),
                             ("info", "urgent", None, "odd level kept as written, stored as info")]
    assert routed.memories == [("postgres", "disk", "grows 2%/day")]
    assert routed.cooldowns == [("restart", "nginx", "success", "came back")]
    assert routed.checks == []
    assert routed.escalation == {"needed": True, "reason": "lag", "context": None, "failed_checks": ["replication"]}


def test_from_fallback_markers_alone_have_no_escalation_decision():
    routed = from_fallback(parse_markers(MARKED), None)
    assert routed.source == "markers"
    assert routed.escalation is None


def test_from_fallback_handoff_without_markers():
    routed = from_fallback(MarkerSet(), Handoff(needed=False, reason="fine"))
    assert routed.source == "handoff"
    assert (routed.events, routed.memories, routed.cooldowns) == ([], [], [])
    assert routed.escalation == {"needed": False, "reason": "fine", "context": None, "failed_checks": []}


def test_from_fallback_nothing_is_source_none():
    routed = from_fallback(parse_markers("no markers here, `[EVENT:info] in code` neither"), None)
    assert routed == Routed(source="none")


# -- actions ----------------------------------------------------------------------------------------

ACTIONS = [
    {"kind": "Restart", "service": " api  v2 ", "result": "done", "detail": "systemctl restart api"},
    {"kind": "cleanup", "service": None, "result": "dry-run", "detail": None},
    {"kind": "redeploy", "service": "web", "result": "proposed", "detail": "cooldown: 1 of 1 in 24h used"},
    {"kind": "config-change", "result": "failed"},
]


def test_from_structured_routes_every_action_normalised():
    resp = AgentResponse.model_validate({"summary": "s", "events": [], "escalation": {"needed": False},
                                         "services_checked": [], "actions": ACTIONS})
    assert from_structured(resp).actions == [
        ("restart", "api v2", "done", "systemctl restart api"),
        ("cleanup", None, "dry-run", None),
        ("redeploy", "web", "proposed", "cooldown: 1 of 1 in 24h used"),
        ("config-change", None, "failed", None),
    ]
    assert from_structured(AgentResponse.model_validate(
        {"summary": "s", "events": [], "escalation": {"needed": False}, "services_checked": []})).actions == []


def test_from_output_takes_the_actions_that_fit_and_names_the_others():
    output = {"summary": "s", "events": [], "services_checked": [], "escalation": {"needed": True},
              "actions": [*ACTIONS[:2], {"kind": "", "result": "done"}, {"kind": "restart", "result": "skipped"}],
              "extra": 1, "memories": "not a list"}  # invalid as a whole: each part is taken on its own
    routed, notes = from_output(output)
    assert routed.actions == [("restart", "api v2", "done", "systemctl restart api"), ("cleanup", None, "dry-run", None)]
    assert [n.split(":")[0] for n in notes] == ["memories not routed", "actions[2] not routed", "actions[3] not routed"]


def test_proposed_actions_reads_a_stored_output():
    output = {"actions": [*ACTIONS, {"kind": "restart", "result": "proposed", "service": "db"}, "junk",
                          {"kind": "restart", "result": "proposed", "service": 5}]}
    assert proposed_actions(output) == [("redeploy", "web", "proposed", "cooldown: 1 of 1 in 24h used"),
                                        ("restart", "db", "proposed", None)]
    for nothing in (None, "text", [], {}, {"actions": "restart api"}, {"actions": None}):
        assert proposed_actions(nothing) == []


def test_an_interrupted_session_keeps_its_findings_but_never_its_escalation():
    """A handoff.json written before the stop, and the markers printed: the events, memories,
    cooldowns and checks stay; the escalation goes, with the note saying why."""
    markers = parse_markers("[EVENT:critical:web-1] disk 99%\n[MEMORY:web-1:disk] fills on Mondays\n"
                            "[COOLDOWN:restart:nginx] success")
    handoff = parse_handoff('{"escalate": true, "reason": "disk", "failed_checks": ["disk"], '
                            '"check_results": [{"name": "disk", "status": "down"}]}')
    routed = from_fallback(markers, handoff)
    assert routed.escalation is not None and routed.escalation["needed"] is True
    assert routed.events and routed.memories and routed.cooldowns and routed.checks
    kept, notes = for_interrupted(routed)
    assert kept.escalation is None and notes == [STOPPED_ESCALATION_NOTE]
    assert (kept.source, kept.events, kept.memories, kept.cooldowns, kept.checks) == (
        routed.source, routed.events, routed.memories, routed.cooldowns, routed.checks)
    assert routed.escalation is not None  # the original is left as it was
    assert for_interrupted(Routed(source="markers")) == (Routed(source="markers"), [])
