"""The incident pages: ``/incidents``, ``/incidents/{id}`` and its three forms, the
overview leading with open incidents, and a session page listing the incidents it touched and
its escalation gate. Through the app in process (``app_server``), plus one run in a real
browser (Playwright driving chromium against uvicorn, as tests/web/pages/test_browser.py does).
"""

from __future__ import annotations

import re

from playwright.sync_api import Browser

from app.store import sessions as session_store
from app.web.auth import COOKIE, new_cookie
from tests.web.api.test_incidents import HOSTILE_DETAIL, proposed, seed_incidents, seeded


def _section(html: str, element_id: str) -> str:
    """The HTML of the element with ``element_id`` up to its closing ``</section>``."""
    start = html.index(f'id="{element_id}"')
    return html[start:html.index("</section>", start)]


def _row(html: str, incident_id: int) -> str:
    """The table row linking to this incident."""
    m = re.search(rf'<tr[^>]*>(?:(?!</tr>).)*href="/incidents/{incident_id}"(?:(?!</tr>).)*</tr>', html, re.S)
    assert m, f"no row for incident {incident_id}"
    return m.group(0)


# --- the list ---------------------------------------------------------------------------------

def test_incidents_page_lists_unresolved_by_default_and_filters(app_server):
    srv = app_server()
    ids = seeded(srv)
    with srv.client() as cl:
        r = cl.get("/incidents")
        assert r.status_code == 200 and "<h1>Incidents</h1>" in r.text
        assert 'href="/incidents" aria-current="page">Incidents</a>' in r.text  # in the nav, current
        api = _row(r.text, ids["api"])
        assert "check:api" in api and "critical" in api and ">open<" in api.replace("</td>", "<")
        assert "<td>2</td>" in api  # occurrences
        assert f'href="/incidents/{ids["disk"]}"' in r.text
        assert f'href="/incidents/{ids["cache"]}"' not in r.text  # resolved: not by default
        resolved = cl.get("/incidents?status=resolved").text
        cache = _row(resolved, ids["cache"])
        assert "check:cache" in cache and re.search(r"\d+\.\d s", cache)  # how long it lasted
        assert f'href="/incidents/{ids["api"]}"' not in resolved
        everything = cl.get("/incidents?status=all").text
        assert all(f'href="/incidents/{pk}"' in everything for pk in (ids["api"], ids["disk"], ids["cache"]))
        db_only = cl.get("/incidents?service=db").text
        assert f'href="/incidents/{ids["disk"]}"' in db_only and f'href="/incidents/{ids["api"]}"' not in db_only
        assert "No acknowledged incidents." in cl.get("/incidents?status=acknowledged").text
        bad = cl.get("/incidents?status=bogus")
        assert bad.status_code == 422 and "status" in bad.text and "Traceback" not in bad.text
        assert cl.get("/incidents?page=0").status_code == 422


def test_flags_show_flapping_and_silenced(app_server):
    srv = app_server()
    ids = seeded(srv)
    with srv.client() as cl:
        assert "silenced" not in _row(cl.get("/incidents").text, ids["api"])
        assert cl.post(f"/api/v1/incidents/{ids['api']}/silence", json={"until": "1d"}).status_code == 200
        assert 'class="badge"' in _row(cl.get("/incidents").text, ids["api"])
        assert "silenced" in _row(cl.get("/incidents").text, ids["api"])
        assert "flapping" not in _row(cl.get("/incidents").text, ids["api"])


# --- one incident and its forms ---------------------------------------------------------------

def test_incident_page_shows_evidence_and_timeline_with_session_links(app_server):
    srv = app_server()
    ids = seeded(srv)
    with srv.client() as cl:
        r = cl.get(f"/incidents/{ids['api']}")
    assert r.status_code == 200
    page = r.text
    assert f"Incident #{ids['api']}" in page and "check:api" in page
    assert '<pre class="evidence">HTTP 502 from /health</pre>' in page  # the latest evidence
    timeline = page[page.index("<h2>Timeline</h2>"):]
    for pk in (ids["session1"], ids["session2"]):
        assert f'<a href="/sessions/{pk}">#{pk}</a> <span class="muted">tier 0</span>' in timeline
    assert "api <span class=\"check check-down\">down</span>" in timeline and "12 ms" in timeline
    assert timeline.count("<td>opened</td>") == 1 and timeline.count("<td>seen</td>") == 1
    for action in ("ack", "resolve", "silence"):
        assert f'action="/incidents/{ids["api"]}/{action}"' in page
    assert all(f'<option value="{v}"' in page for v in ("1h", "4h", "1d", "7d"))


