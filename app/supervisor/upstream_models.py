"""The models the upstream offers: the Anthropic Models API, asked as the claude CLI would ask it.

Why a module of its own: the /config page offers them for a tier's model and ``GET
/api/v1/models`` lists them, so an operator picks a name the API knows instead of typing one.
``GET {ANTHROPIC_BASE_URL or https://api.anthropic.com}/v1/models`` with the credential the CLI
gets (its environment, ``launch.child_env``: ``ANTHROPIC_API_KEY`` as ``x-api-key``, else
``ANTHROPIC_AUTH_TOKEN`` as a bearer) and ``anthropic-version: 2023-06-01``, every page
(``has_more``, ``last_id`` → ``after_id``) up to :data:`MAX_PAGES`, all within
``TIEROPS_MODELS_TIMEOUT``. Standard library in a thread, like the runbook fetch; redirects are
not followed (the credential would go along to wherever they point).

What it does differently from a plain cache: one fetch at a time (:class:`ModelCatalog`: every
caller meanwhile awaits the same one), the list kept ``TIEROPS_MODELS_CACHE_TTL`` s, a failure
answered again for :data:`FAILURE_HOLD` s (a page reloaded in a loop does not hammer a dead
upstream; a refresh asks at once), and a failure that still returns the last good list, marked
stale with its age. Every error names the URL (no user, password or query) and why; a credential
is never logged, stored or returned — scrubbed even from what the upstream or the network said.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict
from urllib.parse import urlencode, urlsplit

from app import __version__
from app.clock import utcnow
from app.config import Settings
from app.supervisor.credentials import cli_home
from app.supervisor.launch import child_env

log = logging.getLogger(__name__)

__all__ = ["FAILURE_HOLD", "MAX_PAGES", "ModelCatalog", "ModelItem", "ModelsBody", "ModelsUnavailable", "ModelsView",
           "api_error", "fetch_models", "scrub", "shown_url"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
MODELS_PATH = "/v1/models"
ANTHROPIC_VERSION = "2023-06-01"
PAGE_LIMIT = 1000  # the Models API's largest page
MAX_PAGES = 20  # pages read at most; a longer list is cut, and says so
PAGE_MAX_BYTES = 4 * 1024 * 1024
FAILURE_HOLD = 10.0  # seconds a failed fetch is answered again without asking (a refresh asks at once)

UNREACHABLE = "upstream_unreachable"
TIMEOUT = "upstream_timeout"
REFUSED = "upstream_error"
BAD_ANSWER = "upstream_bad_answer"


class ModelItem(TypedDict):
    id: str
    display_name: str
    created_at: str | None


class ModelsBody(TypedDict):
    """``GET /api/v1/models``: the list (the last good one, stale, when the upstream failed)."""

    models: list[ModelItem]
    fetched_at: str | None  # when the list was fetched (UTC)
    age_s: float | None
    source_url: str  # where it comes from: no user, password or query
    stale: bool  # the upstream failed just now; this is an older list
    truncated: bool  # more than MAX_PAGES pages: the rest is left out


class ModelsUnavailable(ModelsBody):
    """The answer when the upstream failed (502, 504): why, and the last good list if any (``stale``)."""

    error: str  # upstream_unreachable | upstream_timeout | upstream_error | upstream_bad_answer
    detail: str  # the URL and why; with a stale list, when it was fetched


@dataclass(frozen=True)
class Fetched:
    """One fetch: the models, or the error and why (``status`` 502 or 504)."""

    source_url: str
    models: list[ModelItem] = field(default_factory=list)
    error: str | None = None
    detail: str | None = None
    status: int = 200
    truncated: bool = False
    at: float = 0.0  # the catalog's clock when it ended
    fetched_at: str = ""


@dataclass(frozen=True)
class ModelsView:
    """What a caller gets: the HTTP status (200, 502, 504) and the body."""

    status: int
    body: ModelsBody | ModelsUnavailable


def shown_url(url: str) -> str:
    """A URL as an error may show it: scheme, host, port and path only."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
    except ValueError:
        return "ANTHROPIC_BASE_URL (not a URL)"
    return f"{parts.scheme}://{host}{parts.path}" if parts.scheme in ("http", "https") else "ANTHROPIC_BASE_URL"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        raise urllib.error.URLError(f"redirected ({code}) to {shown_url(newurl)}; redirects are not followed (the "
                                    "credential would go along): set ANTHROPIC_BASE_URL to the final address")


_OPENER = urllib.request.build_opener(_NoRedirects)


