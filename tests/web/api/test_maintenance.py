"""Maintenance windows over HTTP: ``GET/POST /api/v1/maintenance`` and ``POST
/api/v1/maintenance/{id}/end`` (auth, CSRF, validation errors with their JSON paths, who acted),
and the ``/maintenance`` page with its add form and End buttons on a real uvicorn."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from app.store import maintenance as store
from app.web.auth import COOKIE, new_cookie
from tests.web.api.test_routes import assert_error

TOKEN = "maintenance-token-0123456789"
SETTING = '[{"name": "nightly", "start": "02:00", "duration": "2h", "every": ["Tuesday"], "services": ["api"]}]'


def _problems(r) -> dict[str, str]:
    body = assert_error(r, 422, "invalid_body")
    return {p["path"]: p["message"] for p in body["detail"]}


# --- the API ------------------------------------------------------------------------------------

def test_add_list_and_end_through_the_api(app_server):
    srv = app_server(maintenance=SETTING)
    with srv.client() as cl:
        r = cl.post("/api/v1/maintenance", json={"duration": "2h", "services": ["db-*", " api "],
                                                 "reason": " db upgrade ", "by": "alice"})
        assert r.status_code == 201, r.text
        row = r.json()
        assert (row["reason"], row["services"], row["checks"], row["created_by"]) == (
            "db upgrade", ["db-*", "api"], None, "alice (no token configured)")
        listed = cl.get("/api/v1/maintenance").json()
        assert set(listed) == {"now", "windows", "recent", "problems"} and listed["problems"] == []
        first, second = listed["windows"]
        assert (first["name"], first["source"], first["state"], first["id"]) == (
            f"#{row['id']} db upgrade", "ad-hoc", "active", row["id"])
        assert (second["name"], second["source"], second["state"]) == ("nightly", "setting", "scheduled")
        assert second["schedule"] == "02:00 for 2h every Tuesday (UTC)" and second["services"] == ["api"]

        ended = cl.post(f"/api/v1/maintenance/{row['id']}/end", json={"by": "bob"})
        assert ended.status_code == 200, ended.text
        assert ended.json()["cancelled_by"] == "bob (no token configured)" and ended.json()["cancelled_at"]
        assert_error(cl.post(f"/api/v1/maintenance/{row['id']}/end"), 409, "conflict")
        assert_error(cl.post("/api/v1/maintenance/424242/end"), 404, "not_found")
        after = cl.get("/api/v1/maintenance").json()
        assert [w["name"] for w in after["windows"]] == ["nightly"]
        assert [w["id"] for w in after["recent"]] == [row["id"]]


def test_an_upcoming_window_from_an_end_time_and_refusals_at_their_field(app_server):
    srv = app_server()
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    with srv.client() as cl:
        r = cl.post("/api/v1/maintenance", json={"starts_at": tomorrow.isoformat(), "checks": ["*-tls"],
                                                 "ends_at": (tomorrow + timedelta(hours=2)).isoformat(),
                                                 "reason": "cert rotation"})
        assert r.status_code == 201, r.text
        row = r.json()
        assert row["starts_at"] == tomorrow.strftime("%Y-%m-%dT%H:%M:%S.000Z") and row["checks"] == ["*-tls"]
        (view,) = cl.get("/api/v1/maintenance").json()["windows"]
        assert (view["state"], view["duration_s"]) == ("upcoming", 7200)
        assert _problems(cl.post("/api/v1/maintenance", json={
            "starts_at": "2099-01-01T10:00:00+01:00", "ends_at": "2099-01-01T12:00:00Z", "reason": "x"})) == {
            "$.starts_at": "starts_at is more than 90 days ahead"}
        late = _problems(cl.post("/api/v1/maintenance", json={"ends_at": "2000-01-01T00:00:00Z", "reason": "late"}))
        assert list(late) == ["$.ends_at"] and "not in the future" in late["$.ends_at"]
        ended = cl.post(f"/api/v1/maintenance/{row['id']}/end")  # an upcoming window never starts
        assert ended.status_code == 200 and cl.get("/api/v1/maintenance").json()["windows"] == []


def test_bodies_are_validated_with_json_paths(app_server):
    srv = app_server()
    with srv.client() as cl:
        assert "$" in _problems(cl.post("/api/v1/maintenance", json={"reason": "no end"}))
        assert "$" in _problems(cl.post("/api/v1/maintenance", json={"reason": "x", "duration": "1h",
                                                                     "ends_at": "2099-01-01T00:00:00Z"}))
        assert "$.reason" in _problems(cl.post("/api/v1/maintenance", json={"duration": "1h"}))
        assert "$.reason" in _problems(cl.post("/api/v1/maintenance", json={"duration": "1h", "reason": "   "}))
        assert "$.duration" in _problems(cl.post("/api/v1/maintenance", json={"duration": "2 hours", "reason": "x"}))
        assert "$.duration" in _problems(cl.post("/api/v1/maintenance", json={"duration": "0m", "reason": "x"}))
        assert "$.duration" in _problems(cl.post("/api/v1/maintenance", json={"duration": "91d", "reason": "x"}))
        assert "$.duration" in _problems(cl.post("/api/v1/maintenance", json={"duration": 7200, "reason": "x"}))
        assert "$.services" in _problems(cl.post("/api/v1/maintenance", json={"duration": "1h", "reason": "x",
                                                                              "services": []}))
        assert "$.services[1]" in _problems(cl.post("/api/v1/maintenance", json={"duration": "1h", "reason": "x",
                                                                                 "services": ["api", ""]}))
        assert "$.checks" in _problems(cl.post("/api/v1/maintenance", json={"duration": "1h", "reason": "x",
                                                                            "checks": "api-*"}))
        assert "$" in _problems(cl.post("/api/v1/maintenance", json={"duration": None, "ends_at": "2099-01-01T00:00Z",
                                                                     "reason": "x"}))
        assert "$.ends_at" in _problems(cl.post("/api/v1/maintenance", json={"ends_at": "2099-01-01T00:00",
                                                                             "reason": "x"}))  # no zone
        assert "$.when" in _problems(cl.post("/api/v1/maintenance", json={"duration": "1h", "reason": "x",
                                                                          "when": "now"}))
        assert_error(cl.post("/api/v1/maintenance", content=b"not json"), 422, "invalid_json")
        assert_error(cl.post("/api/v1/maintenance", content=b"{}", headers={"content-type": "text/plain"}), 415)
        assert "$.by" in _problems(cl.post("/api/v1/maintenance/1/end", json={"by": "a\nb"}))
        assert_error(cl.get("/api/v1/maintenance?state=active"), 422, "invalid_parameter")
        assert cl.get("/api/v1/maintenance").json()["windows"] == []  # nothing was stored


def test_auth_and_who_acted(app_server):
    srv = app_server(token=TOKEN)
    with srv.client(auth=False) as anon:
        assert_error(anon.get("/api/v1/maintenance"), 401, "unauthorized")
        assert_error(anon.post("/api/v1/maintenance", json={"duration": "1h", "reason": "x"}), 401, "unauthorized")
    with srv.client() as cl:
        row = cl.post("/api/v1/maintenance", json={"duration": "1h", "reason": "x", "by": "alice"}).json()
        assert row["created_by"] == "alice via API token"
    with srv.client(auth=False, cookies={COOKIE: new_cookie(TOKEN)}) as cl:
        assert cl.post(f"/api/v1/maintenance/{row['id']}/end").json()["cancelled_by"] == "dashboard"


def test_cross_site_writes_are_refused(app_server):
    srv = app_server()
    with srv.client(headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}) as cl:
        assert_error(cl.post("/api/v1/maintenance", json={"duration": "1h", "reason": "x"}), 403, "csrf_refused")
    with srv.client() as cl:
        assert cl.get("/api/v1/maintenance").json()["windows"] == []


def test_a_broken_setting_is_a_500_with_the_reason_and_an_error_on_the_page(app_server):
    srv = app_server(maintenance="- {name: x, start: '01:00'}")
    with srv.client() as cl:
        body = assert_error(cl.get("/api/v1/maintenance"), 500, "config_error")
        assert "TIEROPS_MAINTENANCE: [0]: missing 'duration'" in body["detail"]
        page = cl.get("/maintenance")
        assert page.status_code == 200 and "TIEROPS_MAINTENANCE: [0]: missing &#39;duration&#39;" in page.text


# --- the page on a real uvicorn -----------------------------------------------------------------------

def _row(html: str, marker: str) -> str:
    m = re.search(rf"<tr[^>]*>(?:(?!</tr>).)*{re.escape(marker)}(?:(?!</tr>).)*</tr>", html, re.S)
    assert m, f"no row with {marker!r}"
    return m.group(0)


def test_the_page_lists_adds_and_ends(live_server):
    srv = live_server(maintenance=SETTING)
    with srv.client(follow_redirects=False) as cl:
        page = cl.get("/maintenance")
        assert page.status_code == 200 and "<h1>Maintenance</h1>" in page.text
        assert 'href="/maintenance" aria-current="page">Maintenance</a>' in page.text  # in the nav, current
        nightly = _row(page.text, "nightly")
        assert "02:00 for 2h every Tuesday (UTC)" in nightly and "services api; every check" in nightly
        assert "/end" not in nightly  # a configured window has no End button

        r = cl.post("/maintenance", data={"services": "db-*, cache", "checks": "", "duration": "2h",
                                          "reason": "failover test"})
        assert r.status_code == 303 and r.headers["location"] == "/maintenance?notice=maintenance_added"
        page = cl.get("/maintenance?notice=maintenance_added").text
        assert "Maintenance window added" in page
        (row,) = store_rows(srv)
        assert row["services"] == ["db-*", "cache"] and row["checks"] is None and row["created_by"] == (
            "local user (no token configured)")
        added = _row(page, "failover test")
        assert 'data-state="active"' in added and f'action="/maintenance/{row["id"]}/end"' in added
        assert page.index("failover test") < page.index("nightly")  # active first

        r = cl.post(f"/maintenance/{row['id']}/end", data={})
        assert r.status_code == 303 and r.headers["location"] == "/maintenance?notice=maintenance_ended"
        page = cl.get("/maintenance").text
        assert "Recently ended" in page and f'action="/maintenance/{row["id"]}/end"' not in page
        again = cl.post(f"/maintenance/{row['id']}/end", data={})
        assert again.status_code == 409 and "already ended by local user" in again.text
        assert cl.post("/maintenance/999999/end", data={}).status_code == 404


def test_the_form_refuses_with_the_page_and_a_message(live_server):
    srv = live_server()
    with srv.client(follow_redirects=False) as cl:
        r = cl.post("/maintenance", data={"services": "api", "duration": "2 hours", "reason": "upgrade"})
        assert r.status_code == 422 and "Duration: &#39;2 hours&#39; is not a duration" in r.text
        assert 'value="api"' in r.text and 'value="upgrade"' in r.text  # what was typed is kept
        r = cl.post("/maintenance", data={"duration": "91d", "reason": "long"})
        assert r.status_code == 422 and "longer than a window may last" in r.text
        r = cl.post("/maintenance", data={"duration": "1h", "reason": " "})
        assert r.status_code == 422 and "Give a reason" in r.text
        r = cl.post("/maintenance", data={"duration": "1h", "reason": "x"}, headers={"Origin": "https://evil.example"})
        assert r.status_code == 403
        r = cl.post("/maintenance", json={"duration": "1h", "reason": "x"})
        assert r.status_code == 415
        assert "Traceback" not in r.text
    assert store_rows(srv) == []


def test_the_page_needs_the_login_with_a_token(live_server):
    srv = live_server(token=TOKEN)
    with srv.client(auth=False, follow_redirects=False) as anon:
        assert anon.get("/maintenance").status_code == 303  # to the login page
        assert anon.post("/maintenance", data={"duration": "1h", "reason": "x"}).status_code == 401
    with srv.client(auth=False, follow_redirects=False, cookies={COOKIE: new_cookie(TOKEN)}) as cl:
        assert cl.post("/maintenance", data={"duration": "1h", "reason": "x"}).status_code == 303
    assert store_rows(srv)[0]["created_by"] == "dashboard"


def store_rows(srv) -> list:
    return srv.run_async(lambda st: store.list_windows(st.db))