def test_incident_page_lists_the_proposed_actions_with_their_sessions(app_server):
    srv = app_server()
    ids = seeded(srv)
    with srv.client() as cl:
        empty = _section(cl.get(f"/incidents/{ids['api']}").text, "proposals")
        assert "<h2 id=\"proposals-title\">Proposed actions</h2>" in empty
        assert "No action has been proposed for this incident." in empty
        first = proposed(srv, [("restart", "api", "after the deploy")])
        second = proposed(srv, [("<b>redeploy</b>", "<img src=x onerror=alert(1)>", HOSTILE_DETAIL)], tier=3,
                          dry_run=True)
        page = cl.get(f"/incidents/{ids['api']}").text
    section = _section(page, "proposals")
    assert page.index('id="proposals"') < page.index("<h2>Timeline</h2>")
    rows = re.findall(r"<tr>(.*?)</tr>", section.split("<tbody>")[1], re.S)
    assert len(rows) == 2  # newest first
    assert f'<a href="/sessions/{second}">#{second}</a> <span class="muted">tier 3</span>' in rows[0]
    assert '<span class="badge">DRY RUN</span>' in rows[0]
    assert f'<a href="/sessions/{first}">#{first}</a> <span class="muted">tier 2</span>' in rows[1]
    assert "<td>restart</td>" in rows[1] and "<td>api</td>" in rows[1] and "after the deploy" in rows[1]
    # model text is hostile: escaped, and the 100 KB detail cut
    assert "<b>redeploy</b>" not in section and "&lt;b&gt;redeploy&lt;/b&gt;" in section
    assert "<img" not in section and "&lt;img src=x onerror=alert(1)&gt;" in section
    assert "<script>" not in page.split('id="proposals"')[1].split("</section>")[0]
    assert "&lt;script&gt;alert(&#39;detail&#39;)&lt;/script&gt;" in section
    assert "z" * 1100 not in section and len(section) < 6000


def test_forms_act_and_redirect_back_with_a_notice(app_server):
    srv = app_server()
    ids = seeded(srv)
    pk = ids["api"]
    with srv.client(follow_redirects=False) as cl:
        r = cl.post(f"/incidents/{pk}/ack", data={"note": "on it"})
        assert r.status_code == 303 and r.headers["location"] == f"/incidents/{pk}?notice=incident_ack"
        page = cl.get(r.headers["location"]).text
        assert "Incident acknowledged" in page and "on it" in page
        assert f'action="/incidents/{pk}/ack"' not in page  # only an open incident can be acknowledged
        row = cl.get(f"/api/v1/incidents/{pk}").json()
        assert row["status"] == "acknowledged" and row["acknowledged_by"] == "local user (no token configured)"

        r = cl.post(f"/incidents/{pk}/silence", data={"until": "4h", "note": ""})
        assert r.status_code == 303 and r.headers["location"].endswith("notice=incident_silence")
        assert cl.get(f"/api/v1/incidents/{pk}").json()["silenced_until"] is not None

        r = cl.post(f"/incidents/{pk}/resolve", data={"note": "rolled back"})
        assert r.status_code == 303
        page = cl.get(r.headers["location"]).text
        assert "Incident resolved" in page and f'action="/incidents/{pk}/resolve"' not in page
        assert cl.get(f"/api/v1/incidents/{pk}").json()["resolved_by"] == "local user (no token configured)"
        timeline = page[page.index("<h2>Timeline</h2>"):]
        assert [k for k in ("acknowledged", "silenced", "resolved") if f"<td>{k}</td>" in timeline] == [
            "acknowledged", "silenced", "resolved"]


def test_forms_refuse_with_the_page_and_a_message(app_server):
    srv = app_server()
    ids = seeded(srv)
    pk = ids["cache"]  # resolved
    with srv.client(follow_redirects=False) as cl:
        r = cl.post(f"/incidents/{pk}/resolve", data={"note": "again"})
        assert r.status_code == 409 and "Cannot resolve" in r.text and "already resolved" in r.text
        assert '<p class="banner error" role="alert">' in r.text
        r = cl.post(f"/incidents/{ids['api']}/ack", data={"note": "x" * 2001})
        assert r.status_code == 422 and "The note is too long" in r.text
        assert cl.get(f"/api/v1/incidents/{ids['api']}").json()["status"] == "open"
        r = cl.post(f"/incidents/{ids['api']}/silence", data={"until": "forever", "note": "keep me"})
        assert r.status_code == 422 and "Cannot silence" in r.text and "keep me" in r.text  # what was typed stays
        r = cl.post(f"/incidents/{ids['api']}/silence", data={"until": "2020-01-01T00:00:00Z"})
        assert r.status_code == 409 and "not in the future" in r.text
        assert cl.get(f"/api/v1/incidents/{ids['api']}").json()["silenced_until"] is None
        for path in ("/incidents/999", "/incidents/abc", "/incidents/" + "9" * 30):
            assert cl.get(path).status_code == 404
        assert cl.post("/incidents/999/ack", data={"note": ""}).status_code == 404
        r = cl.post(f"/incidents/{ids['api']}/ack", content=b'{"note": 1}', headers={"content-type": "application/json"})
        assert r.status_code == 415
        r = cl.post(f"/incidents/{ids['api']}/ack", data={"note": ""}, headers={"Origin": "https://evil.example"})
        assert r.status_code == 403
        assert cl.get(f"/api/v1/incidents/{ids['api']}").json()["status"] == "open"


