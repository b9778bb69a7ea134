"""The REST API under /api/v1, against the app in process (tests/web/conftest.py ``app_server``).

Every route: its happy path, its filters, its errors (always JSON ``{error, detail}``), and a
handful of garbage inputs that must never produce a 500. Data comes from the real CLI captures
(ingested with app.engine.ingest) or from the fake CLI run by the real supervisor.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.engine.ingest import ingest_path
from app.web.api import memories, routes, runs
from app.web.limits import MEMORY_CATEGORY_MAX, MEMORY_SERVICE_MAX, MEMORY_VALUE_MAX, PROMPT_MAX_CHARS
from tests.fakes.claude_control import fixture_lines, init_line, new_session_id, structured_stream
from tests.helpers import fixture_stream, healthy

HUGE = "9" * 30  # an integer SQLite cannot hold


# --- helpers ------------------------------------------------------------------------------

def assert_error(r: httpx.Response, status: int, error: str | None = None) -> dict:
    """An API error: the status, a JSON body with exactly ``error`` and ``detail``."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers
    body = r.json()
    assert set(body) == {"error", "detail"}, body
    assert isinstance(body["error"], str) and body["error"]
    if error is not None:
        assert body["error"] == error, body
    return body


def ingest(srv: Any, scenario: str, tier: int | None = None) -> dict:
    report, stored = srv.run_async(
        lambda st: ingest_path(st.db, fixture_stream(scenario), st.validator, st.settings, tier=tier))
    assert stored
    return report


