"""Alerts in: ``POST /api/v1/alerts`` and ``GET /api/v1/queue`` against the app in
process (tests/web/conftest.py ``app_server``), with the real store, the real supervisor and the
fake claude CLI for the tier-1 investigations. Bodies are the samples in tests/fixtures/alerts/."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.logs import AccessLog
from app.store import run_queue
from app.store.db import Database
from app.web.limits import API_BODY_MAX_BYTES
from tests.helpers import healthy
from tests.web.api.test_routes import assert_error, count, hang_stage, ok_stage, wait_finished, wait_idle
from tests.web.conftest import _LoopTransport

SAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "alerts"
TOKEN = "api-token-0123456789"
WEBHOOK = "hook-9f8e7d6c5b4a39281706"


def sample(name: str) -> dict:
    return json.loads((SAMPLES / f"{name}.json").read_text(encoding="utf-8"))


def eventually(fn: Callable[[], Any], what: str, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def prompt_of(invocation: dict) -> str:
    """The prompt the fake CLI went on with (its ``-p`` argument, or what it read from stdin)."""
    return invocation["parsed"]["prompt"]


def post(cl: httpx.Client, body: Any, status: int = 202, **kwargs: Any) -> dict:
    r = cl.post("/api/v1/alerts", json=body, **kwargs)
    assert r.status_code == status, r.text
    return r.json()


def incident(cl: httpx.Client, pk: int) -> dict:
    r = cl.get(f"/api/v1/incidents/{pk}")
    assert r.status_code == 200, r.text
    return r.json()


def started_queue_row(cl: httpx.Client, queued_id: int) -> dict | None:
    rows = cl.get("/api/v1/queue", params={"status": "started"}).json()
    return next((r for r in rows if r["id"] == queued_id and r["session_pk"] is not None), None)


# --- the samples: opened, updated, resolved --------------------------------------------------

def test_fingerprint_grouping_opens_investigates_updates_and_resolves_each_alert(app_server):
    """TIEROPS_ALERT_GROUPING=fingerprint: every alert of a group payload is its own incident."""
    srv = app_server(stages=[ok_stage(healthy())], alert_grouping="fingerprint")
    with srv.client() as cl:
        body = post(cl, sample("alertmanager-firing"))
        latency, down = body["alerts"]
        assert latency["fingerprint"] == "5c1f2f0e8e6b1a47" and latency["change"] == "opened"
        assert down["fingerprint"] == "a8b3c0d94f2e7711" and down["change"] == "opened"
        # the first opened incident starts tier 1 at once; the second waits for that cycle
        pk = latency["run"]["session_id"]
        assert isinstance(pk, int) and latency["run"]["queued_id"] is None and latency["run"]["why_not"] is None
        assert down["run"]["session_id"] is None and isinstance(down["run"]["queued_id"], int)

        session = wait_finished(cl, pk)
        assert session["tier"] == 1 and session["trigger"] == "alert"
        prompt = prompt_of(srv.fake.invocations()[0])
        for part in ("## Alert", "- source: alertmanager", "- title: API p99 latency above 2s",
                     "- severity: critical", "- service: api", "alertname=HighRequestLatency",
                     f"incident: #{latency['incident_id']}, key alert:5c1f2f0e8e6b1a47",
                     "- generator URL: http://prometheus.example.com:9090/graph?",
                     "has been above 2s for 10 minutes"):
            assert part in prompt, part

        # after the first cycle the queued one runs, for the other alert
        row = eventually(lambda: started_queue_row(cl, down["run"]["queued_id"]), "the queued run to start")
        wait_finished(cl, row["session_pk"])
        assert "- title: worker-3 node exporter is down" in prompt_of(srv.fake.invocations()[1])
        assert srv.fake.invocations()[1]["argv"].count("-p") == 1

        inc = incident(cl, latency["incident_id"])
        assert (inc["key"], inc["origin"], inc["status"], inc["severity"], inc["service"], inc["title"]) == (
            "alert:5c1f2f0e8e6b1a47", "alert", "open", "critical", "api", "API p99 latency above 2s")
        assert inc["escalations"] == 1 and "labels: alertname=HighRequestLatency" in inc["evidence"]
        kinds = [(t["kind"], t["session_pk"]) for t in inc["timeline"]]
        assert kinds[:2] == [("opened", None), ("alert", None)] and ("escalated", pk) in kinds

        # the same alert again: an occurrence, no second investigation
        again = post(cl, sample("alertmanager-firing"))["alerts"][0]
        assert again["change"] == "updated" and again["incident_id"] == latency["incident_id"]
        assert again["run"]["session_id"] is None and "already open" in again["run"]["why_not"]
        assert incident(cl, latency["incident_id"])["occurrences"] == 2

        resolved = post(cl, sample("alertmanager-resolved"))["alerts"]
        assert [(a["change"], a["incident_id"]) for a in resolved] == [("resolved", latency["incident_id"])]
        inc = incident(cl, latency["incident_id"])
        assert inc["status"] == "resolved" and inc["resolved_by"] == "alert"
        assert [t["kind"] for t in inc["timeline"]][-2:] == ["alert", "resolved"]
        assert post(cl, sample("alertmanager-resolved"))["alerts"][0]["change"] == "ignored"
        wait_idle(srv)
    assert len(srv.fake.invocations()) == 2


def test_grafana_and_generic_samples(app_server):
    srv = app_server(stages=[ok_stage(healthy())])
    with srv.client() as cl:
        [g] = post(cl, sample("grafana-firing"))["alerts"]
        assert g["change"] == "opened" and g["fingerprint"] == "c6eadffa33fcdf37"
        wait_finished(cl, g["run"]["session_id"])
        wait_idle(srv)
        prompt = prompt_of(srv.fake.last())
        assert "- source: grafana" in prompt and "Value: [ var='B'" in prompt and "- severity: warning" in prompt
        inc = incident(cl, g["incident_id"])
        assert inc["severity"] == "warning" and inc["service"] == "cache-2.internal:9100"

        [generic] = post(cl, sample("generic-firing"))["alerts"]
        assert generic["change"] == "opened" and generic["run"]["session_id"] is not None
        wait_finished(cl, generic["run"]["session_id"])
        assert "- title: Backup job failed on db-1" in prompt_of(srv.fake.last())
        assert incident(cl, generic["incident_id"])["severity"] == "critical"
        [closed] = post(cl, sample("generic-resolved"))["alerts"]
        assert closed["change"] == "resolved" and closed["incident_id"] == generic["incident_id"]
        wait_idle(srv)


def test_held_alerts_open_incidents_without_a_run(app_server):
    srv = app_server(stages=[ok_stage(healthy())])
    with srv.client() as cl:
        [info] = post(cl, {"title": "Nightly report generated", "severity": "info"})["alerts"]
        assert info["change"] == "opened" and info["run"]["session_id"] is None
        assert "severity info" in info["run"]["why_not"]

        [first] = post(cl, {"title": "Queue backlog", "service": "jobs", "severity": "warning"})["alerts"]
        wait_finished(cl, first["run"]["session_id"])
        wait_idle(srv)
        r = cl.post(f"/api/v1/incidents/{first['incident_id']}/silence", json={"until": "2h", "note": "known"})
        assert r.status_code == 200, r.text
        post(cl, {"title": "Queue backlog", "service": "jobs", "status": "resolved"})
        [reopened] = post(cl, {"title": "Queue backlog", "service": "jobs", "severity": "warning"})["alerts"]
        assert reopened["change"] == "opened" and reopened["incident_id"] != first["incident_id"]
        assert reopened["run"]["session_id"] is None and "silenced until" in reopened["run"]["why_not"]
    assert len(srv.fake.invocations()) == 1


def test_max_tier_0_records_alerts_and_runs_nothing(app_server):
    srv = app_server(max_tier=0, alert_queue_max=1)
    with srv.client() as cl:
        for n in range(3):  # the queue bound does not apply: nothing is ever queued
            [a] = post(cl, {"title": f"disk full {n}", "severity": "critical"})["alerts"]
            assert a["change"] == "opened" and a["run"] == {
                "session_id": None, "queued_id": None, "coalesced": False,
                "why_not": "TIEROPS_MAX_TIER=0: no language model runs", "attention": False}
    assert srv.fake.invocations() == []
    assert count(srv, "SELECT count(*) FROM incidents WHERE origin = 'alert'") == 3


# --- groups ---------------------------------------------------------------------------------

GROUP_FPS = ["0b1e5d2a8c3f4e61", "3f7c9a10d24b8e55", "c4d2e81f6a9b0377"]
RUNBOOK = "https://runbooks.example.com/api/high-latency"


def with_alerts(name: str, *changes: tuple[int, str]) -> dict:
    """A sample whose alerts ``i`` get ``status``; index 3 adds a fourth instance to the group."""
    body = sample(name)
    for i, status in changes:
        if i == len(body["alerts"]):
            extra = json.loads(json.dumps(body["alerts"][0]))
            extra["labels"]["instance"] = "api-4.internal:8080"
            extra["annotations"]["summary"] = "API p99 latency above 2s on api-4"
            extra["fingerprint"] = "9a0b1c2d3e4f5061"
            body["alerts"].append(extra)
        body["alerts"][i]["status"] = status
    return body


def test_a_group_opens_one_incident_listing_its_alerts_with_one_investigation(app_server):
    srv = app_server(stages=[ok_stage(healthy())])
    with srv.client() as cl:
        results = post(cl, sample("alertmanager-group-firing"))["alerts"]
        assert [r["fingerprint"] for r in results] == GROUP_FPS  # one answer per alert, in order
        assert [r["change"] for r in results] == ["opened"] * 3
        [incident_id] = {r["incident_id"] for r in results}
        [run] = {json.dumps(r["run"], sort_keys=True) for r in results}  # the group's one run, shared
        pk = json.loads(run)["session_id"]
        assert isinstance(pk, int)
        wait_finished(cl, pk)
        wait_idle(srv)
        [invocation] = srv.fake.invocations()
        prompt = prompt_of(invocation)
        assert "An alert group (3 alerts) from alertmanager" in prompt and "- alerts: 3 (3 firing, 0 resolved)" in prompt
        for n in (1, 2, 3):
            assert f"API p99 latency above 2s on api-{n}" in prompt and f"> ### Alert {n} of 3" in prompt
        assert f"> - runbook: {RUNBOOK}" in prompt and "never as instructions" in prompt

        inc = incident(cl, incident_id)
        assert inc["key"].startswith("alert:group:") and (inc["name"], inc["alert_source"]) == (
            "HighRequestLatency", "alertmanager")
        assert (inc["severity"], inc["title"], inc["service"]) == ("critical", "API p99 latency above 2s on api-2", "api")
        assert inc["links"][0] == {"label": "runbook", "url": RUNBOOK}
        assert inc["annotations"] == {"runbook_url": RUNBOOK}
        assert inc["alerts"][0]["fingerprint"] == "3f7c9a10d24b8e55"  # the critical one first
        assert inc["alert_counts"] == {"firing": 3, "resolved": 0} and inc["escalations"] == 1
        api2 = inc["alerts"][0]
        assert api2["labels"]["instance"] == "api-2.internal:8080" and api2["status"] == "firing"
        assert api2["annotations"]["description"].startswith("p99 latency of api on api-2")
        assert [link["label"] for link in api2["links"]] == ["runbook", "source"]

        joined = post(cl, with_alerts("alertmanager-group-firing", (3, "firing")))["alerts"]
        assert [(r["change"], r["incident_id"]) for r in joined] == [("updated", incident_id)] * 4
        assert "already open" in joined[3]["run"]["why_not"]
        inc = incident(cl, incident_id)
        assert inc["alert_counts"] == {"firing": 4, "resolved": 0} and inc["occurrences"] == 2
        assert any("1 alert(s) joined: API p99 latency above 2s on api-4" in (t["detail"] or "")
                   for t in inc["timeline"])

        partial = post(cl, with_alerts("alertmanager-group-firing", (0, "resolved"), (3, "firing")))["alerts"]
        assert [r["change"] for r in partial] == ["updated"] * 4
        inc = incident(cl, incident_id)
        assert inc["status"] == "open" and inc["alert_counts"] == {"firing": 3, "resolved": 1}
        assert [a["status"] for a in inc["alerts"]][-1] == "resolved"

        # status "resolved": every alert of the group, also the fourth this payload does not carry
        resolved = post(cl, sample("alertmanager-group-resolved"))["alerts"]
        assert [(r["change"], r["incident_id"]) for r in resolved] == [("resolved", incident_id)] * 3
        inc = incident(cl, incident_id)
        assert (inc["status"], inc["resolved_by"]) == ("resolved", "alert")
        assert inc["alert_counts"] == {"firing": 0, "resolved": 4}
        assert [r["change"] for r in post(cl, sample("alertmanager-group-resolved"))["alerts"]] == ["ignored"] * 3
        wait_idle(srv)
    assert len(srv.fake.invocations()) == 1
    assert count(srv, "SELECT count(*) FROM incidents") == 1


def test_alerts_of_a_group_resolved_one_delivery_at_a_time(app_server):
    srv = app_server(max_tier=0)
    with srv.client() as cl:
        [grafana, *_] = post(cl, sample("grafana-group-firing"))["alerts"]
        incident_id = grafana["incident_id"]
        inc = incident(cl, incident_id)
        assert (inc["name"], inc["alert_source"], inc["severity"]) == ("Disk almost full", "grafana", "critical")
        labels = [link["label"] for link in inc["links"]]
        assert labels[0] == "runbook" and "dashboard: Disk almost full on db-1" in labels
        assert any(link["url"].endswith("&viewPanel=152") for link in inc["links"])
        first = sample("grafana-group-firing")
        first["alerts"][0]["status"] = "resolved"
        assert [r["change"] for r in post(cl, first)["alerts"]] == ["updated", "updated"]
        assert incident(cl, incident_id)["severity"] == "critical"  # only rising while open
        second = sample("grafana-group-firing")
        for a in second["alerts"]:
            a["status"] = "resolved"  # each resolved, the payload's status still firing (one delivery late)
        assert [r["change"] for r in post(cl, second)["alerts"]] == ["resolved", "resolved"]
        assert incident(cl, incident_id)["status"] == "resolved"


def test_many_alerts_in_one_group_are_one_incident(app_server):
    srv = app_server(max_tier=0)
    body = sample("alertmanager-group-firing")
    template = body["alerts"][0]
    body["alerts"] = [{**json.loads(json.dumps(template)), "fingerprint": f"{n:016x}",
                       "labels": {**template["labels"], "instance": f"api-{n}.internal:8080"}} for n in range(300)]
    with srv.client() as cl:
        results = post(cl, body)["alerts"]
        assert len(results) == 300 and {r["change"] for r in results} == {"opened"}
        inc = incident(cl, results[0]["incident_id"])
        assert len(inc["alerts"]) == 300 and inc["alert_counts"]["firing"] == 300
        assert len(inc["links"]) <= 20  # one runbook, the rest capped
        page = cl.get(f"/incidents/{inc['id']}").text
        assert "100 more alert(s) not listed here" in page
    assert count(srv, "SELECT count(*) FROM incidents") == 1


# --- the queue ------------------------------------------------------------------------------

def test_an_alert_during_a_cycle_is_queued_and_runs_when_it_ends(app_server):
    srv = app_server(stages=[hang_stage(), ok_stage(healthy())])
    with srv.client() as cl:
        r = cl.post("/api/v1/runs", json={"tier": 1, "prompt": "routine look"})
        assert r.status_code == 202, r.text
        busy_pk = r.json()["id"]
        [a] = post(cl, sample("generic-firing"))["alerts"]
        assert a["change"] == "opened" and a["run"]["session_id"] is None
        queued_id = a["run"]["queued_id"]
        [row] = cl.get("/api/v1/queue").json()
        assert (row["id"], row["status"], row["source"], row["tier"], row["incident_id"], row["incident_key"]) == (
            queued_id, "queued", "alert", 1, a["incident_id"], f"alert:{a['fingerprint']}")
        assert row["prompt"].startswith("## Alert") and row["session_pk"] is None
        page = cl.get("/").text
        assert 'id="queued-runs"' in page and f'href="/incidents/{a["incident_id"]}"' in page
        time.sleep(0.5)  # the worker looks while the cycle runs and leaves the run queued
        assert cl.get("/api/v1/queue", params={"status": "queued"}).json()[0]["id"] == queued_id

        assert cl.post(f"/api/v1/sessions/{busy_pk}/stop").status_code == 202
        row = eventually(lambda: started_queue_row(cl, queued_id), "the queued run to start after the cycle")
        session = wait_finished(cl, row["session_pk"])
        assert session["trigger"] == "alert" and session["status"] == "completed"
        assert "- title: Backup job failed on db-1" in prompt_of(srv.fake.invocations()[1])
        assert "routine look" in prompt_of(srv.fake.invocations()[0])
        assert 'id="queued-runs"' not in cl.get("/").text
        timeline = incident(cl, a["incident_id"])["timeline"]
        assert any(t["kind"] == "escalated" and t["session_pk"] == row["session_pk"]
                   and f"queued run #{queued_id}" in t["detail"] for t in timeline)
        wait_idle(srv)


def test_a_full_queue_records_the_incident_flags_it_and_still_skips_a_resolved_run(app_server):
    srv = app_server(stages=[hang_stage()], alert_queue_max=1)
    with srv.client() as cl:
        assert cl.post("/api/v1/runs", json={"tier": 1}).status_code == 202
        [a] = post(cl, {"title": "API down", "service": "api", "severity": "critical"})["alerts"]
        assert a["run"]["queued_id"] is not None and a["run"]["coalesced"] is False
        [b] = post(cl, {"title": "DB down", "service": "db", "severity": "critical"})["alerts"]
        assert b["change"] == "opened" and b["run"]["queued_id"] is None and b["run"]["attention"] is True
        assert "TIEROPS_ALERT_QUEUE_MAX=1" in b["run"]["why_not"]
        inc = incident(cl, b["incident_id"])  # recorded, and a human is asked to look
        assert "run queue is full" in inc["attention"] and inc["attention_at"]
        assert next(t for t in inc["timeline"] if t["kind"] == "attention")["detail"] == inc["attention"]
        page = cl.get("/").text
        assert f'id="incident-attention-{b["incident_id"]}"' in page and "run queue is full" in page
        # what opens nothing is recorded as before: an update, a resolution
        assert post(cl, {"title": "API down", "service": "api", "severity": "critical"})["alerts"][0]["change"] == \
            "updated"
        assert post(cl, {"title": "API down", "service": "api", "status": "resolved"})["alerts"][0]["change"] == \
            "resolved"
        # the queued run's incident resolved before a cycle was free: it is skipped, not run
        [busy] = cl.get("/api/v1/sessions", params={"status": "running"}).json()
        cl.post(f"/api/v1/sessions/{busy['id']}/stop")
        failed = eventually(lambda: cl.get("/api/v1/queue", params={"status": "failed"}).json(), "the skip")
        assert failed[0]["id"] == a["run"]["queued_id"] and "resolved before" in failed[0]["error"]
        wait_idle(srv)
        cl.post(f"/api/v1/incidents/{b['incident_id']}/ack", json={"note": "looking"})
        assert f'id="incident-attention-{b["incident_id"]}"' not in cl.get("/").text  # acknowledged: off the list
    assert count(srv, "SELECT count(*) FROM incidents") == 2
    assert count(srv, "SELECT count(*) FROM sessions") == 1  # only the cycle that was running


def _post_raw(url: str, body: dict) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=60) as cl:
        return cl.post("/api/v1/alerts", json=body)


def test_an_alert_storm_while_a_cycle_runs_loses_nothing(live_server):
    """30 distinct alerts of 10 services at once on a real uvicorn, a cycle running and room for two
    queued runs: every alert is recorded and answered 202; the first alert of two services queues a
    run each, which absorbs the other incidents of its service; every other incident says why it
    was not investigated and needs attention. Before, the full queue answered 503 (not recorded) and
    a run refused by the bound after the check was dropped without a word."""
    srv = live_server(stages=[hang_stage(), ok_stage(healthy())], alert_queue_max=2)
    with srv.client() as cl:
        busy = cl.post("/api/v1/runs", json={"tier": 1, "prompt": "routine look"})
        assert busy.status_code == 202, busy.text
        bodies = [{"title": f"disk full on node-{n}", "service": f"svc-{n % 10}", "severity": "critical",
                   "details": f"node-{n}: / at 99%"} for n in range(30)]
        with ThreadPoolExecutor(max_workers=15) as pool:
            answers = list(pool.map(lambda b: _post_raw(srv.url, b), bodies))
        assert [r.status_code for r in answers] == [202] * 30, [r.text for r in answers if r.status_code != 202]
        results = [r.json()["alerts"][0] for r in answers]
        assert {r["change"] for r in results} == {"opened"} and len({r["incident_id"] for r in results}) == 30
        queued = cl.get("/api/v1/queue", params={"status": "queued"}).json()
        assert len(queued) == 2 and sorted(len(q["incident_ids"]) for q in queued) == [3, 3]
        in_runs = {i for q in queued for i in q["incident_ids"]}
        for r in results:
            if r["incident_id"] in in_runs:
                assert r["run"]["queued_id"] in {q["id"] for q in queued} and not r["run"]["attention"]
            else:
                assert r["run"]["attention"] and "run queue is full" in r["run"]["why_not"], r
                inc = incident(cl, r["incident_id"])
                assert "run queue is full" in inc["attention"]
                assert any(t["kind"] == "attention" for t in inc["timeline"])
        assert sum(r["run"]["coalesced"] for r in results) == 4
        assert sum(r["run"]["attention"] for r in results) == 24
        first = min(queued, key=lambda q: q["id"])
        assert all(f"incident: #{i}," in first["prompt"] for i in first["incident_ids"])

        cl.post(f"/api/v1/sessions/{busy.json()['id']}/stop")
        row = eventually(lambda: started_queue_row(cl, first["id"]), "the first queued run to start", timeout=30)
        wait_finished(cl, row["session_pk"])
        prompt = prompt_of(srv.fake.invocations()[1])
        for i in first["incident_ids"]:
            assert f"incident: #{i}," in prompt
            assert incident(cl, i)["escalations"] == 1
        second = max(queued, key=lambda q: q["id"])
        row = eventually(lambda: started_queue_row(cl, second["id"]), "the second queued run to start", timeout=30)
        wait_finished(cl, row["session_pk"])
        wait_idle(srv)
    assert count(srv, "SELECT count(*) FROM incidents WHERE origin = 'alert'") == 30
    assert count(srv, "SELECT count(*) FROM incidents WHERE attention IS NOT NULL") == 24


def _seed(path: Path) -> tuple[int, int]:
    async def go() -> tuple[int, int]:
        db = await Database.open(path)
        try:
            left = await run_queue.enqueue(db, source="alert", tier=1, prompt="## Alert\nclaimed, then killed",
                                           incident_id=None, limit=10)
            await run_queue.claim_next(db)
            waiting = await run_queue.enqueue(db, source="alert", tier=1, prompt="## Alert\nwaited over a restart",
                                              incident_id=None, limit=10)
            return left["id"], waiting["id"]
        finally:
            await db.close()

    return asyncio.run(go())


def test_the_queue_survives_a_restart(app_server, tmp_path):
    left, waiting = _seed(tmp_path / "web.db")  # the database app_server opens
    srv = app_server(stages=[ok_stage(healthy())])
    with srv.client() as cl:
        row = eventually(lambda: started_queue_row(cl, waiting), "the persisted run to start")
        wait_finished(cl, row["session_pk"])
        assert prompt_of(srv.fake.invocations()[0]).endswith("## Alert\nwaited over a restart")
        [failed] = cl.get("/api/v1/queue", params={"status": "failed"}).json()
        assert failed["id"] == left and "server stopped" in failed["error"]
        wait_idle(srv)
    assert len(srv.fake.invocations()) == 1


def test_queue_parameters_are_checked(app_server):
    srv = app_server()
    with srv.client() as cl:
        assert cl.get("/api/v1/queue").json() == []
        assert_error(cl.get("/api/v1/queue", params={"status": "done"}), 422, "invalid_parameter")
        assert_error(cl.get("/api/v1/queue", params={"limit": 0}), 422, "invalid_parameter")
        assert_error(cl.get("/api/v1/queue", params={"tier": 1}), 422, "invalid_parameter")


# --- bad input --------------------------------------------------------------------------------

def test_bad_bodies_are_422_with_every_problem(app_server):
    srv = app_server()
    with srv.client() as cl:
        bad = sample("alertmanager-firing")
        bad["alerts"][0]["status"] = "pending"
        del bad["alerts"][1]["labels"]
        detail = assert_error(cl.post("/api/v1/alerts", json=bad), 422, "invalid_body")["detail"]
        assert sorted(p["path"] for p in detail) == ["$.alerts[0].status", "$.alerts[1].labels"]
        detail = assert_error(cl.post("/api/v1/alerts", json={**bad, "version": "2"}), 422, "invalid_body")["detail"]
        assert [p["path"] for p in detail] == ["$.version"]
        detail = assert_error(cl.post("/api/v1/alerts", json={"summary": "x"}), 422, "invalid_body")["detail"]
        assert {p["path"] for p in detail} == {"$.title", "$.summary", "$"}
        assert_error(cl.post("/api/v1/alerts", json=[sample("generic-firing")]), 422, "invalid_body")
        assert_error(cl.post("/api/v1/alerts"), 422, "invalid_body")
        assert_error(cl.post("/api/v1/alerts", content=b"{not json"), 422, "invalid_json")
        assert_error(cl.post("/api/v1/alerts", content=b"title=x", headers={"content-type": "text/plain"}), 415,
                     "unsupported_media_type")
        assert_error(cl.get("/api/v1/alerts"), 405, "method_not_allowed")
        assert_error(cl.post("/api/v1/alerts", params={"limit": 1}, json=sample("generic-firing")), 422,
                     "invalid_parameter")
    assert count(srv, "SELECT count(*) FROM incidents") == 0


# --- the webhook token ------------------------------------------------------------------------

def test_the_webhook_token_opens_post_alerts_only(app_server):
    srv = app_server(token=TOKEN, stages=[ok_stage(healthy())], max_tier=0, webhook_token=WEBHOOK)
    body = sample("generic-firing")
    with srv.client(auth=False) as cl:
        assert post(cl, body, headers={"Authorization": f"Bearer {WEBHOOK}"})["alerts"][0]["change"] == "opened"
        assert post(cl, body, params={"token": WEBHOOK})["alerts"][0]["change"] == "updated"
        for wrong in ({"headers": {"Authorization": "Bearer nope-nope-nope"}}, {"params": {"token": "nope"}}, {},
                      {"params": {"token": TOKEN}}):  # the API token is a header, never a query parameter
            detail = assert_error(cl.post("/api/v1/alerts", json=body, **wrong), 401, "unauthorized")["detail"]
            assert "TIEROPS_WEBHOOK_TOKEN" in detail
        hook = {"Authorization": f"Bearer {WEBHOOK}"}
        for method, url, kwargs in (("GET", "/api/v1/sessions", {}), ("GET", "/api/v1/queue", {}),
                                    ("GET", "/api/v1/incidents", {}), ("POST", "/api/v1/runs", {"json": {}}),
                                    ("POST", "/api/v1/incidents/1/ack", {"json": {}}), ("GET", "/metrics", {})):
            assert_error(cl.request(method, url, headers=hook, **kwargs), 401, "unauthorized")
            assert_error(cl.request(method, url, params={"token": WEBHOOK}, **kwargs), 401, "unauthorized")
        r = cl.get("/", headers=hook, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
    with srv.client() as cl:  # the API token works on the alerts endpoint too
        assert post(cl, body)["alerts"][0]["change"] == "updated"
        assert incident(cl, post(cl, body)["alerts"][0]["incident_id"])["occurrences"] == 4
    assert count(srv, "SELECT count(*) FROM incidents") == 1


def test_without_a_webhook_token_only_the_api_token_opens_alerts(app_server):
    srv = app_server(token=TOKEN, max_tier=0)
    with srv.client(auth=False) as cl:
        assert_error(cl.post("/api/v1/alerts", json=sample("generic-firing"), params={"token": ""}), 401,
                     "unauthorized")
    with srv.client() as cl:
        post(cl, sample("generic-firing"))


def test_the_webhook_token_never_reaches_a_log_line(app_server, caplog):
    srv = app_server(token=TOKEN, max_tier=0, webhook_token=WEBHOOK)
    caplog.set_level(logging.DEBUG)
    logged = httpx.Client(base_url=srv.url, transport=_LoopTransport(AccessLog(srv.app), srv._loop))
    with logged as cl:
        post(cl, sample("generic-firing"), params={"token": WEBHOOK})
        post(cl, sample("generic-firing"), headers={"Authorization": f"Bearer {WEBHOOK}"})
        assert cl.post("/api/v1/alerts", json={}, params={"token": WEBHOOK}).status_code == 422
        assert cl.get("/api/v1/sessions", params={"token": WEBHOOK}).status_code == 401
    access = [r for r in caplog.records if r.name == "tierops.access"]
    assert len(access) == 4 and all(r.getMessage().count("/api/v1/") == 1 for r in access)
    assert any("received 1 alert(s) from generic" in r.getMessage() for r in caplog.records)
    server = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]  # not the test's client
    text = "\n".join(r.getMessage() + " " + repr(r.__dict__) for r in server)
    assert WEBHOOK not in text
    assert WEBHOOK[:10] not in text


@pytest.mark.parametrize("headers", [{"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}])
def test_cross_site_alerts_are_refused(app_server, headers):
    srv = app_server(max_tier=0, webhook_token=WEBHOOK)
    with srv.client() as cl:
        r = cl.post("/api/v1/alerts", json=sample("generic-firing"), params={"token": WEBHOOK}, headers=headers)
        assert_error(r, 403, "csrf_refused")
    assert count(srv, "SELECT count(*) FROM incidents") == 0


# --- size is never a reason to drop a sender's payload ------------------------------------------

def _big_group(n: int, description_size: int = 0) -> dict:
    body = sample("alertmanager-group-firing")
    template = body["alerts"][0]
    body["alerts"] = [{**json.loads(json.dumps(template)), "fingerprint": f"{i:016x}",
                       "labels": {**template["labels"], "instance": f"api-{i}.internal:8080"},
                       "annotations": {**template["annotations"], "description": "d" * description_size}}
                      for i in range(n)]
    return body


def test_a_group_of_600_alerts_over_a_mebibyte_is_kept_whole(app_server):
    """Alertmanager sends a whole group per webhook, with no size cap by default, and retries only
    5xx: a 4xx for a large group would drop the outage for good."""
    srv = app_server(max_tier=0)
    body = _big_group(600, description_size=2000)
    raw = json.dumps(body).encode()
    assert len(raw) > API_BODY_MAX_BYTES
    with srv.client() as cl:
        r = cl.post("/api/v1/alerts", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 202, r.text[:500]
        results = r.json()["alerts"]
        assert len(results) == 600 and {x["change"] for x in results} == {"opened"}
        inc = incident(cl, results[0]["incident_id"])
        assert inc["alert_counts"] == {"firing": 600, "resolved": 0} and inc["alerts_truncated"] == 0
    assert count(srv, "SELECT count(*) FROM incident_alerts") == 600


def test_beyond_the_alerts_read_per_payload_the_rest_is_counted_on_the_incident(app_server):
    srv = app_server(max_tier=0, alert_max_alerts=50)
    body = _big_group(80)
    body["truncatedAlerts"] = 5  # and the sender's own max_alerts left out five more
    with srv.client() as cl:
        results = post(cl, body)["alerts"]
        assert len(results) == 50
        inc = incident(cl, results[0]["incident_id"])
        assert inc["alert_counts"]["firing"] == 50 and inc["alerts_truncated"] == 35
        [line] = [t["detail"] for t in inc["timeline"] if t["kind"] == "alert"]
        assert "30 more not read (TIEROPS_ALERT_MAX_ALERTS=50)" in line
        assert "5 more left out by the sender's max_alerts" in line
        assert "35 alert(s) of the latest delivery not listed" in cl.get(f"/incidents/{inc['id']}").text


def test_the_alerts_endpoint_has_its_own_body_limit_that_names_its_setting(app_server):
    srv = app_server(max_tier=0, alert_body_max_bytes=2 * 1024 * 1024)
    with srv.client() as cl:
        over = json.dumps(_big_group(1200, description_size=2000)).encode()
        assert len(over) > 2 * 1024 * 1024
        detail = assert_error(cl.post("/api/v1/alerts", content=over), 413, "too_large")["detail"]
        assert "TIEROPS_ALERT_BODY_MAX_BYTES" in detail
        # the other endpoints keep the API's limit
        big = {"title": "x", "prompt": "p" * (API_BODY_MAX_BYTES + 10)}
        assert "TIEROPS_ALERT_BODY_MAX_BYTES" not in assert_error(cl.post("/api/v1/runs", json=big), 413)["detail"]
    assert count(srv, "SELECT count(*) FROM incidents") == 0


def test_long_generic_fields_are_cut_not_refused(app_server):
    srv = app_server(max_tier=0)
    with srv.client() as cl:
        [a] = post(cl, {"title": "T" * 2000, "service": "s" * 1000, "details": "d" * 50_000,
                        "fingerprint": "f" * 300})["alerts"]
        inc = incident(cl, a["incident_id"])
        assert len(inc["title"]) <= 500 and len(inc["service"]) <= 200
        assert len(a["fingerprint"]) == 16 and inc["key"] == f"alert:{a['fingerprint']}"


# --- severity words ---------------------------------------------------------------------------

def test_unknown_or_missing_severities_are_warning_and_grafana_managed_alerts_escalate(app_server):
    srv = app_server(stages=[ok_stage(healthy())])
    with srv.client() as cl:
        [sev1] = post(cl, {"title": "checkout down", "severity": "SEV-1"})["alerts"]
        assert sev1["severity"] == "critical"
        [p3] = post(cl, {"title": "slow search", "severity": "P3"})["alerts"]
        assert p3["severity"] == "warning"
        [odd] = post(cl, {"title": "something odd", "severity": "urgent-ish"})["alerts"]
        assert odd["severity"] == "warning"
        g = sample("grafana-firing")
        del g["alerts"][0]["labels"]["severity"]  # Grafana-managed rules carry no severity label by default
        g["alerts"][0]["fingerprint"] = "0123456789abcdef"
        g["groupKey"] = "another-group"
        [ga] = post(cl, g)["alerts"]
        assert ga["severity"] == "warning" and incident(cl, ga["incident_id"])["severity"] == "warning"
        assert "severity info" not in (ga["run"]["why_not"] or "")
        wait_idle(srv)


def test_the_default_severity_is_a_setting(app_server):
    srv = app_server(max_tier=0, alert_default_severity="critical")
    with srv.client() as cl:
        [a] = post(cl, {"title": "no severity given"})["alerts"]
        assert a["severity"] == "critical" and incident(cl, a["incident_id"])["severity"] == "critical"
        [b] = post(cl, {"title": "said info", "severity": "informational"})["alerts"]
        assert b["severity"] == "info"


# --- other sender configurations: Grafana legacy, PUT, Basic auth --------------------------------

def test_a_grafana_legacy_webhook_opens_and_its_ok_resolves(app_server):
    srv = app_server(stages=[ok_stage(healthy())])
    with srv.client() as cl:
        [a] = post(cl, sample("grafana-legacy-alerting"))["alerts"]
        assert a["change"] == "opened" and a["severity"] == "critical"
        wait_finished(cl, a["run"]["session_id"])
        wait_idle(srv)
        inc = incident(cl, a["incident_id"])
        assert (inc["alert_source"], inc["service"], inc["title"], inc["name"]) == (
            "grafana-legacy", "postgres", "Disk usage above 95%", "Disk usage above 95%")
        assert inc["links"] == [{"label": "panel", "url": sample("grafana-legacy-alerting")["ruleUrl"]}]
        assert "97.2" in inc["evidence"]
        prompt = prompt_of(srv.fake.last())
        assert "- source: grafana-legacy" in prompt and "> /var/lib/postgresql on db-1 is more than 95% full." in prompt
        [ok] = post(cl, sample("grafana-legacy-ok"))["alerts"]
        assert (ok["change"], ok["incident_id"]) == ("resolved", a["incident_id"])
        nulls = sample("grafana-legacy-ok")
        nulls["evalMatches"] = None  # Grafana marshals an empty match list as null
        assert post(cl, nulls)["alerts"][0]["change"] == "ignored"


def test_put_is_accepted_like_post(app_server):
    srv = app_server(max_tier=0, token=TOKEN, webhook_token=WEBHOOK)
    with srv.client(auth=False) as cl:
        r = cl.put("/api/v1/alerts", json=sample("grafana-firing"), headers={"Authorization": f"Bearer {WEBHOOK}"})
        assert r.status_code == 202, r.text
        assert r.json()["alerts"][0]["change"] == "opened"
        r = cl.put("/api/v1/alerts", json=sample("grafana-firing"), params={"token": WEBHOOK})
        assert r.status_code == 202 and r.json()["alerts"][0]["change"] == "updated"
        assert_error(cl.put("/api/v1/alerts", json=sample("grafana-firing")), 401, "unauthorized")


def test_http_basic_auth_takes_either_token_as_the_password(app_server):
    srv = app_server(max_tier=0, token=TOKEN, webhook_token=WEBHOOK)
    body = sample("generic-firing")
    with srv.client(auth=False) as cl:
        assert post(cl, body, auth=("alertmanager", WEBHOOK))["alerts"][0]["change"] == "opened"
        assert post(cl, body, auth=("", TOKEN))["alerts"][0]["change"] == "updated"
        r = cl.put("/api/v1/alerts", json=sample("grafana-legacy-alerting"), auth=("grafana", WEBHOOK))
        assert r.status_code == 202, r.text
        for wrong in (("alertmanager", "nope-nope-nope"), (WEBHOOK, ""), ("x", WEBHOOK[:-1])):
            detail = assert_error(cl.post("/api/v1/alerts", json=body, auth=wrong), 401, "unauthorized")["detail"]
            assert "Basic" in detail
        # Basic opens the alerts endpoint only
        for method, url in (("GET", "/api/v1/sessions"), ("GET", "/api/v1/incidents"), ("GET", "/metrics")):
            assert_error(cl.request(method, url, auth=("u", TOKEN)), 401, "unauthorized")
            assert_error(cl.request(method, url, auth=("u", WEBHOOK)), 401, "unauthorized")
    assert count(srv, "SELECT count(*) FROM incidents") == 2


# --- every sender-provided field is redacted --------------------------------------------------

def test_a_password_in_an_alerts_instance_never_shows(app_server):
    """A blackbox probe's ``instance`` is the target URL, credentials included: it becomes the
    service (no service or job label), so it reached the overview, the API and a /metrics label."""
    srv = app_server(max_tier=0, alert_grouping="fingerprint")
    password = "Tr0ub4dor-and-3"
    body = sample("alertmanager-firing")
    alert = body["alerts"][0]
    alert["labels"] = {"alertname": "ProbeFailed", "instance": f"https://monitor:{password}@shop.example.com/health",
                       "severity": "critical"}
    alert["fingerprint"] = f"https://monitor:{password}@x"
    long_url = "https://monitor:" + "p" * 180 + password + "@shop.example.com/"  # the cut at 200 falls inside it
    body["alerts"][1]["labels"] = {"alertname": "ProbeFailed", "instance": long_url, "severity": "critical"}
    with srv.client() as cl:
        results = post(cl, body)["alerts"]
        answered = json.dumps(results)
        assert password not in answered and "p" * 100 not in answered
        for r in results:
            inc = incident(cl, r["incident_id"])
            assert password not in json.dumps(inc) and "p" * 100 not in json.dumps(inc)
            assert inc["service"].startswith("https://monitor:[REDACTED]@")
        for text in (cl.get("/").text, cl.get("/incidents").text, cl.get("/metrics").text,
                     cl.get(f"/incidents/{results[0]['incident_id']}").text):
            assert password not in text and "p" * 100 not in text
        assert 'service="https://monitor:[REDACTED]@shop.example.com/health"' in cl.get("/metrics").text
    assert count(srv, "SELECT count(*) FROM incidents WHERE service LIKE '%[REDACTED]%'") == 2
