"""One live view, whoever runs the session, with two real processes: a real uvicorn
(``live_server``) and a real ``python -m app run`` on the same state directory and database,
whose fake claude CLI prints lines slowly (tests/second_process.py).

The server follows the other process's session over SSE line by line and ends the stream, shows
"Cycle running" (``/metrics``, ``/healthz``) while the other process holds the cycle lock, and
stops that session from the API and from the page's form: the other process's CLI is gone, the
row ends ``interrupted`` "stopped by an operator (…)", and ``tierops run`` exits.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from app.cli.cycles import EXIT_INTERRUPTED
from tests.helpers import alive, wait_gone
from tests.second_process import SecondRun, slow_stage, start_run, wait_exit, wait_lines, wait_running
from tests.web.conftest import LiveServer
from tests.web.test_streams import activity_seqs, check_event_ids, iter_events, metric

pytestmark = pytest.mark.timeout(120)


def second(srv: LiveServer, tmp_path: Path, stage: dict) -> SecondRun:
    return start_run(tmp_path, srv.settings.db_path, srv.settings.state_dir, [stage])


def test_the_stream_of_another_process_session_is_live_in_order_and_ends(live_server, tmp_path):
    srv = live_server()
    run = second(srv, tmp_path, slow_stage(16, 0.2))
    try:
        pk = wait_running(run)["id"]
        with srv.client() as cl:
            # "Cycle running" while the other process holds the cycle lock, with who holds it
            assert metric(cl, "tierops_cycle_running") == 1
            health = cl.get("/healthz").json()
            assert health["cycle_running"] is True
            assert health["cycle_holder"].startswith(f"pid {run.proc.pid}, manual cycle from tier 1")
            events, while_running = [], 0
            with cl.stream("GET", f"/sessions/{pk}/stream", timeout=60) as r:
                assert r.status_code == 200
                for ev in iter_events(r):
                    events.append(ev)
                    if ev.event == "activity" and run.proc.poll() is None:
                        while_running += 1
                    if ev.event == "end":
                        break
            assert wait_exit(run) == 0, run.output()
            stored = [row["seq"] for row in cl.get(f"/api/v1/sessions/{pk}/activity",
                                                   params={"limit": 1000}).json()]
            assert metric(cl, "tierops_cycle_running") == 0
            assert cl.get("/healthz").json()["cycle_holder"] is None
    finally:
        run.cleanup()
    check_event_ids(events)
    assert stored == list(range(1, 21))  # init, 16 texts, StructuredOutput, its ack, the result
    assert activity_seqs(events) == stored  # every line, in order, none twice
    assert while_running >= 10, f"only {while_running} lines arrived while the other process ran"
    assert events[-1].event == "end" and events[-1].json() == {"status": "completed"}
    gaps = [b.at - a.at for a, b in itertools.pairwise(events) if b.event == "activity"]
    assert max(gaps) < 2.0, "the stream stalled (a frozen page until the idle check)"


def _hanging(srv: LiveServer, tmp_path: Path) -> tuple[SecondRun, int, int]:
    run = second(srv, tmp_path, slow_stage(3, 0.05, hang=True))
    row = wait_running(run)
    wait_lines(run, row["id"], 4)
    return run, row["id"], row["cli_pid"]


def _assert_stopped(run: SecondRun, pk: int, cli: int, by: str) -> None:
    assert wait_gone([cli], 10) == [] and not alive(cli)
    assert wait_exit(run) == EXIT_INTERRUPTED, run.output()  # its session was stopped: not a clean exit
    row = run.session(pk)
    assert row["status"] == "interrupted"
    assert row["status_reason"].startswith(f"stopped by an operator ({by}, server pid "), row["status_reason"]


def test_stop_from_the_api_reaches_another_process(live_server, tmp_path):
    srv = live_server()
    run, pk, cli = _hanging(srv, tmp_path)
    try:
        with srv.client() as cl:
            r = cl.post(f"/api/v1/sessions/{pk}/stop")
            assert r.status_code == 202 and r.json() == {"id": pk, "stopping": True}
            _assert_stopped(run, pk, cli, "local user (no token configured)")
            again = cl.post(f"/api/v1/sessions/{pk}/stop")
            assert again.status_code == 409 and again.json()["error"] == "not_running"
            assert "status interrupted" in again.json()["detail"]
    finally:
        run.cleanup()


def test_stop_from_the_page_form_reaches_another_process(live_server, tmp_path):
    srv = live_server(token="s3cret-token-for-the-page")
    run, pk, cli = _hanging(srv, tmp_path)
    try:
        with srv.client(auth=False) as cl:
            login = cl.post("/login", data={"token": "s3cret-token-for-the-page", "next": "/"})
            assert login.status_code == 303
            html = cl.get(f"/sessions/{pk}").text
            assert "not started by this server process" not in html
            assert 'title="' not in html.split(f'action="/sessions/{pk}/stop"', 1)[1].split("</form>", 1)[0]
            r = cl.post(f"/sessions/{pk}/stop")
            assert r.status_code == 303 and r.headers["location"] == f"/sessions/{pk}?notice=stop_sent"
            _assert_stopped(run, pk, cli, "dashboard")
            page = cl.get(f"/sessions/{pk}").text
            assert "stopped by an operator (dashboard, server pid" in page
            refused = cl.post(f"/sessions/{pk}/stop")
            assert refused.status_code == 409 and "is not running (status interrupted)" in refused.text
    finally:
        run.cleanup()


def test_a_process_that_cannot_be_verified_is_refused(live_server, tmp_path):
    """A recorded CLI whose start time no longer matches (a recycled pid) is never signalled: the
    API answers 409 and the page's Stop button says why."""
    srv = live_server()
    run, pk, cli = _hanging(srv, tmp_path)
    try:
        async def recycle(st) -> None:  # as if the pid now belonged to a process started earlier
            async with st.db.write() as conn:
                await conn.execute("UPDATE sessions SET cli_start_time = cli_start_time - 3600 WHERE id = ?", (pk,))

        srv.run_async(recycle)
        with srv.client() as cl:
            r = cl.post(f"/api/v1/sessions/{pk}/stop")
            assert r.status_code == 409 and "its start time differs" in r.json()["detail"]
            assert "its start time differs" in cl.get(f"/sessions/{pk}").text  # the button's title
        time.sleep(0.3)
        assert alive(cli) and run.proc.poll() is None and run.session(pk)["stop_requested_at"] is None
    finally:
        run.cleanup()
