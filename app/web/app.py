"""The starlette application: wiring, lifespan, login, health, metrics and the error handlers.

Lifespan order (the only startup hook starlette has): open the store (migrations run there),
mark sessions a dead supervisor left ``running`` as interrupted, then start the scheduler and
the daily prune (``TIEROPS_RETENTION_DAYS``), the approvals' expiry watch, the run queue's
worker and the follower of sessions other processes run; on shutdown stop running sessions'
process groups, cancel those tasks, close the store. One uvicorn worker: the scheduler and the SSE
hub live in this process.

Errors are rendered in one place: an :class:`~app.web.common.ApiError` (or any HTTP error)
raised by a handler becomes JSON ``{error, detail}`` under ``/api/`` and for SSE streams, and
the error page (with the usual nav) everywhere else; a storage condition (a full disk, an I/O
error, a lock held past the busy timeout) is a 503 with ``Retry-After`` and the reason
(``faults.py``), never a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from app.clock import parse_stamp
from app.config import Settings
from app.engine.retention import prune_daily
from app.errors import ConfigError
from app.logs import AccessLog, oneline
from app.output.validate import OutputValidator
from app.redact import install_log_redaction, redactor_for
from app.store import chats as chat_store
from app.store import dashboard
from app.store import guard as guard_store
from app.store import incidents as incident_store
from app.store import nodes as node_store
from app.store import notifications as notification_store
from app.store import stats as stats_store
from app.store.backends import open_database
from app.supervisor.alerts import work_queue
from app.supervisor.chat import ChatService
from app.supervisor.follow import Follower
from app.supervisor.health import assess
from app.supervisor.hub import Hub
from app.supervisor.node import Node
from app.supervisor.remote_stop import watch_stop_requests
from app.supervisor.scheduler import Supervisor
from app.tasks import spawn
from app.tasks import stop as stop_task
from app.vocab import ServiceStatus
from app.web import streams
from app.web.api import routes as api
from app.web.auth import (
    COOKIE,
    COOKIE_MAX_AGE,
    LOGIN_MAX_FAILURES,
    LOGIN_WINDOW_S,
    LoginThrottle,
    SecurityMiddleware,
    is_loopback,
    new_cookie,
    safe_next,
    token_ok,
)
from app.web.chat import ollama_api, openai_api
from app.web.common import ApiError, WebState, json_error, state
from app.web.faults import StorageFaults
from app.web.pages import routes as pages
from app.web.pages.forms import read_form
from app.web.templating import WEB_DIR, error_page, page

log = logging.getLogger(__name__)


class Metrics:
    """Prometheus gauges read at scrape time from the store and the hub."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.sessions = Gauge("tierops_sessions", "Stored sessions", ["status", "tier"], registry=self.registry)
        self.cost = Gauge("tierops_cost_usd_total", "Cost of all stored sessions (USD)", registry=self.registry)
        self.lines = Gauge("tierops_ingest_lines_total", "Stream lines stored", registry=self.registry)
        self.sse = Gauge("tierops_sse_clients", "Open SSE subscriptions", registry=self.registry)
        self.busy = Gauge("tierops_cycle_running", "1 while a cycle runs", registry=self.registry)
        self.cycles = Gauge("tierops_cycles_running", "Cycles running on this node now (TIEROPS_MAX_CONCURRENT at most)",
                            registry=self.registry)
        # notifications by status (pending, sent, failed, suppressed, digested)
        self.notifications = Gauge("tierops_notifications_total", "Stored notifications", ["status"],
                                   registry=self.registry)
        # the PreToolUse guard's decisions, by the session's tier, decision and rule
        self.guard = Gauge("tierops_guard_decisions_total", "Tool calls the guard decided", ["tier", "decision", "rule"],
                           registry=self.registry)
        # findings by evidence status (verified, unsupported, uncited), by the session's tier and model
        self.evidence = Gauge("tierops_findings_evidence", "Checked findings by evidence status",
                              ["tier", "model", "status"], registry=self.registry)
        # incidents and the probe's checks
        self.incidents = Gauge("tierops_incidents_open", "Unresolved incidents", ["service", "severity", "status"],
                               registry=self.registry)
        check = ["check", "service"]
        self.check_up = Gauge("tierops_probe_check_up", "1 when the check's last result was healthy, else 0",
                              check, registry=self.registry)
        self.check_latency = Gauge("tierops_probe_check_latency_seconds", "Latency of the check's last result",
                                   check, registry=self.registry)
        self.check_time = Gauge("tierops_probe_check_timestamp_seconds", "Unix time of the check's last result",
                                check, registry=self.registry)

    async def render(self, st: WebState) -> bytes:
        self.sessions.clear()
        for r in await dashboard.session_counts(st.db):
            self.sessions.labels(r["status"], str(r["tier"])).set(r["n"])
        self.cost.set(await dashboard.total_cost(st.db))
        self.lines.set(await dashboard.total_lines(st.db))
        self.sse.set(st.hub.subscriber_count)
        self.busy.set(int(st.supervisor.busy))
        self.cycles.set(len(st.supervisor.runs))
        await self._incidents(st)
        self.notifications.clear()
        for c in await notification_store.counts(st.db):
            self.notifications.labels(c["status"]).set(c["count"])
        self.guard.clear()
        for g in await guard_store.counts(st.db):
            self.guard.labels("" if g["tier"] is None else str(g["tier"]), g["decision"], g["rule"]).set(g["count"])
        self.evidence.clear()
        for e in await stats_store.evidence_counts(st.db):
            for status in ("verified", "unsupported", "uncited"):
                self.evidence.labels("" if e["tier"] is None else str(e["tier"]), e["model"], status).set(e[status])
        return generate_latest(self.registry)

    async def _incidents(self, st: WebState) -> None:
        """Label sets come from the database: cleared each scrape, so a resolved incident's or a
        removed check's series disappears."""
        for gauge in (self.incidents, self.check_up, self.check_latency, self.check_time):
            gauge.clear()
        for c in await incident_store.counts(st.db):
            self.incidents.labels(c["service"] or "", c["severity"], c["status"]).set(c["count"])
        for r in await incident_store.latest_probe_results(st.db):
            labels = (r["check_name"], r["service"] or "")
            self.check_up.labels(*labels).set(int(r["status"] == ServiceStatus.HEALTHY))
            if r["latency_ms"] is not None:
                self.check_latency.labels(*labels).set(r["latency_ms"] / 1000)
            when = parse_stamp(r["created_at"])
            self.check_time.labels(*labels).set(when.timestamp())


