"""Real targets on 127.0.0.1 for the probe's tests and bench/probe.py: an HTTP(S) server whose
answers the test chooses by path, a port nobody listens on, and self-signed certificates made by
the ``openssl`` command line.

The HTTP server runs ``http.server`` in a daemon thread (one thread per request, so a request
told to sleep does not hold the others):

* ``/ok`` 200 ``service healthy``; ``/fail`` 500; ``/sick`` 200 ``service sick``;
* ``/sleep?s=3`` answers after 3 s; ``/redirect`` 302; ``/chunked`` 200 in chunks;
* ``/auth`` 200 only with Basic ``user:pa55word``, else 401;
* ``/flip`` answers with :attr:`HttpTarget.flip_status` (a test makes it fail, then recover).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

AUTH = "Basic dXNlcjpwYTU1d29yZA=="  # user:pa55word


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        self.server.requests.append((self.command, url.path, dict(self.headers)))
        match url.path:
            case "/ok":
                self._send(200, b"service healthy")
            case "/fail":
                self._send(500, b"internal error: database connection pool exhausted")
            case "/sick":
                self._send(200, b"service sick")
            case "/sleep":
                time.sleep(float(parse_qs(url.query).get("s", ["3"])[0]))
                self._send(200, b"service healthy, slowly")
            case "/redirect":
                self._send(302, headers={"Location": "/ok"})
            case "/chunked":
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for part in (b"service ", b"healthy ", b"in chunks"):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.write(b"0\r\n\r\n")
            case "/auth":
                if self.headers.get("Authorization") == AUTH:
                    self._send(200, b"service healthy")
                else:
                    self._send(401, b"who are you")
            case "/flip":
                self._send(self.server.flip_status, b"service healthy" if self.server.flip_status < 400 else b"down")
            case _:
                self._send(404, b"no such page")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # many checks connect at once
    flip_status = 200

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, str, dict[str, str]]] = []

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a check that hangs up after the handshake (tls) is not an error here


class HttpTarget:
    """``with HttpTarget() as web: web.url("/ok")``; ``tls=(cert, key)`` serves HTTPS."""

    def __init__(self, tls: tuple[Path, Path] | None = None) -> None:
        self.server = _Server()
        self.scheme = "http"
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def url(self, path: str, userinfo: str = "") -> str:
        return f"{self.scheme}://{userinfo + '@' if userinfo else ''}127.0.0.1:{self.port}{path}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def flip_status(self) -> int:
        return self.server.flip_status

    @flip_status.setter
    def flip_status(self, status: int) -> None:
        self.server.flip_status = status

    def __enter__(self) -> HttpTarget:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def closed_port() -> int:
    """A port on 127.0.0.1 that was just free and has no listener."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def self_signed(directory: Path, days: int, name: str = "cert") -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1/localhost valid ``days`` from now: (cert, key)."""
    openssl = shutil.which("openssl")
    if openssl is None:  # pragma: no cover - the test image has it
        raise RuntimeError("openssl is needed to make test certificates")
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", str(days), "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


@contextlib.contextmanager
def serving(tls: tuple[Path, Path] | None = None) -> Iterator[HttpTarget]:
    with HttpTarget(tls) as target:
        yield target
