"""The app under test, two ways, with one interface.

* ``app_server(token=None, stages=None, **settings_overrides)``: create_app() in this process,
  no socket. Its lifespan (store, supervisor, scheduler) and every request run on an event loop
  in a background thread, as under uvicorn, so cycles and fake CLI processes carry on between
  requests; ``.client()`` is an ``httpx.Client`` whose transport hands each request to that
  loop (httpx's ``ASGITransport``, which alone would not run the lifespan). Responses arrive
  whole, so it suits everything but watching a live stream.
* ``live_server(...)``: a real uvicorn on 127.0.0.1 in a background thread, for the live SSE
  streams (test_streams.py) and the browser (test_browser.py).

Both return a server with ``.url``, ``.settings``, ``.fake`` (a fake claude CLI, see
tests/fakes/claude_control.py, whose stages tests set), ``.state``, ``.client(**httpx_kwargs)``
and ``.run_async(coro_fn)`` to run a coroutine against the server's own Database/Supervisor on
the server's event loop (for seeding data or inspecting state with the real objects).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from playwright.sync_api import Browser, sync_playwright
from starlette.applications import Starlette

from app.config import Settings
from app.web.app import create_app
from app.web.common import WebState
from tests.fakes.claude_control import FakeClaude, make_fake_claude

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Served:
    """What the two server fixtures share: the app's state, running code on its loop, a client."""

    url: str
    token: str | None
    _loop: asyncio.AbstractEventLoop

    @property
    def state(self) -> WebState:
        raise NotImplementedError

    def run_async(self, fn: Callable[[WebState], Any], timeout: float = 30) -> Any:
        """Run ``await fn(state)`` on the server's loop and return its result."""
        fut: Future = asyncio.run_coroutine_threadsafe(fn(self.state), self._loop)
        return fut.result(timeout)

    def _transport(self) -> httpx.BaseTransport | None:
        return None  # a real socket

    def client(self, **kwargs: Any) -> httpx.Client:
        headers = kwargs.pop("headers", {})
        if kwargs.pop("auth", True) and self.token:
            headers.setdefault("Authorization", f"Bearer {self.token}")
        if (transport := self._transport()) is not None:
            kwargs["transport"] = transport
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, **kwargs)


@dataclass
class LiveServer(_Served):
    url: str
    settings: Settings
    fake: FakeClaude
    token: str | None
    _server: uvicorn.Server
    _thread: threading.Thread
    _loop: asyncio.AbstractEventLoop

    @property
    def state(self) -> WebState:
        return self._server.config.app.state.tierops  # type: ignore[attr-defined]

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)


@pytest.fixture(autouse=True)
def _no_real_upstream(monkeypatch: pytest.MonkeyPatch) -> None:
    """The /config page and GET /api/v1/models ask the Models API at ANTHROPIC_BASE_URL: in these tests a
    closed loopback port (refused at once), never the real API; a test wanting an upstream sets its own."""
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{_free_port()}")


def build_app(tmp_path: Path, n: int, token: str | None, stages: list[dict] | None,
         overrides: dict[str, Any]) -> tuple[Starlette, Settings, FakeClaude]:
    fake = make_fake_claude(tmp_path / f"bin{n}", stages or [{"lines": []}])
    settings = Settings(db=tmp_path / "web.db", home=tmp_path / "state", claude_bin=str(fake.path),
                        **{"schedule": False, "kill_grace": 1, **overrides})  # a test may turn the schedule on
    return create_app(settings, token=token), settings, fake


def _run_loop(loop: asyncio.AbstractEventLoop, main: Callable[[], Any]) -> None:
    """A server thread's body: ``main()`` on ``loop`` until it returns, then cancel what it left
    behind (sse-starlette leaves a shutdown watcher task when uvicorn runs in a thread) and close."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(main())
    finally:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()


def serve(app: Starlette, settings: Settings, fake: FakeClaude, token: str | None) -> LiveServer:
    """``app`` on a real uvicorn at 127.0.0.1 (a free port) in a background thread; ``.stop()`` it."""
    port = _free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=_run_loop, args=(loop, server.serve), name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    return LiveServer(f"http://127.0.0.1:{port}", settings, fake, token, server, thread, loop)


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[Callable[..., LiveServer]]:
    servers: list[LiveServer] = []

    def start(token: str | None = None, stages: list[dict] | None = None, **overrides: Any) -> LiveServer:
        live = serve(*build_app(tmp_path, len(servers), token, stages, overrides), token)
        servers.append(live)
        return live

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's chromium through Playwright, one per test module (never Playwright's download)."""
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


# --- in process ------------------------------------------------------------------------------

class _LoopTransport(httpx.BaseTransport):
    """A sync httpx transport running each request through ``httpx.ASGITransport`` on ``loop``."""

    def __init__(self, app: Starlette, loop: asyncio.AbstractEventLoop) -> None:
        self._asgi = httpx.ASGITransport(app, raise_app_exceptions=False, client=("127.0.0.1", 50000))
        self._loop = loop

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        async def call() -> tuple[int, list[tuple[bytes, bytes]], bytes]:
            response = await self._asgi.handle_async_request(request)
            body = b"".join([chunk async for chunk in response.stream])
            return response.status_code, response.headers.raw, body

        timeout = (request.extensions.get("timeout") or {}).get("read") or 30
        status, headers, body = asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout)
        return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body), request=request)


@dataclass
class AppServer(_Served):
    url: str
    settings: Settings
    fake: FakeClaude
    token: str | None
    app: Starlette
    _loop: asyncio.AbstractEventLoop
    _thread: threading.Thread
    _stop: asyncio.Event

    @property
    def state(self) -> WebState:
        return self.app.state.tierops

    def _transport(self) -> httpx.BaseTransport:
        return _LoopTransport(self.app, self._loop)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)


@pytest.fixture
def app_server(tmp_path: Path) -> Iterator[Callable[..., AppServer]]:
    servers: list[AppServer] = []

    def start(token: str | None = None, stages: list[dict] | None = None, **overrides: Any) -> AppServer:
        app, settings, fake = build_app(tmp_path, len(servers), token, stages, overrides)
        loop = asyncio.new_event_loop()
        stop = asyncio.Event()
        started: Future = Future()

        async def serve() -> None:
            try:
                async with app.router.lifespan_context(app):
                    started.set_result(None)
                    await stop.wait()
            except BaseException as exc:
                if not started.done():
                    started.set_exception(exc)
                raise

        thread = threading.Thread(target=_run_loop, args=(loop, serve), name=f"app-{len(servers)}", daemon=True)
        thread.start()
        started.result(timeout=20)
        # The port is never bound: the URL only gives requests a loopback Host (and Origin) header.
        srv = AppServer(f"http://127.0.0.1:{8000 + len(servers)}", settings, fake, token, app, loop, thread, stop)
        servers.append(srv)
        return srv

    yield start
    for s in servers:
        s.stop()