def test_form_actor_with_a_token_is_the_dashboard(app_server):
    token = "pages-token-0123456789"
    srv = app_server(token=token)
    ids = seeded(srv)
    with srv.client(auth=False, follow_redirects=False) as anon:
        r = anon.post(f"/incidents/{ids['api']}/ack", data={"note": ""})
        assert r.status_code == 401
        assert anon.get("/incidents").status_code == 303  # to the login page
    with srv.client(auth=False, follow_redirects=False, cookies={COOKIE: new_cookie(token)}) as cl:
        assert cl.post(f"/incidents/{ids['api']}/ack", data={"note": "mine"}).status_code == 303
        assert cl.get(f"/api/v1/incidents/{ids['api']}").json()["acknowledged_by"] == "dashboard"


# --- the overview and the session page --------------------------------------------------------

def test_overview_leads_with_open_incidents(app_server):
    srv = app_server()
    with srv.client() as cl:
        empty = cl.get("/").text
        # the section is there only when there are open incidents; the headline says all clear
        assert 'id="open-incidents"' not in empty and 'data-state="clear"' in empty
        ids = seeded(srv)
        page = cl.get("/").text
    section = _section(page, "open-incidents")
    assert page.index('id="open-incidents"') < page.index("<h2>Scheduler</h2>")  # first on the page
    assert "No open incidents." not in section
    # worst first: the critical api incident before the warning on db; the resolved one is not there
    assert section.index(f'href="/incidents/{ids["api"]}"') < section.index(f'href="/incidents/{ids["disk"]}"')
    assert f'href="/incidents/{ids["cache"]}"' not in section
    api = _row(section, ids["api"])
    assert "critical" in api and "HTTP 502 from /health" in api and "<td>2</td>" in api and "<td>api</td>" in api
    with srv.client() as cl:
        assert cl.post(f"/api/v1/incidents/{ids['api']}/ack", json={}).status_code == 200
        assert "acknowledged" in _row(_section(cl.get("/").text, "open-incidents"), ids["api"])  # still unresolved


def test_session_page_lists_its_incidents_and_the_escalation_gate(app_server):
    srv = app_server()
    ids = seeded(srv)
    gate = "not escalated: incident #1 (check:api): already escalated, 2 cycle(s) failing"
    srv.run_async(lambda st: session_store.set_escalation_gate(st.db, ids["session2"], gate))
    with srv.client() as cl:
        page = cl.get(f"/sessions/{ids['session2']}").text
        first = cl.get(f"/sessions/{ids['session1']}").text
    section = _section(page, "session-incidents")
    for check in ("api", "disk", "cache"):  # seen, opened and resolved by the second cycle
        assert f'href="/incidents/{ids[check]}"' in section
    assert f'href="/incidents/{ids["disk"]}"' not in _section(first, "session-incidents")
    assert "<strong>Escalation not started:</strong> " + gate.replace("'", "&#39;") in page
    assert 'id="escalation-gate"' not in first
    assert "<dt>Tier</dt><dd>0</dd>" in page  # tier 0 is a tier, not "—"
    with srv.client() as cl:
        listing = cl.get("/sessions?tier=0").text
        # the second cell is the start time (a <time> element), the third the tier
        assert re.search(rf'href="/sessions/{ids["session1"]}">#{ids["session1"]}</a></td>\s*<td[^>]*>'
                         r"(?:(?!</td>).)*</td>\s*<td>0</td>", listing)


# --- a real browser -----------------------------------------------------------------------------

