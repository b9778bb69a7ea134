"""In-process publish/subscribe of live activity, for the dashboard's SSE streams.

Why bounded queues: ingestion must never wait for a browser. A subscriber whose queue is full is
marked lagged, its queue is emptied and it receives one :data:`RESYNC` item: it then replays what
it missed from the database (activity rows carry their sequence numbers) and carries on.

Every queued item is a :class:`HubItem`: one shape for stored lines, session changes and the
resync marker, so a consumer dispatches on ``item.kind`` and never guesses which keys a dict has.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.store.rows import ActivityRow

log = logging.getLogger(__name__)

ACTIVITY = "activity"                  # a stored stream line: ``row`` (and ``sse`` when prepared)
RESYNC_KIND = "resync"                 # the subscriber lagged: replay from the database
SESSION_STARTED = "session_started"    # ``data``: tier
SESSION_FINISHED = "session_finished"  # ``data``: status
TICK_KIND = "tick"                     # nothing happened for a while: time for a ping / an idle check


@dataclass(frozen=True, slots=True)
class HubItem:
    kind: str
    session_pk: int | None
    row: ActivityRow | None = None  # the stored line, for ``activity`` items
    data: dict[str, Any] = field(default_factory=dict)  # what ``notify`` was given
    sse: bytes | None = None  # the line's encoded SSE frame, made once by the hub's ``prepare``


RESYNC = HubItem(RESYNC_KIND, None)
TICK = HubItem(TICK_KIND, None)


class Inbox:
    """A bounded FIFO for one consumer: ``asyncio.Queue``'s interface as the hub and the streams use
    it (``put_nowait`` raising ``QueueFull``, ``get``, ``get_nowait``, ``empty``, ``qsize``) plus
    :meth:`drain`, without its task accounting and putter/getter bookkeeping. Why: at 100
    subscribers every published row is a put per subscriber, and a stream takes everything queued
    at once (one write), so both ends are on the fan-out's hot path."""

    __slots__ = ("_items", "_waiter", "maxsize")

    def __init__(self, maxsize: int = 1000) -> None:
        self.maxsize = maxsize
        self._items: deque[HubItem] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def qsize(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items

    def put_nowait(self, item: HubItem) -> None:
        if 0 < self.maxsize <= len(self._items):
            raise asyncio.QueueFull
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def get_nowait(self) -> HubItem:
        if not self._items:
            raise asyncio.QueueEmpty
        return self._items.popleft()

    def drain(self) -> list[HubItem]:
        items = list(self._items)
        self._items.clear()
        return items

    async def wait(self) -> None:
        """Until something is queued (at once if something is)."""
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def get(self) -> HubItem:
        await self.wait()
        return self._items.popleft()


@dataclass(eq=False)
class Subscription:
    hub: Hub
    session_pk: int | None  # None: every session
    queue: Inbox = field(default_factory=Inbox)
    lagged: int = 0

    async def get(self) -> HubItem:
        return await self.queue.get()

    def close(self) -> None:
        self.hub._subs.discard(self)

    def poke(self) -> None:
        """Wake the consumer with a :data:`TICK` unless something is queued already (then it wakes
        anyway). The SSE streams' pings and idle checks come from one shared periodic
        task calling this, instead of a timer per client per wait (``asyncio.timeout``)."""
        if self.queue.empty():
            self.queue.put_nowait(TICK)

    def _offer(self, item: HubItem) -> None:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            self.lagged += 1
            self.queue.drain()
            self.queue.put_nowait(RESYNC)


class Hub:
    """``prepare`` runs once per published row (not once per subscriber) and returns the bytes
    every subscriber sends: the dashboard renders and encodes each line's SSE event a single time
    however many browsers watch (bench/sse.py)."""

    def __init__(self, queue_size: int = 1000, prepare: Callable[[ActivityRow], bytes] | None = None) -> None:
        self.queue_size = queue_size
        self.prepare = prepare
        self._subs: set[Subscription] = set()

    @property
    def subscriber_count(self) -> int:
        return len(self._subs)

    def subscribe(self, session_pk: int | None = None) -> Subscription:
        sub = Subscription(self, session_pk, Inbox(self.queue_size))
        self._subs.add(sub)
        return sub

    def _subscribers(self, session_pk: int) -> list[Subscription]:
        return [s for s in self._subs if s.session_pk is None or s.session_pk == session_pk]

    def publish(self, session_pk: int, rows: list[ActivityRow]) -> None:
        """Activity rows just committed for ``session_pk``. Never blocks."""
        subs = self._subscribers(session_pk)
        if not subs:
            return
        for row in rows:
            item = HubItem(ACTIVITY, session_pk, row, sse=self._prepared(row))
            for sub in subs:
                sub._offer(item)

    def _prepared(self, row: ActivityRow) -> bytes | None:
        """``prepare(row)``; a failure is logged and leaves the encoding to each stream, never to
        the recorder that published (ingestion must not fail because of the dashboard)."""
        if self.prepare is None:
            return None
        try:
            return self.prepare(row)
        except Exception:
            log.exception("hub: preparing line %s of session %s failed", row.get("seq"), row.get("session_pk"))
            return None

    def notify(self, session_pk: int, kind: str, **data: Any) -> None:
        """A session-level change (``session_started``, ``session_finished``)."""
        item = HubItem(kind, session_pk, data=data)
        for sub in self._subscribers(session_pk):
            sub._offer(item)