async def healthz(request: Request) -> Response:
    """An honest health check, unauthenticated and cheap, deciding exactly what the
    overview's headline shows (``app/supervisor/health.py``). 503 ``unhealthy`` when the database
    cannot be written (a real write probe), when the schedule runs here and no cycle finished in
    time (``Supervisor.health``), or when the last ``TIEROPS_UNHEALTHY_AFTER`` cycles failed
    (``problems``). 200 ``degraded`` when the monitor runs but no language-model tier can start —
    no claude CLI, the daily budget spent, the model tiers paused after rejected credentials
    (``warnings``); 200 ``ok`` otherwise. Notifications show counts and errors, never their URLs."""
    st = state(request)
    health = await assess(st.supervisor)
    problems, warnings = health.problems, health.warnings
    body = {"status": health.status, **health.facts,
            "storage": f"error: {oneline(health.storage)}" if health.storage else "ok",
            "notifications": st.supervisor.notifier.status(), "problems": problems, "warnings": warnings,
            **await _nodes(request)}
    previous: tuple[list[str], list[str]] = getattr(request.app.state, "health_problems", ([], []))
    if (problems, warnings) != previous:  # logged when it changes, not at every poll
        request.app.state.health_problems = (problems, warnings)
        if problems:
            log.warning("health check: unhealthy: %s", "; ".join(problems))
        elif warnings:
            log.warning("health check: degraded: %s", "; ".join(warnings))
        else:
            log.info("health check: healthy again")
    return JSONResponse(body, status_code=503 if problems else 200)


