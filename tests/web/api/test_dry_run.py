"""Dry run and the daily budget through the API and the dashboard, against the app in
process (tests/web/conftest.py ``app_server``) with the fake CLI run by the real supervisor."""

from __future__ import annotations

import pytest

from app.config import READ_ONLY_TOOLS
from tests.web.api.test_routes import assert_error, count, ingest, ok_stage, wait_finished, wait_idle


def allowed_tools(inv: dict) -> str:
    return inv["argv"][inv["argv"].index("--allowedTools") + 1]


def test_post_runs_with_dry_run_runs_read_only_and_every_view_says_so(app_server):
    srv = app_server(stages=[ok_stage()])
    with srv.client() as cl:
        r = cl.post("/api/v1/runs", json={"tier": 2, "dry_run": True})
        assert r.status_code == 202, r.text
        dry = r.json()["id"]
        row = wait_finished(cl, dry)
        assert (row["status"], row["dry_run"], row["max_budget_usd"]) == ("completed", True, None)
        assert allowed_tools(srv.fake.last()) == READ_ONLY_TOOLS  # not tier 2's own "Read,Grep,Glob,Bash"
        assert "## Dry run: change nothing" in row["system_prompt"]
        wait_idle(srv)
        r = cl.post("/api/v1/runs", json={"tier": 2})
        assert r.status_code == 202, r.text
        real = r.json()["id"]
        assert wait_finished(cl, real)["dry_run"] is False
        assert allowed_tools(srv.fake.last()) == "Read,Grep,Glob,Bash"
        wait_idle(srv)

        listed = {s["id"]: s["dry_run"] for s in cl.get("/api/v1/sessions").json()}
        assert listed == {dry: True, real: False}
        assert 'id="dry-run"' in cl.get(f"/sessions/{dry}").text
        assert 'id="dry-run"' not in cl.get(f"/sessions/{real}").text
        assert cl.get("/sessions").text.count(">DRY RUN</span>") == 1
        overview = cl.get("/").text  # the last cycle's table
        assert ">DRY RUN</span>" not in overview  # the last cycle was the real one


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_dry_run_must_be_a_boolean(app_server, value):
    srv = app_server(stages=[ok_stage()])
    with srv.client() as cl:
        assert_error(cl.post("/api/v1/runs", json={"dry_run": value}), 422, "invalid_body")
    assert count(srv, "SELECT count(*) FROM sessions") == 0


def test_the_run_now_checkbox_starts_a_dry_run(app_server):
    srv = app_server(stages=[ok_stage()])
    with srv.client(follow_redirects=False) as cl:
        assert 'name="dry_run"' in cl.get("/").text
        r = cl.post("/run", data={"tier": "2", "dry_run": "1"})
        assert r.status_code == 303, r.text
        pk = int(r.headers["location"].removeprefix("/sessions/"))
        assert wait_finished(cl, pk)["dry_run"] is True
        wait_idle(srv)
        assert ">DRY RUN</span>" in cl.get("/").text  # the last cycle's table
        r = cl.post("/run", data={"tier": "2"})  # unticked
        assert r.status_code == 303, r.text
        pk = int(r.headers["location"].removeprefix("/sessions/"))
        assert wait_finished(cl, pk)["dry_run"] is False
    wait_idle(srv)


def test_with_tierops_dry_run_every_run_is_dry_and_the_checkbox_says_so(app_server):
    srv = app_server(stages=[ok_stage()], dry_run=True)
    with srv.client() as cl:
        assert 'id="run-dry-run" name="dry_run" value="1" checked disabled' in cl.get("/").text
        r = cl.post("/api/v1/runs", json={"tier": 2, "dry_run": False})
        assert r.status_code == 202, r.text
        assert wait_finished(cl, r.json()["id"])["dry_run"] is True
    wait_idle(srv)


def test_a_spent_daily_budget_is_409_and_the_overview_shows_it(app_server):
    srv = app_server(stages=[ok_stage()], daily_budget_usd=0.2)
    with srv.client(follow_redirects=False) as cl:
        assert "$0.0000 of $0.2000 daily budget" in cl.get("/").text
        ingest(srv, "c_structured", tier=1)  # $0.203025 today
        body = assert_error(cl.post("/api/v1/runs", json={"tier": 1}), 409, "daily_budget_spent")
        assert body["detail"] == "daily budget spent: $0.20 of $0.20 (TIEROPS_DAILY_BUDGET_USD); tier 1 not started"
        r = cl.post("/run", data={"tier": "1"})
        assert r.status_code == 409 and "daily budget spent: $0.20 of $0.20" in r.text
        page = cl.get("/").text
        assert "$0.2030 of $0.2000 daily budget" in page and "spent: tiers 1 to 3 do not start" in page
    wait_idle(srv)
    assert count(srv, "SELECT count(*) FROM sessions") == 1 and srv.fake.invocations() == []


def test_without_a_daily_budget_the_overview_says_none(app_server):
    srv = app_server()
    with srv.client() as cl:
        ingest(srv, "c_structured", tier=1)
        page = cl.get("/").text
    assert '<dd id="spent-today">$0.2030 <span class="muted">(no daily budget)</span></dd>' in page
