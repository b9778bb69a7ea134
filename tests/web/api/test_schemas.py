"""Output contracts over the API: the schema registry, a run's output contract, and the result endpoint.

The app runs in process (``app_server``) with the real supervisor and the fake CLI; every session
here is a real subprocess replaying stream-json.
"""

from __future__ import annotations

import json

from app.output.spec import AGENT_RESPONSE_SHA256, schema_sha256
from tests.fakes.claude_control import new_session_id, structured_stream
from tests.web.api.test_routes import assert_error, ok_stage, wait_finished

VERDICT = {"type": "object", "additionalProperties": False, "required": ["ok", "why"],
           "properties": {"ok": {"type": "boolean"}, "why": {"type": "string"}}}


def test_registry_create_list_get_delete(app_server):
    srv = app_server()
    with srv.client() as cl:
        r = cl.post("/api/v1/schemas", json={"name": "verdict-v1", "description": "yes or no", "schema": VERDICT})
        assert r.status_code == 201, r.text
        assert r.headers["location"] == "/api/v1/schemas/verdict-v1"
        created = r.json()
        assert created["body"] == VERDICT and created["sha256"] == schema_sha256(VERDICT) and created["used_by"] == 0
        assert [s["name"] for s in cl.get("/api/v1/schemas").json()] == ["verdict-v1"]
        assert cl.get("/api/v1/schemas/verdict-v1").json() == created
        assert_error(cl.post("/api/v1/schemas", json={"name": "verdict-v1", "schema": {"type": "object"}}), 409,
                     "conflict")
        assert cl.delete("/api/v1/schemas/verdict-v1").status_code == 204
        assert_error(cl.delete("/api/v1/schemas/verdict-v1"), 404, "not_found")
        assert_error(cl.get("/api/v1/schemas/verdict-v1"), 404, "not_found")


def test_registry_refuses_bad_bodies_and_bad_schemas(app_server):
    srv = app_server()
    with srv.client() as cl:
        for body in ({"name": "no schema"}, {"name": "a b", "schema": VERDICT}, {"name": "", "schema": VERDICT},
                     {"name": "x", "schema": [1]}, {"name": "x", "schema": VERDICT, "extra": 1}):
            assert_error(cl.post("/api/v1/schemas", json=body), 422, "invalid_body")
        refused = assert_error(cl.post("/api/v1/schemas", json={"name": "bad", "schema": {"type": "array"}}), 422,
                               "invalid_output_schema")
        assert refused["detail"] and {"path", "rule", "message"} <= set(refused["detail"][0])
        not_schema = assert_error(cl.post("/api/v1/schemas", json={"name": "bad", "schema": {
            "type": "object", "properties": {"a": {"type": "no-such-type"}}}}), 422, "invalid_output_schema")
        assert any(p["path"].startswith("$.properties.a") for p in not_schema["detail"]), not_schema
        assert cl.get("/api/v1/schemas").json() == []  # nothing refused was stored


def test_a_run_with_an_inline_schema_records_it_and_routes_nothing(app_server):
    answer = {"ok": False, "why": "disk full"}
    srv = app_server(stages=[{"lines": structured_stream(new_session_id(), answer)}])
    with srv.client() as cl:
        r = cl.post("/api/v1/runs", json={"prompt": "is the disk ok?", "output_schema": VERDICT, "max_retries": 0})
        assert r.status_code == 202, r.text
        row = wait_finished(cl, r.json()["id"])
        assert row["status"] == "completed" and row["schema_source"] == "inline"
        assert row["schema_sha256"] == schema_sha256(VERDICT) and row["output_schema"] == VERDICT
        sent = json.loads(srv.fake.last()["parsed"]["json_schema"])
        assert sent == VERDICT  # the CLI enforced this run's schema, not the default one
        result = cl.get(f"/api/v1/sessions/{row['id']}/result").json()
        assert result["result_data"] == answer and "result_text" not in result and "failure" not in result
        assert result["schema"] == {"source": "inline", "name": None, "sha256": schema_sha256(VERDICT)}
        assert result["validation"] == {"valid": True, "errors": []} and result["degraded"] is False
        # not the agent-response contract: no events, memories or escalation from it
        assert cl.get(f"/api/v1/events?session={row['id']}").json() == []
        assert row["escalation_needed"] is None


def test_a_named_schema_wins_over_the_default_and_an_unknown_name_is_422(app_server):
    srv = app_server(stages=[{"lines": structured_stream(new_session_id(), {"ok": True, "why": "fine"})}])
    with srv.client() as cl:
        assert cl.post("/api/v1/schemas", json={"name": "verdict", "schema": VERDICT}).status_code == 201
        assert_error(cl.post("/api/v1/runs", json={"output_schema_name": "nope"}), 422, "invalid_output_schema")
        assert_error(cl.post("/api/v1/runs", json={"output_schema": {"type": "array"}}), 422, "invalid_output_schema")
        assert srv.fake.invocations() == []  # refused before any CLI started
        r = cl.post("/api/v1/runs", json={"output_schema_name": "verdict"})
        row = wait_finished(cl, r.json()["id"])
        assert (row["schema_source"], row["schema_name"]) == ("named", "verdict")
        assert cl.get("/api/v1/schemas/verdict").json()["used_by"] == 1
        cl.delete("/api/v1/schemas/verdict")
        again = cl.get(f"/api/v1/sessions/{row['id']}").json()
        assert again["output_schema"] == VERDICT  # kept after the name is gone


def test_inline_wins_over_named(app_server):
    srv = app_server(stages=[{"lines": structured_stream(new_session_id(), {"ok": True, "why": "x"})}])
    with srv.client() as cl:
        cl.post("/api/v1/schemas", json={"name": "other", "schema": {"type": "object"}})
        r = cl.post("/api/v1/runs", json={"output_schema": VERDICT, "output_schema_name": "other"})
        row = wait_finished(cl, r.json()["id"])
        assert row["schema_source"] == "inline" and row["schema_sha256"] == schema_sha256(VERDICT)


def test_the_default_contract_is_recorded_and_routed(app_server):
    srv = app_server(stages=[ok_stage()])
    with srv.client() as cl:
        row = wait_finished(cl, cl.post("/api/v1/runs", json={}).json()["id"])
        assert (row["schema_source"], row["schema_sha256"]) == ("default", AGENT_RESPONSE_SHA256)
        result = cl.get(f"/api/v1/sessions/{row['id']}/result").json()
        assert result["schema"]["source"] == "default" and result["result_data"]["summary"]
        assert cl.get(f"/api/v1/events?session={row['id']}").json()  # routed


def test_a_failed_validation_is_reported_with_the_last_output(app_server):
    bad = {"ok": "maybe"}
    srv = app_server(stages=[{"lines": structured_stream(new_session_id(), bad)}])
    with srv.client() as cl:
        row = wait_finished(cl, cl.post("/api/v1/runs", json={"output_schema": VERDICT, "max_retries": 0})
                            .json()["id"])
        result = cl.get(f"/api/v1/sessions/{row['id']}/result").json()
        assert "result_data" not in result and "result_text" not in result  # a schema: never free text
        failure = result["failure"]
        assert failure["type"] == "output_schema_validation_failed" and failure["attempts"] == 1
        assert failure["last_output"] == bad
        assert {e["path"] for e in failure["validation_errors"]} >= {"$.ok", "$"}
        assert result["output_attempts"][0]["valid"] is False
