"""``GET /api/v1/stats``, ``GET /api/v1/sessions/rollup``, the chain totals of ``GET
/api/v1/sessions`` and the ``/stats`` page, against the app in process with a real
database seeded over several days, tiers and statuses (tests/store/test_stats.py ``seed``)."""

from __future__ import annotations

import re

import pytest

from tests.store.test_stats import day, seed
from tests.web.api.test_routes import assert_error


@pytest.fixture
def seeded(app_server):
    srv = app_server()
    return srv, srv.run_async(lambda st: seed(st.db))


def test_stats_of_the_default_window_are_exact(seeded):
    srv, _ = seeded
    with srv.client() as cl:
        r = cl.get("/api/v1/stats")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["days"] == 14 and body["since"] == day(13) and body["generated_at"].endswith("Z")
    assert body["sessions"] == {"total": 10, "today": 4, "running": 1, "completed": 7, "failed": 1,
                                "interrupted": 1, "attention": 1}
    assert body["success_rate"] == 0.7778  # 7 completed of 9 finished
    assert body["escalations"] == 2  # chain A's two; chain B escalated 20 days ago, outside the window
    assert body["cost"] == {"total_usd": 1.22, "today_usd": 0.27, "by_tier": [
        {"tier": 0, "sessions": 3, "cost_usd": 0.0}, {"tier": 1, "sessions": 5, "cost_usd": 0.7},
        {"tier": 2, "sessions": 1, "cost_usd": 0.5}, {"tier": 3, "sessions": 0, "cost_usd": 0.0},
        {"tier": None, "sessions": 1, "cost_usd": 0.02}]}
    assert [d["day"] for d in body["by_day"]] == [day(n) for n in range(13, -1, -1)]
    assert [d["sessions"] for d in body["by_day"]] == [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3, 2, 4]
    assert [d["failed"] for d in body["by_day"]][-3:] == [1, 0, 0]
    assert body["incidents"] == {"open": 2, "acknowledged": 1, "by_severity": {"info": 0, "warning": 1, "critical": 1}}
    assert body["all_time"] == {"sessions": 12, "cost_usd": 2.22}


def test_stats_days_widens_and_narrows_the_window(seeded):
    srv, _ = seeded
    with srv.client() as cl:
        month = cl.get("/api/v1/stats", params={"days": 30}).json()
        today = cl.get("/api/v1/stats?days=1").json()
        empty = cl.get("/api/v1/stats?days=").json()  # empty: the default, as from a form
    assert month["days"] == 30 and month["sessions"]["total"] == 12 and month["cost"]["total_usd"] == 2.22
    assert month["escalations"] == 3
    assert today["days"] == 1 and len(today["by_day"]) == 1
    assert today["sessions"] == {"total": 4, "today": 4, "running": 1, "completed": 3, "failed": 0,
                                 "interrupted": 0, "attention": 0}
    assert today["success_rate"] == 1.0 and today["cost"]["total_usd"] == 0.27
    assert empty["days"] == 14


@pytest.mark.parametrize("query", ["days=0", "days=366", "days=abc", "days=1.5", "days=-3", "day=3", "limit=5"])
def test_stats_refuses_bad_parameters(app_server, query):
    srv = app_server()
    with srv.client() as cl:
        body = assert_error(cl.get(f"/api/v1/stats?{query}"), 422, "invalid_parameter")
    assert "days" in body["detail"] or "unknown" in body["detail"]


def test_stats_of_an_empty_database(app_server):
    srv = app_server()
    with srv.client() as cl:
        body = cl.get("/api/v1/stats?days=3").json()
    assert body["sessions"]["total"] == 0 and body["success_rate"] is None and body["cost"]["total_usd"] == 0
    assert [d["sessions"] for d in body["by_day"]] == [0, 0, 0]
    assert body["incidents"]["open"] == 0 and body["all_time"] == {"sessions": 0, "cost_usd": 0.0}