async def _nodes(request: Request) -> dict[str, Any]:
    """This node and every node seen on the store: leader, sessions running, last seen, state."""
    node: Node | None = getattr(request.app.state, "node", None)
    if node is None:
        return {}
    try:
        rows = await node_store.list_nodes(state(request).db)
    except Exception as exc:  # the storage problem is reported above
        return {"node": {"id": node.id, "leader": node.is_leader}, "nodes_error": oneline(exc)}
    listed = [{"id": r["id"], "host": r["host"], "version": r["version"], "labels": r["labels"],
               "leader": r["leader"], "running_sessions": r["running"], "last_seen_at": r["last_seen_at"],
               "state": "stopped" if r["stopped_at"] else "gone" if r["seen_s"] > 2 * node.lease_s else "up"}
              for r in rows]
    return {"node": {"id": node.id, "leader": node.is_leader}, "nodes": listed}


async def metrics(request: Request) -> Response:
    return Response(await request.app.state.metrics.render(state(request)), media_type=CONTENT_TYPE_LATEST)


async def login(request: Request) -> Response:
    st = state(request)
    nxt = safe_next(request.query_params.get("next"))
    if st.token is None:
        return RedirectResponse(nxt, status_code=303)
    if request.method == "GET":
        return page(request, "login.html", {"next": nxt, "error": None})
    form = await read_form(request)
    nxt = safe_next(str(form.get("next") or "/"))
    # Throttled per client address before the (constant-time) compare; see auth.py.
    throttle: LoginThrottle = request.app.state.login_throttle
    addr = request.client.host if request.client else "unknown"
    if (wait := throttle.retry_after(addr)) is not None:
        return _login_refused(request, nxt, wait)
    if not token_ok(st.token, str(form.get("token") or "")):
        if (wait := throttle.failed(addr)) is not None:
            return _login_refused(request, nxt, wait)
        return page(request, "login.html", {"next": nxt, "error": "Wrong token."}, status=401)
    throttle.succeeded(addr)
    resp = RedirectResponse(nxt, status_code=303)
    resp.set_cookie(COOKIE, new_cookie(st.token), max_age=COOKIE_MAX_AGE, httponly=True, samesite="lax",
                    secure=request.url.scheme == "https")
    return resp


def _login_refused(request: Request, nxt: str, wait: int) -> Response:
    error = (f"Too many wrong tokens from your address: log-ins are refused for {wait} s "
             f"(at most {LOGIN_MAX_FAILURES} failures per {LOGIN_WINDOW_S:.0f} s).")
    resp = page(request, "login.html", {"next": nxt, "error": error}, status=429)
    resp.headers["Retry-After"] = str(wait)
    return resp


async def favicon(request: Request) -> Response:
    """Browsers ask for /favicon.ico whatever the page links; answer it (no 404 in logs)."""
    return FileResponse(WEB_DIR / "static" / "favicon.ico", media_type="image/x-icon",
                        headers={"Cache-Control": "public, max-age=86400"})


async def logout(request: Request) -> Response:
    resp = RedirectResponse("/login", status_code=303)
    resp.delete_cookie(COOKIE)
    return resp


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/") or request.url.path.endswith("/stream")


async def http_error(request: Request, exc: Exception) -> Response:
    """Every HTTP error (an ApiError from a handler, or starlette's 404/405): JSON or the error page."""
    if not isinstance(exc, HTTPException):  # registered for HTTPException only; never a bare 500 anyway
        return await server_error(request, exc)
    error = exc.error if isinstance(exc, ApiError) else {404: "not_found", 405: "method_not_allowed"}.get(
        exc.status_code, "error")
    if _wants_json(request):
        return json_error(exc.status_code, error, exc.detail, headers=exc.headers)  # e.g. Allow on a 405
    response = error_page(request, exc.status_code, exc.detail)
    response.headers.update(exc.headers or {})
    return response


