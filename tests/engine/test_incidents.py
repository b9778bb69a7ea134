"""``app/engine/incidents.py``: reading a session for incidents, and the escalation
decision — when an incident opens, worsens or recurs past TIEROPS_ESCALATE_AFTER; never while
acknowledged or silenced; once for flapping — and the session's proposed actions linked to the
incident they would fix."""

from __future__ import annotations

from typing import Any

from app.config import Settings
from app.engine import incidents as engine
from app.output.contract import AgentResponse
from app.output.route import from_structured
from app.store import cooldowns, findings, incidents, sessions
from app.store.incidents import Change

NOW = "2026-11-23T09:00:00.000Z"


def probe_row(output: dict[str, Any], tier: int = 0) -> dict[str, Any]:
    return {"id": 1, "tier": tier, "source": "structured_output", "structured_output": output}


PROBE_OUTPUT = {
    "summary": "3 checks: 1 failing",
    "events": [{"level": "critical", "service": "api", "message": "api-health failing: HTTP 500",
                "key": "check:api-health"},
               {"level": "info", "service": "dns", "message": "resolver failing: NXDOMAIN", "key": "check:resolver"}],
    "escalation": {"needed": True, "failed_checks": ["api-health"]},
    "services_checked": [
        {"name": "api-health", "check": "api-health", "service": "api", "status": "down", "detail": "HTTP 500",
         "latency_ms": 12},
        {"name": "db-port", "check": "db-port", "service": "db", "status": "healthy", "detail": "open",
         "latency_ms": 0.4},
        {"name": "resolver", "check": "resolver", "service": "dns", "status": "unreachable", "latency_ms": None},
    ],
}


def test_a_probe_report_gives_findings_probe_results_and_passing_checks():
    obs = engine.observation(probe_row(PROBE_OUTPUT))
    assert [(f.key, f.severity, f.service, f.check_name, f.origin) for f in obs.findings] == [
        ("check:api-health", "critical", "api", "api-health", "probe")]  # info never opens an incident
    assert [(p.check_name, p.status, p.latency_ms) for p in obs.probe_results] == [
        ("api-health", "down", 12.0), ("db-port", "healthy", 0.4), ("resolver", "unreachable", None)]
    assert obs.passing_checks == ["db-port"] and obs.healthy_services == []


def test_a_model_report_uses_its_keys_or_derives_stable_ones_and_names_healthy_services():
    output = {"summary": "", "escalation": {"needed": False},
              "events": [{"level": "warning", "service": "web-1", "message": "/var 91% used on sda1"},
                         {"level": "critical", "service": "api", "message": "still 500", "key": "check:api-health"}],
              "services_checked": [{"name": "nginx", "status": "healthy"},
                                   {"name": "api-health", "check": "api-health", "status": "healthy"},
                                   {"name": "pg", "service": "postgres", "status": "healthy"}]}
    obs = engine.observation(probe_row(output, tier=1))
    keys = [(f.key, f.check_name, f.origin) for f in obs.findings]
    assert keys[1] == ("check:api-health", "api-health", "agent")
    assert keys[0][0] == engine.derived_key("web-1", "/var 92% used on sda1")  # the number does not matter
    assert obs.probe_results == []  # only tier 0's results are probe results
    assert obs.passing_checks == ["api-health"] and obs.healthy_services == ["nginx", "pg", "postgres"]


def test_derived_keys_fold_numbers_ids_and_spacing_but_keep_the_words():
    assert engine.derived_key("api", "Latency 4.2 s  (p99)") == engine.derived_key("api", "latency 9 s (p99)")
    assert engine.derived_key(None, "disk full") == "host:disk full"
    assert engine.derived_key("api", "down") != engine.derived_key("db", "down")
    assert len(engine.derived_key("x", "y" * 1000)) == engine.KEY_MAX


def test_a_session_without_structured_output_is_read_from_its_routed_rows():
    row = {"id": 1, "tier": 1, "source": "markers", "structured_output": None}
    obs = engine.observation(row, events=[{"level": "critical", "service": "nginx", "message": "down"}],
                             checks=[{"name": "nginx", "status": "down"}, {"name": "db", "status": "healthy"}])
    assert [f.key for f in obs.findings] == ["nginx:down"] and obs.healthy_services == ["db"]


def inc(**over: Any) -> dict[str, Any]:
    row = {"id": 1, "key": "check:api", "service": "api", "status": "open", "severity": "critical",
           "occurrences": 1, "escalations": 0, "escalated_at": None, "escalated_occurrences": None,
           "flapping": False, "acknowledged_by": None, "silenced_until": None, "silenced_by": None}
    return {**row, **over}


def verdict(kind: str, counted: bool = True, flap_escalated: bool = False, escalate_after: int = 12, **over: Any):
    return engine.decide([Change(inc(**over), kind, counted, flap_escalated)], escalate_after, NOW)  # type: ignore[arg-type]


