"""The incidents API against the app in process (tests/web/conftest.py ``app_server``).

Incidents are made the way the engine makes them: real tier-0 session rows and
``app.store.incidents.observe`` on the server's own database. Covered: the list and its filters,
one incident with its timeline and the actions proposed for it, acknowledge/resolve/silence and
their errors (404, 409, 415, 422), and who is recorded for each way a request can be
authenticated.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest

from app.clock import utcnow
from app.engine import incidents as incident_engine
from app.output.contract import AgentResponse
from app.output.route import from_structured
from app.store import findings
from app.store import incidents as incident_store
from app.store import sessions as session_store
from app.store.incidents import Finding, Observation, ProbeResult
from app.web.api import incidents as incidents_api
from app.web.auth import COOKIE, new_cookie
from tests.web.api.test_routes import HUGE, assert_error

TOKEN = "incident-token-0123456789"


def _probe_failing(*checks: tuple[str, str, str, str]) -> Observation:
    """Checks (name, service, severity, message) failing, with their probe results; "dns" passes."""
    return Observation(
        findings=[Finding(key=f"check:{name}", severity=sev, message=msg, service=svc, check_name=name, origin="probe")
                  for name, svc, sev, msg in checks],
        probe_results=[*(ProbeResult(name, "down" if sev == "critical" else "degraded", svc, 12.0, msg)
                         for name, svc, sev, msg in checks), ProbeResult("dns", "healthy", None, 1.5, "ok")],
        passing_checks=["dns"])


async def seed_incidents(db: Any) -> dict[str, int]:
    """Three cycles of tier-0 sessions: ``api`` fails twice (critical, 2 occurrences), ``disk``
    once (warning, service db), ``cache`` fails then passes (resolved). Sessions end interrupted
    (no CLI ran). Returns the incident ids by check and the sessions by cycle."""
    ids: dict[str, int] = {}
    cycles = [
        _probe_failing(("api", "api", "critical", "HTTP 500 from /health"), ("cache", "cache", "warning", "miss 80%")),
        _probe_failing(("api", "api", "critical", "HTTP 502 from /health"), ("disk", "db", "warning", "disk 91% used")),
    ]
    cycles[1].passing_checks.append("cache")
    for chain, obs in enumerate(cycles, start=1):
        pk = await session_store.create_session(db, tier=0, model="tierops-probe", prompt="x", trigger="schedule")
        ids[f"session{chain}"] = pk
        for change in await incident_store.observe(db, pk, chain, obs, flap_count=3, flap_window_s=3600):
            ids[change.incident["check_name"] or change.incident["key"]] = change.incident["id"]
    await session_store.interrupt_running(db, "test data: no CLI ran")
    return ids


def seeded(srv: Any) -> dict[str, int]:
    return srv.run_async(lambda st: seed_incidents(st.db))


HOSTILE_DETAIL = "<script>alert('detail')</script>" + "z" * 100_000


async def propose(db: Any, settings: Any, actions: list[tuple[str, str | None, str | None]], *, tier: int = 2,
                  dry_run: bool = False) -> int:
    """A session of ``tier`` reporting ``check:api`` failing again and proposing ``actions``
    ((kind, service, detail)), routed and applied to the incidents as a chain does (the store's
    ``write_routed``, then ``app.engine.incidents.track``, which links the proposals)."""
    output = {"summary": "api still down", "escalation": {"needed": False}, "services_checked": [],
              "events": [{"level": "critical", "service": "api", "message": "HTTP 503", "key": "check:api"}],
              "actions": [{"kind": k, "service": svc, "result": "proposed", "detail": d} for k, svc, d in actions]}
    pk = await session_store.create_session(db, tier=tier, trigger="manual", dry_run=dry_run)
    async with db.write() as conn:
        await findings.write_routed(conn, pk, from_structured(AgentResponse.model_validate(output)), utcnow(), 0.7,
                                    0.3)
    row: Any = {"id": pk, "tier": tier, "source": "structured_output", "structured_output": output}
    await incident_engine.track(db, settings, row, chain_id=1000 + pk)
    return pk


def proposed(srv: Any, actions: list[tuple[str, str | None, str | None]], **kw: Any) -> int:
    return srv.run_async(lambda st: propose(st.db, st.settings, actions, **kw))


# --- reading ----------------------------------------------------------------------------------

def test_list_filters_and_paging(app_server):
    srv = app_server()
    ids = seeded(srv)
    with srv.client() as cl:
        everything = cl.get("/api/v1/incidents")
        assert everything.status_code == 200
        rows = everything.json()
        assert isinstance(rows, list)  # a bare list, like every other list endpoint
        # newest activity first: the second cycle touched api, disk and cache (resolved) last
        assert {r["id"] for r in rows} == {ids["api"], ids["disk"], ids["cache"]}
        assert [r["last_seen_at"] for r in rows] == sorted((r["last_seen_at"] for r in rows), reverse=True)
        by_id = {r["id"]: r for r in rows}
        api = by_id[ids["api"]]
        assert (api["key"], api["service"], api["severity"], api["status"], api["occurrences"]) == (
            "check:api", "api", "critical", "open", 2)
        assert api["evidence"] == "HTTP 502 from /health" and api["title"] == "HTTP 500 from /health"
        assert api["flapping"] is False and api["escalations"] == 0
        assert by_id[ids["cache"]]["status"] == "resolved" and by_id[ids["cache"]]["resolved_by"] == "auto"
        assert by_id[ids["cache"]]["duration_s"] >= 0

        def listed(query: str) -> set[int]:
            r = cl.get(f"/api/v1/incidents?{query}")
            assert r.status_code == 200, r.text
            return {row["id"] for row in r.json()}

        assert listed("status=unresolved") == {ids["api"], ids["disk"]}
        assert listed("status=open") == {ids["api"], ids["disk"]}
        assert listed("status=resolved") == {ids["cache"]}
        assert listed("status=acknowledged") == set()
        assert listed("service=db") == {ids["disk"]}
        assert listed("service=db&status=resolved") == set()
        assert listed("status=&service=") == {ids["api"], ids["disk"], ids["cache"]}  # empty = no filter
        assert len(listed("limit=1")) == 1
        assert listed("limit=2") | listed("limit=2&offset=2") == {ids["api"], ids["disk"], ids["cache"]}
        assert listed("offset=3") == set()


@pytest.mark.parametrize("query", ["status=closed", "status=OPEN", "limit=0", "limit=1001", "limit=x", "offset=-1",
                                   "offset=" + HUGE, "severity=critical"])
def test_list_rejects_bad_parameters(app_server, query):
    srv = app_server()
    with srv.client() as cl:
        body = assert_error(cl.get(f"/api/v1/incidents?{query}"), 422, "invalid_parameter")
    assert query.split("=")[0] in body["detail"]


def test_detail_with_timeline(app_server):
    srv = app_server()
    ids = seeded(srv)
    with srv.client() as cl:
        r = cl.get(f"/api/v1/incidents/{ids['api']}")
        assert r.status_code == 200
        body = r.json()
        assert body["id"] == ids["api"] and body["key"] == "check:api"
        timeline = body["timeline"]
        assert [t["kind"] for t in timeline] == ["opened", "seen"]
        assert [t["session_pk"] for t in timeline] == [ids["session1"], ids["session2"]]
        assert all(t["tier"] == 0 for t in timeline)  # tier 0 is a tier, not "no tier"
        assert [(t["check_name"], t["check_status"], t["latency_ms"]) for t in timeline] == [
            ("api", "down", 12.0), ("api", "down", 12.0)]
        cache = cl.get(f"/api/v1/incidents/{ids['cache']}").json()
        assert [t["kind"] for t in cache["timeline"]] == ["opened", "resolved"]
        assert cache["timeline"][1]["detail"] == "check cache passed again"
        assert_error(cl.get("/api/v1/incidents/999"), 404, "not_found")
        assert_error(cl.get(f"/api/v1/incidents/{HUGE}"), 404, "not_found")
        assert_error(cl.get("/api/v1/incidents/abc"), 404, "not_found")
        assert_error(cl.get(f"/api/v1/incidents/{ids['api']}?verbose=1"), 422, "invalid_parameter")


def test_detail_and_session_carry_the_proposals(app_server):
    srv = app_server()
    ids = seeded(srv)
    with srv.client() as cl:
        assert cl.get(f"/api/v1/incidents/{ids['api']}").json()["proposals"] == []
    first = proposed(srv, [("Restart", "api", "after the deploy"), ("cleanup", None, None)])
    second = proposed(srv, [("<b>redeploy</b>", "<i>api</i>", HOSTILE_DETAIL)], tier=3, dry_run=True)
    with srv.client() as cl:
        body = cl.get(f"/api/v1/incidents/{ids['api']}").json()
        got = [(p["session_pk"], p["tier"], p["dry_run"], p["kind"], p["service"], p["detail"])
               for p in body["proposals"]]
        assert got == [  # newest first; the only incident these sessions touched takes the host-wide one too
            (second, 3, True, "<b>redeploy</b>", "<i>api</i>", HOSTILE_DETAIL),
            (first, 2, False, "cleanup", None, None),
            (first, 2, False, "restart", "api", "after the deploy")]  # kinds routed lower-cased
        assert all(p["incident_id"] == ids["api"] for p in body["proposals"])
        assert cl.get(f"/api/v1/incidents/{ids['disk']}").json()["proposals"] == []
        session = cl.get(f"/api/v1/sessions/{first}").json()
        assert [(p["kind"], p["service"]) for p in session["proposals"]] == [("restart", "api"), ("cleanup", None)]
        assert cl.get(f"/api/v1/sessions/{ids['session1']}").json()["proposals"] == []


def _resolved(schemas: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``schema``, or the component its ``$ref`` names (types nested in answers are components)."""
    ref = schema.get("$ref", "")
    return schemas[ref.removeprefix("#/components/schemas/")] if ref else schema


