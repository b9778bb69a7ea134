"""Login attempts are throttled per client address: five wrong tokens within a minute,
then 429 with ``Retry-After`` and a message on the login page, even for the right token; a success
clears the address; other addresses are not affected; the table of addresses is bounded; the
token is still compared in constant time."""

from __future__ import annotations

import hmac
import time
from typing import Any

import httpx
import pytest

from app.web import auth
from app.web.auth import COOKIE, LOGIN_MAX_FAILURES, LOGIN_WINDOW_S, LoginThrottle

TOKEN = "throttle-test-token-8c2d"


def _login(client: httpx.Client, token: str) -> httpx.Response:
    return client.post("/login", data={"token": token, "next": "/sessions"})


def test_five_wrong_tokens_then_429_with_retry_after_even_for_the_right_one(app_server: Any) -> None:
    srv = app_server(token=TOKEN)
    with srv.client(auth=False) as c:
        for _ in range(LOGIN_MAX_FAILURES - 1):
            r = _login(c, "wrong")
            assert r.status_code == 401 and "Wrong token." in r.text
        r = _login(c, "wrong")  # the fifth failure blocks
        assert r.status_code == 429
        wait = int(r.headers["retry-after"])
        assert 1 <= wait <= LOGIN_WINDOW_S
        assert "Too many wrong tokens from your address" in r.text and f"refused for {wait} s" in r.text
        assert 'role="alert"' in r.text and "Traceback" not in r.text
        right = _login(c, TOKEN)  # blocked: the right token gets no cookie either
        assert right.status_code == 429 and COOKIE not in right.headers.get("set-cookie", "")
        assert c.get("/login").status_code == 200  # the page itself still shows


def test_a_success_clears_the_failures(app_server: Any) -> None:
    srv = app_server(token=TOKEN)
    with srv.client(auth=False) as c:
        for _ in range(LOGIN_MAX_FAILURES - 1):
            assert _login(c, "wrong").status_code == 401
        ok = _login(c, TOKEN)
        assert ok.status_code == 303 and ok.headers["location"] == "/sessions"
        assert COOKIE in ok.headers["set-cookie"]
        for _ in range(LOGIN_MAX_FAILURES - 1):  # counted from zero again
            assert _login(c, "wrong").status_code == 401
        assert _login(c, TOKEN).status_code == 303


def test_the_block_ends_after_the_window(app_server: Any) -> None:
    srv = app_server(token=TOKEN)
    srv.app.state.login_throttle = LoginThrottle(max_failures=2, window_s=1.0)
    with srv.client(auth=False) as c:
        assert _login(c, "wrong").status_code == 401
        assert _login(c, "wrong").status_code == 429
        assert _login(c, TOKEN).status_code == 429
        time.sleep(1.1)
        assert _login(c, TOKEN).status_code == 303


def test_other_addresses_are_not_blocked(live_server: Any) -> None:
    """Over real sockets: one client from 127.0.0.1, one from 127.0.0.2 (both loopback)."""
    srv = live_server(token=TOKEN)
    other = httpx.Client(base_url=srv.url, timeout=30, transport=httpx.HTTPTransport(local_address="127.0.0.2"))
    with srv.client(auth=False) as c, other:
        for _ in range(LOGIN_MAX_FAILURES):
            _login(c, "wrong")
        assert _login(c, TOKEN).status_code == 429
        assert _login(other, "wrong").status_code == 401
        assert _login(other, TOKEN).status_code == 303


def test_the_token_is_still_compared_in_constant_time(app_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    original = hmac.compare_digest

    def recording(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return original(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", recording)
    srv = app_server(token=TOKEN)
    with srv.client(auth=False) as c:
        assert _login(c, "nope").status_code == 401
    assert (TOKEN.encode(), b"nope") in calls


# -- the throttle itself ---------------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_sliding_window_and_retry_after() -> None:
    clock = Clock()
    t = LoginThrottle(max_failures=3, window_s=60, clock=clock)
    assert t.failed("a") is None
    clock.now += 10
    assert t.failed("a") is None
    clock.now += 10
    assert t.failed("a") == 40  # the first failure leaves the window in 40 s
    assert t.retry_after("a") == 40
    clock.now += 39.5
    assert t.retry_after("a") == 1
    clock.now += 0.5  # the first failure is a window old: two remain, below the limit
    assert t.retry_after("a") is None
    assert t.failed("a") == 10  # three again within the window: blocked until the second one expires
    clock.now += 100
    assert t.retry_after("a") is None and len(t) == 0  # expired entries are dropped when read


def test_memory_is_bounded_and_the_oldest_address_goes_first() -> None:
    clock = Clock()
    t = LoginThrottle(max_failures=2, window_s=60, max_clients=3, clock=clock)
    for i in range(100):
        t.failed(f"10.0.0.{i}")
    assert len(t) == 3
    t.failed("10.0.0.97")  # a repeat failure makes it the newest
    t.failed("10.0.0.200")
    assert len(t) == 3
    assert t.retry_after("10.0.0.97") == 60  # kept: two failures, blocked
    assert t.retry_after("10.0.0.98") is None  # forgotten (it was the oldest)


def test_success_forgets_the_address() -> None:
    t = LoginThrottle(max_failures=2, window_s=60, clock=Clock())
    t.failed("a")
    t.succeeded("a")
    t.succeeded("never seen")
    assert len(t) == 0 and t.failed("a") is None
