"""Cooldowns on the web: ``GET /api/v1/cooldowns`` and the overview's Cooldowns section,
against the app in process (tests/web/conftest.py ``app_server``) with actions written by the real
store functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from app.output.route import Routed
from app.store import cooldowns as action_store
from app.store import findings, sessions
from tests.web.api.test_routes import assert_error


def ago(**delta: float) -> str:
    at = datetime.now(UTC) - timedelta(**delta)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def seed(srv: Any) -> tuple[int, int, str]:
    """Two restarts of api (the oldest 3 h ago), a dry-run restart of web, a marker redeployment of
    web 30 h ago (out of its window) and a proposed restart of db (listed apart, never counted)."""
    oldest = ago(hours=3)

    async def go(st: Any) -> tuple[int, int]:
        pks = []
        for at, routed in ((ago(hours=30), Routed(source="markers", cooldowns=[("redeployment", "web", "success", "v2")])),
                           (oldest, Routed(source="structured_output", actions=[("restart", "api", "done", "r1")])),
                           (ago(hours=1), Routed(source="structured_output", actions=[
                               ("restart", "api", "failed", "r2"), ("restart", "web", "dry-run", None),
                               ("restart", "db", "proposed", None)]))):
            pk = await sessions.create_session(st.db, tier=2, trigger="manual")
            async with st.db.write() as conn:
                await findings.write_routed(conn, pk, routed, at, 0.7, 0.3)
            pks.append(pk)
        return pks[1], pks[2]

    first, second = srv.run_async(go)
    return first, second, oldest


def plus_4h(stamp: str) -> str:
    return (datetime.fromisoformat(stamp) + timedelta(hours=4)).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def test_cooldowns_api_empty(app_server):
    srv = app_server()
    with srv.client() as cl:
        r = cl.get("/api/v1/cooldowns")
    assert r.status_code == 200
    assert r.json() == {"limits": [{"kind": "restart", "count": 2, "window_s": 14400, "window": "4h"},
                                   {"kind": "redeploy", "count": 1, "window_s": 86400, "window": "24h"}],
                        "active": [], "recent": [], "proposals": []}


def test_cooldowns_api_windows_and_recent_actions(app_server):
    srv = app_server()
    first, second, oldest = seed(srv)
    with srv.client() as cl:
        body = cl.get("/api/v1/cooldowns").json()
        assert body["active"] == [{"kind": "restart", "service": "api", "used": 2, "limit": 2, "window_s": 14400,
                                   "window": "4h", "remaining": 0, "next_allowed_at": plus_4h(oldest),
                                   "frees_at": plus_4h(oldest)}]
        assert [(a["session_pk"], a["action"], a["service"], a["outcome"], a["tier"]) for a in body["recent"]] == [
            (second, "restart", "web", "dry-run", 2), (second, "restart", "api", "failed", 2),
            (first, "restart", "api", "done", 2), (first - 1, "redeployment", "web", "success", 2)]
        assert [a["note"] for a in cl.get("/api/v1/cooldowns?limit=2").json()["recent"]] == [None, "r2"]
        # the proposal apart, never among the actions taken, with what the limits say of it now
        [proposal] = body["proposals"]
        assert (proposal["session_pk"], proposal["tier"], proposal["kind"], proposal["service"], proposal["detail"],
                proposal["allowed"], proposal["limit"], proposal["remaining"], proposal["next_allowed_at"],
                proposal["dry_run"], proposal["incident_id"]) == (
            second, 2, "restart", "db", None, True, "2/4h", 2, None, False, None)
        assert len(cl.get("/api/v1/cooldowns?limit=").json()["recent"]) == 4  # empty: the default
        assert_error(cl.get("/api/v1/cooldowns?limit=0"), 422, "invalid_parameter")
        assert_error(cl.get("/api/v1/cooldowns?limit=501"), 422, "invalid_parameter")
        assert "'service'" in assert_error(cl.get("/api/v1/cooldowns?service=api"), 422, "invalid_parameter")["detail"]


def test_cooldowns_api_with_a_bad_setting_is_500_naming_it(app_server):
    srv = app_server(cooldowns="restart:2/4h,redeploy")
    with srv.client() as cl:
        body = assert_error(cl.get("/api/v1/cooldowns"), 500, "config_error")
    assert body["detail"].startswith("TIEROPS_COOLDOWNS: 'redeploy' is not KIND:COUNT/WINDOW")


def _section(html: str, element_id: str) -> str:
    start = html.index(f'id="{element_id}"')
    return html[start:html.index("</section>", start)]


def test_overview_shows_the_cooldowns_before_the_last_cycle(app_server):
    srv = app_server()
    with srv.client() as cl:
        empty = cl.get("/").text
        assert "No action is in cooldown." in _section(empty, "cooldowns")
        assert "Limits per service: restart 2 in 4h, redeploy 1 in 24h." in _section(empty, "cooldowns")
        assert "Recent actions" not in _section(empty, "cooldowns")
        _, second, _ = seed(srv)
        html = cl.get("/").text
    assert html.index('id="cooldowns"') < html.index("<h2>Last cycle</h2>")
    section = _section(html, "cooldowns")
    assert "No action is in cooldown." not in section
    assert '<tr class="attention-row">' in section and "<td>2 of 2 in 4h</td>" in section
    assert "<td>restart</td>" in section and "<td>api</td>" in section
    assert "Recent actions" in section and f'href="/sessions/{second}"' in section
    assert "restart web: dry-run" in section and "redeployment web: success — v2" in section


def test_overview_shows_a_bad_setting_instead_of_failing(app_server):
    srv = app_server(cooldowns="restart=2/4h")
    with srv.client() as cl:
        r = cl.get("/")
    assert r.status_code == 200
    section = _section(r.text, "cooldowns")
    assert "TIEROPS_COOLDOWNS: &#39;restart=2/4h&#39; is not KIND:COUNT/WINDOW" in section
    assert "No action is in cooldown." not in section


def test_a_proposal_over_its_limit_says_when_it_is_next_allowed(app_server):
    srv = app_server()
    _, _, oldest = seed(srv)

    async def go(st: Any) -> None:
        pk = await sessions.create_session(st.db, tier=3, trigger="manual", dry_run=True)
        async with st.db.write() as conn:
            await findings.write_routed(conn, pk, Routed(source="structured_output", actions=[
                ("restart", "api", "proposed", "<script>alert(1)</script>"), ("restart", "api", "done", "claimed")]),
                ago(minutes=1), 0.7, 0.3)

    srv.run_async(go)
    with srv.client() as cl:
        body = cl.get("/api/v1/cooldowns").json()
    newest = body["proposals"][0]
    assert (newest["kind"], newest["service"], newest["tier"], newest["dry_run"], newest["allowed"],
            newest["remaining"], newest["next_allowed_at"]) == ("restart", "api", 3, True, False, 0, plus_4h(oldest))
    assert newest["detail"] == "<script>alert(1)</script>"  # JSON carries it as written
    # the dry-run session's "done" restart is a dry run: api still has 2 of 2 used, not 3
    assert [(w["service"], w["used"]) for w in body["active"]] == [("api", 2)]
    assert body["recent"][0]["outcome"] == "dry-run" and body["recent"][0]["note"] == "reported done in a dry run: claimed"
    assert len(srv.run_async(lambda st: action_store.proposals(st.db))) == 2