def test_openapi_documents_the_proposals(app_server):
    srv = app_server()
    with srv.client() as cl:
        schemas = cl.get("/api/v1/openapi.json").json()["components"]["schemas"]
    for name in ("IncidentDetail", "SessionDetail"):
        proposals = schemas[name]["properties"]["proposals"]
        assert proposals["type"] == "array" and "proposals" in schemas[name]["required"]
        item = _resolved(schemas, proposals["items"])
        assert set(item["required"]) == {"id", "session_pk", "tier", "dry_run", "kind", "service", "detail",
                                         "created_at", "incident_id"}
    cooldown_item = _resolved(schemas, schemas["Cooldowns"]["properties"]["proposals"]["items"])
    assert {"allowed", "limit", "remaining", "next_allowed_at", "kind", "session_pk"} <= set(cooldown_item["required"])


# --- acting -----------------------------------------------------------------------------------

def test_ack_then_resolve(app_server):
    srv = app_server()
    ids = seeded(srv)
    pk = ids["api"]
    with srv.client() as cl:
        r = cl.post(f"/api/v1/incidents/{pk}/ack", json={"note": "  looking at the load balancer  ", "by": "alice"})
        assert r.status_code == 200, r.text
        row = r.json()
        assert row["status"] == "acknowledged" and row["acknowledged_by"] == "alice (no token configured)"
        assert row["note"] == "looking at the load balancer" and row["acknowledged_at"]
        # acknowledging twice is a conflict; the incident is unchanged
        body = assert_error(cl.post(f"/api/v1/incidents/{pk}/ack"), 409, "conflict")
        assert "acknowledged" in body["detail"]
        assert cl.get("/api/v1/incidents?status=acknowledged").json()[0]["id"] == pk
        r = cl.post(f"/api/v1/incidents/{pk}/resolve")  # no body at all: both fields are optional
        assert r.status_code == 200, r.text
        row = r.json()
        assert row["status"] == "resolved" and row["resolved_by"] == "local user (no token configured)"
        assert row["duration_s"] is not None and row["duration_s"] >= 0
        assert row["note"] == "looking at the load balancer"  # a note is kept when none is given
        assert_error(cl.post(f"/api/v1/incidents/{pk}/resolve", json={}), 409, "conflict")
        assert_error(cl.post(f"/api/v1/incidents/{pk}/ack", json={}), 409, "conflict")
        timeline = cl.get(f"/api/v1/incidents/{pk}").json()["timeline"]
        assert [(t["kind"], t["actor"]) for t in timeline][-2:] == [
            ("acknowledged", "alice (no token configured)"), ("resolved", "local user (no token configured)")]
        assert timeline[-2]["detail"] == "looking at the load balancer"
        assert_error(cl.post("/api/v1/incidents/999/ack", json={}), 404, "not_found")
        assert_error(cl.post("/api/v1/incidents/999/resolve"), 404, "not_found")
        assert_error(cl.post(f"/api/v1/incidents/{HUGE}/resolve"), 404, "not_found")


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_silence_with_a_duration_or_an_iso_time(app_server):
    srv = app_server()
    ids = seeded(srv)
    with srv.client() as cl:
        before = datetime.now(UTC)
        r = cl.post(f"/api/v1/incidents/{ids['api']}/silence", json={"until": "2h", "note": "deploy window"})
        after = datetime.now(UTC)
        assert r.status_code == 200, r.text
        row = r.json()
        assert _iso(before + timedelta(hours=2)) <= row["silenced_until"] <= _iso(after + timedelta(hours=2))
        assert row["silenced_by"] == "local user (no token configured)" and row["status"] == "open"
        assert row["note"] == "deploy window"
        # an ISO time with an offset is stored in UTC
        target = (datetime.now(UTC) + timedelta(days=3)).replace(microsecond=0)
        local = target.astimezone(timezone(timedelta(hours=2))).isoformat()
        r = cl.post(f"/api/v1/incidents/{ids['disk']}/silence", json={"until": local, "by": "bob"})
        assert r.status_code == 200, r.text
        assert r.json()["silenced_until"] == _iso(target) and r.json()["silenced_by"] == "bob (no token configured)"
        # a resolved incident can be silenced too: it holds for the key when it reopens
        assert cl.post(f"/api/v1/incidents/{ids['cache']}/silence", json={"until": "30m"}).status_code == 200
        timeline = cl.get(f"/api/v1/incidents/{ids['api']}").json()["timeline"]
        assert timeline[-1]["kind"] == "silenced" and timeline[-1]["detail"].startswith(
            f"until {row['silenced_until']}: deploy window")


