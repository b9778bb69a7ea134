"""Authentication and CSRF protection, as one pure ASGI middleware (SSE responses stream through
untouched; starlette's BaseHTTPMiddleware would buffer them). The rules, in short (ARCHITECTURE.md,
"Web", says why):

* No token configured: no login, and a request whose ``Host`` is not exactly ``localhost``,
  ``127.0.0.1`` or ``[::1]`` (any port) is refused (DNS rebinding).
* A token configured: API calls need ``Authorization: Bearer <token>`` or the login cookie, pages
  the cookie (else a redirect to ``/login``); :data:`OPEN_PATHS` stay open. The cookie is
  ``<expiry>.<HMAC-SHA256(token, expiry)>``, HttpOnly, SameSite=Lax.
* ``TIEROPS_WEBHOOK_TOKEN`` opens ``POST``/``PUT /api/v1/alerts`` only: as a bearer token, as
  ``?token=``, or (like the API token) as the HTTP Basic password. Elsewhere Basic opens nothing.
* :class:`LoginThrottle`: per client address, after :data:`LOGIN_MAX_FAILURES` wrong tokens within
  :data:`LOGIN_WINDOW_S` seconds further attempts get 429 with ``Retry-After``; at most
  :data:`LOGIN_MAX_CLIENTS` addresses are remembered.
* CSRF: every POST/PUT/PATCH/DELETE is refused with 403 when the browser says it comes from
  elsewhere (``Sec-Fetch-Site``, or an ``Origin`` whose host differs from ``Host``).
* The chat APIs for OpenAI and Ollama clients (:data:`CHAT_PATHS`) take a bearer token and nothing
  else, always: ``TIEROPS_TOKEN`` or ``TIEROPS_CHAT_TOKEN`` (which opens nothing else); no cookie,
  no Basic, and without either token configured they refuse every request. A bearer token cannot
  be sent cross-site without the browser asking first, so neither the Host nor the CSRF rule
  applies there. The error body is the client's own shape (OpenAI's ``{error: {message, type}}``,
  Ollama's ``{error}``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import json
import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger(__name__)

COOKIE = "tierops_session"
COOKIE_MAX_AGE = 7 * 24 * 3600
# the OpenAPI document holds no data; the favicon is asked for by browsers without credentials
# /api/docs renders the (already open) OpenAPI document: no data, and a page, not a 401
OPEN_PATHS = ("/healthz", "/login", "/static/", "/api/v1/openapi.json", "/api/docs", "/favicon.ico")
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
# The chat endpoints OpenAI and Ollama clients call (and /v1/models/<id>): bearer tokens only.
CHAT_PATHS = ("/v1/chat/completions", "/v1/models", "/api/chat", "/api/generate", "/api/tags")
CHAT_PREFIXES = ("/v1/models/",)
WEBHOOK_PATH = "/api/v1/alerts"  # the one endpoint TIEROPS_WEBHOOK_TOKEN and Basic open (POST, PUT)
WEBHOOK_METHODS = ("POST", "PUT")  # Grafana's contact point may send PUT
# Defence in depth behind escaping: no inline script, no plugin, no framing, no MIME sniffing.
SECURITY_HEADERS = [
    (b"content-security-policy",
     b"default-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]


def sign(token: str, expiry: int) -> str:
    mac = hmac.new(token.encode(), f"tierops-session:{expiry}".encode(), hashlib.sha256).hexdigest()
    return f"{expiry}.{mac}"


def cookie_ok(token: str, value: str | None) -> bool:
    if not value or "." not in value:
        return False
    expiry_text, _, _ = value.partition(".")
    if not (expiry_text.isascii() and expiry_text.isdigit() and len(expiry_text) <= 12) \
            or int(expiry_text) < time.time():
        return False
    return hmac.compare_digest(sign(token, int(expiry_text)), value)


def new_cookie(token: str) -> str:
    return sign(token, int(time.time()) + COOKIE_MAX_AGE)


def token_ok(token: str, offered: str | None) -> bool:
    if not offered:
        return False
    return hmac.compare_digest(token.encode(), offered.encode())


# Login throttle limits (see the module docstring).
LOGIN_MAX_FAILURES = 5
LOGIN_WINDOW_S = 60.0
LOGIN_MAX_CLIENTS = 4096


class LoginThrottle:
    """Failed logins per client address in a sliding window, bounded in memory.

    ``retry_after(addr)`` is checked before the token is compared (so a blocked client learns
    nothing, not even from a right guess); ``failed`` records a wrong token, ``succeeded`` forgets
    the address. One instance per app, used from the event loop only (no lock needed)."""

    def __init__(self, max_failures: int = LOGIN_MAX_FAILURES, window_s: float = LOGIN_WINDOW_S,
                 max_clients: int = LOGIN_MAX_CLIENTS, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.max_clients = max_clients
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._failures)

    def _recent(self, addr: str, now: float) -> deque[float] | None:
        times = self._failures.get(addr)
        if times is None:
            return None
        while times and now - times[0] >= self.window_s:
            times.popleft()
        if not times:
            del self._failures[addr]
            return None
        return times

    def retry_after(self, addr: str) -> int | None:
        """Whole seconds until ``addr`` may try again, or None when it may now."""
        now = self._clock()
        times = self._recent(addr, now)
        if times is None or len(times) < self.max_failures:
            return None
        return max(1, math.ceil(times[0] + self.window_s - now))

    def failed(self, addr: str) -> int | None:
        """Record a wrong token; returns :meth:`retry_after` (set when this failure blocked it)."""
        now = self._clock()
        times = self._recent(addr, now)
        if times is None:
            while len(self._failures) >= self.max_clients:
                self._failures.popitem(last=False)  # the address that failed longest ago
            times = self._failures[addr] = deque(maxlen=self.max_failures)
        else:
            self._failures.move_to_end(addr)
        times.append(now)
        blocked = self.retry_after(addr)
        if blocked is not None:
            log.warning("login: %d wrong tokens from %s within %.0f s; refusing logins from it for %d s",
                        self.max_failures, addr, self.window_s, blocked)
        return blocked

    def succeeded(self, addr: str) -> None:
        self._failures.pop(addr, None)


def _cookies(headers: Headers) -> dict[str, str]:
    out = {}
    for part in headers.get("cookie", "").split(";"):
        name, sep, value = part.strip().partition("=")
        if sep:
            out[name] = value
    return out


def cross_site(headers: Headers) -> str | None:
    """Why this request looks cross-site, or None."""
    site = headers.get("sec-fetch-site")
    if site and site not in ("same-origin", "none"):
        return f"Sec-Fetch-Site is {site!r}"
    origin = headers.get("origin")
    if origin is not None:
        if origin == "null":
            return "Origin is null"
        if urlsplit(origin).netloc.lower() != headers.get("host", "").lower():
            return f"Origin {origin!r} does not match Host {headers.get('host')!r}"
    return None


class SecurityMiddleware:
    def __init__(self, app: ASGIApp, token: str | None, webhook_token: str | None = None,
                 chat_token: str | None = None) -> None:
        self.app = app
        self.token = token
        self.webhook_token = webhook_token or None
        self.chat_token = chat_token or None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        outer_send = send

        async def send(message: dict[str, Any]) -> None:  # type: ignore[no-redef]
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await outer_send(message)

        headers = Headers(scope=scope)
        path = scope["path"]
        if path in CHAT_PATHS or path.startswith(CHAT_PREFIXES):
            await self._chat(scope, receive, send, headers)
            return
        is_api = path.startswith("/api/") or path == "/metrics"
        if self.token is None and not loopback_host(headers.get("host", "")):
            # Without a token the server only listens on loopback; a page on another name that
            # resolves to 127.0.0.1 (DNS rebinding) would otherwise pass the Origin == Host check.
            log.info("refused %s %s: Host %r is not loopback", scope["method"], path, headers.get("host"))
            await _respond(send, 403, is_api, "host_not_allowed",
                           f"Host {headers.get('host')!r} is not a loopback name; without TIEROPS_TOKEN only "
                           "127.0.0.1, localhost and [::1] are served")
            return
        if scope["method"] in MUTATING and (why := cross_site(headers)):
            log.info("refused %s %s as cross-site: %s", scope["method"], path, why)
            await _respond(send, 403, is_api, "csrf_refused",
                           f"cross-site request refused ({why}); use the dashboard itself or an API client")
            return
        if self.token is None or path.startswith(OPEN_PATHS):
            await self.app(scope, receive, send)
            return
        auth = headers.get("authorization", "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        if token_ok(self.token, bearer) or cookie_ok(self.token, _cookies(headers).get(COOKIE)):
            scope.setdefault("state", {})["authenticated"] = True
            await self.app(scope, receive, send)
            return
        if self._webhook_ok(scope, bearer, basic_password(auth)):
            scope.setdefault("state", {})["webhook"] = True
            await self.app(scope, receive, send)
            return
        if is_api or scope["method"] != "GET" or path.endswith("/stream"):
            hint, challenge = "", [(b"www-authenticate", b'Bearer realm="tierops"')]
            if path == WEBHOOK_PATH:
                hint = (" (alerts: or TIEROPS_WEBHOOK_TOKEN, as a bearer token or ?token=; or HTTP Basic with either "
                        "token as the password)")
                challenge.append((b"www-authenticate", b'Basic realm="tierops", charset="UTF-8"'))
            await _respond(send, 401, True, "unauthorized",
                           f"send 'Authorization: Bearer <TIEROPS_TOKEN>' or log in at /login{hint}", extra=challenge)
            return
        target = path + (("?" + scope["query_string"].decode("latin-1")) if scope.get("query_string") else "")
        await send({"type": "http.response.start", "status": 303,
                    "headers": [(b"location", f"/login?next={quote(target, safe='')}".encode())]})
        await send({"type": "http.response.body", "body": b""})

    async def _chat(self, scope: Scope, receive: Receive, send: Send, headers: Headers) -> None:
        """A chat endpoint: the API token or the chat token as a bearer token, nothing else."""
        auth = headers.get("authorization", "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        principal = ("api token" if self.token is not None and token_ok(self.token, bearer) else
                     "chat token" if self.chat_token is not None and token_ok(self.chat_token, bearer) else None)
        if principal is not None:
            scope.setdefault("state", {})["chat_principal"] = principal
            await self.app(scope, receive, send)
            return
        if self.token is None and self.chat_token is None:
            detail = ("the chat endpoints need a token and none is configured: set TIEROPS_CHAT_TOKEN (chat "
                      "clients only) or TIEROPS_TOKEN, and send it as 'Authorization: Bearer <token>'")
        else:
            detail = ("send 'Authorization: Bearer <token>' with TIEROPS_CHAT_TOKEN or TIEROPS_TOKEN"
                      + ("; the token sent is not one of them" if bearer else ""))
        log.info("refused %s %s: %s", scope["method"], scope["path"], "wrong token" if bearer else "no token")
        body: dict[str, Any]
        if scope["path"].startswith("/v1/"):
            body = {"error": {"message": detail, "type": "invalid_request_error", "param": None,
                              "code": "invalid_api_key"}}
        else:
            body = {"error": detail}
        data = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                                (b"www-authenticate", b'Bearer realm="tierops-chat"')]})
        await send({"type": "http.response.body", "body": data})

    def _webhook_ok(self, scope: Scope, bearer: str | None, basic: str | None) -> bool:
        """On ``POST``/``PUT /api/v1/alerts`` only: the webhook token as bearer, ``?token=`` or Basic
        password, or the API token as Basic password."""
        if scope["method"] not in WEBHOOK_METHODS or scope["path"] != WEBHOOK_PATH:
            return False
        if self.token is not None and token_ok(self.token, basic):
            return True
        if self.webhook_token is None:
            return False
        if token_ok(self.webhook_token, bearer) or token_ok(self.webhook_token, basic):
            return True
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        return any(token_ok(self.webhook_token, offered) for offered in query.get("token", [])[-1:])


def basic_password(authorization: str) -> str | None:
    """The password of ``Authorization: Basic base64(user:password)`` (any user), or None."""
    if authorization[:6].lower() != "basic ":
        return None
    try:
        decoded = base64.b64decode(authorization[6:].strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    _, sep, password = decoded.partition(":")
    return password if sep else None


async def _respond(send: Send, status: int, as_json: bool, error: str, detail: str,
                   extra: list[tuple[bytes, bytes]] | None = None) -> None:
    if as_json:
        body = json.dumps({"error": error, "detail": detail}).encode()
        ctype = b"application/json"
    else:
        body = f"{status} {error}: {detail}\n".encode()
        ctype = b"text/plain; charset=utf-8"
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", ctype), (b"content-length", str(len(body)).encode()), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


# The Host header values served without a token: exactly these names, each optionally with a port.
# Nothing else, not even other spellings of loopback (``127.0.0.2``, ``*.localhost``,
# ``localhost.localdomain``): a name an attacker's page can be reached under must not pass.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


def is_loopback(host: str) -> bool:
    """A bind address only this machine reaches: ``localhost``, any address in 127.0.0.0/8, or
    ``::1`` (also written ``[::1]``). Names are not resolved: ``localhost`` is the one name."""
    name = host.strip()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def loopback_host(host: str) -> bool:
    """A ``Host`` header that is exactly ``localhost``, ``127.0.0.1`` or ``[::1]``, optionally with
    ``:port`` (1 to 5 ASCII digits). The name is compared case-insensitively (DNS names are)."""
    name, sep, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    if not sep or name.endswith(":"):  # no port, or an unbracketed IPv6 address such as ::1
        name, port = host, ""
    elif not (port.isascii() and port.isdigit() and 1 <= len(port) <= 5):
        return False
    return name.lower() in LOOPBACK_HOSTS


def safe_next(value: str | None) -> str:
    """Only local paths: never redirect a login to another site."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value
