"""``app/store/incidents.py`` against a real SQLite file: one incident per episode,
occurrences per cycle, auto-resolution, flapping, silence carried across reopenings, operator
actions with who and when, and the read functions the API, pages and /metrics use."""

from __future__ import annotations

import pytest

from app.clock import shift
from app.store import incidents, sessions
from app.store.incidents import Finding, IncidentStateError, Observation, ProbeResult

T0 = "2026-11-23T09:00:00.000Z"


def at(minutes: float) -> str:
    return shift(T0, minutes * 60)


def failing(name: str = "api", severity: str = "critical", message: str = "HTTP 500") -> Observation:
    return Observation(findings=[Finding(key=f"check:{name}", severity=severity, message=message, service="svc",
                                         check_name=name, origin="probe")],
                       probe_results=[ProbeResult(name, "down", "svc", 12.0, message)])


def passing(name: str = "api") -> Observation:
    return Observation(probe_results=[ProbeResult(name, "healthy", "svc", 3.0, "HTTP 200")], passing_checks=[name])


async def observe(db, obs: Observation, chain: int, minutes: float, *, flap_count: int = 3, window: float = 3600):
    pk = await sessions.create_session(db, tier=0, model="tierops-probe", trigger="schedule")
    return pk, await incidents.observe(db, pk, chain, obs, flap_count=flap_count, flap_window_s=window,
                                       now=at(minutes))


async def test_a_failure_seen_every_cycle_is_one_incident_counting_occurrences(db):
    _, first = await observe(db, failing(), chain=1, minutes=0)
    assert [c.kind for c in first] == ["opened"]
    inc = first[0].incident
    assert (inc["status"], inc["severity"], inc["occurrences"], inc["origin"], inc["check_name"]) == (
        "open", "critical", 1, "probe", "api")
    for cycle in range(2, 6):
        _, changes = await observe(db, failing(message=f"HTTP 50{cycle}"), chain=cycle, minutes=cycle * 5)
        assert [c.kind for c in changes] == ["seen"] and changes[0].counted
    rows = await incidents.list_incidents(db)
    assert len(rows) == 1
    assert rows[0]["occurrences"] == 5 and rows[0]["evidence"] == "HTTP 505" and rows[0]["title"] == "HTTP 500"
    assert rows[0]["last_seen_at"] == at(25) and rows[0]["opened_at"] == at(0)


async def test_a_second_session_of_the_same_cycle_is_not_another_occurrence(db):
    await observe(db, failing(), chain=7, minutes=0)
    _, changes = await observe(db, failing(message="tier 1 confirms"), chain=7, minutes=1)
    assert changes[0].kind == "seen" and not changes[0].counted
    assert changes[0].incident["occurrences"] == 1 and changes[0].incident["evidence"] == "tier 1 confirms"


async def test_recovery_resolves_with_its_duration_and_a_new_failure_opens_a_new_incident(db):
    _, opened = await observe(db, failing(), chain=1, minutes=0)
    pk, resolved = await observe(db, passing(), chain=2, minutes=14)
    assert [c.kind for c in resolved] == ["resolved"]
    row = resolved[0].incident
    assert row["status"] == "resolved" and row["resolved_by"] == "auto" and row["duration_s"] == 14 * 60
    assert row["last_session_pk"] == pk
    _, again = await observe(db, failing(), chain=3, minutes=20)
    assert again[0].kind == "opened" and again[0].incident["id"] != opened[0].incident["id"]
    assert [r["status"] for r in await incidents.list_incidents(db, status="resolved")] == ["resolved"]
    assert len(await incidents.list_incidents(db, status="unresolved")) == 1


async def test_a_passing_check_without_an_incident_changes_nothing(db):
    _, changes = await observe(db, passing(), chain=1, minutes=0)
    assert changes == []
    assert await incidents.list_incidents(db) == []


async def test_severity_rising_is_worsened(db):
    await observe(db, failing(severity="warning"), chain=1, minutes=0)
    _, changes = await observe(db, failing(severity="critical"), chain=2, minutes=5)
    assert changes[0].kind == "worsened" and changes[0].incident["severity"] == "critical"
    _, later = await observe(db, failing(severity="warning"), chain=3, minutes=10)
    assert later[0].kind == "seen" and later[0].incident["severity"] == "critical"  # the highest is kept


