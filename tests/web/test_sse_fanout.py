"""The session stream's own SSE response (``app/web/sse.py``) against a real uvicorn.

What is checked, on the wire (raw sockets, so HTTP chunks are visible): lines published together
go out coalesced in one write and still parse as separate events, in order; pings arrive while a
session is quiet; a client that stops reading is dropped after the send timeout while another
client of the same session gets every line; a reader that goes away releases its subscription.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from app.web import streams
from tests.fakes.claude_control import init_line, new_session_id
from tests.web.test_streams import (
    STREAM_TIMEOUT,
    activity_seqs,
    iter_events,
    long_stream,
    start_run,
    wait_finished,
)


class RawStream:
    """``GET path`` over a plain socket: the decoded HTTP chunks of the response, one per server write."""

    def __init__(self, url: str, path: str, rcvbuf: int | None = None) -> None:
        parts = urlsplit(url)
        self.sock = socket.socket()
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(20)
        self.sock.connect((parts.hostname, parts.port))
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAccept: text/event-stream\r\n\r\n".encode())
        self.buf = b""
        self.head = b""

    def _fill(self) -> bool:
        got = self.sock.recv(65536)
        self.buf += got
        return bool(got)

    def read_head(self) -> bytes:
        while b"\r\n\r\n" not in self.buf:
            assert self._fill(), "closed before the headers"
        self.head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        assert self.head.startswith(b"HTTP/1.1 200"), self.head
        assert b"transfer-encoding: chunked" in self.head.lower()
        return self.head

    def chunks(self):
        """Each HTTP chunk's payload (b"" for the last one)."""
        while True:
            while b"\r\n" not in self.buf:
                if not self._fill():
                    return
            size_line, _, rest = self.buf.partition(b"\r\n")
            size = int(size_line, 16)
            while len(rest) < size + 2:
                if not self._fill():
                    return
                size_line, _, rest = self.buf.partition(b"\r\n")
            yield rest[:size]
            self.buf = rest[size + 2:]
            if size == 0:
                return

    def close(self) -> None:
        self.sock.close()


def parse(payload: bytes) -> list[tuple[str, str | None, str]]:
    """(event, id, data) of every SSE frame in ``payload`` (which holds whole frames only)."""
    assert payload.endswith(b"\r\n\r\n") or payload.startswith(b":"), payload[-40:]
    out = []
    for frame in payload.decode().split("\r\n\r\n"):
        if not frame or frame.startswith(":"):
            continue
        fields = dict(line.split(": ", 1) for line in frame.split("\r\n"))
        out.append((fields["event"], fields.get("id"), fields["data"]))
    return out


def test_lines_published_together_go_out_in_one_write_and_parse_as_separate_events(live_server):
    n_text = 300
    # One write of every line: the recorder reads them in batches however loaded the machine is.
    srv = live_server(stages=[{"lines": long_stream(n_text), "start_delay": 1.0, "burst": True}])
    with srv.client() as cl:
        pk = start_run(cl)
        raw = RawStream(srv.url, f"/sessions/{pk}/stream")
        try:
            raw.read_head()
            per_chunk = []
            events = []
            for payload in raw.chunks():
                if payload:
                    got = parse(payload)
                    per_chunk.append(sum(1 for e in got if e[0] == "activity"))
                    events += got
        finally:
            raw.close()
        wait_finished(cl, pk)
    activity = [e for e in events if e[0] == "activity"]
    assert [int(e[1]) for e in activity] == list(range(1, n_text + 8))  # every line once, in order
    assert all(json.loads(e[2])["seq"] == int(e[1]) for e in activity)
    assert events[-1][0] == "end" and json.loads(events[-1][2]) == {"status": "completed"}
    assert max(per_chunk) >= 2, f"never coalesced: {per_chunk[:20]}"  # one write carried several events
    assert len(per_chunk) < len(activity) + 1


def test_pings_arrive_while_the_session_is_quiet(live_server, monkeypatch):
    monkeypatch.setattr(streams, "PING_SECONDS", 1)
    srv = live_server(stages=[{"lines": [init_line(new_session_id())], "mode": "hang"}])
    with srv.client() as cl:
        pk = start_run(cl)
        raw = RawStream(srv.url, f"/sessions/{pk}/stream")
        try:
            raw.read_head()
            t0 = time.monotonic()
            seen: list[bytes] = []
            pings = []
            for payload in raw.chunks():
                seen.append(payload)
                if payload.startswith(b": ping"):
                    pings.append(time.monotonic() - t0)
                if len(pings) == 2:
                    break
                assert time.monotonic() - t0 < 10, seen
            assert parse(seen[0])[0][:2] == ("activity", "1")  # the init line came first
            assert pings[0] < 4 and pings[1] - pings[0] < 4, pings
            assert cl.get(f"/api/v1/sessions/{pk}").json()["status"] == "running"
            assert cl.post(f"/api/v1/sessions/{pk}/stop").status_code == 202
            rest = b"".join(p for p in raw.chunks())
        finally:
            raw.close()
        assert parse(rest.replace(b": ping\r\n\r\n", b""))[-1][0] == "end"
        wait_finished(cl, pk)


