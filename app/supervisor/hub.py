"""In-process publish/subscribe of live activity, for the dashboard's SSE streams (issue #4).

Why bounded queues: ingestion must never wait for a browser. A subscriber whose queue is full is
marked lagged, its queue is emptied and it receives one ``RESYNC`` item: it then replays what it
missed from the database (activity rows carry their sequence numbers) and carries on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

RESYNC = {"type": "resync"}


@dataclass(eq=False)
class Subscription:
    hub: Hub
    session_pk: int | None  # None: every session
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(maxsize=1000))
    lagged: int = 0

    async def get(self) -> dict:
        return await self.queue.get()

    def close(self) -> None:
        self.hub._subs.discard(self)

    def _offer(self, item: dict) -> None:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            self.lagged += 1
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(RESYNC)


class Hub:
    """``prepare`` runs once per published row (not once per subscriber): the dashboard uses it to
    render and encode each line's SSE event a single time however many browsers watch."""

    def __init__(self, queue_size: int = 1000, prepare: Callable[[dict], dict] | None = None) -> None:
        self.queue_size = queue_size
        self.prepare = prepare
        self._subs: set[Subscription] = set()

    @property
    def subscriber_count(self) -> int:
        return len(self._subs)

    def subscribe(self, session_pk: int | None = None) -> Subscription:
        sub = Subscription(self, session_pk, asyncio.Queue(maxsize=self.queue_size))
        self._subs.add(sub)
        return sub

    def publish(self, session_pk: int, rows: list[dict]) -> None:
        """Activity rows just committed for ``session_pk``. Never blocks."""
        subs = [s for s in self._subs if s.session_pk is None or s.session_pk == session_pk]
        if not subs:
            return
        for row in rows:
            item = {**row, "type": "activity", "line_type": row.get("type")}
            if self.prepare is not None:
                item = self.prepare(item)
            for sub in subs:
                sub._offer(item)

    def notify(self, session_pk: int, kind: str, **data: Any) -> None:
        """A session-level change (started, finished, escalated)."""
        for sub in list(self._subs):
            if sub.session_pk is None or sub.session_pk == session_pk:
                sub._offer({"type": kind, "session_pk": session_pk, **data})
