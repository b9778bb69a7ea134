"""Authentication, the login cookie, CSRF, the loopback rule and secret redaction, against the app
in process (tests/web/conftest.py ``app_server``)."""

from __future__ import annotations

import html
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from app.config import Settings
from app.engine.ingest import ingest_path
from app.errors import ConfigError
from app.web import app as web_app
from app.web.auth import COOKIE, COOKIE_MAX_AGE, sign
from tests.fakes.claude_control import assistant_tool_use, new_session_id, structured_stream, tool_result
from tests.helpers import fixture_stream, healthy

TOKEN = "t0ken-abc-123"
EVIL = "http://evil.example"
SECRET_KEY = "sk-ant-api03-Xy7Qw9Lm2Np4Rs6Tu8Vw0Yz1Ab3Cd5Ef7Gh9Ij1Kl3Mn5Op7Qr"


# --- helpers ------------------------------------------------------------------------------

def ingest(srv: Any, scenario: str = "c_structured") -> dict:
    report, _ = srv.run_async(lambda st: ingest_path(st.db, fixture_stream(scenario), st.validator, st.settings))
    return report


def count(srv: Any, sql: str) -> int:
    async def go(st: Any) -> int:
        return await st.db.fetchval(sql)

    return srv.run_async(go)


def anon(srv: Any, **kwargs: Any) -> httpx.Client:
    """A client without the bearer token and without following redirects. (``auth=False`` is only
    passed with a token: conftest's client() forwards it to httpx otherwise, which rejects it.)"""
    if srv.token:
        kwargs["auth"] = False
    return srv.client(follow_redirects=False, **kwargs)


def cookie_header(value: str) -> dict:
    return {"Cookie": f"{COOKIE}={value}"}


def login(srv: Any) -> str:
    """Log in through the form; returns the cookie value."""
    with anon(srv) as cl:
        r = cl.post("/login", data={"token": TOKEN, "next": "/"})
    assert r.status_code == 303, r.text
    return r.cookies[COOKIE]


def assert_json_error(r: httpx.Response, status: int, error: str) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error", "detail"} and body["error"] == error, body
    return body


def read_sse(cl: httpx.Client, url: str, **kwargs: Any) -> tuple[httpx.Response, list[tuple[str, str]]]:
    """(response, [(event, data)]) of a stream that ends by itself (a finished session)."""
    events: list[tuple[str, str]] = []
    with cl.stream("GET", url, timeout=15, **kwargs) as r:
        if r.status_code != 200:
            r.read()
            return r, events
        event, data = "message", []
        for line in r.iter_lines():
            if line == "":
                if data:
                    events.append((event, "\n".join(data)))
                event, data = "message", []
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
    return r, events


API_CALLS = [
    ("GET", "/api/v1/sessions", {}), ("GET", "/api/v1/sessions/1", {}), ("GET", "/api/v1/sessions/1/activity", {}),
    ("GET", "/api/v1/sessions/1/result", {}), ("GET", "/api/v1/events", {}), ("GET", "/api/v1/memories", {}),
    ("GET", "/metrics", {}),
    ("POST", "/api/v1/runs", {"json": {"tier": 7}}), ("POST", "/api/v1/sessions/1/stop", {}),
    ("POST", "/api/v1/memories", {"json": {}}), ("PATCH", "/api/v1/memories/1", {"json": {"x": 1}}),
    ("DELETE", "/api/v1/memories/999", {}),
]


# --- auth off -----------------------------------------------------------------------------

def test_without_a_token_everything_is_open(app_server):
    srv = app_server()
    pk = ingest(srv)["id"]
    with anon(srv) as cl:
        for method, url, kwargs in API_CALLS:
            r = cl.request(method, url, **kwargs)
            assert r.status_code not in (401, 403) and r.status_code < 500, (method, url, r.status_code, r.text)
        for page in ("/", "/sessions", f"/sessions/{pk}", "/events", "/memories"):
            r = cl.get(page)
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), page
        r = cl.get("/login?next=/events")
        assert r.status_code == 303 and r.headers["location"] == "/events"  # no login to show
        r, events = read_sse(cl, f"/sessions/{pk}/stream")
        assert r.status_code == 200 and events[-1][0] == "end"
        assert cl.post("/api/v1/memories", json={"category": "c", "value": "v"}).status_code == 201