def test_acknowledge_and_silence_in_a_browser(live_server, browser: Browser):
    srv = live_server()
    ids = srv.run_async(lambda st: seed_incidents(st.db))
    context = browser.new_context()
    errors: list[str] = []
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(srv.url + "/")
        page.click(f"#open-incidents a[href='/incidents/{ids['api']}']")
        assert page.locator("h1").inner_text().startswith(f"Incident #{ids['api']}")
        page.fill("#ack-note", "paged the on-call <b>owner</b>")
        with page.expect_navigation():
            page.click(f"form[action='/incidents/{ids['api']}/ack'] button[type=submit]")
        assert page.url.endswith(f"/incidents/{ids['api']}?notice=incident_ack")
        assert "Incident acknowledged" in page.locator(".banner.info").inner_text()
        assert page.locator(f"form[action='/incidents/{ids['api']}/ack']").count() == 0
        page.select_option("#silence-until", "7d")
        with page.expect_navigation():
            page.click(f"form[action='/incidents/{ids['api']}/silence'] button[type=submit]")
        assert "Incident silenced" in page.locator(".banner.info").inner_text()
        timeline = page.locator("table.timeline").inner_text()
        assert "acknowledged" in timeline and "paged the on-call <b>owner</b>" in timeline  # shown as text
        assert "silenced" in timeline and "local user (no token configured)" in timeline
        page.click("nav a[href='/incidents']")
        assert page.locator("nav a[aria-current='page']").inner_text() == "Incidents"
        row = page.locator("table.incidents tr", has=page.locator(f"a[href='/incidents/{ids['api']}']")).first
        assert "acknowledged" in row.inner_text() and "silenced" in row.inner_text()
    finally:
        context.close()
    assert not errors, errors


# --- alert incidents: links, annotations, alerts ----------------------------------------------

def hostile_group() -> dict:
    """An Alertmanager group whose every field an attacker wrote: script in texts, a javascript:
    runbook, quotes and angle brackets in URLs and labels."""
    def alert(fp: str, runbook: str, generator: str, **labels: str) -> dict:
        return {"status": "firing", "labels": {"alertname": "Evil<Alert>", "severity": "critical", **labels},
                "annotations": {"summary": '<script>alert("s")</script>', "runbook_url": runbook,
                                "description": '"><img src=x onerror=alert(1)>'},
                "startsAt": "2026-11-24T09:12:03.123Z", "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": generator, "fingerprint": fp}
    return {"receiver": "tierops", "status": "firing", "version": "4", "groupKey": '{}:{alertname="Evil<Alert>"}',
            "groupLabels": {"alertname": "Evil<Alert>"}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://alertmanager.example.com:9093", "truncatedAlerts": 0,
            "alerts": [alert("aaaa000000000001", "javascript:alert(document.cookie)",
                             'https://prom.example.com/graph?g0.expr=up&x="><script>alert(2)</script>'),
                       alert("aaaa000000000002", "https://runbooks.example.com/a?b=1&c=<2>", "data:text/html,hi",
                             env="<b>bold</b>")]}


def test_an_alert_incident_page_shows_links_annotations_and_alerts_escaped(app_server):
    srv = app_server(max_tier=0)
    with srv.client() as cl:
        r = cl.post("/api/v1/alerts", json=hostile_group())
        assert r.status_code == 202, r.text
        pk = r.json()["alerts"][0]["incident_id"]
        page = cl.get(f"/incidents/{pk}").text
    assert "<dt>Name</dt><dd>Evil&lt;Alert&gt;</dd>" in page and "<dd>alertmanager</dd>" in page
    links = _section(page, "links")
    hrefs = re.findall(r'href="([^"]*)"', links)
    assert hrefs[0] == "https://runbooks.example.com/a?b=1&amp;c=&lt;2&gt;"  # the runbook first, escaped
    assert hrefs[1] == "https://prom.example.com/graph?g0.expr=up&amp;x=&#34;&gt;&lt;script&gt;alert(2)&lt;/script&gt;"
    assert len(hrefs) == 2  # the javascript: runbook and the data: URL are not links
    assert links.count('rel="noopener noreferrer"') == 2
    alerts = _section(page, "alerts")
    assert "(2 firing, 0 resolved)" in alerts and alerts.count("<tr>") == 3  # the head and two alerts
    assert "<code>env=&lt;b&gt;bold&lt;/b&gt;</code>" in alerts
    assert "<dd>javascript:alert(document.cookie)</dd>" in alerts  # kept as text among the annotations
    assert "<dd>data:text/html,hi</dd>" in alerts
    assert "&lt;script&gt;alert(&#34;s&#34;)&lt;/script&gt;" in page
    assert 'href="javascript:' not in page and "href='javascript:" not in page and 'href="data:' not in page
    for raw in ("<script>alert", "<img src=x", "<b>bold", "Evil<Alert>"):
        assert raw not in page, raw


def test_a_probe_incident_page_has_no_alert_sections(app_server):
    srv = app_server()
    ids = seeded(srv)
    with srv.client() as cl:
        page = cl.get(f"/incidents/{ids['api']}").text
    assert 'id="links"' not in page and 'id="alerts"' not in page
    assert "<dt>Name</dt><dd>api</dd>" in page  # the check's name
