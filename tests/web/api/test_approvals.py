"""Approvals over HTTP: ``/api/v1/approvals`` (list, one, approve, reject), the
pending approvals on the overview and on the escalating session's page with their forms, the
approval page, the lifespan's expiry watch, and one Approve clicked in a real browser.

Every approval here is made the real way: a chain started through ``POST /api/v1/runs`` at tier 2
whose fake CLI escalates, with tier 3 left at its default (manual approval).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from playwright.sync_api import Browser

from app.store import approvals as approval_store
from app.store import sessions as session_store
from app.store.db import Database
from tests.fakes.claude_control import new_session_id, structured_stream
from tests.helpers import escalating, healthy
from tests.web.api.test_routes import hang_stage

pytestmark = pytest.mark.timeout(90)

TOKEN = "approvals-token-0123456789"


def stages() -> list[dict]:
    """Tier 2 asks for tier 3; tier 3 (once approved) reports healthy."""
    return [{"lines": structured_stream(new_session_id(), escalating("roll back the nginx config"))},
            {"lines": structured_stream(new_session_id(), healthy("Rolled back."))}]


def wait_idle(srv, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while srv.state.supervisor.busy:
        assert time.monotonic() < deadline, "the cycle did not finish"
        time.sleep(0.05)


def gate(srv) -> dict:
    """Run a chain that stops waiting for an approval; return the approval."""
    with srv.client() as cl:
        r = cl.post("/api/v1/runs", json={"tier": 2})
        assert r.status_code == 202, r.text
        wait_idle(srv)
        pending = cl.get("/api/v1/approvals", params={"status": "pending"}).json()
    assert pending, "the chain did not stop at an approval"
    return pending[-1]


def _section(html: str, element_id: str) -> str:
    start = html.index(f'id="{element_id}"')
    return html[start:html.index("</section>", start)]


# --- the API ------------------------------------------------------------------------------------

def test_list_and_get(app_server):
    srv = app_server(stages=stages())
    a = gate(srv)
    with srv.client() as cl:
        assert cl.get("/api/v1/approvals").json() == [a]
        assert cl.get(f"/api/v1/approvals/{a['id']}").json() == a
        assert (a["status"], a["tier"]) == ("pending", 3)
        assert a["handoff"].startswith(f"## Escalation from tier 2 (session {a['session_pk']})")
        assert "Reason: roll back the nginx config" in a["handoff"]
        session = cl.get(f"/api/v1/sessions/{a['session_pk']}").json()
        assert session["escalation_gate"] == f"waiting for approval #{a['id']} to run tier 3"
        assert session["escalated_to"] is None
        assert cl.get("/api/v1/approvals", params={"status": "approved"}).json() == []
        assert cl.get("/api/v1/approvals", params={"status": ""}).json() == [a]  # empty = not given
        r = cl.get("/api/v1/approvals", params={"status": "maybe"})
        assert r.status_code == 422 and r.json()["error"] == "invalid_parameter"
        assert cl.get("/api/v1/approvals", params={"limit": 0}).status_code == 422
        assert cl.get("/api/v1/approvals", params={"sort": "id"}).status_code == 422  # undocumented parameter
        for path in ("/api/v1/approvals/999", "/api/v1/approvals/abc"):
            r = cl.get(path)
            assert r.status_code == 404 and r.json()["error"] == "not_found"


def test_approve_starts_the_tier_and_answers_with_its_session(app_server):
    srv = app_server(token=TOKEN, stages=stages())
    a = gate(srv)
    with srv.client() as cl:
        r = cl.post(f"/api/v1/approvals/{a['id']}/approve", json={"note": "  in the window  ", "by": "alice"})
        assert r.status_code == 202, r.text
        body = r.json()
        child = body["session_id"]
        assert r.headers["location"] == f"/api/v1/sessions/{child}"
        assert (body["approval"]["status"], body["approval"]["decided_by"], body["approval"]["note"],
                body["approval"]["child_session_pk"]) == ("approved", "alice via API token", "in the window", child)
        wait_idle(srv)
        s = cl.get(f"/api/v1/sessions/{child}").json()
        assert (s["tier"], s["status"], s["parent_session_id"], s["trigger"]) == (3, "completed", a["session_pk"],
                                                                                   "escalation")
        assert a["handoff"] in s["system_prompt"]
        parent = cl.get(f"/api/v1/sessions/{a['session_pk']}").json()
        assert parent["escalated_to"] == child and parent["escalation_gate"] is None
        r = cl.post(f"/api/v1/approvals/{a['id']}/approve")
        assert r.status_code == 409 and "already approved by alice via API token" in r.json()["detail"]
        assert cl.post(f"/api/v1/approvals/{a['id']}/reject").status_code == 409
        assert cl.post("/api/v1/approvals/999/approve").status_code == 404
    assert len(srv.fake.invocations()) == 2


def test_reject_flags_the_session(app_server):
    srv = app_server(stages=stages())
    a = gate(srv)
    with srv.client() as cl:
        r = cl.post(f"/api/v1/approvals/{a['id']}/reject", json={"note": "not during the sale"})
        assert r.status_code == 200
        assert (r.json()["status"], r.json()["decided_by"]) == ("rejected", "local user (no token configured)")
        s = cl.get(f"/api/v1/sessions/{a['session_pk']}").json()
        assert s["attention"] == (f"approval #{a['id']} to run tier 3 rejected by local user (no token configured): "
                                  "not during the sale")
        assert cl.post(f"/api/v1/approvals/{a['id']}/approve").status_code == 409
        assert cl.post("/api/v1/approvals/999/reject").status_code == 404
    assert len(srv.fake.invocations()) == 1


def test_bad_bodies_are_refused_before_anything_is_decided(app_server):
    srv = app_server(stages=stages())
    a = gate(srv)
    url = f"/api/v1/approvals/{a['id']}"
    with srv.client() as cl:
        for body in ({"note": "x" * 2001}, {"by": "a\nb"}, {"extra": 1}, {"note": 5}, []):
            r = cl.post(url + "/approve", json=body)
            assert r.status_code == 422 and r.json()["error"] == "invalid_body", (body, r.text)
        r = cl.post(url + "/reject", content=b"note=x", headers={"content-type": "application/x-www-form-urlencoded"})
        assert r.status_code == 415
        assert cl.get(url).json()["status"] == "pending"


def test_approve_while_a_cycle_runs_is_409_and_stays_pending(app_server):
    srv = app_server(stages=stages())
    a = gate(srv)
    srv.fake.set_stages([hang_stage()])
    with srv.client() as cl:
        running = cl.post("/api/v1/runs", json={"tier": 1}).json()["id"]
        r = cl.post(f"/api/v1/approvals/{a['id']}/approve")
        assert r.status_code == 409 and r.json()["error"] == "cycle_running"
        assert r.json()["detail"] == (f"a cycle is running; approve again when it has finished "
                                      f"(approval #{a['id']} stays pending)")
        assert cl.get(f"/api/v1/approvals/{a['id']}").json()["status"] == "pending"
        assert cl.post(f"/api/v1/sessions/{running}/stop").status_code == 202
        wait_idle(srv)
        srv.fake.set_stages([{"lines": structured_stream(new_session_id(), healthy())}])
        assert cl.post(f"/api/v1/approvals/{a['id']}/approve").status_code == 202  # again, once it finished
        wait_idle(srv)


def test_the_lifespan_expires_approvals_past_their_time(tmp_path, app_server):
    async def seed() -> tuple[int, int]:
        db = await Database.open(tmp_path / "web.db")  # the file app_server's settings use
        try:
            pk = await session_store.create_session(db, tier=2, model="sonnet", trigger="schedule")
            row = await approval_store.create_approval(db, session_pk=pk, chain_id=pk, tier=3, handoff="h",
                                                       timeout_s=60, now="2026-01-01T00:00:00.000Z")
            return pk, row["id"]
        finally:
            await db.close()

    session_pk, approval_id = asyncio.run(seed())
    srv = app_server()
    deadline = time.monotonic() + 10
    with srv.client() as cl:
        while cl.get(f"/api/v1/approvals/{approval_id}").json()["status"] == "pending":
            assert time.monotonic() < deadline, "the expiry watch did not run at start"
            time.sleep(0.05)
        assert cl.get(f"/api/v1/approvals/{approval_id}").json()["status"] == "expired"
        assert cl.get(f"/api/v1/sessions/{session_pk}").json()["attention"] == (
            f"approval #{approval_id} to run tier 3 expired after 60 s")


# --- the pages ----------------------------------------------------------------------------------

def test_overview_and_session_page_show_the_pending_approval_with_its_form(app_server):
    srv = app_server(stages=stages())
    with srv.client() as cl:
        assert 'id="pending-approvals"' not in cl.get("/").text
    a = gate(srv)
    with srv.client() as cl:
        overview = cl.get("/").text
        session = cl.get(f"/sessions/{a['session_pk']}").text
        approval = cl.get(f"/approvals/{a['id']}").text
    assert overview.index('id="open-incidents"') < overview.index('id="pending-approvals"') < overview.index(
        "<h2>Scheduler</h2>")
    for html in (overview, session, approval):
        section = _section(html, "pending-approvals")
        assert f'action="/approvals/{a["id"]}/approve"' in section
        assert f'formaction="/approvals/{a["id"]}/reject"' in section
        assert "Reason: roll back the nginx config" in section and 'name="note"' in section
    assert 'name="back" value="overview"' in overview and 'name="back" value="session"' in session
    assert f"waiting for approval #{a['id']} to run tier 3" in session  # the gate banner
    with srv.client() as cl:
        assert cl.get("/approvals/999").status_code == 404


def test_reject_form_redirects_back_with_a_notice(app_server):
    srv = app_server(stages=stages())
    a = gate(srv)
    with srv.client(follow_redirects=False) as cl:
        r = cl.post(f"/approvals/{a['id']}/reject", data={"note": "no", "back": "overview"})
        assert r.status_code == 303 and r.headers["location"] == "/?notice=approval_rejected"
        page = cl.get(r.headers["location"]).text
        assert "Rejected: the escalation will not run" in page and 'id="pending-approvals"' not in page
        session = cl.get(f"/sessions/{a['session_pk']}").text
        assert "Rejected" in _section(session, "pending-approvals") and "by local user" in session
        assert f"approval #{a['id']} to run tier 3 rejected by local user (no token configured): no" in session
        r = cl.post(f"/approvals/{a['id']}/reject", data={"note": "", "back": "session"})
        assert r.status_code == 409 and "Cannot reject" in r.text and "already rejected" in r.text


def test_approve_form_and_its_refusals(app_server):
    srv = app_server(stages=stages())
    a = gate(srv)
    pk = a["id"]
    with srv.client(follow_redirects=False) as cl:
        r = cl.post(f"/approvals/{pk}/approve", data={"note": "x" * 2001, "back": "session"})
        assert r.status_code == 422 and "The note is too long" in r.text
        r = cl.post(f"/approvals/{pk}/approve", data={"note": "", "back": "elsewhere"})
        assert r.status_code == 422 and "Unknown form field back" in r.text
        r = cl.post(f"/approvals/{pk}/approve", data={"note": ""}, headers={"Origin": "https://evil.example"})
        assert r.status_code == 403
        assert cl.post("/approvals/999/approve", data={"note": ""}).status_code == 404
        assert cl.get(f"/api/v1/approvals/{pk}").json()["status"] == "pending"
        srv.fake.set_stages([hang_stage()])
        running = cl.post("/api/v1/runs", json={"tier": 1}).json()["id"]
        r = cl.post(f"/approvals/{pk}/approve", data={"note": "", "back": "session"})
        assert r.status_code == 409 and "approve again when it has finished" in r.text
        cl.post(f"/api/v1/sessions/{running}/stop")
        wait_idle(srv)
        srv.fake.set_stages([{"lines": structured_stream(new_session_id(), healthy())}])
        r = cl.post(f"/approvals/{pk}/approve", data={"note": "go", "back": "session"})
        assert r.status_code == 303 and r.headers["location"] == f"/sessions/{a['session_pk']}?notice=approval_approved"
        assert "Approved: the escalated tier is starting" in cl.get(r.headers["location"]).text
        wait_idle(srv)
        done = cl.get(f"/api/v1/approvals/{pk}").json()
        assert (done["status"], done["decided_by"], done["note"]) == ("approved", "local user (no token configured)",
                                                                      "go")
        assert f'href="/sessions/{done["child_session_pk"]}"' in cl.get(f"/approvals/{pk}").text


# --- a real browser -----------------------------------------------------------------------------

def test_approve_in_a_browser(live_server, browser: Browser):
    srv = live_server(stages=stages())
    a = gate(srv)
    context = browser.new_context()
    errors: list[str] = []
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(srv.url + "/")
        card = page.locator(f"#approval-{a['id']}")
        assert "Reason: roll back the nginx config" in card.locator("pre.handoff").inner_text()
        card.locator("textarea[name=note]").fill("approved from the <b>browser</b>")
        with page.expect_navigation():
            card.locator("button", has_text="Approve").click()
        assert page.url.endswith("/?notice=approval_approved")
        assert "Approved: the escalated tier is starting" in page.locator("#approval-notice").inner_text()
        assert page.locator(f"#approval-{a['id']}").count() == 0  # no longer pending
    finally:
        context.close()
    assert not errors, errors
    wait_idle(srv)
    with srv.client() as cl:
        done = cl.get(f"/api/v1/approvals/{a['id']}").json()
        assert (done["status"], done["note"]) == ("approved", "approved from the <b>browser</b>")
        child = cl.get(f"/api/v1/sessions/{done['child_session_pk']}").json()
    assert (child["tier"], child["status"], child["parent_session_id"]) == (3, "completed", a["session_pk"])