# --- auth on: the API ---------------------------------------------------------------------

@pytest.mark.parametrize("method,url,kwargs", API_CALLS)
def test_api_needs_the_token(app_server, method, url, kwargs):
    srv = app_server(token=TOKEN)
    ingest(srv)
    with anon(srv) as cl:
        for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": f"Basic {TOKEN}"},
                        {"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": f"Bearer {TOKEN[:-1]}"},
                        {"Authorization": "Bearer"}, {"Authorization": TOKEN}, {"X-Token": TOKEN}):
            r = cl.request(method, url, headers=headers, **kwargs)
            body = assert_json_error(r, 401, "unauthorized")
            assert "Bearer" in body["detail"] and r.headers["www-authenticate"].startswith("Bearer")
        for scheme in ("Bearer", "bearer", "BEARER"):
            r = cl.request(method, url, headers={"Authorization": f"{scheme} {TOKEN}"}, **kwargs)
            assert r.status_code not in (401, 403) and r.status_code < 500, (scheme, r.status_code, r.text)
    assert count(srv, "SELECT count(*) FROM memories") == 1  # only the ingested one: nothing got through


def test_healthz_and_static_stay_open_metrics_does_not(app_server):
    srv = app_server(token=TOKEN)
    with anon(srv) as cl:
        r = cl.get("/healthz")
        assert r.status_code == 200 and r.json()["status"] == "ok"
        assert cl.get("/static/app.css").status_code == 200
        assert_json_error(cl.get("/metrics"), 401, "unauthorized")
        assert cl.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_openapi_document_is_as_open_as_it_says(app_server):
    srv = app_server(token=TOKEN)
    with srv.client() as cl:
        doc = cl.get("/api/v1/openapi.json").json()
    assert doc["paths"]["/openapi.json"]["get"]["security"] == []
    with anon(srv) as cl:
        assert cl.get("/api/v1/openapi.json").status_code == 200


# --- auth on: pages, login, cookie, logout ------------------------------------------------

def test_pages_redirect_to_login_with_next(app_server):
    srv = app_server(token=TOKEN)
    with anon(srv) as cl:
        r = cl.get("/sessions?status=running&tier=1")
        assert r.status_code == 303
        loc = urlsplit(r.headers["location"])
        assert loc.path == "/login" and not loc.netloc
        assert parse_qs(loc.query) == {"next": ["/sessions?status=running&tier=1"]}
        for page in ("/", "/events", "/memories", "/sessions/1"):
            r = cl.get(page)
            assert r.status_code == 303 and r.headers["location"].startswith("/login?next="), page
        # a form POST without the cookie is refused, not redirected (a redirect would lose the body)
        assert_json_error(cl.post("/memories", data={"category": "c", "value": "v"}), 401, "unauthorized")
        # the SSE stream is not a page: 401 JSON, not a redirect an EventSource would follow
        assert_json_error(cl.get("/sessions/1/stream"), 401, "unauthorized")
        assert_json_error(cl.get("/events/stream"), 401, "unauthorized")
    assert count(srv, "SELECT count(*) FROM memories") == 0


