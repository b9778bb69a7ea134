"""The overview's Notifications panel, the ``/notifications`` page (routes, messages, preview), the
notifications API and ``tierops_notifications_total``, with the server's own Notifier recording
real rows in its real SQLite file. URLs never appear, only their scheme and host."""

from __future__ import annotations

import sys

from prometheus_client.parser import text_string_to_metric_families

from app.notify.messages import Notice
from app.store.incidents import Finding, Observation, observe

SECRET = "pw-overview-77aa"
ROUTES = "[{name: page, match: {severity: critical}, to: [pager]}, {name: quiet, match: {service: noisy}, to: []}]"


def post(srv, kind: str, severity: str, title: str, body: str, link_path: str | None = None, **about) -> None:
    srv.run_async(lambda st: st.supervisor.notifier.post(Notice(kind, severity, title, body, link_path, None, **about)))


def test_not_configured_lists_what_would_have_been_sent(app_server):
    srv = app_server()
    post(srv, "incident_opened", "critical", "api: api-health failing", "HTTP 503", link_path="/incidents/1")
    with srv.client() as cl:
        html = cl.get("/").text
    panel = html.split('id="notifications"', 1)[1].split("</section>", 1)[0]
    assert "Not configured (TIEROPS_NOTIFY_URLS)" in panel
    assert "[CRITICAL] api: api-health failing" in panel
    assert ">suppressed</span>" in panel and "no TIEROPS_NOTIFY_URLS" in panel
    assert 'href="/notifications"' in panel


def test_failures_are_highlighted_and_counted(app_server, monkeypatch):
    monkeypatch.setitem(sys.modules, "apprise", None)  # the notify extra missing: every message fails
    srv = app_server(notify_urls=f"json://u:{SECRET}@127.0.0.1:9/x", public_url="https://t.example")
    post(srv, "attention", "warning", "tierops: session 3 (tier 1) needs attention", "tier 1 failed",
         link_path="/sessions/3")
    post(srv, "incident_resolved", "info", "api: recovered", "ok")
    with srv.client() as cl:
        html = cl.get("/").text
        metrics = cl.get("/metrics").text
    panel = html.split('id="notifications"', 1)[1].split("</section>", 1)[0]
    assert "1 URL(s), warning and above" in panel and "Apprise is not installed" in panel
    assert "1 failed in the last 24 h." in panel
    assert '<span class="status status-failed">failed</span>' in panel
    assert ('<a href="https://t.example/sessions/3">[WARNING] tierops: session 3 (tier 1) needs attention</a>'
            in panel)
    assert SECRET not in html
    samples = {s.labels["status"]: s.value for fam in text_string_to_metric_families(metrics)
               for s in fam.samples if s.name == "tierops_notifications_total"}
    assert samples == {"failed": 1.0, "suppressed": 1.0}


def _incident(srv, severity: str, service: str, check: str) -> None:
    async def go(st) -> None:
        await observe(st.db, await _session(st), None, Observation(findings=[Finding(
            key=f"check:{check}", severity=severity, message=f"{check} failing: HTTP 500", service=service,
            check_name=check, origin="probe")]), flap_count=3, flap_window_s=3600)

    srv.run_async(go)


async def _session(st) -> int:
    from app.store.sessions import create_session

    return await create_session(st.db, tier=0, model="tierops-probe", trigger="schedule")


def test_the_page_shows_routes_messages_and_what_the_settings_would_send_where(app_server):
    srv = app_server(notify_urls=f"pager=json://u:{SECRET}@127.0.0.1:9/p json://127.0.0.1:9/chat",
                     notify_routes=ROUTES)
    _incident(srv, "critical", "db", "db-health")
    _incident(srv, "warning", "noisy", "noisy-check")
    post(srv, "incident_opened", "critical", "db: db-health failing", "503", link_path="/incidents/1",
         source="check", service="db", check="db-health")
    with srv.client() as cl:
        html = cl.get("/notifications").text
        api = cl.get("/api/v1/notifications").json()
        preview = cl.get("/api/v1/notifications/preview?last=5").json()
        bad = cl.get("/api/v1/notifications/preview?last=0")
    assert SECRET not in html and SECRET not in str(api) and SECRET not in str(preview)
    assert "page" in html and "severity=critical" in html and "json://127.0.0.1:9" in html
    assert [r["name"] for r in api["routes"]] == ["page", "quiet", "default"]
    assert api["routes"][0]["urls"] == ["json://127.0.0.1:9"] and api["routes"][1]["urls"] == []
    assert api["recent"][0]["routes"] == ["page"] and api["status"]["routes_from"] == "TIEROPS_NOTIFY_ROUTES"
    by_key = {i["key"]: i for i in preview["incidents"]}
    db_open = by_key["check:db-health"]["messages"][0]
    assert db_open["title"] == "[CRITICAL] db: db-health failing" and db_open["sent"] and db_open["routes"] == ["page"]
    noisy = by_key["check:noisy-check"]["messages"][0]
    assert not noisy["sent"] and noisy["why"].startswith("route quiet sends to no URL")
    assert "[WARNING] noisy: noisy-check failing" in html and "route quiet sends to no URL" in html
    assert bad.status_code == 422