@pytest.mark.parametrize("until,status,words", [
    ("91d", 422, "longer than a silence may last"),
    ("0m", 422, "more than zero"),
    ("2026-11-23T18:00:00", 422, "no time zone"),
    ("2026-13-45T18:00:00Z", 422, "until must be"),
    ("9999-01-01T00:00:00Z", 422, "more than 90 days"),
    ("2020-01-01T00:00:00Z", 409, "not in the future"),
    ("2 hours", 422, "$.until"),  # the documented shape (a pattern), refused by the model
    ("", 422, "$.until"),
])
def test_silence_refuses_a_bad_end(app_server, until, status, words):
    srv = app_server()
    ids = seeded(srv)
    with srv.client() as cl:
        body = assert_error(cl.post(f"/api/v1/incidents/{ids['api']}/silence", json={"until": until}), status)
        assert words in str(body["detail"]), body
        assert cl.get(f"/api/v1/incidents/{ids['api']}").json()["silenced_until"] is None


@pytest.mark.parametrize("body,where", [
    ({"note": "x" * 2001}, "$.note"),
    ({"by": "x" * 101}, "$.by"),
    ({"by": "alice\nmallory"}, "$.by"),
    ({"note": 5}, "$.note"),
    ({"by": True}, "$.by"),
    ({"until": "2h"}, "$.until"),  # silence only
    ({"note": "n", "extra": 1}, "$.extra"),
    ([], "$"),
])
def test_action_bodies_are_validated(app_server, body, where):
    srv = app_server()
    ids = seeded(srv)
    with srv.client() as cl:
        detail = assert_error(cl.post(f"/api/v1/incidents/{ids['api']}/ack", json=body), 422, "invalid_body")["detail"]
        assert where in [p["path"] for p in detail], detail
        assert cl.get(f"/api/v1/incidents/{ids['api']}").json()["status"] == "open"


