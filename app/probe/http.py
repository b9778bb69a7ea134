"""A minimal HTTP/1.1 client for the http check: one request, the status, at most 64 KiB of body.

Why not ``urllib.request`` or httpx: urllib's timeout bounds each socket operation, not the
request, runs in a thread that outlives a cancelled check, reads proxies from the environment and
follows redirects; httpx is not a dependency. A health check needs much less: connect (through
:mod:`app.probe.net`, so a hung resolver cannot hold the probe), send one request with
``Connection: close``, read the status line, the headers and a bounded body (``Content-Length``,
chunked or until close), under the check's own timeout, cancelled cleanly. Redirects are not
followed: a 3xx is an answer. ``user:password@`` in the URL is sent as Basic authentication and
never shown.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from app import __version__
from app.probe import net
from app.probe.targets import quote

log = logging.getLogger(__name__)

__all__ = ["BODY_LIMIT", "HttpError", "HttpResponse", "request"]

BODY_LIMIT = 64 * 1024
MAX_HEADERS = 200


class HttpError(Exception):
    """The server's answer was not HTTP (a bad status line, an overlong header block)."""


@dataclass(frozen=True)
class HttpResponse:
    status: int
    reason: str
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes  # at most BODY_LIMIT bytes
    address: str


def tls_context(verify: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


async def request(url: str, *, method: str = "GET", headers: tuple[tuple[str, str], ...] = (),
                  verify: bool = True, body_limit: int = BODY_LIMIT) -> HttpResponse:
    parts = urlsplit(url)
    https = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if https else 80)
    reader, writer, address = await net.connect(host, port, tls=tls_context(verify) if https else None)
    try:
        writer.write(_request_bytes(parts.netloc.rpartition("@")[2], parts.path or "/", parts.query, method,
                                    _auth(parts.username, parts.password), headers))
        await writer.drain()
        status, reason = await _status_line(reader)
        while 100 <= status < 200 and status != 101:  # interim answers (100 Continue): the real one follows
            await _headers(reader)
            status, reason = await _status_line(reader)
        found = await _headers(reader)
        no_body = method == "HEAD" or status in (204, 304) or 100 <= status < 200
        body = b"" if no_body else await _body(reader, found, body_limit)
        return HttpResponse(status=status, reason=reason, headers=found, body=body, address=address)
    finally:
        net.close(writer)


def _auth(user: str | None, password: str | None) -> str | None:
    if not user:
        return None
    token = f"{unquote(user)}:{unquote(password or '')}".encode()
    return "Basic " + base64.b64encode(token).decode("ascii")


def _request_bytes(netloc: str, path: str, query: str, method: str, auth: str | None,
                   extra: tuple[tuple[str, str], ...]) -> bytes:
    target = path + (f"?{query}" if query else "")
    fields = {"host": ("Host", netloc), "user-agent": ("User-Agent", f"tierops-probe/{__version__}"),
              "accept": ("Accept", "*/*"), "connection": ("Connection", "close")}
    if auth:
        fields["authorization"] = ("Authorization", auth)
    for name, value in extra:  # the operator's headers win
        fields[name.lower()] = (name, value)
    lines = [f"{method} {target} HTTP/1.1", *(f"{n}: {v}" for n, v in fields.values()), "", ""]
    return "\r\n".join(lines).encode("latin-1", "replace")


async def _status_line(reader: asyncio.StreamReader) -> tuple[int, str]:
    line = (await reader.readline()).decode("latin-1").strip()
    if not line:
        raise ConnectionResetError("the server closed the connection without answering")
    version, _, rest = line.partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/") or not (code.isdigit() and len(code) == 3):
        raise HttpError(f"not an HTTP answer: {quote(line, 80)}")  # the sender's text: redacted, then cut
    return int(code), reason


async def _headers(reader: asyncio.StreamReader) -> dict[str, str]:
    found: dict[str, str] = {}
    for _ in range(MAX_HEADERS):
        line = (await reader.readline()).decode("latin-1")
        if line in ("\r\n", "\n", ""):
            return found
        name, sep, value = line.partition(":")
        if sep:
            found[name.strip().lower()] = value.strip()
    raise HttpError(f"more than {MAX_HEADERS} response headers")


async def _body(reader: asyncio.StreamReader, headers: dict[str, str], limit: int) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return await _chunked(reader, limit)
    length = headers.get("content-length", "")
    if length.isdigit():
        try:
            return await reader.readexactly(min(int(length), limit))
        except asyncio.IncompleteReadError as exc:  # closed early: what came is what there is
            return exc.partial
    body = b""
    while len(body) < limit and (chunk := await reader.read(limit - len(body))):
        body += chunk
    return body


async def _chunked(reader: asyncio.StreamReader, limit: int) -> bytes:
    body = b""
    while len(body) < limit:
        size_line = (await reader.readline()).split(b";")[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            break  # a malformed chunk: keep what was read
        if size == 0:
            break
        try:
            body += await reader.readexactly(min(size, limit - len(body)))
            if len(body) >= limit:
                break
            await reader.readexactly(2)  # the chunk's CRLF
        except asyncio.IncompleteReadError as exc:
            body += exc.partial
            break
    return body[:limit]
