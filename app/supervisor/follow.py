"""Following sessions another process runs, so one live view serves them all.

Why: a live page replays a session's lines from the database, then waits on the in-process
:class:`~app.supervisor.hub.Hub`, which only this process's recorders publish to; a session that
``tierops run`` or ``tierops supervise`` runs on the same database would freeze its page. The
:class:`Follower` tails the database for such *foreign* sessions (those ``Supervisor.owns`` does
not) and publishes what it finds exactly as a recorder does, plus ``session_started`` and
``session_finished``. What it deliberately does: nothing while nobody subscribes (no query); else
one indexed query every :data:`POLL_S` s while it follows a session, every :data:`DISCOVER_S` s
otherwise, and lines read only for a session whose committed ``line_count`` moved. No gap, no
duplicate: a session is followed from its newest line when first seen and its subscribers get one
:data:`CATCH_UP` item (each stream replays what it has not sent; repeats are dropped by ``seq``).
A foreign session ``running`` while no process holds the cycle lock lost its process: at most every
:data:`ABANDONED_CHECK_S` s the follower asks the supervisor to sweep (``Supervisor.sweep_abandoned``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Protocol

from app.store import activity, processes
from app.store.db import Database
from app.store.sessions import session_status
from app.supervisor.hub import SESSION_FINISHED, SESSION_STARTED, Hub

log = logging.getLogger(__name__)

POLL_S = 0.2  # how often followed sessions are polled while a page watches (a live page wants 100-250 ms)
DISCOVER_S = 1.0  # how often, while pages watch but nothing is followed, a foreign session is looked for
ABANDONED_CHECK_S = 5.0  # how often a foreign session without a cycle lock holder triggers a sweep
ERROR_BACKOFF_S = 2.0  # after a failed poll (storage trouble), before the next one
READ_BATCH = 500  # lines read per query
CATCH_UP = "catch_up"  # a hub item kind: replay from the database after your last line (no data)


class Owner(Protocol):
    """What the follower needs of the supervisor (``app/supervisor/scheduler.py``)."""

    def owns(self, pk: int, cli_pid: int | None) -> bool: ...

    async def sweep_abandoned(self) -> int: ...


@dataclass
class _Tail:
    seq: int  # the last line published
    count: int  # the session's line_count when last read


class Follower:
    def __init__(self, db: Database, hub: Hub, owner: Owner, *, period: float = POLL_S) -> None:
        self.db = db
        self.hub = hub
        self.owner = owner
        self.period = period
        self._tails: dict[int, _Tail] = {}
        self._active = False  # polled at least once since the last time nobody subscribed
        self._last_sweep = 0.0
        self._last_poll = -DISCOVER_S  # monotonic time of the last poll
        self.polls = 0  # database polls made (tests assert there are none while nobody watches)

    @property
    def following(self) -> list[int]:
        """The foreign sessions followed now."""
        return sorted(self._tails)

    async def run(self) -> None:
        """Poll every ``period`` s until cancelled (``app.tasks.spawn`` in the server's lifespan)."""
        while True:
            try:
                await self.step()
            except Exception:  # storage trouble now must not end the follower
                log.exception("following other processes' sessions failed; trying again in %.0f s", ERROR_BACKOFF_S)
                await asyncio.sleep(ERROR_BACKOFF_S)
            await asyncio.sleep(self.period)

    async def step(self) -> None:
        """One poll: publish what foreign sessions wrote since the last one."""
        if self.hub.subscriber_count == 0:
            self._tails.clear()  # nobody to tell: start afresh (and catch up) when a page opens
            self._active = False
            return
        now = time.monotonic()
        if self._active and not self._tails and now - self._last_poll < DISCOVER_S:
            return  # nothing followed: look for a foreign session once a second only
        first, self._active = not self._active, True
        self._last_poll = now
        self.polls += 1
        live = await processes.live_sessions(self.db)
        running = {s.id for s in live}
        foreign = [s for s in live if not self.owner.owns(s.id, s.cli_pid)]
        foreign_ids = {s.id for s in foreign}
        for pk in [pk for pk in self._tails if pk not in foreign_ids]:
            tail = self._tails.pop(pk)
            if pk not in running:  # it ended (a session this process took over needs nothing more)
                await self._finish(pk, tail)
        for s in foreign:
            known = self._tails.get(s.id)
            if known is None:
                self._tails[s.id] = _Tail(await activity.last_seq(self.db, s.id), s.line_count)
                self.hub.notify(s.id, CATCH_UP)  # each stream replays what it has not sent itself
                if not first:
                    self.hub.notify(s.id, SESSION_STARTED, tier=s.tier)
                log.debug("following session %d of another process", s.id, extra={"session": s.id})
            elif s.line_count != known.count:
                known.count = s.line_count
                await self._publish(s.id, known)
        if foreign and time.monotonic() - self._last_sweep >= ABANDONED_CHECK_S:
            self._last_sweep = time.monotonic()
            if await self.owner.sweep_abandoned():
                log.info("sessions whose process is gone were marked interrupted")

    async def _publish(self, pk: int, tail: _Tail) -> None:
        while True:
            rows = await activity.lines_after(self.db, pk, tail.seq, READ_BATCH)
            if rows:
                tail.seq = rows[-1]["seq"]
                self.hub.publish(pk, rows)
            if len(rows) < READ_BATCH:
                return

    async def _finish(self, pk: int, tail: _Tail) -> None:
        await self._publish(pk, tail)  # lines committed before the end
        status = await session_status(self.db, pk)
        self.hub.notify(pk, SESSION_FINISHED, status=status)
        log.debug("session %d of another process ended: %s", pk, status, extra={"session": pk})