def test_login_form_cookie_and_logout(app_server):
    srv = app_server(token=TOKEN)
    pk = ingest(srv)["id"]
    with anon(srv) as cl:
        r = cl.get("/login?next=/sessions%3Fstatus%3Dcompleted")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert '<form method="post" action="/login">' in r.text and 'name="token"' in r.text
        assert 'value="/sessions?status=completed"' in r.text

        r = cl.post("/login", data={"token": "nope", "next": "/events"})
        assert r.status_code == 401 and "Wrong token." in r.text and "set-cookie" not in r.headers
        r = cl.post("/login", data={"next": "/events"})
        assert r.status_code == 401 and "set-cookie" not in r.headers
        r = cl.post("/login", data={"token": TOKEN, "next": "/sessions?status=completed"})
        assert r.status_code == 303 and r.headers["location"] == "/sessions?status=completed"
        set_cookie = r.headers["set-cookie"]
        flags = {part.strip().split("=")[0].lower(): part.strip() for part in set_cookie.split(";")}
        assert set_cookie.startswith(f"{COOKIE}=")
        assert "httponly" in flags and flags["samesite"].lower() == "samesite=lax"
        assert flags["max-age"] == f"Max-Age={COOKIE_MAX_AGE}" and flags["path"] == "Path=/"
        assert "secure" not in flags  # plain http on loopback
        value = r.cookies[COOKIE]
        assert TOKEN not in value  # signed with the token, never carrying it

    with anon(srv, headers=cookie_header(value)) as cl:
        r = cl.get("/sessions?status=completed")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert cl.get(f"/sessions/{pk}").status_code == 200
        r = cl.get("/api/v1/sessions")
        assert r.status_code == 200 and [s["id"] for s in r.json()] == [pk]
        r = cl.post("/api/v1/memories", json={"category": "c", "value": "by cookie"})
        assert r.status_code == 201
        r, events = read_sse(cl, f"/sessions/{pk}/stream")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert [e for e, _ in events] == ["activity"] * 7 + ["end"]

        r = cl.post("/logout")
        assert r.status_code == 303 and r.headers["location"] == "/login"
        cleared = r.headers["set-cookie"]
        assert cleared.startswith(f'{COOKIE}="";') or cleared.startswith(f"{COOKIE}=;")
        assert "max-age=0" in cleared.lower()

    with anon(srv) as cl:  # the browser dropped the cookie: logged out
        assert cl.get("/sessions").status_code == 303
        assert cl.get("/api/v1/sessions").status_code == 401


@pytest.mark.parametrize("url, status, message", [
    ("/sessions/999", 404, "There is no session 999."), ("/sessions?tier=9", 422, "tier"),
    ("/events?level=debug", 422, "level"), ("/no-such-page", 404, "Not Found"),
])
def test_error_pages_keep_the_nav_and_the_log_out_button(app_server, url, status, message):
    srv = app_server(token=TOKEN)
    with srv.client() as cl:
        r = cl.get(url)
    assert r.status_code == status and r.headers["content-type"].startswith("text/html")
    assert message in html.unescape(r.text)
    assert 'href="/memories"' in r.text and 'action="/logout"' in r.text


def test_login_with_a_wrong_token_sets_nothing_and_keeps_next_local(app_server):
    srv = app_server(token=TOKEN)
    with anon(srv) as cl:
        r = cl.post("/login", data={"token": "x" * 10_000, "next": "//evil.example"})
        assert r.status_code == 401 and "set-cookie" not in r.headers
        assert "evil.example" not in r.text and 'name="next" value="/"' in r.text


def _bad_cookies() -> dict[str, str]:
    now = int(time.time())
    good = sign(TOKEN, now + 3600)
    expiry, _, mac = good.partition(".")
    return {
        "tampered mac": f"{expiry}.{mac[:-1]}{'0' if mac[-1] != '0' else '1'}",
        "tampered expiry": f"{int(expiry) + 1}.{mac}",
        "expired": sign(TOKEN, now - 5),
        "other token": sign("another-token", now + 3600),
        "no mac": expiry,
        "empty": "",
        "garbage": "hello.world",
        "negative": f"-{expiry}.{mac}",
        "the token itself": TOKEN,
    }


@pytest.mark.parametrize("name", list(_bad_cookies()))
def test_bad_cookies_are_refused(app_server, name):
    srv = app_server(token=TOKEN)
    pk = ingest(srv)["id"]
    value = _bad_cookies()[name]
    with anon(srv, headers=cookie_header(value)) as cl:
        r = cl.get("/sessions")
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
        assert_json_error(cl.get("/api/v1/sessions"), 401, "unauthorized")
        assert_json_error(cl.get(f"/sessions/{pk}/stream"), 401, "unauthorized")
        assert_json_error(cl.post("/api/v1/memories", json={"category": "c", "value": "v"}), 401, "unauthorized")
    assert count(srv, "SELECT count(*) FROM memories") == 1


