"""The dead-man heartbeat: an outside service hears from every cycle, so a monitor
that stopped — crashed, hung, its host gone — is noticed by something that is not itself.

Convention of healthchecks.io (and Uptime Kuma's push monitors, Cronitor, …): ``GET URL/start``
when a cycle starts, ``GET URL`` when it completed, ``GET URL/fail`` when it failed (what counts
as failed is the scheduler's decision: see ``Supervisor._cycle_finished``).

What it does differently from a plain request in the cycle:

* **Never in the cycle's way.** Each call only queues the ping and returns; one background task
  sends the queued pings in order (a start is never overtaken by its own end), each GET in a
  daemon thread with a 10 s timeout and 2 retries. A hanging or dead receiver costs the cycle
  nothing, and a process that exits is not held by a request in flight.
* **Never raises.** A failed ping is logged (WARNING) with the path it went to and the error,
  never the URL: its path is the secret that lets anyone ping.
* Standard library only (``urllib``): no dependency for one GET.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import urllib.error
import urllib.request
from urllib.parse import urlsplit, urlunsplit

from app.config import Settings
from app.logs import oneline
from app.notify.urls import UrlMask
from app.tasks import spawn

log = logging.getLogger(__name__)

__all__ = ["Heartbeat"]

TIMEOUT = 10.0  # seconds per GET
RETRIES = 2  # more tries after a failed GET
RETRY_DELAY = 1.0  # seconds between tries
CLOSE_WAIT = 3.0  # seconds close() waits for queued pings
QUEUE_MAX = 20  # pings waiting (a receiver down for many cycles drops the oldest)


class Heartbeat:
    """``Heartbeat(settings)``; without ``TIEROPS_HEARTBEAT_URL`` every call does nothing."""

    def __init__(self, settings: Settings, *, timeout: float = TIMEOUT, retries: int = RETRIES,
                 retry_delay: float = RETRY_DELAY) -> None:
        secret = settings.heartbeat_url.get_secret_value().strip() if settings.heartbeat_url is not None else ""
        self.url = secret or None
        self.timeout = timeout
        self.retries = retries
        self.retry_delay = retry_delay
        self._mask = UrlMask([secret] if secret else [])
        self._queue: asyncio.Queue[str] | None = None
        self._task: asyncio.Task[None] | None = None
        self.last_error: str | None = None

    @property
    def configured(self) -> bool:
        return self.url is not None

    async def start_cycle(self) -> None:
        self._queue_ping("start")

    async def cycle_ok(self) -> None:
        self._queue_ping("")

    async def cycle_failed(self) -> None:
        self._queue_ping("fail")

    async def close(self) -> None:
        """Wait at most :data:`CLOSE_WAIT` s for queued pings, then stop."""
        task, self._task = self._task, None
        if task is None or self._queue is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), CLOSE_WAIT)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        self._queue = None

    def _queue_ping(self, suffix: str) -> None:
        if self.url is None:
            return
        try:
            if self._queue is None:
                self._queue = asyncio.Queue(QUEUE_MAX)
            if self._task is None or self._task.done():
                self._task = spawn(self._sender(self._queue), "tierops-heartbeat")
            if self._queue.full():  # the receiver has been unreachable for many cycles: newest wins
                self._queue.get_nowait()
                self._queue.task_done()
            self._queue.put_nowait(suffix)
        except Exception as exc:  # never the cycle's problem
            log.warning("heartbeat %s not queued: %s: %s", _what(suffix), type(exc).__name__, oneline(exc))

    async def _sender(self, queue: asyncio.Queue[str]) -> None:
        while True:
            suffix = await queue.get()
            try:
                await self._ping(suffix)
            finally:
                queue.task_done()

    async def _ping(self, suffix: str) -> None:
        if self.url is None:
            return
        url = _with_suffix(self.url, suffix)
        error = ""
        for attempt in range(1 + self.retries):
            if attempt:
                await asyncio.sleep(self.retry_delay)
            error = await _get_in_daemon_thread(url, self.timeout)
            if not error:
                self.last_error = None
                log.debug("heartbeat %s sent", _what(suffix))
                return
        self.last_error = self._mask(error)
        log.warning("heartbeat %s failed after %d tries: %s", _what(suffix), 1 + self.retries, self.last_error)


def _what(suffix: str) -> str:
    return f"/{suffix}" if suffix else "(cycle ok)"


def _with_suffix(url: str, suffix: str) -> str:
    """``https://hc-ping.com/UUID`` + ``start`` → ``https://hc-ping.com/UUID/start`` (a query kept)."""
    if not suffix:
        return url
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + suffix))


def _get(url: str, timeout: float) -> str:
    """One GET; "" when answered 2xx, else the error (no URL in it)."""
    if urlsplit(url).scheme not in ("http", "https"):
        return "TIEROPS_HEARTBEAT_URL must be an http:// or https:// URL"
    request = urllib.request.Request(url, method="GET", headers={"User-Agent": "tierops-heartbeat"})  # noqa: S310 - http(s) only
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - http(s) only
            response.read(1024)
            return ""
    except urllib.error.HTTPError as exc:
        with contextlib.suppress(Exception):
            exc.close()
        return f"HTTP {exc.code} {exc.reason}"
    except urllib.error.URLError as exc:
        return f"{type(exc.reason).__name__}: {exc.reason}" if isinstance(exc.reason, BaseException) else str(exc.reason)
    except (OSError, ValueError) as exc:  # a timeout while reading, a malformed URL
        return f"{type(exc).__name__}: {exc}"


async def _get_in_daemon_thread(url: str, timeout: float) -> str:
    """:func:`_get` in a daemon thread: unlike the default executor, a process that exits
    (``tierops run`` after its cycle) does not wait for a request still hanging."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str] = loop.create_future()

    def run() -> None:
        try:
            result = _get(url, timeout)
        except Exception as exc:  # never leave the future unresolved
            result = f"{type(exc).__name__}: {exc}"
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(_resolve, done, result)

    threading.Thread(target=run, name="tierops-heartbeat-get", daemon=True).start()
    return await done


def _resolve(future: asyncio.Future[str], value: str) -> None:
    if not future.done():
        future.set_result(value)