async def test_flapping_is_marked_once_the_key_opened_more_than_flap_count_times(db):
    kinds = []
    for i in range(4):
        _, opened = await observe(db, failing(), chain=2 * i, minutes=i * 10, flap_count=3)
        await observe(db, passing(), chain=2 * i + 1, minutes=i * 10 + 5, flap_count=3)
        kinds.append((opened[0].incident["flapping"], opened[0].flap_escalated))
    assert kinds == [(False, False), (False, False), (False, False), (True, False)]
    flapping_id = (await incidents.list_incidents(db, status="resolved"))[0]["id"]
    await incidents.mark_escalated(db, [flapping_id], 1, "flapping", now=at(36))
    _, fifth = await observe(db, failing(), chain=99, minutes=40, flap_count=3)
    assert fifth[0].incident["flapping"] and fifth[0].flap_escalated  # escalated once for it already
    # outside the window, the count starts again
    _, much_later = await observe(db, failing(name="other"), chain=100, minutes=200, flap_count=3)
    assert not much_later[0].incident["flapping"]


async def test_operator_actions_record_who_when_and_refuse_what_does_not_apply(db):
    _, opened = await observe(db, failing(), chain=1, minutes=0)
    pk = opened[0].incident["id"]
    acked = await incidents.acknowledge(db, pk, "alice via CLI", "looking", now=at(1))
    assert (acked["status"], acked["acknowledged_by"], acked["acknowledged_at"], acked["note"]) == (
        "acknowledged", "alice via CLI", at(1), "looking")
    with pytest.raises(IncidentStateError, match="only an open incident"):
        await incidents.acknowledge(db, pk, "bob", now=at(2))
    # still failing: the acknowledged incident is updated, not duplicated
    _, seen = await observe(db, failing(), chain=2, minutes=5)
    assert seen[0].incident["id"] == pk and seen[0].incident["status"] == "acknowledged"
    done = await incidents.resolve(db, pk, "alice via CLI", "fixed the config", now=at(6))
    assert (done["status"], done["resolved_by"], done["duration_s"]) == ("resolved", "alice via CLI", 360.0)
    with pytest.raises(IncidentStateError, match="already resolved"):
        await incidents.resolve(db, pk, "bob", now=at(7))
    with pytest.raises(LookupError):
        await incidents.acknowledge(db, 999, "bob")
    kinds = [t["kind"] for t in await incidents.timeline(db, pk)]
    assert kinds == ["opened", "acknowledged", "seen", "resolved"]
    actors = [t["actor"] for t in await incidents.timeline(db, pk) if t["actor"]]
    assert actors == ["alice via CLI", "alice via CLI"]


async def test_a_silence_outlives_its_incident_until_it_ends(db):
    _, opened = await observe(db, failing(), chain=1, minutes=0)
    pk = opened[0].incident["id"]
    with pytest.raises(IncidentStateError, match="not in the future"):
        await incidents.silence(db, pk, at(0), "carol", now=at(1))
    row = await incidents.silence(db, pk, at(120), "carol via API token", "maintenance", now=at(1))
    assert row["silenced_until"] == at(120) and row["silenced_by"] == "carol via API token"
    await observe(db, passing(), chain=2, minutes=5)
    _, reopened = await observe(db, failing(), chain=3, minutes=10)
    assert reopened[0].incident["silenced_until"] == at(120)  # carried to the new episode
    await observe(db, passing(), chain=4, minutes=15)
    _, after = await observe(db, failing(), chain=5, minutes=130)
    assert after[0].incident["silenced_until"] is None


async def test_agent_incidents_resolve_when_a_model_reports_the_service_healthy(db):
    agent = Observation(findings=[Finding(key="nginx:cert", severity="warning", message="cert in 5 days",
                                          service="nginx")])
    _, opened = await observe(db, agent, chain=1, minutes=0)
    assert opened[0].incident["origin"] == "agent"
    # the same service healthy but the same key reported again: stays open
    both = Observation(findings=agent.findings, healthy_services=["nginx"])
    _, again = await observe(db, both, chain=2, minutes=5)
    assert [c.kind for c in again] == ["seen"]
    _, healthy = await observe(db, Observation(healthy_services=["nginx"]), chain=3, minutes=10)
    assert [c.kind for c in healthy] == ["resolved"]
    assert "reported healthy" in (await incidents.timeline(db, opened[0].incident["id"]))[-1]["detail"]


