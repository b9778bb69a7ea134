"""The ``/cooldowns`` page: the limits in words, each window in cooldown with used,
remaining and next allowed time, the recent actions and, apart, the proposed ones — the data
``GET /api/v1/cooldowns`` returns — with actions written by the real store functions
(tests/web/api/test_cooldowns.py ``seed``)."""

from __future__ import annotations

import html as htmllib
import re
from typing import Any

from app.output.route import Routed
from app.store import findings, sessions
from app.web.pages.cooldowns import span
from tests.web.api.test_cooldowns import ago, plus_4h, seed


def text(fragment: str) -> str:
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def section(page: str, ident: str) -> str:
    start = page.index(f'aria-labelledby="{ident}"')
    return page[start:page.index("</section>", start)]


def test_cooldowns_page_shows_the_same_data_as_the_api(app_server):
    srv = app_server()
    first, second, oldest = seed(srv)
    with srv.client() as cl:
        r = cl.get("/cooldowns")
        api = cl.get("/api/v1/cooldowns").json()
    assert r.status_code == 200, r.text
    page = r.text
    limits = text(section(page, "cd-limits"))
    assert "restart 2 4 hours (4h)" in limits and "redeploy 1 1 day (24h)" in limits
    assert "TIEROPS_COOLDOWNS = restart:2/4h,redeploy:1/24h" in limits
    active = section(page, "cd-active")
    (window,) = api["active"]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", active.split("<tbody>")[1], re.DOTALL)
    assert len(rows) == 1
    assert text(rows[0]).startswith("restart api 2 of 2 in 4 hours 0 — limit reached")
    assert f'<time class="when" datetime="{plus_4h(oldest)[:19]}Z"' in rows[0]  # next allowed, the when filter
    assert window["next_allowed_at"] == plus_4h(oldest)
    assert "attention-row" in active
    assert "No action in its window: redeploy." in text(active)  # the redeployment was 30 h ago
    recent = section(page, "cd-recent")
    recent_rows = [text(row) for row in re.findall(r"<tr>(.*?)</tr>", recent.split("<tbody>")[1], re.DOTALL)]
    assert len(recent_rows) == len(api["recent"]) == 4
    assert re.search(rf"restart web dry-run #{second} tier 2", recent_rows[0])
    assert re.search(rf"restart api done #{first} tier 2 r1$", recent_rows[2])
    assert f'href="/sessions/{first}"' in recent
    assert "restart db" not in text(recent)  # the proposal is not an action taken
    proposed = section(page, "cd-proposed")
    (row,) = [text(r) for r in re.findall(r"<tr>(.*?)</tr>", proposed.split("<tbody>")[1], re.DOTALL)]
    assert re.search(rf"restart db proposed allowed \(2 of 2/4h left\) #{second} tier 2 — —$", row)
    assert len(api["proposals"]) == 1


def test_cooldowns_page_without_actions_or_limits(app_server):
    srv = app_server(cooldowns="")
    with srv.client() as cl:
        page = cl.get("/cooldowns").text
    assert "No limits: every action is recorded, none is limited." in page
    assert "No action has been recorded yet." in page
    assert "No action has been proposed." in page


def test_cooldowns_page_shows_a_bad_setting_instead_of_failing(app_server):
    srv = app_server(cooldowns="restart:2/4h,redeploy")
    with srv.client() as cl:
        r = cl.get("/cooldowns")
    assert r.status_code == 200
    assert re.search(r'<p class="banner error" role="alert">TIEROPS_COOLDOWNS: .*redeploy.* is not KIND:COUNT/WINDOW',
                     htmllib.unescape(r.text))


def test_windows_read_as_lengths():
    assert [span(s) for s in (14400, 86400, 5400, 60, 1)] == ["4 hours", "1 day", "1 h 30 min", "1 minute", "1 second"]


def test_hostile_proposals_are_escaped_and_cut(app_server):
    detail = "<script>alert('d')</script>" + "y" * 100_000

    async def go(st: Any) -> int:
        pk = await sessions.create_session(st.db, tier=3, trigger="manual")
        async with st.db.write() as conn:
            await findings.write_routed(conn, pk, Routed(source="structured_output", actions=[
                ("<b>restart</b>", "<img src=x onerror=alert(1)>", "proposed", detail)]), ago(minutes=1), 0.7, 0.3)
        return pk

    srv = app_server()
    pk = srv.run_async(go)
    with srv.client() as cl:
        page = cl.get("/cooldowns").text
    proposed = section(page, "cd-proposed")
    assert "<b>restart</b>" not in proposed and "&lt;b&gt;restart&lt;/b&gt;" in proposed
    assert "<img" not in proposed and "&lt;img src=x onerror=alert(1)&gt;" in proposed
    assert "<script>" not in proposed and "&lt;script&gt;alert(&#39;d&#39;)&lt;/script&gt;" in proposed
    assert "y" * 400 not in proposed and len(proposed) < 5000  # the detail cut to 300 characters
    assert f'href="/sessions/{pk}"' in proposed and "allowed (no limit)" in text(proposed)
