"""app/web/pages.py ``read_form``, the one reader of every dashboard form (``/login`` included):
input it refuses is a 400 with what was wrong, never a 500 with a logged traceback."""

from __future__ import annotations

import json
import logging
import time

import pytest

from app.web.limits import FORM_MAX_FIELDS
from tests.fakes.claude_control import new_session_id, structured_stream
from tests.helpers import healthy
from tests.web.api.test_routes import ok_stage, wait_finished, wait_idle

pytestmark = pytest.mark.timeout(60)

TOKEN = "forms-token-0123456789"


def too_many_fields(**fields: str) -> dict[str, str]:
    return {**{f"f{n}": "x" for n in range(FORM_MAX_FIELDS + 1)}, **fields}


@pytest.mark.parametrize("url", ["/login", "/memories", "/run", "/approvals/1/approve", "/maintenance"])
def test_a_form_with_too_many_fields_is_a_400(app_server, caplog, url):
    """``/login`` needs no authentication, so anyone could send it; the others are the forms behind it."""
    srv = app_server(token=TOKEN)
    with caplog.at_level(logging.INFO), srv.client(auth=url != "/login") as cl:
        r = cl.post(url, data=too_many_fields(token="wrong", category="c", value="v"))
    assert r.status_code == 400, r.text
    assert f"the form has more than {FORM_MAX_FIELDS} fields" in r.text and "Traceback" not in r.text
    assert [rec for rec in caplog.records if rec.exc_info or rec.levelno >= logging.ERROR] == []


def test_a_form_within_the_limit_is_read(app_server):
    srv = app_server(token=TOKEN)
    fields = {f"f{n}": "x" for n in range(FORM_MAX_FIELDS - 3)}
    with srv.client(auth=False) as cl:
        assert cl.post("/login", data={**fields, "token": "wrong"}).status_code == 401  # read, and the token judged


HANDOFF = {"escalate": True, "reason": "nginx keeps crashing", "failed_checks": ["nginx"]}


@pytest.mark.parametrize("how", ["the Stop button", "POST /api/v1/sessions/{id}/stop"])
def test_stop_on_a_real_server_never_escalates_nor_asks_for_an_approval(live_server, how):
    """The session's CLI wrote handoff.json asking to escalate (tier 2 needs an approval), then was
    stopped through a real uvicorn: interrupted, its escalation not routed, no approval, no tier 2."""
    srv = live_server(stages=[{"lines": structured_stream(new_session_id(), healthy()), "mode": "hang", "after": 1,
                               "write_files": {"handoff.json": HANDOFF}}, ok_stage()], tier2_approval="manual")
    with srv.client() as cl:
        r = cl.post("/api/v1/runs", json={"tier": 1})
        assert r.status_code == 202, r.text
        pk = r.json()["id"]
        deadline = time.monotonic() + 20
        while not srv.fake.invocations():
            assert time.monotonic() < deadline, "the fake CLI did not start"
            time.sleep(0.05)
        if how == "the Stop button":
            r = cl.post(f"/sessions/{pk}/stop", data={}, follow_redirects=False)
            assert r.status_code == 303 and r.headers["location"] == f"/sessions/{pk}?notice=stop_sent"
        else:
            assert cl.post(f"/api/v1/sessions/{pk}/stop").status_code == 202
        row = wait_finished(cl, pk, timeout=15)
        wait_idle(srv)
        assert (row["status"], row["status_reason"]) == ("interrupted", "stopped by an operator")
        assert (row["escalation_needed"], row["escalation_reason"], row["attention"], row["escalated_to"]) == (
            None, None, None, None)
        assert json.loads(row["handoff_raw"]) == HANDOFF
        assert cl.get("/api/v1/approvals", params={"status": "pending"}).json() == []
        assert srv.run_async(lambda st: st.db.fetchval("SELECT count(*) FROM approvals")) == 0
        assert [s["id"] for s in cl.get("/api/v1/sessions").json()] == [pk]
    assert len(srv.fake.invocations()) == 1
