"""The starlette application: wiring, lifespan, login, health and metrics.

Lifespan order (the only startup hook starlette has): open the store (migrations run there),
mark sessions a dead supervisor left ``running`` as interrupted, then start the scheduler; on
shutdown stop running sessions' process groups, cancel the scheduler, close the store.
One uvicorn worker: the scheduler and the SSE hub live in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from app.config import Settings
from app.output.validate import OutputValidator
from app.store.db import Database
from app.supervisor.hub import Hub
from app.supervisor.scheduler import Supervisor
from app.web import api, pages, streams
from app.web.auth import COOKIE, COOKIE_MAX_AGE, SecurityMiddleware, new_cookie, safe_next, token_ok
from app.web.common import WEB_DIR, ApiError, WebState, json_error, state, templates


class Metrics:
    """Prometheus gauges read at scrape time from the store and the hub."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.sessions = Gauge("tierops_sessions", "Stored sessions", ["status", "tier"], registry=self.registry)
        self.cost = Gauge("tierops_cost_usd_total", "Cost of all stored sessions (USD)", registry=self.registry)
        self.lines = Gauge("tierops_ingest_lines_total", "Stream lines stored", registry=self.registry)
        self.sse = Gauge("tierops_sse_clients", "Open SSE subscriptions", registry=self.registry)
        self.busy = Gauge("tierops_cycle_running", "1 while a cycle runs", registry=self.registry)

    async def render(self, st: WebState) -> bytes:
        self.sessions.clear()
        for r in await st.db.fetchall("SELECT status, ifnull(tier, 0) AS tier, count(*) AS n FROM sessions"
                                      " GROUP BY status, tier"):
            self.sessions.labels(r["status"], str(r["tier"])).set(r["n"])
        self.cost.set(await st.db.fetchval("SELECT ifnull(sum(cost_usd), 0) FROM sessions"))
        self.lines.set(await st.db.fetchval("SELECT ifnull(sum(line_count), 0) FROM sessions"))
        self.sse.set(st.hub.subscriber_count)
        self.busy.set(int(st.supervisor.busy))
        return generate_latest(self.registry)


async def healthz(request: Request) -> Response:
    try:
        await state(request).db.fetchval("SELECT 1")
    except Exception as exc:  # the point of a health check: report, never raise
        return JSONResponse({"status": "error", "db": str(exc)}, status_code=503)
    return JSONResponse({"status": "ok", "db": "ok"})


async def metrics(request: Request) -> Response:
    return Response(await request.app.state.metrics.render(state(request)), media_type=CONTENT_TYPE_LATEST)


async def login(request: Request) -> Response:
    st = state(request)
    nxt = safe_next(request.query_params.get("next"))
    if st.token is None:
        return RedirectResponse(nxt, status_code=303)
    if request.method == "GET":
        return templates.TemplateResponse(request, "login.html", {"next": nxt, "error": None})
    form = await pages.read_form(request)
    nxt = safe_next(str(form.get("next") or "/"))
    if not token_ok(st.token, str(form.get("token") or "")):
        return templates.TemplateResponse(request, "login.html", {"next": nxt, "error": "Wrong token."},
                                          status_code=401)
    resp = RedirectResponse(nxt, status_code=303)
    resp.set_cookie(COOKIE, new_cookie(st.token), max_age=COOKIE_MAX_AGE, httponly=True, samesite="lax",
                    secure=request.url.scheme == "https")
    return resp


async def logout(request: Request) -> Response:
    resp = RedirectResponse("/login", status_code=303)
    resp.delete_cookie(COOKIE)
    return resp


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/") or request.url.path.endswith("/stream")


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error = exc.error if isinstance(exc, ApiError) else {404: "not_found", 405: "method_not_allowed"}.get(
        exc.status_code, "error")
    if _wants_json(request):
        return json_error(exc.status_code, error, exc.detail)
    return templates.TemplateResponse(request, "error.html", {"status": exc.status_code, "message": exc.detail},
                                      status_code=exc.status_code)


async def server_error(request: Request, exc: Exception) -> Response:
    if _wants_json(request):
        return json_error(500, "internal_error", f"{type(exc).__name__}: {exc}")
    return templates.TemplateResponse(request, "error.html", {"status": 500, "message": "internal error"},
                                      status_code=500)


def create_app(settings: Settings, *, token: str | None = None) -> Starlette:
    """``token`` defaults to the settings' token (TIEROPS_TOKEN / TIEROPS_TOKEN_FILE)."""
    token = token if token is not None else settings.resolved_token()
    if token is not None and settings.resolved_token() != token:
        # the recorders' redactor reads the token from the settings: keep them the same
        settings = settings.model_copy(update={"token": SecretStr(token), "token_file": None})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        db = await Database.open(settings.db)
        validator = OutputValidator.from_file(settings.schema_file)
        hub = Hub(prepare=streams.prepare_activity)
        supervisor = Supervisor(db, settings, validator, hub)
        await supervisor.recover_interrupted()
        app.state.tierops = WebState(settings, db, hub, supervisor, validator, token)
        scheduler = asyncio.create_task(supervisor.run_forever()) if settings.schedule else None
        try:
            yield
        finally:
            if scheduler is not None:
                scheduler.cancel()
            await supervisor.shutdown()
            if scheduler is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await scheduler
            await db.close()

    routes = [
        Route("/healthz", healthz),
        Route("/metrics", metrics),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Mount("/api/v1", routes=api.routes),
        *streams.routes,
        *pages.routes,
        Mount("/static", StaticFiles(directory=str(WEB_DIR / "static")), name="static"),
    ]
    app = Starlette(
        routes=routes, lifespan=lifespan,
        middleware=[Middleware(SecurityMiddleware, token=token)],
        exception_handlers={HTTPException: http_error, Exception: server_error},
    )
    app.state.metrics = Metrics()
    return app


def is_loopback(host: str) -> bool:
    import ipaddress

    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve(settings: Settings, host: str, port: int) -> None:
    """Run uvicorn with one worker. Refuses a non-loopback bind without a token."""
    import uvicorn

    token = settings.resolved_token()
    if token is None and not is_loopback(host):
        raise ValueError(f"refusing to bind to {host}: without TIEROPS_TOKEN (or TIEROPS_TOKEN_FILE) anyone who "
                         "can reach this address could run sessions and read their output; set a token or bind to "
                         "127.0.0.1")
    uvicorn.run(create_app(settings, token=token), host=host, port=port, workers=1, proxy_headers=False)