def _request_parts(env: Mapping[str, str]) -> tuple[str, dict[str, str], list[str]]:
    """The base URL, the headers (with the credential) and the secrets to scrub from any text."""
    base = (env.get("ANTHROPIC_BASE_URL") or "").strip() or DEFAULT_BASE_URL
    headers = {"anthropic-version": ANTHROPIC_VERSION, "accept": "application/json",
               "user-agent": f"TierOps/{__version__} (models)"}
    if key := (env.get("ANTHROPIC_API_KEY") or "").strip():
        headers["x-api-key"] = key
    elif token := (env.get("ANTHROPIC_AUTH_TOKEN") or "").strip():
        headers["authorization"] = f"Bearer {token}"
    secrets = [v.strip() for k, v in env.items() if k in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN") and v.strip()]
    # asked without a user or password in the URL (nor a query): what an error shows is what is asked
    return shown_url(base).rstrip("/"), headers, secrets


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` on one line, each of ``secrets`` replaced, at most 500 characters."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return " ".join(text.split())[:500]


def api_error(exc: urllib.error.HTTPError) -> str:
    """The API's ``error.type: error.message`` from its JSON body, or the HTTP reason."""
    try:
        data = json.loads(exc.read(64 * 1024) or b"{}")
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict):
            return f"{error.get('type') or 'error'}: {str(error.get('message') or '')[:300]}"
    except (OSError, ValueError, http.client.HTTPException):
        pass
    return str(exc.reason or "")[:300]


def _page(data: Any, where: str) -> tuple[list[ModelItem], str | None]:
    """One page's models and the id to continue after (None: the last page); ValueError says why not."""
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ValueError("no \"data\" list in the answer")
    items: list[ModelItem] = []
    for i, item in enumerate(data["data"]):
        if not isinstance(item, dict) or not isinstance(item.get("id"), str) or not item["id"].strip():
            raise ValueError(f"data[{i}] has no \"id\" text")
        name, created = item.get("display_name"), item.get("created_at")
        items.append({"id": item["id"], "display_name": name if isinstance(name, str) and name else item["id"],
                      "created_at": created if isinstance(created, str) else None})
    if data.get("has_more") is not True:
        return items, None
    last = data.get("last_id")
    if not isinstance(last, str) or not last:
        raise ValueError(f"\"has_more\" is true but there is no \"last_id\" ({where})")
    return items, last


def fetch_models(env: Mapping[str, str], timeout: float, *, page_limit: int = PAGE_LIMIT,
                 max_pages: int = MAX_PAGES) -> Fetched:
    """Every model the Models API at ``env``'s base URL lists, or why not. Blocking: call it in a thread."""
    base, headers, secrets = _request_parts(env)
    shown = shown_url(base + MODELS_PATH)
    if not shown.startswith(("http://", "https://")):
        return Fetched("ANTHROPIC_BASE_URL", error=UNREACHABLE, status=502,
                       detail="ANTHROPIC_BASE_URL is not an http:// or https:// URL; fix it in TierOps' environment")
    deadline = time.monotonic() + timeout
    models: list[ModelItem] = []
    after: str | None = None
    for _ in range(max_pages):
        query = {"limit": str(page_limit), **({"after_id": after} if after else {})}
        request = urllib.request.Request(f"{base}{MODELS_PATH}?{urlencode(query)}", headers=headers)  # noqa: S310
        try:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            with _OPENER.open(request, timeout=left) as answer:
                body = answer.read(PAGE_MAX_BYTES + 1)
        except urllib.error.HTTPError as exc:
            with exc:  # its body is read here; closed, no socket is left to the collector
                why = scrub(api_error(exc), secrets)
            hint = ""
            if exc.code in (401, 403):
                hint = ("; check ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN in TierOps' environment (the CLI gets the "
                        "same)" if secrets else "; TierOps' environment has no ANTHROPIC_API_KEY or "
                        "ANTHROPIC_AUTH_TOKEN to send")
            return Fetched(shown, error=REFUSED, detail=f"{shown} answered HTTP {exc.code} {why}{hint}", status=502)
        except (TimeoutError, urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            if isinstance(reason, TimeoutError):
                return Fetched(shown, error=TIMEOUT, status=504, detail=f"no complete answer from {shown} within "
                               f"{timeout:g} s (TIEROPS_MODELS_TIMEOUT)")
            why = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
            return Fetched(shown, error=UNREACHABLE, status=502, detail=f"cannot reach {shown}: {scrub(why, secrets)}")
        try:
            if len(body) > PAGE_MAX_BYTES:
                raise ValueError(f"a page is larger than {PAGE_MAX_BYTES // (1024 * 1024)} MiB")
            try:
                data = json.loads(body)
            except ValueError:
                raise ValueError(f"not JSON ({len(body)} bytes)") from None
            items, after = _page(data, shown)
        except ValueError as exc:
            return Fetched(shown, error=BAD_ANSWER, status=502, detail=f"{shown} answered with something that is not "
                           f"the Models API's list: {scrub(str(exc), secrets)}")
        seen = {m["id"] for m in models}
        models += [m for m in items if m["id"] not in seen]
        if after is None:
            return Fetched(shown, models=models)
    return Fetched(shown, models=models, truncated=True)


class ModelCatalog:
    """The upstream's models, fetched once at a time and kept ``TIEROPS_MODELS_CACHE_TTL`` s.

    ``environ`` (default: this process's) is what the CLI's environment is built from, read at
    each fetch; ``clock`` (monotonic seconds) is injectable for tests."""

    def __init__(self, settings: Settings, *, environ: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic, page_limit: int = PAGE_LIMIT) -> None:
        self.settings = settings
        self.environ = environ
        self.clock = clock
        self.page_limit = page_limit
        self._good: Fetched | None = None
        self._failure: Fetched | None = None
        self._inflight: asyncio.Task[Fetched] | None = None

    async def get(self, *, refresh: bool = False) -> ModelsView:
        """The list: the kept one while fresh, else a fetch (joining the one in flight, if any);
        ``refresh`` asks the upstream now whatever is kept."""
        now = self.clock()
        if not refresh:
            if self._failure is not None and now - self._failure.at < FAILURE_HOLD:
                return self._view(self._failure)
            if self._good is not None and now - self._good.at < self.settings.models_cache_ttl:
                return self._view(self._good)
        task = self._inflight
        if task is None:
            task = self._inflight = asyncio.create_task(self._fetch(), name="tierops-models")
        return self._view(await asyncio.shield(task))

    def cached(self) -> ModelsView | None:
        """The last answer without asking anyone (None before the first fetch ended)."""
        latest = self._failure or self._good
        return self._view(latest) if latest is not None else None

    async def _fetch(self) -> Fetched:
        env = child_env(cli_home(self.settings), self.settings.allowed_env(),
                        None if self.environ is None else dict(self.environ))
        timeout = self.settings.models_timeout
        started = time.monotonic()
        try:
            got = await asyncio.wait_for(asyncio.to_thread(fetch_models, env, timeout, page_limit=self.page_limit),
                                         timeout + 1)
        except TimeoutError:  # the thread's own timeouts apply per socket operation; this bounds the whole
            base, _headers, _secrets = _request_parts(env)
            got = Fetched(shown_url(base + MODELS_PATH), error=TIMEOUT, status=504,
                          detail=f"no complete answer within {timeout:g} s (TIEROPS_MODELS_TIMEOUT)")
        except Exception as exc:  # a bug: never a traceback to a client, never a credential in a log
            log.error("fetching the models list failed: %s", type(exc).__name__)
            got = Fetched("", error=REFUSED, status=502, detail=f"internal error: {type(exc).__name__}")
        finally:
            self._inflight = None
        got = replace(got, at=self.clock(), fetched_at=utcnow())
        if got.error is None:
            self._good, self._failure = got, None
            log.info("models: %d from %s in %.1f s%s", len(got.models), got.source_url, time.monotonic() - started,
                     " (cut: more pages than read)" if got.truncated else "")
        else:
            self._failure = got
            log.warning("models list unavailable: %s", got.detail)
        return got

    def _view(self, got: Fetched) -> ModelsView:
        now = self.clock()
        listed = got if got.error is None else self._good
        body: ModelsBody = {
            "models": list(listed.models) if listed else [], "fetched_at": listed.fetched_at if listed else None,
            "age_s": round(max(0.0, now - listed.at), 1) if listed else None,
            "source_url": got.source_url or (listed.source_url if listed else ""),
            "stale": got.error is not None and listed is not None, "truncated": bool(listed and listed.truncated)}
        if got.error is None:
            return ModelsView(got.status, body)
        failed: ModelsUnavailable = {**body, "error": got.error, "detail": (got.detail or "") + (
            f"; the list below is the one fetched at {listed.fetched_at} ({body['age_s']:g} s ago)"
            if listed is not None else "")}
        return ModelsView(got.status, failed)
