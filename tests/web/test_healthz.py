"""/healthz (issue #13): an honest answer — the app in process with its real lifespan (store,
supervisor, scheduler), real cycles with the fake CLI, a real SQLite file locked by another
connection. See tests/web/conftest.py for ``app_server``."""

from __future__ import annotations

import sqlite3
import time

import pytest

from app.store import notifications
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
    assert body["status"] == "ok" and body["problems"] == []
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
        st.supervisor.started_monotonic -= 3 * 366 * 86400  # the allowance: 2 years + the longest tier timeout

    srv.run_async(server_started_years_ago)
    r = get(srv)
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "unhealthy" and body["scheduler"] == "stale" and body["last_cycle_at"] is None
    assert body["problems"][0].startswith("no cycle finished in ")
    assert "twice the schedule's period plus the longest tier timeout" in body["problems"][0]

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
