"""The HTTP edge: body size limits read incrementally, the exact loopback Host rule,
and bad API input answered with one clear 4xx JSON error. (The OpenAPI document against
behaviour: api/test_schemathesis.py; the CLI's errors: tests/cli/test_base.py.)"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest

from app.web.auth import is_loopback, loopback_host
from app.web.limits import API_BODY_MAX_BYTES, FORM_MAX_BYTES
from tests.web.api.test_routes import assert_error, count, hang_stage

CHUNK = 64 * 1024


def padded(doc: dict, size: int) -> bytes:
    """``doc`` as JSON, padded with trailing whitespace (still valid JSON) to exactly ``size`` bytes."""
    raw = json.dumps(doc).encode()
    return raw + b" " * (size - len(raw))


def asgi_request(srv: Any, method: str, path: str, chunks: Iterable[bytes],
                 headers: list[tuple[bytes, bytes]]) -> tuple[int, dict[str, str], bytes, int]:
    """One request straight into the ASGI app on the server's loop, its body given chunk by chunk
    as a server would (``more_body``). Returns (status, headers, body, chunks the app pulled)."""
    pulled = 0

    async def call() -> tuple[int, dict[str, str], bytes]:
        nonlocal pulled
        source = iter(chunks)
        sent: list[dict] = []

        async def receive() -> dict:
            nonlocal pulled
            chunk = next(source, None)
            if chunk is None:
                return {"type": "http.request", "body": b"", "more_body": False}
            pulled += 1
            return {"type": "http.request", "body": chunk, "more_body": True}

        async def send(message: dict) -> None:
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
                 "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
                 "headers": [(b"host", b"127.0.0.1:8000"), *headers], "client": ("127.0.0.1", 50000),
                 "server": ("127.0.0.1", 8000), "state": {}}
        await srv.app(scope, receive, send)
        start = next(m for m in sent if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body

    status, response_headers, body = asyncio.run_coroutine_threadsafe(call(), srv._loop).result(30)
    return status, response_headers, body, pulled


# --- 1. every body has a limit, read incrementally -----------------------------------------

@pytest.mark.parametrize("method,path,doc", [
    ("POST", "/api/v1/memories", {"category": "c", "value": "too large"}),
    ("POST", "/api/v1/runs", {"tier": 1}),
    ("PATCH", "/api/v1/memories/{pk}", {"value": "too large"}),
])
def test_an_api_body_over_1_mib_is_413_json_and_changes_nothing(app_server, method, path, doc):
    srv = app_server(stages=[hang_stage()])
    with srv.client() as cl:
        pk = cl.post("/api/v1/memories", json={"category": "c", "value": "v"}).json()["id"]
        r = cl.request(method, path.format(pk=pk), content=padded(doc, API_BODY_MAX_BYTES + 1),
                       headers={"content-type": "application/json"})
        body = assert_error(r, 413, "too_large")
        assert str(API_BODY_MAX_BYTES) in body["detail"]
        assert cl.get("/api/v1/memories").json()[0]["value"] == "v"
    assert count(srv, "SELECT count(*) FROM memories") == 1
    assert count(srv, "SELECT count(*) FROM sessions") == 0 and not srv.state.supervisor.busy


def test_a_body_of_exactly_the_limit_is_read(app_server):
    srv = app_server()
    with srv.client() as cl:
        r = cl.post("/api/v1/memories", content=padded({"category": "c", "value": "at the limit"}, API_BODY_MAX_BYTES),
                    headers={"content-type": "application/json"})
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("path,ctype,limit", [
    ("/api/v1/memories", b"application/json", API_BODY_MAX_BYTES),
    ("/memories", b"application/x-www-form-urlencoded", FORM_MAX_BYTES),  # forms share the reader
])
def test_reading_stops_at_the_first_chunk_over_the_limit(app_server, path, ctype, limit):
    """Chunked (no Content-Length): the app pulls at most limit + one chunk, then answers 413."""
    srv = app_server()
    start = b'{"category": "c", "value": "v"}' if b"json" in ctype else b"category=c&value=v&x="
    chunks = [start, *([b" " * CHUNK] * 160)]  # 10 MiB that would be valid if read to the end
    status, _, body, pulled = asgi_request(srv, "POST", path, chunks, [(b"content-type", ctype)])
    assert status == 413, body[:300]
    assert pulled <= limit // CHUNK + 2, f"{pulled} chunks of {CHUNK} bytes pulled for a {limit} byte limit"
    if path.startswith("/api/"):
        assert json.loads(body) == {"error": "too_large", "detail": f"request body is larger than the limit of {limit} bytes"}
    assert count(srv, "SELECT count(*) FROM memories") == 0


@pytest.mark.parametrize("path,ctype", [("/api/v1/memories", b"application/json"),
                                        ("/memories", b"application/x-www-form-urlencoded")])
def test_a_declared_length_over_the_limit_is_refused_before_reading(app_server, path, ctype):
    srv = app_server()
    status, _, _, pulled = asgi_request(srv, "POST", path, [b" " * CHUNK] * 160,
                                        [(b"content-type", ctype), (b"content-length", str(160 * CHUNK).encode())])
    assert status == 413 and pulled == 0


def test_a_real_server_answers_413_without_waiting_for_the_rest(live_server):
    """Over a socket: a chunked body of which only limit + 256 KiB is ever sent gets its 413 at
    once (the server does not wait for, or buffer, the rest)."""
    srv = live_server()
    port = urlsplit(srv.url).port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /api/v1/memories HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        first = b'{"category": "c", "value": "v"}'
        sock.sendall(b"%x\r\n%s\r\n" % (len(first), first))
        for _ in range((API_BODY_MAX_BYTES + 256 * 1024) // CHUNK):
            sock.sendall(b"%x\r\n%s\r\n" % (CHUNK, b" " * CHUNK))
        response = b""
        while b"\r\n\r\n" not in response or not response.rstrip().endswith(b"}"):
            data = sock.recv(65536)  # times out (10 s) if the server waits for the rest
            if not data:
                break
            response += data
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert json.loads(body)["error"] == "too_large"
    assert count(srv, "SELECT count(*) FROM memories") == 0


# --- 2. the loopback Host rule is exact ----------------------------------------------------

ACCEPTED_HOSTS = ["localhost", "localhost:8080", "127.0.0.1", "127.0.0.1:80", "[::1]", "[::1]:8080", "LocalHost:1"]
REFUSED_HOSTS = [
    "a.localhost", "a.localhost:8080", "localhost.localdomain", "127.0.0.2", "127.1.2.3:8080", "127.1",
    "localhost.evil.example", "localhostevil", "127.0.0.1.nip.io", "127.0.0.1.evil.example:80", "localhost.",
    "::1", "[::1", "[::1]x", "[::1]:", "localhost:", "localhost:http", "localhost:123456", "localhost:80:80",
    "[::ffff:127.0.0.1]", "0x7f000001", "2130706433", "evil.example", "",
]


@pytest.mark.parametrize("host", ACCEPTED_HOSTS)
def test_exactly_the_three_loopback_names_are_served_without_a_token(app_server, host):
    assert loopback_host(host)
    srv = app_server()
    with srv.client(headers={"Host": host}) as cl:
        assert cl.get("/api/v1/sessions").status_code == 200


@pytest.mark.parametrize("host", REFUSED_HOSTS)
def test_every_other_host_is_refused_without_a_token(app_server, host):
    assert not loopback_host(host)
    srv = app_server()
    with srv.client(headers={"Host": host}) as cl:
        body = assert_error(cl.get("/api/v1/sessions"), 403, "host_not_allowed")
        assert "127.0.0.1, localhost and [::1]" in body["detail"]
        r = cl.post("/memories", data={"category": "c", "value": "rebound"})
        assert r.status_code == 403
    assert count(srv, "SELECT count(*) FROM memories") == 0


@pytest.mark.parametrize("host,loopback", [
    ("127.0.0.1", True), ("127.0.0.53", True), ("127.255.255.254", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("LOCALHOST", True),
    ("localhost.localdomain", False), ("evil.localhost", False), ("0.0.0.0", False), ("::", False),
    ("128.0.0.1", False), ("example.com", False), ("", False), ("[::1", False),
])
def test_a_bind_to_any_127_or_ipv6_loopback_address_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


# --- 4. bad API input: one clear 4xx JSON error --------------------------------------------

def test_a_body_that_is_not_json_is_415(app_server):
    srv = app_server()
    with srv.client() as cl:
        for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            r = cl.post("/api/v1/memories", content=b'{"category": "c", "value": "v"}', headers={"content-type": ctype})
            body = assert_error(r, 415, "unsupported_media_type")
            assert ctype.split(";")[0] in body["detail"]
        for ctype in ("application/json", "application/json; charset=utf-8", "application/merge-patch+json"):
            r = cl.post("/api/v1/memories", json={"category": ctype, "value": "v"}, headers={"content-type": ctype})
            assert r.status_code == 201, (ctype, r.text)


@pytest.mark.parametrize("url,name", [
    ("/api/v1/sessions?limt=5", "'limt'"), ("/api/v1/events?levle=critical", "'levle'"),
    ("/api/v1/memories?activ=true", "'activ'"), ("/api/v1/sessions/1/activity?offset=3", "'offset'"),
])
def test_unknown_query_parameters_are_named(app_server, url, name):
    srv = app_server()
    with srv.client() as cl:
        body = assert_error(cl.get(url), 422, "invalid_parameter")
    assert name in body["detail"] and "takes:" in body["detail"]


@pytest.mark.parametrize("path,name", [("/sessions", "limit"), ("/sessions", "status"), ("/events", "level"),
                                       ("/memories", "active"), ("/events", "session")])
def test_an_empty_query_value_means_not_given_as_documented(app_server, path, name):
    srv = app_server()
    with srv.client() as cl:
        doc = cl.get("/api/v1/openapi.json").json()
        assert cl.get(f"/api/v1{path}?{name}=").json() == cl.get(f"/api/v1{path}").json()
    [param] = [p for p in doc["paths"][path]["get"]["parameters"] if p["name"] == name]
    assert jsonschema.Draft202012Validator(param["schema"]).is_valid("")


@pytest.mark.parametrize("path,doc,where", [
    ("/api/v1/runs", {"tier": "1"}, "$.tier"), ("/api/v1/runs", {"tier": True}, "$.tier"),
    ("/api/v1/memories", {"category": "c", "value": "v", "active": 0}, "$.active"),
    ("/api/v1/memories", {"category": "c", "value": "v", "confidence": "0.5"}, "$.confidence"),
    ("/api/v1/memories", {"category": 5, "value": "v"}, "$.category"),
    ("/api/v1/memories", {"category": "c", "value": " " + "v" * 10_000}, "$.value"),  # counted as sent
    ("/api/v1/memories", {"category": " \t", "value": "v"}, "$.category"),
])
def test_body_types_are_the_documented_ones(app_server, path, doc, where):
    srv = app_server(stages=[hang_stage()])
    with srv.client() as cl:
        body = assert_error(cl.post(path, json=doc), 422, "invalid_body")
    assert [p["path"] for p in body["detail"]] == [where]
    assert count(srv, "SELECT count(*) FROM memories") == 0 and not srv.state.supervisor.busy


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_finite_numbers_are_not_json(app_server, constant):
    srv = app_server()
    with srv.client() as cl:
        body = assert_error(cl.post("/api/v1/memories", content=b'{"category": "c", "value": "v", "confidence": '
                                    + constant + b"}"), 422, "invalid_json")
    assert constant.decode().lstrip("-") in body["detail"]


def test_a_required_body_that_is_missing_says_so(app_server):
    srv = app_server()
    with srv.client() as cl:
        pk = cl.post("/api/v1/memories", json={"category": "c", "value": "v"}).json()["id"]
        for method, url in (("POST", "/api/v1/memories"), ("PATCH", f"/api/v1/memories/{pk}")):
            body = assert_error(cl.request(method, url), 422, "invalid_body")
            assert "body is required" in body["detail"]


@pytest.mark.parametrize("method,url,allow", [
    ("PUT", "/api/v1/sessions", "GET, HEAD"), ("DELETE", "/api/v1/runs", "POST"),
    ("TRACE", "/api/v1/sessions/1", "GET, HEAD"), ("GET", "/api/v1/memories/1", "PATCH, DELETE"),
])
def test_405_names_the_allowed_methods(app_server, method, url, allow):
    srv = app_server()
    with srv.client() as cl:
        r = cl.request(method, url)
    assert_error(r, 405, "method_not_allowed")
    assert sorted(r.headers["allow"].split(", ")) == sorted(allow.split(", "))


@pytest.mark.parametrize("token", [None, "t0ken-for-the-document"])
def test_the_document_describes_the_server_that_serves_it(app_server, token):
    srv = app_server(token=token)
    with srv.client() as cl:
        doc = cl.get("/api/v1/openapi.json").json()
    assert ("security" in doc) is (token is not None)
    assert ("401" in doc["paths"]["/sessions"]["get"]["responses"]) is (token is not None)
    for ops in doc["paths"].values():
        for op in ops.values():
            if "requestBody" in op:
                assert {"413", "415", "422"} <= set(op["responses"])
    session = doc["components"]["schemas"]["Session"]
    assert {"id", "status", "tier", "started_at"} <= set(session["required"])
    assert doc["components"]["schemas"]["Memory"]["properties"]["confidence"] == {"type": "number"}
