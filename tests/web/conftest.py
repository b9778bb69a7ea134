"""A real uvicorn serving create_app() on 127.0.0.1 in a background thread, per test.

``live_server(**settings_overrides)`` returns a :class:`LiveServer` with ``.url``, ``.settings``,
``.fake`` (a fake claude CLI, see tests/fakes/claude_control.py, whose stages tests set) and
``.run_async(coro_fn)`` to run a coroutine against the server's own Database/Supervisor on the
server's event loop (for seeding data or inspecting state with the real objects).
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


@dataclass
class LiveServer:
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

    def run_async(self, fn: Callable[[WebState], Any], timeout: float = 30) -> Any:
        """Run ``await fn(state)`` on the server's loop and return its result."""
        fut: Future = asyncio.run_coroutine_threadsafe(fn(self.state), self._loop)
        return fut.result(timeout)

    def client(self, **kwargs: Any) -> httpx.Client:
        headers = kwargs.pop("headers", {})
        if kwargs.pop("auth", True) and self.token:
            headers.setdefault("Authorization", f"Bearer {self.token}")
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, **kwargs)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[Callable[..., LiveServer]]:
    servers: list[LiveServer] = []

    def start(token: str | None = None, stages: list[dict] | None = None, **overrides: Any) -> LiveServer:
        fake = make_fake_claude(tmp_path / f"bin{len(servers)}", stages or [{"lines": []}])
        settings = Settings(db=tmp_path / "web.db", state_dir=tmp_path / "state", claude_bin=str(fake.path),
                            schedule=False, kill_grace=1, **overrides)
        app = create_app(settings, token=token)
        port = _free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
        server = uvicorn.Server(config)
        loop_box: dict[str, asyncio.AbstractEventLoop] = {}

        def run() -> None:
            loop = asyncio.new_event_loop()
            loop_box["loop"] = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(server.serve())
            finally:
                # sse-starlette leaves a shutdown watcher task behind when uvicorn runs in a thread
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.close()

        thread = threading.Thread(target=run, name=f"uvicorn-{port}", daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        live = LiveServer(f"http://127.0.0.1:{port}", settings, fake, token, server, thread, loop_box["loop"])
        servers.append(live)
        return live

    yield start
    for s in servers:
        s.stop()
