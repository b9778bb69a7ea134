"""The overview as an operations console: one headline in each of its three states,
needs-attention items acknowledged from the page and the API (and not piling up), the
per-service status grid, today's cost and sessions. The app in process with its real lifespan
(``app_server``), a real SQLite file, real cycles with the fake CLI where a cycle matters."""

from __future__ import annotations

import re
import sqlite3
from html import unescape

import pytest

from app.store import sessions as session_store
from app.supervisor.guards import BudgetSpent
from tests.fakes import claude_control as cc
from tests.helpers import healthy
from tests.store.test_console_reads import _model_session, _probe_cycle, set_cols
from tests.web.api.test_incidents import seeded

pytestmark = pytest.mark.timeout(120)

TOKEN = "t0k3n-console-5678"


def _section(html: str, element_id: str) -> str:
    start = html.index(f'id="{element_id}"')
    return html[start:html.index("</section>", start)]


def headline(html: str) -> tuple[str, str]:
    """(data-state, the headline's text without tags)."""
    m = re.search(r'<section[^>]*id="headline"[^>]*data-state="([a-z]+)"[^>]*>(.*?)</section>', html, re.S)
    assert m, "no #headline"
    return m.group(1), " ".join(unescape(re.sub(r"<[^>]+>", " ", m.group(2))).split())


def overview(srv) -> str:
    with srv.client() as cl:
        r = cl.get("/")
        assert r.status_code == 200, r.text
        return r.text


# -- the headline ---------------------------------------------------------------------------------