def test_action_body_errors_say_what(app_server):
    srv = app_server()
    ids = seeded(srv)
    url = f"/api/v1/incidents/{ids['api']}"
    with srv.client() as cl:
        assert_error(cl.post(url + "/silence"), 422, "invalid_body")  # silence needs a body
        assert_error(cl.post(url + "/silence", json={"note": "n"}), 422, "invalid_body")
        assert_error(cl.post(url + "/ack", content=b"{not json"), 422, "invalid_json")
        assert_error(cl.post(url + "/ack", content=b'{"note": "x"}', headers={"content-type": "text/plain"}),
                     415, "unsupported_media_type")
        assert_error(cl.post(url + "/ack", content=b"x" * 2_000_000, headers={"content-type": "application/json"}),
                     413, "too_large")
        assert_error(cl.post(url + "/ack?force=1", json={}), 422, "invalid_parameter")
        assert_error(cl.get(url + "/ack"), 405, "method_not_allowed")
        # the body is checked before the incident: a bad body on a missing incident is still 422
        assert_error(cl.post("/api/v1/incidents/999/ack", json={"note": 1}), 422, "invalid_body")
        assert_error(cl.post("/api/v1/incidents/999/silence", json={"until": "91d"}), 404, "not_found")
        # blank fields are no value
        row = cl.post(url + "/ack", json={"note": "   ", "by": " "}).json()
        assert row["acknowledged_by"] == "local user (no token configured)" and row["note"] is None