async def test_reads_for_metrics_the_overview_and_the_session_page(db):
    pk, _ = await observe(db, failing(), chain=1, minutes=0)
    await observe(db, failing(name="db", severity="warning"), chain=1, minutes=0)
    await observe(db, passing(name="dns"), chain=1, minutes=0)
    counts = {(c["service"], c["severity"], c["status"]): c["count"] for c in await incidents.counts(db)}
    assert counts == {("svc", "critical", "open"): 1, ("svc", "warning", "open"): 1}
    latest = {r["check_name"]: (r["status"], r["latency_ms"]) for r in await incidents.latest_probe_results(db)}
    assert latest == {"api": ("down", 12.0), "db": ("down", 12.0), "dns": ("healthy", 3.0)}
    assert [r["key"] for r in await incidents.session_incidents(db, pk)] == ["check:api"]
    assert [r["key"] for r in await incidents.list_incidents(db, service="svc", status="open")] == ["check:db",
                                                                                                      "check:api"]


async def test_pruning_a_session_keeps_its_incidents(db):
    pk, opened = await observe(db, failing(), chain=1, minutes=0)
    await sessions.delete_session(db, pk)
    row = await incidents.get_incident(db, opened[0].incident["id"])
    assert row is not None and row["first_session_pk"] is None
    assert (await incidents.timeline(db, row["id"]))[0]["session_pk"] is None


async def test_a_probe_incident_is_named_by_its_check_and_a_model_finding_by_nothing(db):
    _, [probe] = await observe(db, failing("api-health"), chain=1, minutes=0)
    assert probe.incident["name"] == "api-health" and probe.incident["alert_source"] is None
    model = Observation(findings=[Finding(key="svc:disk full", severity="warning", message="disk full", service="db")])
    _, [found] = await observe(db, model, chain=2, minutes=1)
    assert found.incident["name"] is None and found.incident["links"] is None


async def _attention_for(db, *incident_ids: int) -> int:
    pk = await sessions.create_session(db, tier=0, model="tierops-probe", trigger="schedule")
    await sessions.set_attention(db, pk, "checks failing; not escalated to tier 1: claude CLI not found", incident_ids)
    return pk


async def _ack_of(db, pk: int) -> tuple[str | None, str | None]:
    row = await sessions.get_session(db, pk, fresh=True)
    assert row is not None
    return row["attention_acked_at"], row["attention_acked_by"]


async def test_a_flag_raised_for_an_incident_is_acknowledged_with_it(db):
    _, [opened] = await observe(db, failing(), chain=1, minutes=0)
    pk = await _attention_for(db, opened.incident["id"])
    assert await _ack_of(db, pk) == (None, None)
    await incidents.acknowledge(db, opened.incident["id"], "alice", now=at(5))
    acked_at, by = await _ack_of(db, pk)
    assert acked_at == at(5) and by == f"incident #{opened.incident['id']} acknowledged by alice"


async def test_a_flag_follows_every_incident_it_was_raised_for_until_none_is_open(db):
    _, [api] = await observe(db, failing("api"), chain=1, minutes=0)
    _, [db_inc] = await observe(db, failing("db"), chain=1, minutes=0)
    pk = await _attention_for(db, api.incident["id"], db_inc.incident["id"])
    await observe(db, passing("api"), chain=2, minutes=10)  # one recovers: the other still needs a human
    assert await _ack_of(db, pk) == (None, None)
    await incidents.resolve(db, db_inc.incident["id"], "bob", now=at(12))
    acked_at, by = await _ack_of(db, pk)
    assert acked_at == at(12) and by.startswith(f"incident #{db_inc.incident['id']} resolved by bob")
    # a flag raised for no incident is left to people
    lone = await sessions.create_session(db, tier=1, model="haiku", trigger="schedule")
    await sessions.set_attention(db, lone, "tier 1 failed: timed out")
    _, [again] = await observe(db, failing("api"), chain=3, minutes=20)
    await incidents.resolve(db, again.incident["id"], "bob", now=at(21))
    assert await _ack_of(db, lone) == (None, None)


async def test_a_key_failing_again_soon_after_it_resolved_reopens_it(db):
    _, [first] = await observe(db, failing(), chain=1, minutes=0)
    await observe(db, passing(), chain=2, minutes=5)
    _, [again] = await observe(db, failing(), chain=3, minutes=10, window=3600)
    assert again.incident["reopened_from"] == first.incident["id"]
    await observe(db, passing(), chain=4, minutes=15)
    _, [later] = await observe(db, failing(), chain=5, minutes=200, window=3600)  # long after: a new episode
    assert later.incident["reopened_from"] is None
