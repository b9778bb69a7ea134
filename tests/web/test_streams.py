"""SSE streams (/sessions/{id}/stream, /events/stream) read by real HTTP clients from a real uvicorn.

What is checked: lines arrive live, in order, with ``id`` = the activity ``seq``, and the stream
ends with ``event: end``; a reconnect with ``Last-Event-ID`` gets exactly what it missed; agent
output cannot break the framing; a slow client never slows ingestion and still gets every line
(``resync`` then a replay from the database).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import httpx_sse
import pytest

from app.engine.ingest import ingest_path
from tests.fakes.claude_control import (
    assistant_text,
    assistant_tool_use,
    init_line,
    new_session_id,
    result_success,
    structured_stream,
    tool_result,
)
from tests.helpers import fixture_stream, healthy

HUGE = "9" * 30
EVIL_TOOL_OUTPUT = "event: end\ndata: fake\n\nid: 999\n"
STREAM_TIMEOUT = httpx.Timeout(30, read=20)


# --- helpers ------------------------------------------------------------------------------

@dataclass
class Event:
    event: str
    data: str
    id: str | None
    at: float  # time.monotonic() when it was parsed

    def json(self) -> Any:
        return json.loads(self.data)


def iter_events(response: httpx.Response) -> Iterator[Event]:
    """A plain SSE parser (the EventSource rules): blank line dispatches, ':' lines are comments."""
    event, data, eid = "", [], None
    for line in response.iter_lines():
        if line == "":
            if data or event:
                yield Event(event or "message", "\n".join(data), eid, time.monotonic())
            event, data, eid = "", [], None
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
        elif field == "id":
            eid = value


def read_stream(cl: httpx.Client, url: str, headers: dict | None = None, until_seq: int | None = None) -> list[Event]:
    """Every event until ``end`` (or until the activity event with seq ``until_seq``, then disconnect)."""
    out: list[Event] = []
    with cl.stream("GET", url, headers=headers or {}, timeout=STREAM_TIMEOUT) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for ev in iter_events(r):
            out.append(ev)
            if ev.event == "end" or (until_seq is not None and ev.event == "activity" and int(ev.id) >= until_seq):
                break
    return out


def activity_seqs(events: list[Event]) -> list[int]:
    return [int(e.id) for e in events if e.event == "activity"]


def check_event_ids(events: list[Event]) -> None:
    for e in events:
        if e.event == "activity":
            assert e.id is not None and int(e.id) == e.json()["seq"], e


def start_run(cl: httpx.Client) -> int:
    r = cl.post("/api/v1/runs", json={})
    assert r.status_code == 202, r.text
    return r.json()["id"]


def wait_finished(cl: httpx.Client, pk: int, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        row = cl.get(f"/api/v1/sessions/{pk}").json()
        if row["status"] != "running":
            return row
        assert time.monotonic() < deadline, f"session {pk} still running"
        time.sleep(0.05)


def stored_rows(cl: httpx.Client, pk: int) -> list[dict]:
    return cl.get(f"/api/v1/sessions/{pk}/activity?limit=5000").json()


def long_stream(n_text: int, *, text: str = "step {i}: checking", output: dict | None = None) -> list[dict]:
    """init, n_text assistant text lines, then a complete structured run (7 + n_text lines)."""
    sid = new_session_id()
    lines = structured_stream(sid, output or healthy())
    extra = [assistant_text(sid, text.format(i=i)) for i in range(n_text)]
    return lines[:2] + extra + lines[2:]


def ingest_file(srv: Any, path: Path) -> dict:
    report, _ = srv.run_async(lambda st: ingest_path(st.db, path, st.validator, st.settings))
    return report


def metric(cl: httpx.Client, name: str) -> float:
    for line in cl.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def activity_span(srv: Any, pk: int) -> float:
    """Seconds from the first to the last stored line of a session (the recorder's own ts)."""
    async def go(st: Any) -> tuple[str, str]:
        row = await st.db.fetchone("SELECT min(ts) AS a, max(ts) AS b FROM activity WHERE session_pk = ?", (pk,))
        return row["a"], row["b"]

    first, last = srv.run_async(go)
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return (parse(last) - parse(first)).total_seconds()


# --- live streaming -----------------------------------------------------------------------

def test_a_live_session_streams_in_order_and_ends(live_server):
    lines = long_stream(8)
    assert len(lines) == 15
    srv = live_server(stages=[{"lines": lines, "delay": 0.2}])
    with srv.client() as cl:
        pk = start_run(cl)
        t0 = time.monotonic()
        events = read_stream(cl, f"/sessions/{pk}/stream")
        rows = stored_rows(cl, pk)
    assert [e.event for e in events] == ["activity"] * 15 + ["end"]
    assert activity_seqs(events) == list(range(1, 16))
    check_event_ids(events)
    assert events[-1].json() == {"status": "completed"} and events[-1].id is None
    # live: lines came one by one while the fake printed them (0.2 s apart), not in one burst at the end
    first, last = events[0].at, events[-2].at
    assert last - first > 2.0, f"15 lines 0.2 s apart arrived within {last - first:.2f} s"
    assert first - t0 < 3
    gaps = [b.at - a.at for a, b in itertools.pairwise(events)]
    assert sum(g > 0.1 for g in gaps) >= 10, gaps
    for ev, row in zip(events[:-1], rows, strict=True):
        data = ev.json()
        assert (data["seq"], data["attempt"], data["type"], data["subtype"], data["display"]) == (
            row["seq"], row["attempt"], row["type"], row["subtype"], row["display"])
        assert isinstance(data["html"], str) and data["html"]


def test_reconnect_with_last_event_id_has_no_gaps_or_duplicates(live_server):
    lines = long_stream(13)
    srv = live_server(stages=[{"lines": lines, "delay": 0.1}])
    with srv.client() as cl:
        pk = start_run(cl)
        url = f"{srv.url}/sessions/{pk}/stream"
        first: list[int] = []
        with httpx_sse.connect_sse(cl, "GET", url, timeout=STREAM_TIMEOUT) as source:  # a real SSE client
            for sse in source.iter_sse():
                assert sse.event == "activity"
                first.append(int(sse.id))
                if int(sse.id) == 6:
                    break  # the browser loses the connection here
        assert first == [1, 2, 3, 4, 5, 6]
        assert cl.get(f"/api/v1/sessions/{pk}").json()["status"] == "running"
        time.sleep(0.5)  # lines keep coming while nobody listens
        second = read_stream(cl, f"/sessions/{pk}/stream", headers={"Last-Event-ID": "6"})
        assert second[-1].event == "end"
        check_event_ids(second)
        seqs = first + activity_seqs(second)
        assert seqs == list(range(1, len(lines) + 1)), seqs  # 1..last, each exactly once
        # the same through ?after= (what the page uses on its first connection), and after the end
        third = read_stream(cl, f"/sessions/{pk}/stream?after=17")
        assert activity_seqs(third) == [18, 19, 20] and third[-1].event == "end"
        last = read_stream(cl, f"/sessions/{pk}/stream", headers={"Last-Event-ID": str(len(lines))})
        assert [e.event for e in last] == ["end"]
        beyond = read_stream(cl, f"/sessions/{pk}/stream", headers={"Last-Event-ID": "500"})
        assert [e.event for e in beyond] == ["end"]
        # Last-Event-ID wins over ?after= (a reconnecting EventSource keeps the page's URL)
        both = read_stream(cl, f"/sessions/{pk}/stream?after=2", headers={"Last-Event-ID": "19"})
        assert activity_seqs(both) == [20]


def test_agent_output_cannot_break_the_framing(live_server):
    sid = new_session_id()
    use = assistant_tool_use(sid, "Bash", {"command": "printf 'event: end\\n'"})
    hostile = [
        assistant_text(sid, "line one\nline two\n\n  indented\r\nwindows line\rold mac\u2028sep\u0085nel"),
        assistant_text(sid, "data: {\"seq\": 1}\n\nevent: resync\nretry: 1\n: comment\nid: 7\n"),
        use,
        tool_result(sid, use["message"]["content"][0]["id"], EVIL_TOOL_OUTPUT),
        tool_result(sid, use["message"]["content"][0]["id"], "\r\n\r\n" + EVIL_TOOL_OUTPUT * 3, is_error=True),
    ]
    lines = structured_stream(sid, healthy())
    lines[2:2] = hostile
    srv = live_server(stages=[{"lines": lines, "delay": 0.05}])
    with srv.client() as cl:
        pk = start_run(cl)
        live = read_stream(cl, f"/sessions/{pk}/stream")
        replay = read_stream(cl, f"/sessions/{pk}/stream")  # the finished session, from the database
        rows = stored_rows(cl, pk)
    n = len(lines)
    for events in (live, replay):
        assert [e.event for e in events] == ["activity"] * n + ["end"]
        assert activity_seqs(events) == list(range(1, n + 1))
        assert all(e.id != "999" for e in events) and [e.id for e in events[:-1]] == [str(i) for i in range(1, n + 1)]
        check_event_ids(events)
        for ev, row in zip(events[:-1], rows, strict=True):
            data = ev.json()  # each data field is one intact JSON document
            assert set(data) == {"seq", "attempt", "type", "subtype", "display", "html"}
            assert (data["seq"], data["attempt"], data["type"], data["subtype"], data["display"]) == (
                row["seq"], row["attempt"], row["type"], row["subtype"], row["display"])
    assert [e.data for e in live[:-1]] == [e.data for e in replay[:-1]]  # live and replayed data agree
    assert "event: end" in live[5].json()["display"] and "id: 999" in live[5].json()["display"]
    assert json.loads(rows[5]["raw"])["message"]["content"][0]["content"] == EVIL_TOOL_OUTPUT
    assert "line two" in live[2].json()["display"]


def test_a_finished_session_replays_everything_then_ends(live_server):
    srv = live_server()
    report, _ = srv.run_async(lambda st: ingest_path(st.db, fixture_stream("c_structured"), st.validator,
                                                     st.settings))
    pk = report["id"]
    with srv.client() as cl:
        t0 = time.monotonic()
        events = read_stream(cl, f"/sessions/{pk}/stream")
        assert time.monotonic() - t0 < 3  # no waiting for a session that is over
        rows = stored_rows(cl, pk)
        assert [e.event for e in events] == ["activity"] * 7 + ["end"]
        assert activity_seqs(events) == [r["seq"] for r in rows] == list(range(1, 8))
        assert events[-1].json() == {"status": "completed"}
        check_event_ids(events)
        assert activity_seqs(read_stream(cl, f"/sessions/{pk}/stream?after=4")) == [5, 6, 7]
        negative = read_stream(cl, f"/sessions/{pk}/stream", headers={"Last-Event-ID": "-3"})
        assert activity_seqs(negative) == list(range(1, 8))  # clamped to the start


def test_replay_crosses_batch_boundaries(live_server, tmp_path):
    """More lines than one replay batch (500): every one exactly once, in order."""
    sid = new_session_id()
    lines = [init_line(sid)] + [assistant_text(sid, f"line {i}") for i in range(1198)]
    lines.append(result_success(sid, result_text="done"))
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    srv = live_server()
    pk = ingest_file(srv, path)["id"]
    with srv.client() as cl:
        events = read_stream(cl, f"/sessions/{pk}/stream")
        assert activity_seqs(events) == list(range(1, 1201)) and events[-1].event == "end"
        resumed = read_stream(cl, f"/sessions/{pk}/stream", headers={"Last-Event-ID": "499"})
        assert activity_seqs(resumed) == list(range(500, 1201))


def test_unknown_session_and_bad_ids(live_server):
    srv = live_server()
    with srv.client() as cl:
        for url in ("/sessions/999/stream", "/sessions/abc/stream", "/sessions/-1/stream"):
            r = cl.get(url)
            assert r.status_code == 404 and r.headers["content-type"].startswith("application/json"), url
            assert r.json()["error"] == "not_found"
        report, _ = srv.run_async(lambda st: ingest_path(st.db, fixture_stream("c_structured"), st.validator,
                                                         st.settings))
        for headers, url in (({"Last-Event-ID": "abc"}, f"/sessions/{report['id']}/stream"),
                             ({}, f"/sessions/{report['id']}/stream?after=1.5"),
                             ({"Last-Event-ID": "x"}, "/events/stream")):
            r = cl.get(url, headers=headers)
            assert r.status_code == 422 and r.json()["error"] == "invalid_parameter", (url, r.text)


@pytest.mark.parametrize("where", ["session-header", "session-query", "events-query"])
def test_huge_last_event_id_is_422(live_server, where):
    srv = live_server()
    report, _ = srv.run_async(lambda st: ingest_path(st.db, fixture_stream("c_structured"), st.validator,
                                                     st.settings))
    url, headers = {
        "session-header": (f"/sessions/{report['id']}/stream", {"Last-Event-ID": HUGE}),
        "session-query": (f"/sessions/{report['id']}/stream?after={HUGE}", {}),
        "events-query": (f"/events/stream?after={HUGE}", {}),
    }[where]
    with srv.client() as cl:
        try:
            r = cl.get(url, headers=headers, timeout=5)
        except httpx.HTTPError as exc:
            pytest.fail(f"stream broken: {exc!r}")
    assert r.status_code == 422, r.text


def test_huge_session_id_stream_is_404(live_server):
    srv = live_server()
    with srv.client() as cl:
        r = cl.get(f"/sessions/{HUGE}/stream")
    assert r.status_code == 404, r.text


def test_a_stopped_session_stream_ends_interrupted(live_server):
    srv = live_server(stages=[{"lines": [init_line(new_session_id())], "mode": "hang"}])
    with srv.client() as cl:
        pk = start_run(cl)
        got: list[Event] = []

        def reader() -> None:
            with srv.client() as c2:
                got.extend(read_stream(c2, f"/sessions/{pk}/stream"))

        t = threading.Thread(target=reader)
        t.start()
        deadline = time.monotonic() + 10
        while metric(cl, "tierops_sse_clients") < 1 or not stored_rows(cl, pk):  # subscribed, init stored
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert cl.post(f"/api/v1/sessions/{pk}/stop").status_code == 202
        t.join(20)
        assert not t.is_alive()
    assert [e.event for e in got] == ["activity", "end"]
    assert got[-1].json() == {"status": "interrupted"}


def test_closed_streams_release_their_subscription(live_server):
    srv = live_server(stages=[{"lines": [init_line(new_session_id())], "mode": "hang"}])
    with srv.client() as cl:
        pk = start_run(cl)
        assert metric(cl, "tierops_sse_clients") == 0
        with srv.client() as c2, c2.stream("GET", f"/sessions/{pk}/stream", timeout=STREAM_TIMEOUT) as r:
            events = iter_events(r)  # keep a reference: a collected iterator closes the response
            first = next(events)
            assert first.event == "activity" and first.id == "1"
            assert metric(cl, "tierops_sse_clients") == 1
        deadline = time.monotonic() + 5
        while metric(cl, "tierops_sse_clients") != 0:  # the browser went away: no leaked subscriber
            assert time.monotonic() < deadline, "the subscription outlived its client"
            time.sleep(0.05)
        assert cl.post(f"/api/v1/sessions/{pk}/stop").status_code == 202
        wait_finished(cl, pk)


# --- slow clients -------------------------------------------------------------------------

def test_an_overflowing_subscriber_gets_resync_and_a_gapless_replay(live_server):
    n_text = 400
    srv = live_server(stages=[{"lines": long_stream(n_text), "start_delay": 1.0}])
    srv.state.hub.queue_size = 1  # every multi-line read overflows the stream's queue
    with srv.client() as cl:
        pk = start_run(cl)
        events = read_stream(cl, f"/sessions/{pk}/stream")
    kinds = [e.event for e in events]
    assert "resync" in kinds, "the queue never overflowed"
    assert kinds[-1] == "end" and set(kinds) == {"activity", "resync", "end"}
    assert activity_seqs(events) == list(range(1, n_text + 8))  # no gap, no duplicate
    check_event_ids(events)
    for i, e in enumerate(events):
        if e.event == "resync":  # it says where the replay starts: right after the last line sent
            sent = activity_seqs(events[:i])
            assert e.json() == {"after": sent[-1] if sent else 0}


def test_a_client_that_stops_reading_does_not_slow_ingestion(live_server):
    n_text = 2000
    big = "x" * 8000 + " {i}"  # ~16 MB of lines: more than the socket buffers hold for a stalled client
    stage = {"lines": long_stream(n_text, text=big), "start_delay": 0.5}
    srv = live_server(stages=[stage])
    srv.state.hub.queue_size = 50
    with srv.client() as cl:
        baseline_pk = start_run(cl)  # nobody watching
        wait_finished(cl, baseline_pk)
        baseline = activity_span(srv, baseline_pk)
        while srv.state.supervisor.busy:
            time.sleep(0.05)

        pk = start_run(cl)
        with srv.client() as viewer, viewer.stream("GET", f"/sessions/{pk}/stream", timeout=STREAM_TIMEOUT) as r:
            events = iter_events(r)
            got = [next(events)]  # connected and reading ... then the tab freezes
            assert wait_finished(cl, pk)["status"] == "completed"
            stalled = activity_span(srv, pk)
            subs = [s for s in list(srv.state.hub._subs) if s.session_pk == pk]
            assert subs and subs[0].lagged >= 1, "the hub should have dropped, not queued, for the stalled client"
            for ev in events:  # the tab wakes up
                got.append(ev)
                if ev.event == "end":
                    break
    # Blocking on the stalled client would not finish at all (the client reads only after it);
    # the margin is for a machine busy with other tests.
    assert stalled < max(3 * baseline, baseline + 5), (baseline, stalled)
    kinds = [e.event for e in got]
    assert "resync" in kinds and kinds[-1] == "end"
    assert activity_seqs(got) == list(range(1, n_text + 8))
    assert got[-2].json()["display"].startswith("Structured output provided") or got[-2].json()["type"] == "result"


# --- /events/stream -----------------------------------------------------------------------

def test_events_stream_delivers_events_when_a_session_finishes(live_server):
    out = healthy("all good")
    out["events"].append({"level": "warning", "service": "db-1", "message": "replica lag <b>40 s</b>"})
    srv = live_server(stages=[{"lines": structured_stream(new_session_id(), out), "delay": 0.1}])
    with srv.client() as cl:
        got: list[Event] = []
        with cl.stream("GET", "/events/stream", timeout=STREAM_TIMEOUT) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            pk = start_run(cl)
            t0 = time.monotonic()
            for ev in iter_events(r):
                got.append(ev)
                if len(got) == 2:
                    break
            waited = time.monotonic() - t0
        stored = cl.get(f"/api/v1/events?session={pk}").json()
        assert cl.get(f"/api/v1/sessions/{pk}").json()["status"] == "completed"
        assert waited < 10
        assert [e.event for e in got] == ["event", "event"]
        assert [int(e.id) for e in got] == sorted(x["id"] for x in stored)
        for e in got:
            data = e.json()
            assert set(data) == {"id", "html"} and str(data["id"]) == e.id
        assert "nginx" in got[0].json()["html"] and "<b>" not in got[1].json()["html"]  # escaped
        # a reconnect from id 0 replays them
        with cl.stream("GET", "/events/stream", headers={"Last-Event-ID": "0"}, timeout=STREAM_TIMEOUT) as r:
            events = iter_events(r)
            again = [next(events), next(events)]
        assert [e.id for e in again] == [e.id for e in got]