def test_a_fresh_signature_is_accepted_and_rotation_logs_out(app_server):
    srv = app_server(token=TOKEN)
    value = sign(TOKEN, int(time.time()) + 60)
    with anon(srv, headers=cookie_header(value)) as cl:
        assert cl.get("/api/v1/sessions").status_code == 200
    other = app_server(token="rotated-token-456")
    with anon(other, headers=cookie_header(login(srv))) as cl:
        assert cl.get("/api/v1/sessions").status_code == 401


@pytest.mark.parametrize("value", ["\u00b2.abc", "9" * 5000 + ".abc"])
def test_malformed_cookie_expiry_is_401_not_500(app_server, value):
    srv = app_server(token=TOKEN)
    with anon(srv) as cl:
        r = cl.get("/api/v1/sessions", headers=[(b"cookie", f"{COOKIE}={value}".encode("latin-1"))])
    assert_json_error(r, 401, "unauthorized")


@pytest.mark.parametrize("target", [
    "//evil.example", "//evil.example/path", "http://evil.example", "https://evil.example/x", "/\\evil.example",
    "\\\\evil.example", "javascript:alert(1)", "/\t/evil.example", "/\n/evil.example", " //evil.example",
    "evil.example", "///evil.example", "http:/evil.example", "",
])
def test_next_never_leaves_the_site(app_server, target):
    def local(location: str) -> None:
        cleaned = "".join(ch for ch in location if ch not in "\t\n\r ")  # what browsers strip
        parts = urlsplit(cleaned)
        assert cleaned.startswith("/") and not cleaned.startswith("//") and "\\" not in cleaned, location
        assert not parts.scheme and not parts.netloc, location

    srv = app_server(token=TOKEN)
    with anon(srv) as cl:
        r = cl.post("/login", data={"token": TOKEN, "next": target})
        assert r.status_code == 303
        local(r.headers["location"])
        r = cl.get("/login", params={"next": target})
        assert r.status_code == 200
        kept = target.startswith("/") and not target.startswith("//") and "\\" not in target
        expected = html.escape(target) if kept else "/"
        assert f'name="next" value="{expected}"' in r.text  # and the POST above shows where it leads
    open_srv = app_server()
    with anon(open_srv) as cl:
        r = cl.get("/login", params={"next": target})
        assert r.status_code == 303
        local(r.headers["location"])


# --- CSRF ---------------------------------------------------------------------------------

CROSS_SITE = [
    {"Origin": EVIL}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
    {"Origin": EVIL, "Sec-Fetch-Site": "same-origin"},
]


@pytest.mark.parametrize("token", [None, TOKEN], ids=["auth-off", "auth-on"])
@pytest.mark.parametrize("headers", CROSS_SITE, ids=lambda h: ",".join(f"{k}={v}" for k, v in h.items()))
def test_cross_site_writes_are_refused_and_change_nothing(app_server, token, headers):
    srv = app_server(token=token)
    ingest(srv)

    async def snapshot(st: Any) -> tuple:
        mems = await st.db.fetchall("SELECT * FROM memories ORDER BY id")
        sessions = await st.db.fetchall("SELECT id, status FROM sessions ORDER BY id")
        return [dict(m) for m in mems], [dict(s) for s in sessions]

    before = srv.run_async(snapshot)
    mem_id = before[0][0]["id"]
    # the browser scenario: a logged-in user's cookie rides along with the forged request
    auth = cookie_header(login(srv)) if token else {}
    with anon(srv, headers={**auth, **headers}) as cl:
        for method, url, kwargs in [
            ("POST", "/api/v1/memories", {"json": {"category": "c", "value": "forged"}}),
            ("PATCH", f"/api/v1/memories/{mem_id}", {"json": {"value": "forged"}}),
            ("DELETE", f"/api/v1/memories/{mem_id}", {}),
            ("POST", "/api/v1/runs", {"json": {"tier": 1}}),
            ("POST", "/api/v1/sessions/1/stop", {}),
        ]:
            body = assert_json_error(cl.request(method, url, **kwargs), 403, "csrf_refused")
            assert "cross-site" in body["detail"]
        for url, data in [("/memories", {"category": "c", "value": "forged"}),
                          (f"/memories/{mem_id}", {"value": "forged", "confidence": "0.5"}),
                          (f"/memories/{mem_id}/toggle", {}), (f"/memories/{mem_id}/delete", {}),
                          ("/run", {"tier": "1"}), ("/logout", {}),
                          ("/login", {"token": TOKEN, "next": "/"})]:
            r = cl.post(url, data=data)
            assert r.status_code == 403, (url, r.status_code)
            assert r.headers["content-type"].startswith("text/plain") and "csrf_refused" in r.text
            assert "set-cookie" not in r.headers
    assert srv.run_async(snapshot) == before
    assert not srv.state.supervisor.busy


