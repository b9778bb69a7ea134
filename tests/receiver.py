"""A real HTTP receiver on 127.0.0.1 for the notification and heartbeat tests.

``Receiver()`` serves in a background thread (``http.server``) and records every request
(method, path, headers, body). ``fail`` maps a path prefix to how many requests get a 500 before
it answers 200 (``None``: always 500); ``hang`` holds every request until :meth:`close` (or
``hang`` seconds). Apprise URLs point at it as ``json://127.0.0.1:PORT/path`` or ``form://…``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.time)  # when it arrived (wall clock; benchmarks measure with it)

    def json(self) -> dict:
        return json.loads(self.body)

    def form(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(self.body.decode()).items()}


class Receiver:
    def __init__(self, *, fail: dict[str, int | None] | None = None, hang: float = 0.0) -> None:
        self.requests: list[Received] = []
        self.fail = dict(fail or {})
        self.hang = hang
        self._released = threading.Event()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with receiver._lock:
                    receiver.requests.append(Received(self.command, self.path, dict(self.headers), body))
                    status = receiver._status(self.path)
                if receiver.hang:
                    receiver._released.wait(receiver.hang)
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok" if status == 200 else b"no")

            do_GET = do_POST = _handle

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name=f"receiver-{self.port}", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _status(self, path: str) -> int:
        for prefix, left in self.fail.items():
            if path.startswith(prefix):
                if left is None:
                    return 500
                if left > 0:
                    self.fail[prefix] = left - 1
                    return 500
        return 200

    def paths(self) -> list[str]:
        with self._lock:
            return [r.path for r in self.requests]

    def to(self, prefix: str) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if r.path.startswith(prefix)]

    def wait_for(self, count: int, timeout: float = 15.0, prefix: str = "") -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.to(prefix)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"receiver got {self.paths()}, expected {count} request(s) to {prefix or '/'}")
            time.sleep(0.02)
        return self.to(prefix)

    def close(self) -> None:
        self._released.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)