async def server_error(request: Request, exc: Exception) -> Response:
    """A bug: starlette logs the traceback (it re-raises to the server after this response)."""
    if _wants_json(request):
        return json_error(500, "internal_error", f"{type(exc).__name__}: {exc}")
    return error_page(request, 500, "internal error")


def create_app(settings: Settings, *, token: str | None = None) -> Starlette:
    """``token`` defaults to the settings' token (TIEROPS_TOKEN / TIEROPS_TOKEN_FILE)."""
    token = token if token is not None else settings.resolved_token()
    if token is not None and settings.resolved_token() != token:
        # the recorders' redactor reads the token from the settings: keep them the same
        settings = settings.model_copy(update={"token": SecretStr(token), "token_file": None})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        redact = redactor_for(settings)  # knows the dashboard token too
        install_log_redaction(redact)
        db = await open_database(settings.database_target, redact=redact)
        validator = OutputValidator.from_file(settings.schema_file)
        hub = Hub(prepare=streams.prepare_activity)
        supervisor = Supervisor(db, settings, validator, hub)
        # This process as one node of those sharing the store: only the leader schedules, expires
        # approvals, sends notifications and prunes (supervisor/node.py). Known before the sweep of
        # sessions left running, which ends only this node's own.
        node = Node(db, lease_s=settings.lease_seconds, state_dir=settings.state_dir, labels=settings.node_labels,
                    running=lambda: len(supervisor.handles) + len(supervisor.chat_handles))
        await node.start()
        supervisor.node = node
        supervisor.notifier.may_send = lambda: node.is_leader
        node.on_lead.append(supervisor.notifier.wake)
        await supervisor.recover_interrupted()
        await chat_store.interrupt_running(db, "the server stopped while this question was answered", node.id)
        await supervisor.start()  # the notification sender (stopped by shutdown below)
        app.state.tierops = WebState(settings, db, hub, supervisor, validator, token)
        # Ask TierOps: chat turns beside the cycles (never the cycle lock), with the run-time settings.
        app.state.chat = chat = ChatService(supervisor)
        try:
            await node.tick()  # lead at once when nobody does
        except Exception as exc:  # the heartbeat task tries again
            log.warning("node %s: first heartbeat failed: %s", node.id, oneline(exc))
        node_task = spawn(node.run(), "tierops-node")
        app.state.node = node
        scheduler = spawn(supervisor.run_forever(), "tierops-scheduler") if settings.schedule else None
        # Prune sessions past TIEROPS_RETENTION_DAYS shortly after start, then daily; with
        # retention off too, for the claude CLI's own transcripts left behind (engine/retention.py).
        pruner = spawn(prune_daily(db, settings, leading=lambda: node.is_leader), "tierops-prune")
        # Pending approvals expire on time even when no cycle starts (checked every 30 s).
        approvals_watch = spawn(supervisor.watch(), "tierops-watch")
        # Runs queued by alerts start when the cycle is free (woken when a cycle ends).
        run_queue_worker = spawn(work_queue(supervisor), "tierops-run-queue")
        # Live pages of sessions other processes run (tierops run/supervise, other nodes: same database).
        follower = spawn(Follower(db, hub, supervisor).run(), "tierops-follow")
        # Stop buttons pressed on another node for this node's sessions.
        stop_watch = spawn(watch_stop_requests(supervisor), "tierops-stop-requests")
        log.info("serving state %s (database %s); scheduled cycles %s; retention %s", settings.state_dir,
                 db.path, "on" if settings.schedule else "off (TIEROPS_SCHEDULE=false)",
                 f"{settings.retention_days} days" if settings.retention_days else "off")
        try:
            yield
        finally:
            await stop_task(run_queue_worker)  # first: no queued run may start while shutting down
            await stop_task(approvals_watch)
            await stop_task(follower)
            await stop_task(stop_watch)
            await stop_task(pruner)  # before the store closes; a prune cut short rolls its batch back
            if scheduler is not None:
                scheduler.cancel()
            await chat.shutdown(settings.kill_grace + 5)  # running turns' CLIs stopped, their sessions recorded
            await supervisor.shutdown()
            await stop_task(node_task)
            await node.stop()  # the lease given up: another node leads at once
            if scheduler is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):  # its exception is logged by spawn
                    await scheduler
            await db.close()

    routes = [
        Route("/healthz", healthz),
        Route("/metrics", metrics),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/favicon.ico", favicon),
        Route("/logout", logout, methods=["POST"]),
        Mount("/api/v1", routes=api.routes),
        *openai_api.routes,  # Ask TierOps for OpenAI and Ollama clients (bearer tokens only: auth.py)
        *ollama_api.routes,
        *streams.routes,
        *pages.routes,
        Mount("/static", StaticFiles(directory=str(WEB_DIR / "static")), name="static"),
    ]
    app = Starlette(
        routes=routes, lifespan=lifespan,
        middleware=[Middleware(SecurityMiddleware, token=token, webhook_token=(
            settings.webhook_token.get_secret_value() if settings.webhook_token else None),
            chat_token=settings.chat_token.get_secret_value() if settings.chat_token else None),
            Middleware(StorageFaults)],  # a full disk, an I/O error, a lock: 503 with the reason (faults.py)
        exception_handlers={HTTPException: http_error, Exception: server_error},
    )
    app.state.metrics = Metrics()
    app.state.login_throttle = LoginThrottle()
    return app