@pytest.mark.parametrize("token", [None, TOKEN], ids=["auth-off", "auth-on"])
def test_same_origin_and_scripts_may_write(app_server, token):
    srv = app_server(token=token)
    auth = cookie_header(login(srv)) if token else {}
    allowed = [{"Origin": srv.url}, {"Sec-Fetch-Site": "same-origin", "Origin": srv.url},
               {"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}, {}]
    for n, headers in enumerate(allowed):
        with anon(srv, headers={**auth, **headers}) as cl:
            r = cl.post("/api/v1/memories", json={"category": "c", "value": f"v{n}"})
            assert r.status_code == 201, (headers, r.text)
            mem = r.json()
            r = cl.patch(f"/api/v1/memories/{mem['id']}", json={"confidence": 0.1})
            assert r.status_code == 200, (headers, r.text)
    with anon(srv, headers={**auth, "Origin": srv.url, "Sec-Fetch-Site": "same-origin"}) as cl:
        r = cl.post("/memories", data={"category": "form", "value": "same origin"})
        assert r.status_code < 400, r.text
        assert cl.delete(f"/api/v1/memories/{mem['id']}").status_code == 204
    if token:  # a script with the bearer token sends no Origin
        with srv.client() as cl:
            assert cl.post("/api/v1/memories", json={"category": "c", "value": "script"}).status_code == 201
    # one per allowed request, plus the form's, minus the deleted one, plus the script's
    assert count(srv, "SELECT count(*) FROM memories") == len(allowed) + 1 - 1 + (1 if token else 0)


def test_dns_rebinding_is_refused_without_a_token(app_server):
    srv = app_server()
    rebound = urlsplit(srv.url)._replace(netloc=f"evil.example:{urlsplit(srv.url).port}")
    with anon(srv, headers={"Host": rebound.netloc, "Origin": rebound.geturl()}) as cl:
        r = cl.post("/api/v1/memories", json={"category": "c", "value": "rebound"})
    assert r.status_code in (400, 403, 421), r.status_code
    assert count(srv, "SELECT count(*) FROM memories") == 0


# --- the loopback rule ---------------------------------------------------------------------

@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in list(os.environ):
        if name.startswith("TIEROPS_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no stray .env
    return tmp_path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "[::]", "192.168.1.10", "10.0.0.1", "example.com", "evil.localhost"])
def test_serve_refuses_a_non_loopback_bind_without_a_token(clean_env, monkeypatch, host):
    calls: list = []
    monkeypatch.setattr("uvicorn.run", lambda *a, **k: calls.append((a, k)))  # never bind, whatever happens
    settings = Settings(db=clean_env / "t.db", home=clean_env / "state", schedule=False)
    with pytest.raises(ConfigError, match="TIEROPS_TOKEN") as exc:
        web_app.serve(settings, host, _free_port())
    assert host in str(exc.value) and "127.0.0.1" in str(exc.value)
    assert calls == []


@pytest.mark.parametrize("host", ["127.0.0.1", "127.9.8.7", "::1", "[::1]", "localhost"])
def test_serve_allows_loopback_without_a_token(clean_env, monkeypatch, host):
    calls: list = []
    monkeypatch.setattr("uvicorn.run", lambda *a, **k: calls.append((a, k)))
    web_app.serve(Settings(db=clean_env / "t.db", home=clean_env / "state", schedule=False), host, _free_port())
    [(_, kwargs)] = calls
    assert kwargs["host"] == host and kwargs["workers"] == 1


def test_serve_allows_a_non_loopback_bind_with_a_token(clean_env, monkeypatch):
    calls: list = []
    monkeypatch.setattr("uvicorn.run", lambda *a, **k: calls.append((a, k)))
    token_file = clean_env / "token"
    token_file.write_text(TOKEN + "\n")
    web_app.serve(Settings(db=clean_env / "t.db", home=clean_env / "state", token_file=token_file), "0.0.0.0",
                  _free_port())
    assert len(calls) == 1 and calls[0][1]["host"] == "0.0.0.0"  # uvicorn.run replaced: only a bind check ran
    with pytest.raises(ConfigError, match="TIEROPS_TOKEN_FILE"):
        web_app.serve(Settings(db=clean_env / "t.db", token_file=clean_env / "missing"), "127.0.0.1", 1)


def test_cli_serve_exits_2_on_a_non_loopback_host_without_a_token(clean_env):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIEROPS_")}
    env.update(TIEROPS_DB=str(clean_env / "cli.db"), TIEROPS_HOME=str(clean_env / "state"),
               TIEROPS_SCHEDULE="false")
    exe = Path(sys.executable).with_name("tierops")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "app.cli"]
    t0 = time.monotonic()
    proc = subprocess.run([*argv, "serve", "--host", "0.0.0.0", "--port", str(_free_port())], env=env,
                          cwd=clean_env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "tierops: error:" in proc.stderr and "TIEROPS_TOKEN" in proc.stderr and "0.0.0.0" in proc.stderr
    assert time.monotonic() - t0 < 20


# --- secrets ------------------------------------------------------------------------------

def _leaky_stage() -> dict:
    """A run whose Bash tool result echoes an API key and the dashboard token."""
    sid = new_session_id()
    use = assistant_tool_use(sid, "Bash", {"command": "env | sort"})
    leak = (f"ANTHROPIC_API_KEY={SECRET_KEY}\nHOME=/root\nTIEROPS_TOKEN={TOKEN}\n"
            f"curl -H 'X-Dash: {TOKEN}' http://127.0.0.1/")
    lines = structured_stream(sid, healthy())
    lines[2:2] = [use, tool_result(sid, use["message"]["content"][0]["id"], leak)]
    return {"lines": lines}


def _run_and_collect(srv: Any) -> tuple[str, list[str]]:
    with srv.client() as cl:
        pk = cl.post("/api/v1/runs", json={}).json()["id"]
        deadline = time.monotonic() + 20
        while cl.get(f"/api/v1/sessions/{pk}").json()["status"] == "running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        r = cl.get(f"/api/v1/sessions/{pk}/activity")
        rows = r.json()
        assert len(rows) == 9 and all(isinstance(json.loads(row["raw"]), dict) for row in rows)  # still JSON
        texts = [r.text, cl.get(f"/api/v1/sessions/{pk}").text, cl.get(f"/api/v1/sessions/{pk}/result").text,
                 cl.get(f"/sessions/{pk}").text]
        _, events = read_sse(cl, f"/sessions/{pk}/stream")
        texts.append(json.dumps(events))

    async def stored(st: Any) -> list[str]:
        rows = await st.db.fetchall("SELECT raw, display FROM activity WHERE session_pk = ?", (pk,))
        return [x for row in rows for x in (row["raw"], row["display"])]

    return r.text, texts + srv.run_async(stored)


def test_secrets_are_redacted_before_storage(app_server, tmp_path):
    token_file = tmp_path / "token.txt"
    token_file.write_text(TOKEN)
    srv = app_server(token=TOKEN, stages=[_leaky_stage()], token_file=token_file)
    activity, everything = _run_and_collect(srv)
    assert "[REDACTED]" in activity and "HOME=/root" in activity  # the rest of the output is kept
    for text in everything:
        assert SECRET_KEY not in text and "sk-ant-api03-Xy7Q" not in text
        assert TOKEN not in text


def test_the_app_token_is_redacted_even_when_passed_to_create_app(app_server):
    srv = app_server(token=TOKEN, stages=[_leaky_stage()])
    activity, everything = _run_and_collect(srv)
    assert SECRET_KEY not in activity  # the key shape is always caught
    assert all(TOKEN not in text for text in everything)