def wait_finished(client: httpx.Client, pk: int, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        row = client.get(f"/api/v1/sessions/{pk}").json()
        if row["status"] != "running":
            return row
        if time.monotonic() > deadline:
            raise AssertionError(f"session {pk} still running after {timeout} s")
        time.sleep(0.05)


def wait_idle(srv: Any, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while srv.state.supervisor.busy:
        if time.monotonic() > deadline:
            raise AssertionError("the cycle did not finish")
        time.sleep(0.05)


def hang_stage() -> dict:
    """The fake prints its init line, then sleeps until killed."""
    return {"lines": [init_line(new_session_id())], "mode": "hang"}


def ok_stage(output: dict | None = None, delay: float = 0.0) -> dict:
    return {"lines": structured_stream(new_session_id(), output or healthy()), "delay": delay}


def count(srv: Any, sql: str) -> int:
    async def go(st: Any) -> int:
        return await st.db.fetchval(sql)

    return srv.run_async(go)


# --- GET /sessions ------------------------------------------------------------------------

def test_sessions_list_filters_and_paging(app_server):
    srv = app_server()
    a = ingest(srv, "c_structured", tier=1)          # completed
    b = ingest(srv, "d_text_only", tier=2)           # completed (degraded)
    c = ingest(srv, "d_invalid_structured", tier=3)  # failed
    d = ingest(srv, "f_api_500", tier=1)             # failed
    with srv.client() as cl:
        rows = cl.get("/api/v1/sessions").json()
        assert [r["id"] for r in rows] == [d["id"], c["id"], b["id"], a["id"]]  # newest first
        assert {"id", "session_id", "tier", "status", "line_count", "validation_valid", "source"} <= set(rows[0])
        by_id = {r["id"]: r for r in rows}
        assert by_id[a["id"]]["session_id"] == a["session_id"] and by_id[a["id"]]["line_count"] == 7
        assert by_id[a["id"]]["validation_valid"] is True and by_id[b["id"]]["degraded"] is True

        def ids(query: str) -> list[int]:
            r = cl.get(f"/api/v1/sessions?{query}")
            assert r.status_code == 200, r.text
            return [x["id"] for x in r.json()]

        assert ids("status=completed") == [b["id"], a["id"]]
        assert ids("status=failed") == [d["id"], c["id"]]
        assert ids("status=running") == [] and ids("status=interrupted") == []
        assert ids("tier=1") == [d["id"], a["id"]]
        assert ids("tier=3") == [c["id"]]
        assert ids("status=failed&tier=1") == [d["id"]]
        assert ids("limit=2") == [d["id"], c["id"]]
        assert ids("limit=2&offset=2") == [b["id"], a["id"]]
        assert ids("offset=4") == []
        assert ids("status=&tier=&limit=&offset=") == [d["id"], c["id"], b["id"], a["id"]]  # empty = unset
        assert ids("limit=500") == ids("")


@pytest.mark.parametrize("query", [
    "status=bogus", "status=RUNNING", "tier=-1", "tier=4", "tier=abc", "tier=1.5", "limit=0", "limit=501",
    "limit=-1", "limit=x", "offset=-1", "offset=1e-3", "offset=1e400", "limit=nan", f"offset={HUGE}", f"limit={'9' * 5000}",
])
def test_sessions_list_rejects_bad_parameters(app_server, query):
    srv = app_server()
    with srv.client() as cl:
        body = assert_error(cl.get(f"/api/v1/sessions?{query}"), 422, "invalid_parameter")
        assert query.split("=")[0] in body["detail"]


# --- GET /sessions/{id} -------------------------------------------------------------------

def test_session_detail_includes_output_attempts(app_server):
    srv = app_server()
    ok = ingest(srv, "c_structured")
    bad = ingest(srv, "d_invalid_structured")
    with srv.client() as cl:
        row = cl.get(f"/api/v1/sessions/{ok['id']}").json()
        assert row["id"] == ok["id"] and row["session_id"] == ok["session_id"] and row["status"] == "completed"
        assert row["structured_output"]["summary"].startswith("All services healthy")
        [attempt] = row["output_attempts"]
        assert attempt["attempt"] == 1 and attempt["kind"] == "stream" and attempt["has_output"] == 1
        assert attempt["valid"] == 1 and attempt["errors"] == [] and attempt["result_subtype"] == "success"

        row = cl.get(f"/api/v1/sessions/{bad['id']}").json()
        assert row["status"] == "failed"
        # the CLI refused five StructuredOutput calls before giving up: each is an attempt
        *rejected, attempt = row["output_attempts"]
        assert [(a["origin"], a["run"], a["valid"]) for a in rejected] == [("cli_rejected", 1, 0)] * 5
        assert attempt["attempt"] == 6 and attempt["run"] == 1 and attempt["origin"] == "tool"
        assert attempt["valid"] == 0 and attempt["result_subtype"] == "error_max_structured_output_retries"
        assert {"path": "$.events[0].level"}.items() <= attempt["errors"][0].items()


@pytest.mark.parametrize("pk", ["999", "0", "-1", "abc", "1.5", "%00", "%E2%91%A0", "1e3", "9" * 5000])
def test_session_detail_unknown_is_404(app_server, pk):
    srv = app_server()
    ingest(srv, "c_structured")
    with srv.client() as cl:
        for suffix in ("", "/activity", "/result"):
            assert_error(cl.get(f"/api/v1/sessions/{pk}{suffix}"), 404, "not_found")
        assert_error(cl.post(f"/api/v1/sessions/{pk}/stop"), 404, "not_found")


# --- GET /sessions/{id}/activity ----------------------------------------------------------

def test_activity_order_after_and_limit(app_server):
    srv = app_server()
    rep = ingest(srv, "c_structured")
    pk = rep["id"]
    expected = fixture_lines("c_structured")
    with srv.client() as cl:
        rows = cl.get(f"/api/v1/sessions/{pk}/activity").json()
        assert [r["seq"] for r in rows] == list(range(1, len(expected) + 1))
        assert set(rows[0]) == {"seq", "attempt", "ts", "type", "subtype", "display", "raw"}
        assert [json.loads(r["raw"]) for r in rows] == expected  # the transcript replays exactly
        assert [r["type"] for r in rows] == [x["type"] for x in expected]
        assert rows[0]["subtype"] == "init" and all(r["attempt"] == 1 for r in rows)

        def seqs(query: str) -> list[int]:
            r = cl.get(f"/api/v1/sessions/{pk}/activity?{query}")
            assert r.status_code == 200, r.text
            return [x["seq"] for x in r.json()]

        assert seqs("after=3") == [4, 5, 6, 7]
        assert seqs("after=3&limit=2") == [4, 5]
        assert seqs("limit=1") == [1]
        assert seqs("after=7") == [] and seqs("after=1000") == []
        assert seqs("after=0&limit=5000") == list(range(1, 8))
        for query in ("after=-1", "after=x", "after=1.5", "limit=0", "limit=5001", "limit=", "after="):
            r = cl.get(f"/api/v1/sessions/{pk}/activity?{query}")
            if query.endswith("="):
                assert r.status_code == 200  # empty means the default
            else:
                assert_error(r, 422, "invalid_parameter")


# --- GET /sessions/{id}/result ------------------------------------------------------------

def test_result_of_a_valid_structured_session(app_server):
    srv = app_server()
    rep = ingest(srv, "c_structured")
    result_line = fixture_lines("c_structured")[-1]
    with srv.client() as cl:
        body = cl.get(f"/api/v1/sessions/{rep['id']}/result").json()
    assert "result_text" not in body
    assert body["result_data"] == result_line["structured_output"]
    assert body["validation"] == {"valid": True, "errors": []}
    assert (body["source"], body["attempts"], body["status"]) == ("structured_output", 1, "completed")
    assert body["session_id"] == result_line["session_id"]


def test_result_of_a_text_only_session(app_server):
    srv = app_server()
    rep = ingest(srv, "d_text_only")
    result_line = fixture_lines("d_text_only")[-1]
    with srv.client() as cl:
        body = cl.get(f"/api/v1/sessions/{rep['id']}/result").json()
    # the session ran under a schema, so its free text is not the result; the failure
    # says what was wrong and what came last
    assert "result_data" not in body and "result_text" not in body
    assert body["schema"]["source"] == "default" and body["degraded"] is True
    assert body["failure"]["type"] == "output_schema_validation_failed" and body["failure"]["last_output"] is None
    assert result_line["result"]  # the text is still on the session row and page
    assert body["validation"]["valid"] is False
    [err] = body["validation"]["errors"]
    assert err["path"] == "$" and "no structured_output" in err["message"]
    assert body["source"] != "structured_output" and body["attempts"] == 1 and body["status"] == "completed"


def test_result_of_an_invalid_structured_session(app_server):
    srv = app_server()
    rep = ingest(srv, "d_invalid_structured")
    with srv.client() as cl:
        body = cl.get(f"/api/v1/sessions/{rep['id']}/result").json()
    assert "result_data" not in body and "result_text" not in body  # rejected output is never the result
    assert body["attempts"] == 6 and body["failure"]["attempts"] == 6
    assert body["failure"]["last_output"]["events"][0]["level"] not in ("info", "warning", "critical")
    assert body["validation"]["valid"] is False
    assert any(e["path"] == "$.events[0].level" for e in body["validation"]["errors"])
    assert body["status"] == "failed"


def test_result_of_a_live_session(app_server):
    out = healthy("Live run healthy.")
    srv = app_server(stages=[ok_stage(out, delay=0.01)])
    with srv.client() as cl:
        r = cl.post("/api/v1/runs", json={"tier": 1})
        assert r.status_code == 202, r.text
        pk = r.json()["id"]
        assert wait_finished(cl, pk)["status"] == "completed"
        body = cl.get(f"/api/v1/sessions/{pk}/result").json()
    assert body["result_data"] == out and "result_text" not in body
    assert body["validation"] == {"valid": True, "errors": []}


# --- POST /runs and POST /sessions/{id}/stop -----------------------------------------------

def test_runs_answers_at_once_then_stop_interrupts(app_server):
    srv = app_server(stages=[hang_stage()])
    with srv.client() as cl:
        t0 = time.monotonic()
        r = cl.post("/api/v1/runs", json={"tier": 1, "prompt": "Check nginx only."})
        elapsed = time.monotonic() - t0
        assert r.status_code == 202, r.text
        assert elapsed < 2, f"POST /runs took {elapsed:.2f} s with a hanging CLI"
        body = r.json()
        pk = body["id"]
        assert body == {"id": pk, "tier": 1, "status": "running"}
        assert r.headers["location"] == f"/api/v1/sessions/{pk}"
        row = cl.get(f"/api/v1/sessions/{pk}").json()
        assert row["status"] == "running" and row["prompt"].endswith("Check nginx only.") and row["tier"] == 1

        busy = assert_error(cl.post("/api/v1/runs", json={}), 409, "cycle_running")
        assert "already running" in busy["detail"]
        metrics = cl.get("/metrics").text
        assert "tierops_cycle_running 1.0" in metrics

        r = cl.post(f"/api/v1/sessions/{pk}/stop")
        assert r.status_code == 202, r.text
        assert r.json() == {"id": pk, "stopping": True}
        row = wait_finished(cl, pk, timeout=15)
        assert row["status"] == "interrupted" and row["status_reason"] == "stopped by an operator"
        assert_error(cl.post(f"/api/v1/sessions/{pk}/stop"), 409, "not_running")
        wait_idle(srv)
        assert count(srv, "SELECT count(*) FROM sessions") == 1  # an interrupted run does not escalate


def test_stop_refuses_sessions_that_are_not_running_here(app_server):
    srv = app_server()
    done = ingest(srv, "c_structured")

    async def orphan(st: Any) -> int:  # 'running' in the store but owned by no process of this server
        async with st.db.write() as conn:
            cur = await conn.execute("INSERT INTO sessions (tier, trigger, status, started_at)"
                                     " VALUES (1, 'ingest', 'running', '2026-01-01T00:00:00.000Z')")
            return cur.lastrowid

    other = srv.run_async(orphan)
    with srv.client() as cl:
        body = assert_error(cl.post(f"/api/v1/sessions/{done['id']}/stop"), 409, "not_running")
        assert "completed" in body["detail"]
        assert_error(cl.post(f"/api/v1/sessions/{other}/stop"), 409, "not_running")
        assert_error(cl.post("/api/v1/sessions/4242/stop"), 404, "not_found")
        assert_error(cl.get(f"/api/v1/sessions/{done['id']}/stop"), 405, "method_not_allowed")


@pytest.mark.parametrize("body", [
    {"json": {"tier": 7}}, {"json": {"tier": 0}}, {"json": {"tier": -1}}, {"json": {"tier": "x"}},
    {"json": {"tier": 1.5}}, {"json": {"tier": 10**30}}, {"json": {"tier": True}},
    {"json": {"tier": 1, "model": "opus"}}, {"json": {"prompt": 5}}, {"json": {"prompt": "x" * (PROMPT_MAX_CHARS + 1)}},
    {"content": b"tier=1"}, {"content": b"{"}, {"content": b"\xff\xfe\x00"}, {"content": b"[]"},
    {"content": b"null"}, {"content": b'"tier"'}, {"content": b"1" * 5000},
])
def test_runs_rejects_bad_bodies(app_server, body):
    srv = app_server(stages=[hang_stage()])
    with srv.client() as cl:
        err = assert_error(cl.post("/api/v1/runs", **body), 422)
        assert err["error"] in ("invalid_body", "invalid_json")
    assert count(srv, "SELECT count(*) FROM sessions") == 0 and not srv.state.supervisor.busy


def test_runs_unknown_fields_and_json_errors_say_what(app_server):
    srv = app_server(stages=[hang_stage()])
    with srv.client() as cl:
        body = assert_error(cl.post("/api/v1/runs", json={"tier": 7, "colour": "red"}), 422, "invalid_body")
        assert {p["path"] for p in body["detail"]} == {"$.tier", "$.colour"}  # every problem listed
        body = assert_error(cl.post("/api/v1/runs", content=b"{not json"), 422, "invalid_json")
        assert "not JSON" in body["detail"]


def test_runs_refuses_a_tier_above_max_tier(app_server):
    srv = app_server(stages=[hang_stage()], max_tier=1)
    with srv.client() as cl:
        body = assert_error(cl.post("/api/v1/runs", json={"tier": 2}), 422, "invalid_body")
        assert "TIEROPS_MAX_TIER=1" in body["detail"]
    assert count(srv, "SELECT count(*) FROM sessions") == 0


def test_runs_refuses_a_prompt_with_a_nul_byte(app_server):
    srv = app_server(stages=[ok_stage()])
    with srv.client() as cl:
        r = cl.post("/api/v1/runs", content=b'{"prompt": "check\\u0000 nginx"}')
        if r.status_code == 202:
            wait_idle(srv)
        assert_error(r, 422, "invalid_body")


def test_runs_whose_cycle_fails_before_its_first_session_is_500(app_server, tmp_path):
    srv = app_server(stages=[ok_stage()], tier1_prompt_file=tmp_path / "missing.md")
    with srv.client() as cl:
        body = assert_error(cl.post("/api/v1/runs", json={"tier": 1}), 500, "run_failed")
    assert "could not start" in body["detail"] and "missing.md" in body["detail"]
    wait_idle(srv)
    assert count(srv, "SELECT count(*) FROM sessions") == 0


# --- the Run Now form: the same start as POST /runs (Supervisor.start_cycle) ---------------

def test_run_now_redirects_to_the_first_session(app_server):
    srv = app_server(stages=[hang_stage()])
    with srv.client(follow_redirects=False) as cl:
        r = cl.post("/run", data={"tier": "1", "prompt": "Check nginx only."})
        assert r.status_code == 303, r.text
        pk = int(r.headers["location"].removeprefix("/sessions/"))
        row = cl.get(f"/api/v1/sessions/{pk}").json()
        assert row["status"] == "running" and row["trigger"] == "manual" and row["prompt"].endswith("nginx only.")
        r = cl.post("/run", data={"tier": "1"})  # one cycle at a time: the form says so
        assert r.status_code == 409 and "already running" in r.text
        assert cl.post(f"/api/v1/sessions/{pk}/stop").status_code == 202
        assert wait_finished(cl, pk)["status"] == "interrupted"
    wait_idle(srv)


def test_run_now_shows_why_a_cycle_could_not_start(app_server, tmp_path):
    srv = app_server(stages=[ok_stage()], tier1_prompt_file=tmp_path / "missing.md")
    with srv.client(follow_redirects=False) as cl:
        r = cl.post("/run", data={"tier": "1"})
    assert r.status_code == 500 and r.headers["content-type"].startswith("text/html")
    assert "The cycle could not start" in r.text and "missing.md" in r.text
    wait_idle(srv)


@pytest.mark.parametrize("tier, prompt, message", [
    ("9", "", "Tier must be a number from 0 to 3."), ("x", "", "Tier must be a number"),
    ("1", "x" * (PROMPT_MAX_CHARS + 1), "The prompt is too long"),
])
def test_run_now_refuses_what_post_runs_refuses(app_server, tier, prompt, message):
    srv = app_server(stages=[hang_stage()])
    with srv.client(follow_redirects=False) as cl:
        r = cl.post("/run", data={"tier": tier, "prompt": prompt})
        assert r.status_code == 422 and message in r.text
        api_tier = int(tier) if tier.isdigit() else tier
        assert_error(cl.post("/api/v1/runs", json={"tier": api_tier, "prompt": prompt or None}), 422)
    assert count(srv, "SELECT count(*) FROM sessions") == 0 and not srv.state.supervisor.busy


# --- GET /events --------------------------------------------------------------------------

def test_events_filters_and_paging(app_server):
    srv = app_server()
    a = ingest(srv, "c_structured")
    b = ingest(srv, "d_text_only")

    async def seed(st: Any) -> None:
        async with st.db.write() as conn:
            await conn.executemany(
                "INSERT INTO events (session_pk, level, service, message, source, created_at)"
                " VALUES (?, ?, ?, ?, 'structured_output', '2026-01-01T00:00:00.000Z')",
                [(a["id"], "warning", "db-1", "replica lag 40 s"), (b["id"], "critical", "nginx", "502s"),
                 (b["id"], "info", None, "all quiet")])

    srv.run_async(seed)
    assert [(e["level"], e["service"]) for e in a["events"]] == [("info", "nginx")]
    with srv.client() as cl:
        rows = cl.get("/api/v1/events").json()
        assert len(rows) == 4 and [r["id"] for r in rows] == sorted((r["id"] for r in rows), reverse=True)
        assert {"id", "session_pk", "session_id", "tier", "level", "service", "message", "source",
                "created_at"} <= set(rows[0])

        def got(query: str) -> list[tuple]:
            r = cl.get(f"/api/v1/events?{query}")
            assert r.status_code == 200, r.text
            return [(e["session_pk"], e["level"], e["service"]) for e in r.json()]

        assert got("level=critical") == [(b["id"], "critical", "nginx")]
        assert got("level=warning") == [(a["id"], "warning", "db-1")]
        assert {x[2] for x in got("service=nginx")} == {"nginx"} and len(got("service=nginx")) == 2
        assert got(f"session={b['id']}") == [(b["id"], "info", None), (b["id"], "critical", "nginx")]
        assert got(f"session={b['id']}&level=info") == [(b["id"], "info", None)]
        assert got("session=999") == [] and got("service=nope") == []
        assert got("limit=1") == got("")[:1] and got("limit=2&offset=2") == got("")[2:]
        for query in ("level=debug", "level=INFO", "session=x", "session=-1", "limit=0", "limit=1001",
                      "offset=-1", f"session={HUGE}"):
            assert_error(cl.get(f"/api/v1/events?{query}"), 422, "invalid_parameter")


def test_events_of_a_live_session(app_server):
    srv = app_server(stages=[ok_stage(healthy("nginx fine"))])
    with srv.client() as cl:
        pk = cl.post("/api/v1/runs", json={}).json()["id"]
        wait_finished(cl, pk)
        [ev] = cl.get(f"/api/v1/events?session={pk}").json()
    assert (ev["level"], ev["service"], ev["message"], ev["source"]) == (
        "info", "nginx", "nginx active (running)", "structured_output")


# --- /memories ----------------------------------------------------------------------------

def test_memories_create_list_edit_delete(app_server):
    srv = app_server()
    with srv.client() as cl:
        r = cl.post("/api/v1/memories", json={"category": "baseline", "value": "  disk  at 71 %  ",
                                              "service": "web-1", "confidence": 0.9})
        assert r.status_code == 201, r.text
        m1 = r.json()
        assert (m1["category"], m1["value"], m1["service"], m1["confidence"], m1["active"]) == (
            "baseline", "disk at 71 %", "web-1", 0.9, True)
        assert m1["times_seen"] == 1 and m1["created_by_session"] is None
        m2 = cl.post("/api/v1/memories", json={"category": "quirk", "value": "cron noisy at 03:00",
                                                "active": False}).json()
        assert m2["service"] is None and m2["confidence"] == 0.7 and m2["active"] is False
        m3 = cl.post("/api/v1/memories", json={"category": "quirk", "value": "ünïcødé ✓ 🚀", "service": "db"}).json()
        assert m3["value"] == "ünïcødé ✓ 🚀"

        def ids(query: str = "") -> list[int]:
            r = cl.get(f"/api/v1/memories?{query}")
            assert r.status_code == 200, r.text
            return [m["id"] for m in r.json()]

        assert set(ids()) == {m1["id"], m2["id"], m3["id"]}
        assert ids("service=web-1") == [m1["id"]]
        assert set(ids("category=quirk")) == {m2["id"], m3["id"]}
        assert ids("active=false") == ids("active=0") == [m2["id"]]
        assert set(ids("active=true")) == set(ids("active=1")) == {m1["id"], m3["id"]}
        assert set(ids("active=")) == set(ids())
        assert len(ids("limit=1")) == 1 and len(ids("limit=2&offset=2")) == 1

        r = cl.patch(f"/api/v1/memories/{m1['id']}", json={"value": "disk at 75 %", "confidence": 0.5,
                                                           "active": False})
        assert r.status_code == 200, r.text
        edited = r.json()
        assert (edited["value"], edited["confidence"], edited["active"], edited["category"]) == (
            "disk at 75 %", 0.5, False, "baseline")
        assert edited["updated_at"] >= m1["updated_at"]
        r = cl.patch(f"/api/v1/memories/{m1['id']}", json={})  # nothing to change: still 200
        assert r.status_code == 200 and r.json()["value"] == "disk at 75 %"
        r = cl.patch(f"/api/v1/memories/{m1['id']}", json={"service": ""})  # empty service: none
        assert r.status_code == 200 and r.json()["service"] is None

        r = cl.delete(f"/api/v1/memories/{m2['id']}")
        assert r.status_code == 204 and r.content == b""
        assert m2["id"] not in ids()
        assert_error(cl.delete(f"/api/v1/memories/{m2['id']}"), 404, "not_found")
        assert_error(cl.patch(f"/api/v1/memories/{m2['id']}", json={"value": "x"}), 404, "not_found")
        assert_error(cl.patch("/api/v1/memories/abc", json={"value": "x"}), 404, "not_found")
        assert_error(cl.delete("/api/v1/memories/-3"), 404, "not_found")
        assert_error(cl.put(f"/api/v1/memories/{m1['id']}", json={}), 405, "method_not_allowed")
        assert_error(cl.get(f"/api/v1/memories/{m1['id']}"), 405, "method_not_allowed")


def test_memories_duplicates_are_409(app_server):
    srv = app_server()
    with srv.client() as cl:
        first = cl.post("/api/v1/memories", json={"category": "c", "value": "a b", "service": "s"}).json()
        other = cl.post("/api/v1/memories", json={"category": "c", "value": "x", "service": "s"}).json()
        nosvc = cl.post("/api/v1/memories", json={"category": "c", "value": "a b"})
        assert nosvc.status_code == 201  # another service (none) is another memory
        for dup in ({"category": "c", "value": "a b", "service": "s"},
                    {"category": "c", "value": "  a    b ", "service": " s "},  # normalised the same
                    {"category": "c", "value": "a b", "service": ""}):           # '' is no service
            body = assert_error(cl.post("/api/v1/memories", json=dup), 409, "conflict")
            assert "already exists" in body["detail"]
        assert_error(cl.patch(f"/api/v1/memories/{other['id']}", json={"value": "a b"}), 409, "conflict")
        values = sorted(m["value"] for m in cl.get("/api/v1/memories?service=s").json())
        assert values == ["a b", "x"] and first["id"] != other["id"]
    assert count(srv, "SELECT count(*) FROM memories") == 3


@pytest.mark.parametrize("body", [
    {}, {"category": "c"}, {"value": "v"}, {"category": "", "value": "v"}, {"category": "c", "value": "   "},
    {"category": "c", "value": "v", "confidence": 1.01}, {"category": "c", "value": "v", "confidence": -0.1},
    {"category": "c", "value": "v", "confidence": "high"}, {"category": "c", "value": "v", "active": "maybe"},
    {"category": "c", "value": "v", "colour": "red"}, {"category": "c" * 201, "value": "v"},
    {"category": "c", "value": "v" * 10_001}, {"category": "c", "value": 12}, {"category": ["c"], "value": "v"},
    {"category": "c", "value": "v", "service": {"a": 1}}, {"category": "c", "value": "v", "id": 5},
])
def test_memories_create_rejects_bad_bodies(app_server, body):
    srv = app_server()
    with srv.client() as cl:
        err = assert_error(cl.post("/api/v1/memories", json=body), 422, "invalid_body")
        assert all(set(p) == {"path", "message"} and p["path"].startswith("$") for p in err["detail"])
    assert count(srv, "SELECT count(*) FROM memories") == 0


@pytest.mark.parametrize("body", [
    {"json": {"value": ""}}, {"json": {"category": "  "}}, {"json": {"confidence": 2}},
    {"json": {"active": "maybe"}}, {"json": {"times_seen": 3}}, {"json": []}, {"content": b"value=x"},
    {"content": b"{"}, {"content": b"null"},
])
def test_memories_patch_rejects_bad_bodies(app_server, body):
    srv = app_server()
    with srv.client() as cl:
        m = cl.post("/api/v1/memories", json={"category": "c", "value": "v"}).json()
        err = assert_error(cl.patch(f"/api/v1/memories/{m['id']}", **body), 422)
        assert err["error"] in ("invalid_body", "invalid_json")
        assert cl.get("/api/v1/memories").json() == [m]  # unchanged


@pytest.mark.parametrize("field, limit", [("category", MEMORY_CATEGORY_MAX), ("value", MEMORY_VALUE_MAX),
                                          ("service", MEMORY_SERVICE_MAX)])
def test_memory_form_and_api_accept_the_same_lengths(app_server, field, limit):
    srv = app_server()
    fields = {"category": "c", "value": "v", "service": "s"}
    with srv.client(follow_redirects=False) as cl:
        too_long = {**fields, field: "é" * (limit + 1)}
        r = cl.post("/memories", data=too_long)
        assert r.status_code == 422 and "too long" in r.text
        assert_error(cl.post("/api/v1/memories", json=too_long), 422, "invalid_body")
        assert cl.post("/memories", data={**fields, field: "é" * limit}).status_code == 303
        assert cl.post("/api/v1/memories", json={**fields, field: "ü" * limit}).status_code == 201
    assert count(srv, "SELECT count(*) FROM memories") == 2


def test_memories_list_rejects_bad_parameters(app_server):
    srv = app_server()
    with srv.client() as cl:
        for query in ("active=maybe", "active=TRUE", "limit=0", "limit=2001", "offset=-1", "limit=x"):
            assert_error(cl.get(f"/api/v1/memories?{query}"), 422, "invalid_parameter")


@pytest.mark.parametrize("field", ["category", "value", "confidence", "active"])
def test_memories_patch_refuses_null(app_server, field):
    srv = app_server()
    with srv.client() as cl:
        m = cl.post("/api/v1/memories", json={"category": "c", "value": "v"}).json()
        r = cl.patch(f"/api/v1/memories/{m['id']}", json={field: None})
        after = cl.get("/api/v1/memories").json()
    assert after == [m], f"memory changed: {after}"
    assert_error(r, 422, "invalid_body")


# --- openapi.json -------------------------------------------------------------------------

def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if "$ref" in node else []
        return own + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_openapi_documents_every_route(app_server):
    srv = app_server()
    with srv.client() as cl:
        r = cl.get("/api/v1/openapi.json")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    doc = r.json()
    assert doc["openapi"].startswith("3.1") and doc["info"]["title"] and doc["info"]["version"]
    assert doc["servers"] == [{"url": "/api/v1"}]

    mounted = {route.path: {m.lower() for m in route.methods if m != "HEAD"} for route in routes.routes}
    documented = {path: set(ops) for path, ops in doc["paths"].items()}
    assert documented == mounted

    for ref in _refs(doc):  # every $ref resolves
        node = doc
        for part in ref.removeprefix("#/").split("/"):
            node = node[part]
    for path, ops in doc["paths"].items():
        placeholders = {seg[1:-1] for seg in path.split("/") if seg.startswith("{")}
        for method, op in ops.items():
            assert op["summary"], (path, method)
            assert any(code.startswith("2") for code in op["responses"]), (path, method)
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == placeholders, (path, method)
            assert all(p["required"] for p in op.get("parameters", []) if p["in"] == "path")
            for code, resp in op["responses"].items():
                if code[0] in "45":
                    assert resp["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
            if method in ("post", "patch") and path not in ("/sessions/{id}/stop", "/models/refresh"):
                assert "requestBody" in op, (path, method)

    schemas = doc["components"]["schemas"]
    for name, model in (("RunRequest", runs.RunRequest), ("MemoryCreate", memories.MemoryCreate),
                        ("MemoryPatch", memories.MemoryPatch)):
        assert set(schemas[name]["properties"]) == set(model.model_fields), name
        assert set(schemas[name].get("required", [])) == {k for k, f in model.model_fields.items() if f.is_required()}
        assert schemas[name]["additionalProperties"] is False  # the models forbid extra fields
        for field, prop in model.model_json_schema()["properties"].items():  # the same limits (app/web/limits.py)
            for key in ("maxLength", "minimum", "maximum"):
                checked = [p[key] for p in (prop, *prop.get("anyOf", [])) if key in p]
                assert [schemas[name]["properties"][field].get(key)] == (checked or [None]), (name, field, key)
    # the documented query parameters are the ones the handlers read
    params = {p["name"] for p in doc["paths"]["/sessions"]["get"]["parameters"]}
    assert params == {"status", "tier", "limit", "offset"}
    params = {p["name"] for p in doc["paths"]["/events"]["get"]["parameters"]}
    assert params == {"level", "service", "session", "limit", "offset"}


# --- /healthz and /metrics ----------------------------------------------------------------

def test_healthz(app_server):
    srv = app_server()
    with srv.client() as cl:
        r = cl.get("/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok" and r.json()["storage"] == "ok"  # tests/web/test_healthz.py


def test_metrics_prometheus_text(app_server):
    srv = app_server()
    ingest(srv, "c_structured", tier=1)
    ingest(srv, "d_invalid_structured", tier=2)
    with srv.client() as cl:
        r = cl.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    for name in ("tierops_sessions", "tierops_sse_clients", "tierops_ingest_lines_total", "tierops_cycle_running"):
        assert f"# TYPE {name} gauge" in r.text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(r.text) for s in fam.samples}
    assert samples[("tierops_sessions", (("status", "completed"), ("tier", "1")))] == 1
    assert samples[("tierops_sessions", (("status", "failed"), ("tier", "2")))] == 1
    assert samples[("tierops_ingest_lines_total", ())] == 7 + 15
    assert samples[("tierops_sse_clients", ())] == 0
    assert samples[("tierops_cycle_running", ())] == 0 and samples[("tierops_cycles_running", ())] == 0


# --- errors are JSON, garbage is never a 500 -----------------------------------------------

def test_unknown_paths_and_methods_are_json(app_server):
    srv = app_server()
    with srv.client() as cl:
        assert_error(cl.get("/api/v1/nope"), 404, "not_found")
        assert_error(cl.get("/api/v2/sessions"), 404, "not_found")
        assert_error(cl.put("/api/v1/sessions"), 405, "method_not_allowed")
        assert_error(cl.delete("/api/v1/runs"), 405, "method_not_allowed")
        assert_error(cl.post("/api/v1/openapi.json"), 405, "method_not_allowed")


FUZZ = [
    ("GET", "/api/v1/sessions?limit=" + "9" * 40, {}),
    ("GET", "/api/v1/sessions?tier=%D9%A1", {}),  # an Arabic-Indic one: int() reads it as 1
    ("GET", "/api/v1/sessions?status=%00", {}),
    ("GET", "/api/v1/sessions?status=%F0%9F%92%A5&tier=-0", {}),
    ("GET", "/api/v1/sessions?offset=%20", {}),
    ("GET", "/api/v1/sessions/%00", {}),
    ("GET", "/api/v1/sessions/1%20OR%201=1", {}),
    ("GET", "/api/v1/sessions/1/activity?after=" + "1" * 5000, {}),
    ("GET", "/api/v1/sessions/1/activity?limit=-99999999999", {}),
    ("GET", "/api/v1/events?service=%27%20OR%201%3D1%20--", {}),
    ("GET", "/api/v1/events?service=" + "x" * 20_000, {}),
    ("GET", "/api/v1/events?level=%E2%80%AE", {}),
    ("GET", "/api/v1/memories?category=%E2%80%AE%F0%9F%92%A5&service=%00", {}),
    ("POST", "/api/v1/memories", {}),  # no body at all
    ("POST", "/api/v1/memories", {"content": b""}),
    ("POST", "/api/v1/memories", {"content": b"\x00\x01\x02"}),
    ("POST", "/api/v1/memories", {"content": b'{"category": "c", "value": "\\ud800"}'}),  # lone surrogate
    ("POST", "/api/v1/memories", {"content": b'{"category": "c", "value": "v", "confidence": NaN}'}),
    ("POST", "/api/v1/memories", {"content": b'{"category": "c", "value": "v", "confidence": Infinity}'}),
    ("POST", "/api/v1/memories", {"content": b'{"category": "c", "value": "v", "confidence": 1' + b"0" * 400 + b"}"}),
    ("POST", "/api/v1/memories", {"content": b'{"category": "c", "value": "v", "active": 2}'}),
    ("POST", "/api/v1/memories", {"json": {"category": "c\u0000", "value": "v", "confidence": -1e308}}),
    ("POST", "/api/v1/memories", {"content": b"x" * 200_000, "headers": {"content-type": "text/plain"}}),
    ("POST", "/api/v1/runs", {"content": b'{"tier": 1, "tier": 9}'}),
    ("POST", "/api/v1/runs", {"content": b'{"tier": "\\u0661\\u0661"}'}),
    ("POST", "/api/v1/runs", {"json": {"tier": 3.0000001}}),
    ("POST", "/api/v1/runs", {"json": {"tier": True, "prompt": None, "x": None}}),
    ("PATCH", "/api/v1/memories/1", {"json": {"confidence": 1e-400, "value": "\u202e"}}),
    ("PATCH", "/api/v1/memories/%F0%9F%92%A5", {"json": {}}),
    ("PATCH", "/api/v1/memories/-1", {"json": {"value": "v"}}),
    ("PATCH", "/api/v1/memories/0", {}),
    ("DELETE", "/api/v1/memories/1e3", {}),
    ("DELETE", "/api/v1/memories/" + "9" * 5000, {}),
    ("POST", "/api/v1/sessions/-1/stop", {"json": {"force": True}}),
    ("POST", "/api/v1/sessions/%00/stop", {}),
    ("OPTIONS", "/api/v1/sessions", {}),
]


def test_garbage_never_yields_a_500(app_server):
    srv = app_server(stages=[hang_stage()])
    ingest(srv, "c_structured")
    seen = []
    for method, url, kwargs in FUZZ:
        with srv.client() as cl:  # a fresh connection each: a 500 would close a kept-alive one
            r = cl.request(method, url, **kwargs)
        seen.append((method, url[:60], r.status_code))
        assert r.status_code < 500, (method, url[:80], r.status_code, r.text[:300])
        if r.status_code >= 400:
            assert_error(r, r.status_code)
    assert not srv.state.supervisor.busy, "a fuzzed POST /runs started a cycle"
    assert count(srv, "SELECT count(*) FROM sessions") == 1
    assert {s for _, _, s in seen} <= {200, 201, 204, 404, 405, 409, 415, 422}


@pytest.mark.parametrize("method,path", [
    ("GET", "/api/v1/sessions/{}"), ("GET", "/api/v1/sessions/{}/activity"), ("GET", "/api/v1/sessions/{}/result"),
    ("POST", "/api/v1/sessions/{}/stop"), ("PATCH", "/api/v1/memories/{}"), ("DELETE", "/api/v1/memories/{}"),
])
def test_huge_path_ids_are_404(app_server, method, path):
    srv = app_server()
    with srv.client() as cl:
        r = cl.request(method, path.format(HUGE), json={} if method == "PATCH" else None)
    assert_error(r, 404, "not_found")


@pytest.mark.parametrize("path", ["/api/v1/memories", "/api/v1/runs"])
def test_deeply_nested_json_is_422(app_server, path):
    srv = app_server(stages=[hang_stage()])
    with srv.client() as cl:
        r = cl.post(path, content=b"[" * 100_000 + b"]" * 100_000)
    assert_error(r, 422, "invalid_json")