# --- who acted ----------------------------------------------------------------------------------

def test_actor_records_how_the_request_was_authenticated(app_server):
    srv = app_server(token=TOKEN)
    ids = seeded(srv)
    with srv.client() as cl:  # bearer token
        assert cl.post(f"/api/v1/incidents/{ids['api']}/ack", json={"by": "alice"}).json()[
            "acknowledged_by"] == "alice via API token"
        assert cl.post(f"/api/v1/incidents/{ids['disk']}/ack").json()["acknowledged_by"] == "API token"
    cookie = {COOKIE: new_cookie(TOKEN)}
    with srv.client(auth=False, cookies=cookie) as cl:  # the dashboard's login cookie
        r = cl.post(f"/api/v1/incidents/{ids['api']}/silence", json={"until": "1h", "by": "carol"})
        assert r.status_code == 200, r.text
        assert r.json()["silenced_by"] == "carol via dashboard"
        assert cl.post(f"/api/v1/incidents/{ids['api']}/resolve").json()["resolved_by"] == "dashboard"
    with srv.client(auth=False) as cl:  # neither: refused before anything happens
        assert_error(cl.post(f"/api/v1/incidents/{ids['disk']}/resolve"), 401, "unauthorized")
        assert_error(cl.get("/api/v1/incidents"), 401, "unauthorized")
    with srv.client(auth=False, headers={"Authorization": "Bearer wrong"}, cookies=cookie) as cl:
        # a wrong bearer token next to a valid cookie: the cookie is what let it in
        assert cl.post(f"/api/v1/incidents/{ids['disk']}/resolve").json()["resolved_by"] == "dashboard"


def test_cross_site_actions_are_refused(app_server):
    srv = app_server()
    ids = seeded(srv)
    with srv.client(headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}) as cl:
        assert_error(cl.post(f"/api/v1/incidents/{ids['api']}/ack", json={}), 403, "csrf_refused")
    with srv.client() as cl:
        assert cl.get(f"/api/v1/incidents/{ids['api']}").json()["status"] == "open"