def test_decide_escalates_when_an_incident_opens_worsens_or_recurs_past_the_threshold():
    assert verdict("opened").escalate[0][1] == "opened"
    assert "worsened" in verdict("worsened", escalations=1, escalated_occurrences=1).escalate[0][1]
    held = verdict("seen", occurrences=12, escalations=1, escalated_occurrences=1)
    assert not held.escalate and "again after 1 more cycle" in held.held[0][1]
    again = verdict("seen", occurrences=13, escalations=1, escalated_occurrences=1)
    assert "12 more cycles" in again.escalate[0][1]
    assert not verdict("seen", counted=False, occurrences=13, escalations=1, escalated_occurrences=1).escalate
    assert not verdict("seen", escalate_after=0, occurrences=500, escalations=1, escalated_occurrences=1).escalate
    # failing but never escalated (it opened while silenced, or from a model tier): escalate now
    assert "never escalated" in verdict("seen", occurrences=4).escalate[0][1]


def test_decide_holds_acknowledged_silenced_info_and_already_escalated_flapping():
    ack = verdict("worsened", status="acknowledged", acknowledged_by="alice via CLI", escalations=1)
    assert not ack.escalate and "acknowledged by alice" in ack.held[0][1]
    silenced = verdict("opened", silenced_until="2026-11-23T10:00:00.000Z", silenced_by="bob")
    assert not silenced.escalate and "silenced until" in silenced.held[0][1]
    expired = verdict("opened", silenced_until="2026-11-23T08:00:00.000Z")
    assert expired.escalate
    assert not verdict("opened", severity="info").escalate
    assert "flapping" in verdict("opened", flapping=True).escalate[0][1]
    flap_again = verdict("opened", flapping=True, flap_escalated=True)
    assert not flap_again.escalate and "already escalated once" in flap_again.held[0][1]
    text = flap_again.gate_text()
    assert text.startswith("not escalated: incident #1 (check:api)")


async def test_track_applies_a_session_and_decides(db, tmp_path):
    settings = Settings(home=tmp_path, escalate_after=2)
    pk = await sessions.create_session(db, tier=0, model="tierops-probe", trigger="schedule")
    row: Any = {**probe_row(PROBE_OUTPUT), "id": pk}
    first = await engine.track(db, settings, row, chain_id=pk)
    assert [r["key"] for r, _ in first.escalate] == ["check:api-health"]
    await incidents.mark_escalated(db, [first.escalate[0][0]["id"]], pk, "to tier 1")
    seconds = [await engine.track(db, settings, row, chain_id=pk + n) for n in (1, 2)]
    assert [bool(v.escalate) for v in seconds] == [False, True]  # recurs 2 cycles after its escalation
    assert (await engine.track(db, settings, {"id": pk, "tier": 0, "source": "none"}, chain_id=9)) == engine.Verdict()


MODEL_OUTPUT = {
    "summary": "api down, web slow", "escalation": {"needed": False},
    "events": [{"level": "critical", "service": "api", "message": "api answers 500", "key": "api:500"},
               {"level": "warning", "service": "web", "message": "web slow", "key": "web:slow"}],
    "services_checked": [],
    "actions": [{"kind": "restart", "service": "api", "result": "proposed", "detail": "after the deploy"},
                {"kind": "cleanup", "result": "proposed"},
                {"kind": "restart", "service": "web", "result": "done"}],
}


async def finished(db, output: dict[str, Any], tier: int = 2) -> Any:
    """A session whose structured output was routed, as the recorder finishes one."""
    pk = await sessions.create_session(db, tier=tier, trigger="manual")
    async with db.write() as conn:
        await findings.write_routed(conn, pk, from_structured(AgentResponse.model_validate(output)), NOW, 0.7, 0.3)
    return {"id": pk, "tier": tier, "source": "structured_output", "structured_output": output}


async def test_track_links_each_proposal_to_the_incident_of_its_service(db, tmp_path):
    row = await finished(db, MODEL_OUTPUT)
    verdict = await engine.track(db, Settings(home=tmp_path), row, chain_id=row["id"])
    by_key = {ch.incident["key"]: ch.incident["id"] for ch in verdict.changes}
    got = [(p["kind"], p["service"], p["incident_id"]) for p in await cooldowns.proposals(db, session_pk=row["id"])]
    assert got == [("restart", "api", by_key["api:500"]), ("cleanup", None, None)]  # two incidents: no guess
    [proposal] = await cooldowns.proposals(db, incident_id=by_key["api:500"])
    assert proposal["detail"] == "after the deploy" and proposal["tier"] == 2


async def test_track_links_a_proposal_to_the_only_incident_its_session_touched(db, tmp_path):
    output = {**MODEL_OUTPUT, "events": MODEL_OUTPUT["events"][:1]}
    row = await finished(db, output)
    verdict = await engine.track(db, Settings(home=tmp_path), row, chain_id=row["id"])
    [change] = verdict.changes
    assert [p["incident_id"] for p in await cooldowns.proposals(db, session_pk=row["id"])] == [
        change.incident["id"]] * 2


async def test_a_session_touching_no_incident_leaves_its_proposals_unlinked(db, tmp_path):
    row = await finished(db, {**MODEL_OUTPUT, "events": []})
    assert await engine.track(db, Settings(home=tmp_path), row, chain_id=row["id"]) == engine.Verdict()
    assert [p["incident_id"] for p in await cooldowns.proposals(db, session_pk=row["id"])] == [None, None]