def test_a_client_that_stops_reading_is_dropped_and_the_others_get_every_line(live_server, monkeypatch):
    monkeypatch.setattr(streams, "SEND_TIMEOUT", 1)
    n_text = 1500
    big = "x" * 8000 + " {i}"  # ~12 MB: far more than a stalled socket's buffers hold
    srv = live_server(stages=[{"lines": long_stream(n_text, text=big), "start_delay": 1.0, "delay": 0.0005}])
    with srv.client() as cl:
        pk = start_run(cl)
        stalled = RawStream(srv.url, f"/sessions/{pk}/stream", rcvbuf=4096)  # connects, then never reads
        got = []
        try:
            with srv.client() as viewer, viewer.stream("GET", f"/sessions/{pk}/stream", timeout=STREAM_TIMEOUT) as r:
                for ev in iter_events(r):
                    got.append(ev)
                    if ev.event == "end":
                        break
            assert wait_finished(cl, pk)["status"] == "completed"
            deadline = time.monotonic() + 10
            while [s for s in list(srv.state.hub._subs) if s.session_pk == pk]:  # the stalled stream let go
                assert time.monotonic() < deadline, "a client that stopped reading kept its stream"
                time.sleep(0.1)
        finally:
            stalled.close()
    assert activity_seqs(got) == list(range(1, n_text + 8)) and got[-1].event == "end"


def test_the_shared_ticker_stops_with_the_last_stream(live_server):
    srv = live_server(stages=[{"lines": [init_line(new_session_id())], "mode": "hang"}])
    with srv.client() as cl:
        pk = start_run(cl)
        with srv.client() as c2, c2.stream("GET", f"/sessions/{pk}/stream", timeout=STREAM_TIMEOUT) as r:
            events = iter_events(r)
            assert next(events).event == "activity"
            assert _ticker_running(srv) is True
        deadline = time.monotonic() + 5
        while _ticker_running(srv):
            assert time.monotonic() < deadline, "the ticker outlived every stream"
            time.sleep(0.1)
        assert cl.post(f"/api/v1/sessions/{pk}/stop").status_code == 202
        wait_finished(cl, pk)


def _ticker_running(srv) -> bool:
    from app.web import sse

    ticker = sse._tickers.get(srv._loop)
    return ticker is not None and ticker.task is not None


def test_a_stream_on_a_finished_session_over_plain_http(live_server):
    """The response's framing as a plain HTTP client sees it (headers of an event stream, a last chunk)."""
    srv = live_server(stages=[{"lines": long_stream(3)}])
    with srv.client() as cl:
        pk = start_run(cl)
        wait_finished(cl, pk)
        r = httpx.get(f"{srv.url}/sessions/{pk}/stream", timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert r.headers["cache-control"] == "no-store" and r.headers["x-accel-buffering"] == "no"
    assert [e[0] for e in parse(r.content)] == ["activity"] * 10 + ["end"]


SERVE_AND_STOP = r'''
import os, signal, socket, sys, threading, time
from pathlib import Path
sys.path.insert(0, {root!r})
import httpx, uvicorn
from app.config import Settings
from app.web.app import create_app, server_options
from tests.fakes.claude_control import init_line, make_fake_claude, new_session_id
tmp = Path({tmp!r})
fake = make_fake_claude(tmp / "bin", [{{"lines": [init_line(new_session_id())], "mode": "hang"}}])
settings = Settings(db=tmp / "w.db", home=tmp / "state", claude_bin=str(fake.path), schedule=False, kill_grace=1,
                    _env_file=None)
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
server = uvicorn.Server(uvicorn.Config(create_app(settings, token=None), host="127.0.0.1", port=port,
                                       log_level="warning", **server_options()))
def client():
    while not server.started:
        time.sleep(0.05)
    with httpx.Client(base_url=f"http://127.0.0.1:{{port}}", timeout=30) as cl:
        pk = cl.post("/api/v1/runs", json={{}}).json()["id"]
        with cl.stream("GET", f"/sessions/{{pk}}/stream") as r:
            for line in r.iter_lines():
                if line.startswith("id: 1"):
                    print("streaming, SIGTERM", flush=True)
                    t0 = time.monotonic()
                    os.kill(os.getpid(), signal.SIGTERM)
        print(f"stream ended cleanly after {{time.monotonic() - t0:.1f}} s", flush=True)
threading.Thread(target=client, daemon=True).start()
server.run()
'''


def test_a_server_asked_to_stop_ends_its_open_streams(tmp_path):
    """uvicorn waits for open responses before it stops: a live stream must not keep it running."""
    script = tmp_path / "serve.py"
    script.write_text(SERVE_AND_STOP.format(root=str(Path(__file__).resolve().parents[2]), tmp=str(tmp_path)))
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    out = done.stdout
    assert "streaming, SIGTERM" in out, (out, done.stderr[-2000:])
    assert "stream ended cleanly" in out, (out, done.stderr[-2000:])  # a complete chunked body, no cut
    assert float(out.split("stream ended cleanly after ")[1].split()[0]) < 5
    assert "ASGI callable returned without completing response" not in done.stderr
    assert time.monotonic() - t0 < 40