def test_sessions_carry_their_chain_totals(seeded):
    srv, s = seeded
    with srv.client() as cl:
        rows = {r["id"]: r for r in cl.get("/api/v1/sessions?limit=500").json()}
    assert len(rows) == 12
    for pk in s.chain_a:
        assert (rows[pk]["chain_root_id"], rows[pk]["chain_sessions"], rows[pk]["chain_cost_usd"]) == \
            (s.chain_a[0], 3, 0.6)
    assert (rows[s.chain_b[1]]["chain_root_id"], rows[s.chain_b[1]]["chain_cost_usd"]) == (s.chain_b[0], 0.3)
    ingested = rows[s.ingested]  # no chain: a chain of one
    assert ingested["chain_id"] is None
    assert (ingested["chain_root_id"], ingested["chain_sessions"], ingested["chain_cost_usd"]) == (s.ingested, 1, 0.02)
    running = rows[s.running]
    assert (running["chain_root_id"], running["chain_sessions"], running["chain_cost_usd"]) == (s.running, 1, 0.0)


def test_rollup_by_day_and_by_chain(seeded):
    srv, s = seeded
    with srv.client() as cl:
        days = cl.get("/api/v1/sessions/rollup?by=day&days=3").json()
        default = cl.get("/api/v1/sessions/rollup").json()
        chains = cl.get("/api/v1/sessions/rollup", params={"by": "chain", "days": 14}).json()
        page = cl.get("/api/v1/sessions/rollup", params={"by": "chain", "limit": 2, "offset": 1}).json()
    assert (days["by"], days["days"], days["since"]) == ("day", 3, day(2))
    assert [(d["day"], d["sessions"], d["cost_usd"]) for d in days["rows"]] == [
        (day(2), 3, 0.6), (day(1), 2, 0.05), (day(0), 4, 0.27)]
    assert default["by"] == "day" and len(default["rows"]) == 14
    assert chains["by"] == "chain"
    roots = [r["chain_root_id"] for r in chains["rows"]]
    assert roots == sorted([s.chain_a[0], *s.singles, s.running, s.ingested], reverse=True)
    a = next(r for r in chains["rows"] if r["chain_root_id"] == s.chain_a[0])
    assert (a["sessions"], a["max_tier"], a["cost_usd"], a["failed"], a["attention"]) == (3, 2, 0.6, 1, 1)
    assert [r["chain_root_id"] for r in page["rows"]] == roots[1:3]


@pytest.mark.parametrize("query", ["by=week", "days=400", "limit=0", "limit=1001", "offset=-1", "sort=cost"])
def test_rollup_refuses_bad_parameters(app_server, query):
    srv = app_server()
    with srv.client() as cl:
        assert_error(cl.get(f"/api/v1/sessions/rollup?{query}"), 422, "invalid_parameter")


def test_session_ids_still_route_beside_rollup(seeded):
    srv, s = seeded
    with srv.client() as cl:
        assert cl.get(f"/api/v1/sessions/{s.chain_a[0]}").json()["id"] == s.chain_a[0]
        assert_error(cl.get("/api/v1/sessions/rollups"), 404, "not_found")


def test_stats_page_draws_three_charts_with_their_numbers(seeded):
    srv, _ = seeded
    with srv.client() as cl:
        r = cl.get("/stats?days=7")
    assert r.status_code == 200, r.text
    html = r.text
    assert html.count("<svg") == 3 and html.count('role="img"') == 3
    for ident, title in (("chart-cost", "Cost per day"), ("chart-sessions", "Sessions per day"),
                         ("chart-failures", "Failed sessions per day")):
        assert f'<title id="{ident}-title">{title}</title>' in html
        assert f'aria-labelledby="{ident}-title {ident}-desc"' in html
        assert f"<summary>{title} as a table</summary>" in html
    # the cost table: seven days, day 2 at $0.60, today $0.27
    cost_table = html[html.index("Cost per day as a table"):html.index("Sessions per day as a table")]
    assert cost_table.count("<tr><td>") == 7
    assert f"<tr><td>{day(2)}</td><td>$0.6000</td></tr>" in cost_table
    assert f"<tr><td>{day(0)}</td><td>$0.2700</td></tr>" in cost_table
    failures = html[html.index("Failed sessions per day as a table"):]
    assert f"<tr><td>{day(2)}</td><td>1</td></tr>" in failures
    assert re.search(r"<dt>Success rate</dt><dd>75\.0 %", html)  # 6 of 8 in 7 days
    assert '<option value="7" selected>' in html
    assert 'href="/api/v1/stats?days=7"' in html
    assert "<script" not in html.split("</head>")[1]  # no chart script: the page draws on the server


def test_stats_page_refuses_a_bad_window(app_server):
    srv = app_server()
    with srv.client() as cl:
        r = cl.get("/stats?days=0")
    assert r.status_code == 422 and "text/html" in r.headers["content-type"]
    assert "between 1 and 365" in r.text
