"""A bare Server-Sent Events response for the live session stream.

:class:`EventStream` writes the bytes it is given straight to the ASGI ``send``: sse-starlette's
``EventSourceResponse`` spent ~47 % of the event loop's busy time around each write with 100
clients (an anyio task group per response, a cancel scope per send; ARCHITECTURE.md, "Live
view"). What it keeps, without a timer per client or per write:

* **Dropping a client that stops reading** (``send_timeout``): one shared :class:`Ticker` per
  event loop looks at every open stream once a second and cancels the request task of a stream
  whose write has waited longer; the producer's ``finally`` runs (the subscription is closed).
* **Pings while idle**: the same tick calls the producer's ``wake`` hook for a stream that has
  written nothing for a second; the producer then calls :meth:`EventStream.ping_if_due`.
* **Server shutdown**: uvicorn waits for open responses, so the ticker ends every stream once
  uvicorn has been asked to exit (the browser reconnects with ``Last-Event-ID``).
* **A client that goes away** is noticed by one task per stream waiting on ``receive()`` for
  ``http.disconnect`` (uvicorn ignores writes to a closed connection rather than failing them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
import weakref
from collections.abc import Awaitable, Callable

from sse_starlette.sse import AppStatus
from starlette.types import Receive, Scope, Send

log = logging.getLogger(__name__)

PING_FRAME = b": ping\r\n\r\n"
TICK_SECONDS = 1.0
HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),  # nginx: do not buffer the stream
]


class Ticker:
    """One periodic task per event loop for every open :class:`EventStream`; it exits when the
    last stream closes and starts again with the next one."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.streams: set[EventStream] = set()
        self.task: asyncio.Task[None] | None = None

    def add(self, stream: EventStream) -> None:
        self.streams.add(stream)
        if self.task is None:
            self.task = self.loop.create_task(self._run(), name="tierops-sse-ticker")

    def discard(self, stream: EventStream) -> None:
        self.streams.discard(stream)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            if not self.streams:  # nothing awaited between this check and the exit: add() restarts us
                self.task = None
                return
            now = time.monotonic()
            closing = shutting_down()
            for stream in list(self.streams):
                try:
                    if closing:  # uvicorn waits for open responses before it stops: end ours
                        stream._close("shutdown")
                    else:
                        stream.tick(now)
                except Exception:  # one stream's hook must not stop the pings of the others
                    log.exception("sse: tick failed")


def shutting_down() -> bool:
    """Whether uvicorn was asked to stop: sse-starlette's flag (its import wraps uvicorn's
    ``Server.handle_exit``) or the ``should_exit`` of the uvicorn server whose signal handler is
    installed (the same two sources sse-starlette's own streams watch)."""
    if AppStatus.should_exit:
        return True
    handler = signal.getsignal(signal.SIGTERM)
    server = getattr(handler, "__self__", None)
    return bool(getattr(server, "should_exit", False))


_tickers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Ticker] = weakref.WeakKeyDictionary()


def ticker() -> Ticker:
    loop = asyncio.get_running_loop()
    found = _tickers.get(loop)
    if found is None:
        found = _tickers[loop] = Ticker(loop)
    return found


class EventStream:
    """An ASGI response: ``produce(stream)`` writes encoded SSE frames with :meth:`write`; when it
    returns the response ends. ``wake`` is called (from the ticker) when the stream has been quiet
    for a second: it should make ``produce`` call :meth:`ping_if_due` soon (e.g. put a marker in
    the queue ``produce`` waits on)."""

    def __init__(self, produce: Callable[[EventStream], Awaitable[None]], *, ping: float, send_timeout: float,
                 wake: Callable[[], None] | None = None, close: Callable[[], None] | None = None) -> None:
        self.produce = produce
        self.close = close  # called however the response ends (e.g. to unsubscribe), even before produce ran
        self.ping = ping
        self.send_timeout = send_timeout
        self.wake = wake
        self.last_write = time.monotonic()
        self.sending_since: float | None = None
        self.closed_by: str | None = None  # "disconnect", "send timeout", "shutdown": why the task was cancelled
        self._send: Send | None = None
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._send = send
        self._task = asyncio.current_task()
        tick = ticker()
        listener = None
        try:
            await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
            self.last_write = time.monotonic()
            tick.add(self)
            listener = asyncio.get_running_loop().create_task(self._listen(receive))
            await self.produce(self)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if self.closed_by is None:  # the server is shutting down: not ours to swallow
                raise
            if self._task is not None:
                self._task.uncancel()
            if self.closed_by == "send timeout":
                log.warning("sse: dropped a client that stopped reading (%s s without progress)", self.send_timeout)
            elif self.closed_by == "shutdown":  # end the body properly if the client still reads
                with contextlib.suppress(TimeoutError, OSError):
                    async with asyncio.timeout(1):
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            tick.discard(self)
            if listener is not None:
                listener.cancel()
            if self.close is not None:
                self.close()

    async def _listen(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self._close("disconnect")
                return

    def _close(self, why: str) -> None:
        if self.closed_by is None and self._task is not None and not self._task.done():
            self.closed_by = why
            self._task.cancel()

    async def write(self, data: bytes) -> None:
        """One ASGI send of ``data`` (whole SSE frames); watched by the ticker for ``send_timeout``."""
        if self._send is None:
            raise RuntimeError("EventStream.write before the response started")
        self.sending_since = time.monotonic()
        await self._send({"type": "http.response.body", "body": data, "more_body": True})
        self.sending_since = None
        self.last_write = time.monotonic()

    async def ping_if_due(self) -> None:
        if time.monotonic() - self.last_write >= self.ping:
            await self.write(PING_FRAME)

    def tick(self, now: float) -> None:
        since = self.sending_since
        if since is not None:
            if now - since > self.send_timeout:
                self._close("send timeout")
        elif now - self.last_write >= TICK_SECONDS and self.wake is not None:
            self.wake()


def frame(data: str, event: str, id: str | None = None) -> bytes:
    """One encoded SSE frame; ``data`` must be a single line (JSON from ``json.dumps`` is)."""
    head = f"id: {id}\r\nevent: {event}\r\n" if id is not None else f"event: {event}\r\n"
    return f"{head}data: {data}\r\n\r\n".encode()