def test_all_clear_with_the_last_and_next_cycle(app_server):
    srv = app_server(stages=[{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    state, text = headline(overview(srv))
    assert state == "clear" and "✓ All clear" in text
    assert "Last cycle: none yet" in text and "Next cycle: not scheduled (TIEROPS_SCHEDULE is off" in text
    srv.run_async(lambda st: st.supervisor.run_cycle())
    page = overview(srv)
    state, text = headline(page)
    assert state == "clear"
    first = srv.run_async(lambda st: session_store.list_sessions(st.db))[-1]["id"]
    assert re.search(r"Last cycle: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\S* \(completed, #\d+ ?\)", text), text
    assert f'href="/sessions/{first}">#{first}</a>' in _section(page, "headline")
    # the headline leads the page: before the Run Now form and the scheduler
    assert page.index('id="headline"') < page.index("<h2>Scheduler</h2>") < page.index('action="/run"')


def test_next_cycle_time_when_the_schedule_runs(app_server):
    srv = app_server(schedule=True, cron="0 0 1 1 *")  # a schedule that runs no cycle during the test
    _, text = headline(overview(srv))
    year = re.search(r"Next cycle: (\d{4})-01-01 00:00:00", text)
    assert year, text


def test_open_incidents_worst_named_first(app_server):
    srv = app_server()
    ids = seeded(srv)  # api critical (open), disk warning on db (open), cache resolved
    page = overview(srv)
    state, text = headline(page)
    assert state == "incidents" and "! 2 open incidents" in text
    assert "Worst: critical check:api on api — HTTP 502 from /health" in text
    assert f'href="/incidents/{ids["api"]}"' in _section(page, "headline")
    with srv.client() as cl:
        assert cl.post(f"/api/v1/incidents/{ids['api']}/ack", json={}).status_code == 200
    state, text = headline(overview(srv))
    assert state == "incidents" and "2 open incidents (1 acknowledged)" in text
    assert page.index('id="headline"') < page.index('id="open-incidents"')


def test_cycles_failing_make_the_monitor_unhealthy_before_incidents(app_server):
    srv = app_server(unhealthy_after=2, stages=[{"lines": [], "mode": "crash"}])
    seeded(srv)
    srv.run_async(lambda st: st.supervisor.run_cycle())
    assert headline(overview(srv))[0] == "incidents"  # one failed cycle is not yet unhealthy
    srv.run_async(lambda st: st.supervisor.run_cycle())
    state, text = headline(overview(srv))
    assert state == "unhealthy" and "✕ Monitor unhealthy" in text
    assert "the last 2 cycles failed (TIEROPS_UNHEALTHY_AFTER=2)" in text
    assert "Also 2 open incidents; worst: critical check:api" in text
    assert "(needs_attention" in text  # the last cycle's status
    srv.fake.set_stages([{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    srv.run_async(lambda st: st.supervisor.run_cycle())
    assert headline(overview(srv))[0] == "incidents"


def test_storage_that_cannot_be_written_is_unhealthy(app_server):
    srv = app_server()
    other = sqlite3.connect(srv.settings.db_path, timeout=1, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")  # another process holding the write lock past the probe's 2 s
        state, text = headline(overview(srv))
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert state == "unhealthy" and "the database cannot be written: database is locked" in text
    assert headline(overview(srv))[0] == "clear"


def healthz(srv) -> tuple[int, dict]:
    with srv.client(auth=False) as cl:
        r = cl.get("/healthz")
        return r.status_code, r.json()


def test_a_missing_cli_is_degraded_as_healthz_says(app_server):
    """Tier 0 runs without the claude CLI: amber "Model tiers unavailable", what to install, and
    /healthz agrees (200 degraded, the same warning); open incidents are still listed under it."""
    srv = app_server()
    assert headline(overview(srv))[0] == "clear"
    seeded(srv)
    srv.fake.path.unlink()  # the configured claude is gone
    state, text = headline(overview(srv))
    assert state == "degraded" and "⚠ Model tiers unavailable" in text and "Monitor unhealthy" not in text
    assert "the claude CLI is missing" in text and "tiers 1 to 3 cannot run" in text
    assert "scripts/install-claude.sh" in text and "TIEROPS_MAX_TIER=0" in text
    assert "Also 2 open incidents; worst: critical check:api" in text
    status, body = healthz(srv)
    assert (status, body["status"], body["problems"]) == (200, "degraded", [])
    assert body["warnings"][0] in text


def test_a_spent_daily_budget_is_degraded(app_server):
    srv = app_server(daily_budget_usd=0.5)
    assert headline(overview(srv))[0] == "clear"

    async def spend(st):
        pk = await session_store.create_session(st.db, tier=1)
        await set_cols(st.db, pk, status="completed", cost_usd=0.75)

    srv.run_async(spend)
    state, text = headline(overview(srv))
    assert state == "degraded" and "Model tiers unavailable" in text
    assert "daily budget spent: $0.75 of $0.50 (TIEROPS_DAILY_BUDGET_USD)" in text
    assert healthz(srv)[1]["status"] == "degraded"


def test_unhealthy_wins_over_degraded_and_both_agree_with_healthz(app_server):
    srv = app_server(unhealthy_after=1, stages=[{"lines": [], "mode": "crash"}])
    srv.run_async(lambda st: st.supervisor.run_cycle())  # the cycle failed
    srv.fake.path.unlink()
    state, text = headline(overview(srv))
    assert state == "unhealthy" and "Monitor unhealthy" in text
    assert "the last 1 cycles failed (TIEROPS_UNHEALTHY_AFTER=1)" in text
    status, body = healthz(srv)
    assert (status, body["status"]) == (503, "unhealthy") and body["warnings"]  # the CLI is missing too


def test_a_skipped_cycle_is_the_last_cycle_without_a_session(app_server):
    srv = app_server(daily_budget_usd=0.5)

    async def spend(st):
        pk = await session_store.create_session(st.db, tier=1)
        await set_cols(st.db, pk, status="completed", cost_usd=0.75)

    srv.run_async(spend)
    with pytest.raises(BudgetSpent):
        srv.run_async(lambda st: st.supervisor.run_cycle())
    page = overview(srv)
    state, text = headline(page)
    assert state == "degraded" and "(skipped: daily budget spent: $0.75 of $0.50" in text
    assert 'href="/sessions/' not in _section(page, "headline").split('id="last-cycle"', 1)[1].split("</span>", 1)[0]


# -- needs attention ------------------------------------------------------------------------------

def _flag(srv, n: int) -> list[int]:
    async def flag(st):
        pks = []
        for i in range(n):
            pk = await session_store.create_session(st.db, tier=1)
            await session_store.set_attention(st.db, pk, f"tier 1 failed: reason {i}")
            pks.append(pk)
        return pks

    return srv.run_async(flag)


def test_acknowledge_from_the_overview_and_the_session_page(app_server):
    srv = app_server()
    a, b = _flag(srv, 2)
    section = _section(overview(srv), "needs-attention")
    assert f'action="/sessions/{a}/attention/ack"' in section and "tier 1 failed: reason 1" in section
    with srv.client(follow_redirects=False) as cl:
        r = cl.post(f"/sessions/{b}/attention/ack", data={"back": "overview"})
        assert r.status_code == 303 and r.headers["location"] == "/?notice=attention_acked#needs-attention"
        page = cl.get("/?notice=attention_acked").text
        assert "Acknowledged: the overview no longer lists it" in page
        assert f'href="/sessions/{b}"' not in _section(page, "needs-attention")
        session = cl.get(f"/sessions/{b}").text  # kept there, marked with who and when
        acked = _section(session, "verdict")
        assert "tier 1 failed: reason 1" in acked and 'id="attention-acked"' in acked
        assert "by local user (no token configured)" in acked
        assert f'action="/sessions/{b}/attention/ack"' not in session
        r = cl.post(f"/sessions/{a}/attention/ack", data={"back": "session"})
        assert r.status_code == 303 and r.headers["location"] == f"/sessions/{a}?notice=attention_acked"
        assert 'id="needs-attention"' not in cl.get("/").text  # none left
        quiet = srv.run_async(lambda st: session_store.create_session(st.db, tier=1))
        r = cl.post(f"/sessions/{quiet}/attention/ack", data={"back": "session"})
        assert r.status_code == 409 and "Nothing to acknowledge" in r.text and "Traceback" not in r.text
        assert cl.post("/sessions/9999/attention/ack", data={"back": "session"}).status_code == 404


def test_acknowledge_through_the_api(app_server):
    srv = app_server(token=TOKEN)
    (pk,) = _flag(srv, 1)
    quiet = srv.run_async(lambda st: session_store.create_session(st.db, tier=1))
    with srv.client() as cl:
        r = cl.post(f"/api/v1/sessions/{pk}/attention/ack", json={"by": "alice"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["id"] == pk and body["attention"] == "tier 1 failed: reason 0"
        assert body["attention_acked_by"] == "alice via API token" and body["attention_acked_at"]
        again = cl.post(f"/api/v1/sessions/{pk}/attention/ack")  # no body: optional; the first stays
        assert again.status_code == 200 and again.json()["attention_acked_by"] == "alice via API token"
        r = cl.post(f"/api/v1/sessions/{quiet}/attention/ack", json={})
        assert r.status_code == 409 and r.json()["error"] == "conflict"
        assert cl.post("/api/v1/sessions/9999/attention/ack", json={}).status_code == 404
        r = cl.post(f"/api/v1/sessions/{pk}/attention/ack", json={"who": "x"})
        assert r.status_code == 422 and r.json()["error"] == "invalid_body"
        assert cl.post(f"/api/v1/sessions/{pk}/attention/ack", json={"by": 5}).status_code == 422
        detail = cl.get(f"/api/v1/sessions/{pk}").json()
        assert detail["attention_acked_by"] == "alice via API token"
        doc = cl.get("/api/v1/openapi.json").json()
        op = doc["paths"]["/sessions/{id}/attention/ack"]["post"]
        assert op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/AttentionAck")
    with srv.client(auth=False) as anon:
        assert anon.post(f"/api/v1/sessions/{pk}/attention/ack", json={}).status_code == 401


def test_attention_does_not_pile_up(app_server):
    srv = app_server()
    pks = _flag(srv, 8)
    page = overview(srv)
    section = _section(page, "needs-attention")
    shown = [pk for pk in pks if f'id="attention-{pk}"' in section]
    assert shown == pks[-5:]  # the newest five
    assert '<a href="/sessions?attention=open">3 more not acknowledged</a>' in section
    with srv.client() as cl:
        listing = cl.get("/sessions?attention=open")
        assert listing.status_code == 200
        assert all(f'href="/sessions/{pk}">#{pk}</a>' in listing.text for pk in pks)
        assert "need attention and are not acknowledged" in listing.text
        assert cl.get("/sessions?attention=bogus").status_code == 422


# -- the service grid and today -------------------------------------------------------------------

def test_service_grid_with_history_cells_carrying_a_symbol_and_a_link(app_server):
    srv = app_server()

    async def seed(st):
        c1 = await _probe_cycle(st.db, [("api-health", "api", "healthy"), ("dns", "dns", "healthy")])
        c2 = await _probe_cycle(st.db, [("api-health", "api", "down"), ("dns", "dns", "healthy")])
        t1 = await _model_session(st.db, c2, [("nginx", "degraded")])
        return c1, c2, t1

    c1, c2, t1 = srv.run_async(seed)
    page = overview(srv)
    grid = _section(page, "service-grid")
    rows = re.findall(r'<tr data-service="([^"]+)" data-state="([a-z]+)">(.*?)</tr>', grid, re.S)
    assert [(name, state) for name, state, _ in rows] == [("api", "down"), ("nginx", "degraded"), ("dns", "ok")]
    api = rows[0][2]
    assert "✕ down" in api  # the current status: a symbol and a word, not only a colour
    cells = re.findall(r'<(a|span) class="cell cell-([a-z]+)"(?: href="([^"]*)")? title="([^"]*)" '
                       r'aria-label="([^"]*)">([^<]*)</\1>', api)
    assert [(c[1], c[5]) for c in cells] == [("ok", "✓"), ("down", "✕")]  # two cycles
    assert cells[0][2] == f"/sessions/{c1}" and cells[1][2] == f"/sessions/{c2}"
    assert cells[1][4].startswith("api: down (down) at ") and f"session #{c2}" in cells[1][4]
    nginx = rows[1][2]
    assert f'href="/sessions/{t1}"' in nginx and "nginx said degraded" in nginx
    # not checked in the first cycle: a dot, said in words
    assert re.search(r'<span class="cell cell-none" title="nginx: not checked in the cycle of [^"]+" '
                     r'aria-label="[^"]+">·</span><a class="cell cell-degraded"', nginx)
    assert page.index('id="headline"') < page.index('id="service-grid"') < page.index("<h2>Scheduler</h2>")


def test_today_shows_cost_and_sessions_by_status(app_server):
    srv = app_server()

    async def seed(st):
        for status, cost in (("completed", 0.25), ("completed", 0.125), ("failed", None)):
            pk = await session_store.create_session(st.db, tier=1)
            await set_cols(st.db, pk, status=status, cost_usd=cost)
        old = await session_store.create_session(st.db, tier=1)
        await set_cols(st.db, old, started_at="2020-01-01T00:00:00.000Z", status="completed", cost_usd=9.0)

    srv.run_async(seed)
    today = _section(overview(srv), "today")
    assert '<strong id="today-cost">$0.3750</strong>' in today and '<strong id="today-sessions">3</strong>' in today
    assert re.search(r'status-completed">completed</span></a> 2 · \$0.3750', today)
    assert re.search(r'status-failed">failed</span></a> 1</li>', today)
