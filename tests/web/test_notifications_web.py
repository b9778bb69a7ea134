"""The overview's Notifications panel and ``tierops_notifications_total`` (issue #13), with the
server's own Notifier recording real rows in its real SQLite file."""

from __future__ import annotations

import sys

from prometheus_client.parser import text_string_to_metric_families


def notify(srv, *args, **kwargs) -> None:
    srv.run_async(lambda st: st.supervisor.notifier.notify(*args, **kwargs))


def test_not_configured_lists_what_would_have_been_sent(app_server):
    srv = app_server()
    notify(srv, "incident_opened", "critical", "api: incident opened — api-health failing", "HTTP 503",
           link_path="/incidents/1")
    with srv.client() as cl:
        html = cl.get("/").text
    panel = html.split('id="notifications"', 1)[1].split("</section>", 1)[0]
    assert "Not configured (TIEROPS_NOTIFY_URLS)" in panel
    assert "[CRITICAL] api: incident opened — api-health failing" in panel
    assert ">suppressed</span>" in panel and "no TIEROPS_NOTIFY_URLS" in panel


def test_failures_are_highlighted_and_counted(app_server, monkeypatch):
    monkeypatch.setitem(sys.modules, "apprise", None)  # the notify extra missing: every message fails
    secret = "pw-overview-77aa"
    srv = app_server(notify_urls=f"json://u:{secret}@127.0.0.1:9/x", public_url="https://t.example")
    notify(srv, "attention", "critical", "host: session 3 needs attention", "tier 1 failed", link_path="/sessions/3")
    notify(srv, "incident_resolved", "info", "api: recovered", "ok")
    with srv.client() as cl:
        html = cl.get("/").text
        metrics = cl.get("/metrics").text
    panel = html.split('id="notifications"', 1)[1].split("</section>", 1)[0]
    assert "1 URL(s), warning and above" in panel and "Apprise is not installed" in panel
    assert "1 failed in the last 24 h." in panel
    assert '<span class="status status-failed">failed</span>' in panel
    assert '<a href="https://t.example/sessions/3">[CRITICAL] host: session 3 needs attention</a>' in panel
    assert secret not in html
    samples = {s.labels["status"]: s.value for fam in text_string_to_metric_families(metrics)
               for s in fam.samples if s.name == "tierops_notifications_total"}
    assert samples == {"failed": 1.0, "suppressed": 1.0}
