"""app/notify/sender.py: real Apprise sending to a real HTTP receiver on 127.0.0.1,
a real SQLite file, and real Supervisor cycles with the fake CLI for the monitor's own notices.

Apprise URLs under test: ``json://user:password@127.0.0.1:PORT/…`` (POSTs a JSON object with
``title``, ``message``, ``type``) and ``form://127.0.0.1:PORT/…`` (a form post). Nothing of ours is
mocked; only delays are made short (retry delays, the gather and digest windows are parameters).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.config import Settings
from app.notify.messages import Notice
from app.notify.policy import format_title, quiet_hours
from app.notify.sender import Notifier
from app.notify.urls import UrlMask, notify_urls, shown_url
from app.store import notifications as store
from app.store.db import Database
from app.supervisor.scheduler import Supervisor
from tests.fakes import claude_control as cc
from tests.helpers import healthy, wait_until
from tests.receiver import Receiver

pytestmark = pytest.mark.timeout(60)

PASSWORD = "s3cret-Passw0rd"
TOKEN = "HookToken9f8e7d6c5b"  # a secret path segment (Apprise logs request URLs at debug)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(fail={"/down": None})
    yield r
    r.close()


def note(kind: str, severity: str, title: str, body: str = "", *, link_path: str | None = None,
         dedup_key: str | None = None, **about) -> Notice:
    return Notice(kind, severity, title, body, link_path, dedup_key, **about)


def settings_for(tmp_path: Path, **overrides) -> Settings:
    return Settings(db=tmp_path / "tierops.db", home=tmp_path / "state", **overrides)


async def rows(db: Database) -> list[store.NotificationRow]:
    return list(reversed(await store.recent(db, 100)))


async def sent(notifier: Notifier, db: Database, pk_count: int, status: str = "sent") -> list[store.NotificationRow]:
    """Wait until ``pk_count`` rows have ``status``; return all rows, oldest first."""
    async def check() -> bool:
        return sum(r["status"] == status for r in await rows(db)) >= pk_count

    deadline = asyncio.get_running_loop().time() + 15
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"rows: {await rows(db)}"
        await asyncio.sleep(0.02)
    return await rows(db)


async def test_a_message_reaches_json_and_form_urls_once(db, tmp_path, receiver):
    urls = f"json://user:{PASSWORD}@{receiver.address}/json/{TOKEN}, form://{receiver.address}/form"
    settings = settings_for(tmp_path, notify_urls=urls, public_url="https://tierops.example.com/")
    notifier = Notifier(db, settings, gather=0)
    await notifier.start()
    try:
        await notifier.post(note("incident_opened", "critical", "api: incident opened — api-health failing",
                              "HTTP 503 from http://127.0.0.1:8000/healthz after 12 ms", link_path="/incidents/3",
                              dedup_key="incident:3:opened"))
        # the same state change again: recorded once, sent once
        await notifier.post(note("incident_opened", "critical", "api: incident opened — api-health failing",
                              "again", link_path="/incidents/3", dedup_key="incident:3:opened"))
        assert len(await rows(db)) == 1
        [row] = await sent(notifier, db, 1)
    finally:
        await notifier.close()

    [as_json] = receiver.to("/json/")
    payload = as_json.json()
    assert payload["title"] == "[CRITICAL] api: incident opened — api-health failing"
    assert payload["message"] == ("HTTP 503 from http://127.0.0.1:8000/healthz after 12 ms\n\n"
                                  "https://tierops.example.com/incidents/3")
    assert payload["type"] == "failure"  # critical → Apprise's failure type
    assert as_json.headers["Authorization"] == "Basic " + base64.b64encode(f"user:{PASSWORD}".encode()).decode()
    [as_form] = receiver.to("/form")
    assert as_form.form()["title"] == payload["title"] and as_form.form()["message"] == payload["message"]
    assert row["status"] == "sent" and row["attempts"] == 1 and row["sent_at"] and row["last_error"] is None
    assert row["link"] == "https://tierops.example.com/incidents/3" and row["dedup_key"] == "incident:3:opened"
    status = notifier.status()
    assert status["configured"] and status["urls"] == 2 and status["failures_24h"] == 0
    assert PASSWORD not in str(status) and receiver.address not in str(status)


async def test_no_link_without_a_public_url_and_severity_types(db, tmp_path, receiver):
    notifier = Notifier(db, settings_for(tmp_path, notify_urls=f"json://{receiver.address}/j",
                                         notify_min_severity="info"), gather=0)
    await notifier.start()
    try:
        await notifier.post(note("incident_resolved", "info", "[RESOLVED] api: api-health recovered after 5m",
                              "Incident #3 resolved.", link_path="/incidents/3"))
        await notifier.post(note("escalation", "warning", "host: tier 0 escalated to tier 1", "check failing"))
        await sent(notifier, db, 2)
    finally:
        await notifier.close()
    first, second = (r.json() for r in receiver.to("/j"))
    assert first["title"] == "[RESOLVED] api: api-health recovered after 5m"  # a tagged title is kept
    assert first["message"] == "Incident #3 resolved." and first["type"] == "success"  # no public URL: no link
    assert second["title"] == "[WARNING] host: tier 0 escalated to tier 1" and second["type"] == "warning"


async def test_min_severity_and_quiet_hours_are_recorded_not_sent(db, tmp_path, receiver):
    night = datetime(2026, 1, 5, 23, 30, tzinfo=UTC)
    settings = settings_for(tmp_path, notify_urls=f"json://{receiver.address}/q", notify_quiet_hours="22-07")
    notifier = Notifier(db, settings, gather=0, now=lambda: night)
    await notifier.start()
    try:
        await notifier.post(note("incident_resolved", "info", "api: recovered", "fine again"))
        await notifier.post(note("incident_opened", "warning", "db: incident opened — db-port failing", "refused"))
        await notifier.post(note("incident_opened", "critical", "api: incident opened — api-health failing", "503"))
        all_rows = await sent(notifier, db, 1)
    finally:
        await notifier.close()
    assert [(r["severity"], r["status"]) for r in all_rows] == [
        ("info", "suppressed"), ("warning", "suppressed"), ("critical", "sent")]
    assert all_rows[0]["why"] == "below TIEROPS_NOTIFY_MIN_SEVERITY=warning"
    assert all_rows[1]["why"] == "quiet hours (22-07 UTC): only critical is sent"
    assert [r.json()["title"] for r in receiver.to("/q")] == ["[CRITICAL] api: incident opened — api-health failing"]


def test_quiet_hours_and_url_parsing(tmp_path):
    assert quiet_hours("22-07") == (22, 7) and quiet_hours("") is None and quiet_hours("9:00-17:00") == (9, 17)
    with pytest.raises(ValueError, match="START-END"):
        quiet_hours("nights")
    text = "json://a.example/x?to=a@x,b@y, form://b.example/y\n  tgram://123:ABC/456"
    assert notify_urls(Settings(notify_urls=text)) == ["json://a.example/x?to=a@x,b@y", "form://b.example/y",
                                                        "tgram://123:ABC/456"]
    urls_file = tmp_path / "urls"
    urls_file.write_text("# ops channel\njson://c.example/z\n")
    assert notify_urls(Settings(notify_urls_file=urls_file)) == ["json://c.example/z"]
    assert format_title("warning", "api: x") == "[WARNING] api: x"
    assert shown_url(f"json://user:{PASSWORD}@127.0.0.1:9/j/{TOKEN}") == "json://127.0.0.1:9"
    assert shown_url("tgram://123456789:ABCdefGhIJKlmnOPQRstuVWxyz/12345") == "tgram://1...z"
    mask = UrlMask([f"json://user:{PASSWORD}@127.0.0.1:9/j/{TOKEN}", "tgram://123456789:ABCdefGhIJKlmnOPQ/1"])
    masked = mask(f"POST http://127.0.0.1:9/j/{TOKEN} pw {PASSWORD} https://api.telegram.org/bot123456789:ABCdefGhIJKlmnOPQ/x")
    assert TOKEN not in masked and PASSWORD not in masked and "ABCdefGhIJKlmnOPQ" not in masked
    assert "127.0.0.1:9" in masked  # a host name is not a secret


async def test_a_burst_is_one_digest_and_critical_goes_on_its_own(db, tmp_path, receiver):
    settings = settings_for(tmp_path, notify_urls=f"json://{receiver.address}/d", notify_digest_after=3,
                            public_url="https://t.example")
    notifier = Notifier(db, settings, gather=0.3)
    await notifier.start()
    try:
        for i in range(6):
            await notifier.post(note("incident_opened", "critical" if i == 2 else "warning",
                                     f"svc{i}: check{i} failing", f"evidence {i}", link_path=f"/incidents/{i}"))
        await sent(notifier, db, 2)
    finally:
        await notifier.close()
    alone, digest = (r.json() for r in receiver.to("/d"))
    assert alone["title"] == "[CRITICAL] svc2: check2 failing"  # first, never digested
    assert digest["title"] == "[WARNING] tierops: 5 notifications" and digest["type"] == "warning"
    for i in (0, 1, 3, 4, 5):
        assert f"svc{i}: check{i} failing (https://t.example/incidents/{i})" in digest["message"]
    assert "svc2" not in digest["message"]
    all_rows = await rows(db)
    digest_row = all_rows[-1]
    assert digest_row["kind"] == "digest" and digest_row["status"] == "sent"
    assert [r["status"] for r in all_rows[:6]] == ["digested", "digested", "sent", "digested", "digested", "digested"]
    assert {r["why"] for r in all_rows[:6] if r["status"] == "digested"} == {f"sent in digest #{digest_row['id']}"}


async def test_over_the_minute_allowance_warnings_wait_and_critical_does_not(db, tmp_path, receiver):
    settings = settings_for(tmp_path, notify_urls=f"json://{receiver.address}/w", notify_digest_after=2)
    notifier = Notifier(db, settings, gather=0, digest_window=1.0)  # "a minute" of one second
    await notifier.start()
    try:
        for i in range(2):
            await notifier.post(note("attention", "warning", f"api: session {i} needs attention", "why"))
            await sent(notifier, db, i + 1)
        await notifier.post(note("attention", "warning", "api: session 2 needs attention", "why"))
        await notifier.post(note("attention", "warning", "api: session 3 needs attention", "why"))
        await notifier.post(note("incident_opened", "critical", "db: db-port failing", "refused"))
        await wait_until(lambda: len(receiver.to("/w")) == 3, what="the critical message, at once")
        assert receiver.to("/w")[2].json()["title"] == "[CRITICAL] db: db-port failing"
        await wait_until(lambda: len(receiver.to("/w")) == 4, what="the held messages' digest")
    finally:
        await notifier.close()
    titles = [r.json()["title"] for r in receiver.to("/w")]
    assert titles == ["[WARNING] api: session 0 needs attention", "[WARNING] api: session 1 needs attention",
                      "[CRITICAL] db: db-port failing", "[WARNING] tierops: 2 notifications"]
    assert [r["status"] for r in await rows(db)] == ["sent", "sent", "digested", "digested", "sent", "sent"]


async def test_retries_then_failed_and_no_secret_anywhere(db, tmp_path, receiver, caplog):
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="apprise")  # its debug lines print request URLs
    url = f"json://user:{PASSWORD}@{receiver.address}/down/{TOKEN}"
    notifier = Notifier(db, settings_for(tmp_path, notify_urls=url), gather=0, retry_delays=(0.05, 0.1, 0.2))
    await notifier.start()
    try:
        await notifier.post(note("attention", "critical", "host: session 9 needs attention", "tier 1 failed"))
        [row] = await sent(notifier, db, 1, status="failed")
    finally:
        await notifier.close()
    assert len(receiver.to("/down")) == 4  # the first try and three retries
    assert row["attempts"] == 4 and "500" in row["last_error"] and row["sent_at"] is None
    status = notifier.status()
    assert status["failures_24h"] == 1 and "500" in status["last_error"]
    assert "notification #1 failed after 4 tries" in caplog.text
    assert "JSON POST URL" in caplog.text  # Apprise's own debug line was there …
    for secret in (PASSWORD, TOKEN, url):  # … masked, like everything else
        assert secret not in caplog.text
        assert secret not in str(await rows(db)) and secret not in str(status)


async def test_a_retry_goes_only_to_the_urls_that_refused(db, tmp_path):
    flaky = Receiver(fail={"/flaky": 2})
    try:
        urls = f"json://{flaky.address}/ok json://{flaky.address}/flaky"
        notifier = Notifier(db, settings_for(tmp_path, notify_urls=urls), gather=0, retry_delays=(0.05, 0.05, 0.05))
        await notifier.start()
        try:
            await notifier.post(note("monitor", "critical", "tierops: monitor unhealthy — storage error", "disk full"))
            [row] = await sent(notifier, db, 1)
        finally:
            await notifier.close()
        assert len(flaky.to("/ok")) == 1 and len(flaky.to("/flaky")) == 3
        assert row["attempts"] == 3 and row["last_error"] is None
    finally:
        flaky.close()


async def test_without_urls_everything_is_recorded_suppressed(db, tmp_path, caplog):
    notifier = Notifier(db, settings_for(tmp_path), gather=0)
    await notifier.start()
    try:
        await notifier.post(note("incident_opened", "critical", "api: incident opened — api-health failing", "503"))
        await notifier.post(note("incident_resolved", "info", "api: recovered", "ok"))
    finally:
        await notifier.close()
    assert [(r["status"], r["why"]) for r in await rows(db)] == [
        ("suppressed", "no TIEROPS_NOTIFY_URLS"), ("suppressed", "below TIEROPS_NOTIFY_MIN_SEVERITY=warning")]
    assert notifier.status()["configured"] is False and notifier.status()["urls"] == 0


async def test_urls_but_no_apprise_fails_with_the_fix(db, tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "apprise", None)  # as if the notify extra were not installed
    notifier = Notifier(db, settings_for(tmp_path, notify_urls="json://127.0.0.1:9/x"), gather=0)
    await notifier.start()
    try:
        await notifier.post(note("attention", "critical", "host: session 1 needs attention", "why"))
        await notifier.post(note("attention", "critical", "host: session 2 needs attention", "why"))
    finally:
        await notifier.close()
    assert [r["status"] for r in await rows(db)] == ["failed", "failed"]
    assert all("install tierops[notify]" in (r["last_error"] or "") for r in await rows(db))
    assert caplog.text.count("Apprise is not installed") == 1  # one clear error, not one per message
    assert notifier.status()["apprise"] is False and notifier.status()["failures_24h"] == 2


async def test_notify_never_raises_and_sends_without_storage(tmp_path, receiver, caplog):
    settings = settings_for(tmp_path, notify_urls=f"json://{receiver.address}/nostore")
    db = await Database.open(settings.db_path)
    notifier = Notifier(db, settings, gather=0)
    await notifier.start()
    await db.close()  # storage gone: the message cannot be recorded, it is sent anyway
    try:
        await notifier.post(note("monitor", "critical", "tierops: monitor unhealthy — storage error", "disk I/O error"))
        await wait_until(lambda: receiver.to("/nostore"), what="the unrecorded message")
    finally:
        await notifier.close()
    assert receiver.to("/nostore")[0].json()["title"] == "[CRITICAL] tierops: monitor unhealthy — storage error"
    assert "could not be recorded" in caplog.text


async def test_pending_messages_go_out_at_the_next_start(db, tmp_path, receiver):
    settings = settings_for(tmp_path, notify_urls=f"json://{receiver.address}/later")
    await Notifier(db, settings).post(note("attention", "critical", "host: session 4 needs attention", "why"))
    assert [r["status"] for r in await rows(db)] == ["pending"]  # recorded; no sender was running
    notifier = Notifier(db, settings, gather=0)
    await notifier.start()
    try:
        await sent(notifier, db, 1)
    finally:
        await notifier.close()
    assert receiver.to("/later")[0].json()["title"] == "[CRITICAL] host: session 4 needs attention"


# -- the monitor's own health (Supervisor) ------------------------------------------------------

async def test_monitor_unhealthy_once_per_episode_then_healthy_again(db, make_settings, validator, tmp_path, receiver):
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": [], "mode": "crash"}])
    settings = make_settings(fake, unhealthy_after=2, notify_urls=f"json://{receiver.address}/mon",
                             notify_min_severity="info")
    sup = Supervisor(db, settings, validator)
    sup.notifier.gather = 0
    await sup.start()
    try:
        for _ in range(3):
            await sup.run_cycle()
        assert sup.consecutive_failures == 3 and sup.last_cycle_status == "needs_attention"
        fake.set_stages([{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
        await sup.run_cycle()
        assert sup.consecutive_failures == 0 and sup.last_cycle_status == "completed"
        # the failed sessions' own "needs attention" messages go to the same URL (chain notices)
        def monitor_messages() -> list[dict]:
            return [m for m in (r.json() for r in receiver.to("/mon")) if "tierops: monitor" in m["title"]]

        await wait_until(lambda: len(monitor_messages()) == 2, what="unhealthy, then healthy again")
    finally:
        await sup.shutdown()
    unhealthy, healthy_again = monitor_messages()
    assert unhealthy["title"] == "[CRITICAL] tierops: monitor unhealthy — 2 cycles in a row failed"
    assert "2 cycle(s) in a row failed (TIEROPS_UNHEALTHY_AFTER=2)" in unhealthy["message"]
    assert "ended failed" in unhealthy["message"]
    assert healthy_again["title"] == "[INFO] tierops: monitor healthy again" and healthy_again["type"] == "info"
    monitor_rows = [r for r in await rows(db) if r["kind"] == "monitor"]
    assert [(r["severity"], r["status"]) for r in monitor_rows] == [("critical", "sent"), ("info", "sent")]
    assert monitor_rows[0]["dedup_key"].startswith("monitor:unhealthy:")
