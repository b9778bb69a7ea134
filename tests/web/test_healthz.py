"""/healthz: an honest answer — the app in process with its real lifespan (store,
supervisor, scheduler), real cycles with the fake CLI, a real SQLite file locked by another
connection. See tests/web/conftest.py for ``app_server``."""

from __future__ import annotations

import sqlite3
import time
from datetime import timedelta

import pytest

from app.store import notifications
from app.store import sessions as session_store
from app.supervisor.credentials import cli_home, pause_model_tiers
from app.supervisor.guards import BudgetSpent
from app.supervisor.launch import child_env
from tests.fakes import claude_control as cc
from tests.helpers import healthy

pytestmark = pytest.mark.timeout(90)

PASSWORD = "pw-9a8b7c6d5e"
YEARLY = "0 0 1 1 *"  # a schedule that runs no cycle during a test


def get(srv):
    with srv.client(auth=False) as cl:
        return cl.get("/healthz")


def test_healthy_body(app_server):
    srv = app_server(token="t0k3n-healthz-1234", notify_urls=f"json://user:{PASSWORD}@127.0.0.1:9/hook")
    r = get(srv)  # no token needed
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "ok" and body["problems"] == [] and body["warnings"] == []
    assert body["scheduler"] == "off"  # TIEROPS_SCHEDULE=false in this app
    assert body["storage"] == "ok" and body["consecutive_failures"] == 0
    assert body["last_cycle_at"] is None and body["last_cycle_status"] is None
    assert body["notifications"]["configured"] is True and body["notifications"]["urls"] == 1
    assert body["notifications"]["failures_24h"] == 0
    assert PASSWORD not in r.text and "json://" not in r.text and "127.0.0.1:9" not in r.text


def test_a_stale_schedule_is_503_until_a_cycle_finishes(app_server):
    srv = app_server(schedule=True, cron=YEARLY)
    assert get(srv).json()["scheduler"] == "ok"  # just started: within the allowance

    async def server_started_years_ago(st):
        # with cron: the first new year after the start was due, the next one went by too
        st.supervisor.started_wall -= timedelta(days=3 * 366)

    srv.run_async(server_started_years_ago)
    r = get(srv)
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "unhealthy" and body["scheduler"] == "stale" and body["last_cycle_at"] is None
    assert body["problems"][0].startswith("no cycle finished since the start ")
    assert f"(TIEROPS_CRON '{YEARLY}'); allowed until " in body["problems"][0]
    assert body["problems"][0].endswith("the cron time after it plus the longest tier timeout")

    srv.run_async(lambda st: st.supervisor.run_cycle())  # one cycle (its session fails: no result line)
    r = get(srv)
    assert r.status_code == 200, r.text
    assert r.json()["scheduler"] == "ok" and r.json()["last_cycle_at"] is not None


def test_consecutive_failures_are_503_and_a_good_cycle_clears_them(app_server):
    srv = app_server(unhealthy_after=2, stages=[{"lines": [], "mode": "crash"}])
    srv.run_async(lambda st: st.supervisor.run_cycle())
    assert get(srv).status_code == 200  # one failed cycle is not yet unhealthy
    srv.run_async(lambda st: st.supervisor.run_cycle())
    r = get(srv)
    assert r.status_code == 503
    body = r.json()
    assert body["consecutive_failures"] == 2 and body["last_cycle_status"] == "needs_attention"
    assert body["problems"] == ["the last 2 cycles failed (TIEROPS_UNHEALTHY_AFTER=2)"]
    # the monitor's own notice was recorded (no URLs here: suppressed, listed on the overview)
    rows = srv.run_async(lambda st: notifications.recent(st.db, 10))
    rows = [n for n in rows if n["kind"] == "monitor"]  # the failed sessions are told of too (chain notices)
    assert [(n["kind"], n["severity"], n["status"], n["why"]) for n in rows] == [
        ("monitor", "critical", "suppressed", "no TIEROPS_NOTIFY_URLS")]
    assert rows[0]["title"] == "[CRITICAL] tierops: monitor unhealthy — 2 cycles in a row failed"

    srv.fake.set_stages([{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    srv.run_async(lambda st: st.supervisor.run_cycle())
    r = get(srv)
    assert r.status_code == 200, r.text
    assert r.json()["consecutive_failures"] == 0 and r.json()["last_cycle_status"] == "completed"


def test_a_database_that_cannot_be_written_is_503(app_server):
    srv = app_server()
    assert get(srv).status_code == 200
    other = sqlite3.connect(srv.settings.db_path, timeout=1, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")  # another process holding the write lock
        started = time.monotonic()
        r = get(srv)
        took = time.monotonic() - started
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert r.status_code == 503, r.text
    body = r.json()
    assert body["storage"] == "error: database is locked"
    assert body["problems"] == ["the database cannot be written: database is locked"]
    assert took < 5  # bounded: the probe waits 2 s for the lock, never the writer's 10 s
    assert get(srv).status_code == 200  # released: healthy again


# -- degraded: the monitor runs, the language-model tiers cannot ------------------------------------

def test_a_missing_cli_is_degraded_not_unhealthy(app_server):
    """Tier 0 runs fine without the claude CLI: /healthz says degraded (200) with what to install,
    exactly what the overview's headline says (tests/web/test_overview_console.py)."""
    srv = app_server()
    srv.fake.path.unlink()
    r = get(srv)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "degraded" and body["problems"] == []
    [warning] = body["warnings"]
    assert warning.startswith("the claude CLI is missing: ") and "tiers 1 to 3 cannot run" in warning
    assert "scripts/install-claude.sh" in warning and "npm install -g @anthropic-ai/claude-code" in warning
    assert "TIEROPS_MAX_TIER=0" in warning


def test_without_language_model_tiers_a_missing_cli_is_fine(app_server):
    srv = app_server(max_tier=0)
    srv.fake.path.unlink()
    body = get(srv).json()
    assert (body["status"], body["warnings"]) == ("ok", [])


def test_a_spent_daily_budget_is_degraded_and_a_skipped_cycle_no_failure(app_server):
    srv = app_server(daily_budget_usd=0.5, unhealthy_after=1)

    async def spend(st):
        pk = await session_store.create_session(st.db, tier=1)
        async with st.db.write() as conn:
            await conn.execute("UPDATE sessions SET status = 'completed', cost_usd = 0.75 WHERE id = ?", (pk,))

    srv.run_async(spend)
    with pytest.raises(BudgetSpent):
        srv.run_async(lambda st: st.supervisor.run_cycle())  # tier 1 first: skipped
    r = get(srv)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "degraded" and body["problems"] == [] and body["consecutive_failures"] == 0
    assert body["warnings"] == ["daily budget spent: $0.75 of $0.50 (TIEROPS_DAILY_BUDGET_USD); tier 1 not started"]
    assert body["last_cycle_status"] == ("skipped: daily budget spent: $0.75 of $0.50 (TIEROPS_DAILY_BUDGET_USD); "
                                         "tier 1 not started")


def test_paused_model_tiers_are_degraded(app_server):
    srv = app_server()

    async def rejected(st):
        home = cli_home(st.settings)
        await pause_model_tiers(st.db, "HTTP 401 authentication_failed",
                                child_env(home, st.settings.allowed_env()), home, None)

    srv.run_async(rejected)
    body = get(srv).json()
    assert body["status"] == "degraded"
    [warning] = body["warnings"]
    assert warning.startswith("model tiers paused: the API rejected the credentials (HTTP 401 authentication_failed)")