def serve(settings: Settings, host: str, port: int) -> None:
    """Run uvicorn with one worker. Refuses a non-loopback bind without a token (:class:`ConfigError`).

    Logging: ``log_config=None`` leaves uvicorn's loggers without handlers of their
    own, so its startup and error lines go through the root handler of ``app.logs`` in the chosen
    format and level; uvicorn's access log is off and :class:`app.logs.AccessLog` writes one line
    per request on ``tierops.access`` instead, when ``TIEROPS_ACCESS_LOG`` is on (one format, no
    query strings, no line twice).
    """
    import uvicorn

    token = settings.resolved_token()
    if token is None and not is_loopback(host):
        raise ConfigError(f"refusing to bind to {host}: without TIEROPS_TOKEN (or TIEROPS_TOKEN_FILE) anyone who "
                          "can reach this address could run sessions and read their output; set a token or bind "
                          "to 127.0.0.1")
    check_listen(host, port)
    app = create_app(settings, token=token)
    options = server_options()
    uvicorn.run(AccessLog(app) if settings.access_log else app, host=host, port=port, workers=1,
                proxy_headers=False, log_config=None, access_log=False,
                loop=options["loop"], http=options["http"])


def server_options() -> dict[str, str]:
    """uvicorn's ``loop`` and ``http``: uvloop and httptools when installed (uvicorn[standard]),
    else asyncio and h11. Named explicitly rather than "auto" so bench/sse.py measures what
    ``serve`` runs."""
    import importlib.util

    def have(name: str) -> bool:
        return importlib.util.find_spec(name) is not None

    return {"loop": "uvloop" if have("uvloop") else "asyncio", "http": "httptools" if have("httptools") else "h11"}


def check_listen(host: str, port: int) -> None:
    """:class:`ConfigError` when ``host:port`` cannot be listened on (an unknown name, an address
    of another machine, a port in use), before anything starts: one line instead of a traceback."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"--host {host!r} is not an address of this machine ({exc})") from None
    family, kind, proto, _, address = infos[0]
    try:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
            sock.bind(address)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host} port {port}: {exc.strerror or exc}") from None