def test_garbage_never_yields_a_500(app_server):
    srv = app_server()
    ids = seeded(srv)
    url = f"/api/v1/incidents/{ids['api']}"
    garbage: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", url + "/ack", {"content": b'{"note": "\\ud800"}'}),  # a lone surrogate
        ("POST", url + "/ack", {"content": b'{"by": "\\u0000"}'}),
        ("POST", url + "/ack", {"content": b'{"note": NaN}'}),
        ("POST", url + "/silence", {"json": {"until": "9" * 9 + "d"}}),
        ("POST", url + "/silence", {"json": {"until": "0001-01-01T00:00:00+23:59"}}),
        ("POST", url + "/silence", {"json": {"until": "2026-11-23T18:00:00+99:00"}}),
        ("POST", url + "/silence", {"content": b"[" * 50_000 + b"]" * 50_000}),
        ("GET", "/api/v1/incidents?service=%00%27%20OR%201=1", {}),
        ("GET", "/api/v1/incidents?limit=1e3", {}),
        ("GET", "/api/v1/incidents/%F0%9F%92%A5", {}),
    ]
    for method, target, kwargs in garbage:
        with srv.client() as cl:
            r = cl.request(method, target, **kwargs)
        assert r.status_code < 500, (target, kwargs, r.status_code, r.text[:300])
        if r.status_code >= 400:
            assert_error(r, r.status_code)


# --- the document ---------------------------------------------------------------------------

def test_openapi_documents_the_incident_operations(app_server):
    srv = app_server()
    with srv.client() as cl:
        doc = cl.get("/api/v1/openapi.json").json()
    paths = doc["paths"]
    assert set(paths["/incidents"]) == {"get"} and set(paths["/incidents/{id}"]) == {"get"}
    for action in ("ack", "resolve", "silence"):
        op = paths[f"/incidents/{{id}}/{action}"]["post"]
        assert {"200", "404", "409", "413", "415", "422"} <= set(op["responses"])
        assert op["requestBody"]["required"] is (action == "silence")
    assert {p["name"] for p in paths["/incidents"]["get"]["parameters"]} == {"status", "service", "limit", "offset"}
    schemas = doc["components"]["schemas"]
    assert schemas["IncidentDetail"]["properties"]["timeline"]["type"] == "array"
    for name, model in (("IncidentAction", incidents_api.IncidentAction),
                        ("IncidentSilence", incidents_api.IncidentSilence)):
        assert schemas[name]["additionalProperties"] is False
        assert set(schemas[name]["properties"]) == set(model.model_fields), name
        assert set(schemas[name].get("required", [])) == {k for k, f in model.model_fields.items() if f.is_required()}
        for field, prop in model.model_json_schema()["properties"].items():  # the same limits
            for key in ("maxLength", "minLength", "pattern"):
                checked = [p[key] for p in (prop, *prop.get("anyOf", [])) if key in p]
                assert [schemas[name]["properties"][field].get(key)] == (checked or [None]), (name, field, key)


def test_incidents_with_an_empty_database(app_server):
    srv = app_server()
    with srv.client() as cl:
        assert cl.get("/api/v1/incidents").json() == []
        assert cl.get("/api/v1/incidents?status=unresolved").json() == []
        r: httpx.Response = cl.post("/api/v1/incidents/1/silence", json={"until": "2020-01-01T00:00:00Z"})
        assert_error(r, 404, "not_found")  # no incident: 404 before the time is looked at


# --- alert incidents ----------------------------------------------------------------------------

def test_a_probe_incident_detail_has_a_name_and_no_alerts(app_server):
    srv = app_server()
    ids = seeded(srv)
    with srv.client() as cl:
        body = cl.get(f"/api/v1/incidents/{ids['api']}").json()
    assert (body["name"], body["alert_source"], body["links"], body["annotations"]) == ("api", None, None, None)
    assert body["alerts"] == [] and body["alert_counts"] == {"firing": 0, "resolved": 0}


def test_openapi_documents_the_alerts_of_an_incident(app_server):
    srv = app_server()
    with srv.client() as cl:
        schemas = cl.get("/api/v1/openapi.json").json()["components"]["schemas"]
    detail = schemas["IncidentDetail"]
    assert {"alerts", "alert_counts", "name", "alert_source", "links", "annotations"} <= set(detail["required"])
    item = _resolved(schemas, detail["properties"]["alerts"]["items"])
    assert {"fingerprint", "status", "severity", "title", "labels", "annotations", "links", "first_seen_at",
            "resolved_at"} <= set(item["required"])
    link = _resolved(schemas, item["properties"]["links"]["anyOf"][0]["items"])
    assert link["required"] == ["label", "url"]
    assert _resolved(schemas, detail["properties"]["alert_counts"])["required"] == ["firing", "resolved"]
