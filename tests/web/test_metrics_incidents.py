"""``/metrics`` for incidents and the probe's checks: the gauges exist with the values
the store holds, and series disappear when what they describe does (resolved, acknowledged)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from app.store import incidents as incident_store
from app.store import sessions as session_store
from app.store.incidents import Finding, Observation, ProbeResult
from tests.web.api.test_incidents import seeded


def scrape(srv: Any) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    with srv.client() as cl:
        r = cl.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(r.text) for s in fam.samples}
    return r.text, samples


def by_name(samples: dict, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (n, labels), value in samples.items() if n == name}


def test_gauges_without_incidents_or_checks(app_server):
    srv = app_server()
    text, samples = scrape(srv)
    for name in ("tierops_incidents_open", "tierops_probe_check_up", "tierops_probe_check_latency_seconds",
                 "tierops_probe_check_timestamp_seconds"):
        assert f"# TYPE {name} gauge" in text
        assert by_name(samples, name) == {}


def test_incident_and_probe_gauges(app_server):
    srv = app_server()
    ids = seeded(srv)
    _, samples = scrape(srv)
    assert by_name(samples, "tierops_incidents_open") == {  # unresolved only: cache is resolved
        (("service", "api"), ("severity", "critical"), ("status", "open")): 1,
        (("service", "db"), ("severity", "warning"), ("status", "open")): 1,
    }
    up = by_name(samples, "tierops_probe_check_up")
    assert up == {(("check", "api"), ("service", "api")): 0, (("check", "cache"), ("service", "cache")): 0,
                  (("check", "disk"), ("service", "db")): 0, (("check", "dns"), ("service", "")): 1}
    latency = by_name(samples, "tierops_probe_check_latency_seconds")
    assert latency[(("check", "api"), ("service", "api"))] == 0.012
    assert latency[(("check", "dns"), ("service", ""))] == 0.0015
    stamps = by_name(samples, "tierops_probe_check_timestamp_seconds")
    last = srv.run_async(lambda st: incident_store.latest_probe_results(st.db))
    assert len(last) == len(stamps) == 4
    for r in last:
        expected = datetime.fromisoformat(r["created_at"].replace("Z", "+00:00")).timestamp()
        assert stamps[(("check", r["check_name"]), ("service", r["service"] or ""))] == expected

    # acknowledged moves the series; resolved removes it
    with srv.client() as cl:
        assert cl.post(f"/api/v1/incidents/{ids['api']}/ack", json={}).status_code == 200
        assert cl.post(f"/api/v1/incidents/{ids['disk']}/resolve", json={}).status_code == 200
    _, samples = scrape(srv)
    assert by_name(samples, "tierops_incidents_open") == {
        (("service", "api"), ("severity", "critical"), ("status", "acknowledged")): 1}


def test_label_values_from_the_database_are_escaped(app_server):
    srv = app_server()
    odd = 'we"ird\\svc\nname'

    async def seed(st: Any) -> None:
        pk = await session_store.create_session(st.db, tier=0, model="tierops-probe", prompt="x", trigger="schedule")
        obs = Observation(findings=[Finding(key="check:odd", severity="warning", message="m", service=odd,
                                            check_name="odd", origin="probe")],
                          probe_results=[ProbeResult("odd", "down", odd, None, "m")])
        await incident_store.observe(st.db, pk, 1, obs, flap_count=3, flap_window_s=3600)

    srv.run_async(seed)
    _, samples = scrape(srv)
    assert by_name(samples, "tierops_incidents_open") == {
        (("service", odd), ("severity", "warning"), ("status", "open")): 1}
    assert by_name(samples, "tierops_probe_check_up") == {(("check", "odd"), ("service", odd)): 0}
    assert by_name(samples, "tierops_probe_check_latency_seconds") == {}  # no latency: no sample
