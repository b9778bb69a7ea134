"""What the benchmarks share beyond the machine: a free loopback port, the app on uvicorn in a
thread of the benchmark's own process, and the closing OK/MISSED lines.

Imported as ``bench.serving`` (the scripts put the repository root on ``sys.path``) or as
``serving`` (``python bench/x.py`` puts ``bench/`` there)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_in_thread(app: Any, *, loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
                    http: str = "h11") -> tuple[Any, threading.Thread, str]:
    """``app`` on uvicorn in a daemon thread; returns ``(server, thread, base URL)`` once it listens.

    The thread's loop is made here (``loop_factory``): uvicorn installs its loop policy only in
    ``run()``, which a thread does not call."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                                           http=http, backlog=4096))

    def run() -> None:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(server.serve())

    thread = threading.Thread(target=run, name="bench-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    return server, thread, f"http://127.0.0.1:{port}"


def verdict(ok: bool) -> str:
    return "OK" if ok else "MISSED"


def report(lines: Sequence[tuple[bool, str]]) -> int:
    """Print one ``OK``/``MISSED`` line per target; the exit code is 1 when any was missed."""
    print()
    for ok, text in lines:
        print(f"{verdict(ok):6} {text}")
    return 0 if all(ok for ok, _ in lines) else 1
