"""Alerts in (issue #13): ``POST /api/v1/alerts`` and ``GET /api/v1/queue`` against the app in
process (tests/web/conftest.py ``app_server``), with the real store, the real supervisor and the
fake claude CLI for the tier-1 investigations. Bodies are the samples in tests/fixtures/alerts/."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.logs import AccessLog
from app.store import run_queue
from app.store.db import Database
from app.web.limits import API_BODY_MAX_BYTES
from tests.helpers import healthy
from tests.web.conftest import _LoopTransport
from tests.web.test_api import assert_error, count, hang_stage, ok_stage, wait_finished, wait_idle

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "alerts"
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
    """The ``-p`` text the fake CLI was started with (its recorded argv)."""
    argv = invocation["argv"]
    return argv[argv.index("-p") + 1]


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
                "session_id": None, "queued_id": None, "why_not": "TIEROPS_MAX_TIER=0: no language model runs"}
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


def test_a_full_queue_refuses_new_incidents_with_503_and_stores_nothing(app_server):
    srv = app_server(stages=[hang_stage()], alert_queue_max=1)
    with srv.client() as cl:
        assert cl.post("/api/v1/runs", json={"tier": 1}).status_code == 202
        [a] = post(cl, {"title": "API down", "severity": "critical"})["alerts"]
        assert a["run"]["queued_id"] is not None
        body = assert_error(cl.post("/api/v1/alerts", json={"title": "DB down", "severity": "critical"}), 503,
                            "queue_full")
        assert "TIEROPS_ALERT_QUEUE_MAX" in body["detail"]
        assert count(srv, "SELECT count(*) FROM incidents") == 1  # the refused alert wrote nothing
        # what opens nothing is still recorded: an update, a resolution
        assert post(cl, {"title": "API down", "severity": "critical"})["alerts"][0]["change"] == "updated"
        assert post(cl, {"title": "API down", "status": "resolved"})["alerts"][0]["change"] == "resolved"
        # the queued run's incident resolved before a cycle was free: it is skipped, not run
        [busy] = cl.get("/api/v1/sessions", params={"status": "running"}).json()
        cl.post(f"/api/v1/sessions/{busy['id']}/stop")
        failed = eventually(lambda: cl.get("/api/v1/queue", params={"status": "failed"}).json(), "the skip")
        assert failed[0]["id"] == a["run"]["queued_id"] and "resolved before" in failed[0]["error"]
        wait_idle(srv)
    assert count(srv, "SELECT count(*) FROM sessions") == 1  # only the cycle that was running


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
        huge = b'{"title": "x", "details": "' + b"a" * API_BODY_MAX_BYTES + b'"}'
        assert_error(cl.post("/api/v1/alerts", content=huge), 413, "too_large")
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
