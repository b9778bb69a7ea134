"""This process as one node of several sharing a store: its heartbeat, and whether it leads.

Why: any number of ``tierops serve`` processes may share one database (PostgreSQL across hosts,
or SQLite on one); exactly one of them must run the schedule, the approvals' expiry, the
notification sender and the prune. The leader is whoever holds the ``leader`` lease
(``store/nodes.py``: taken and renewed in a write transaction, against the database's clock).
A node renews every third of ``TIEROPS_LEASE_SECONDS``; it counts itself leader only until its
last successful renewal, by its own monotonic clock, plus the lease minus a margin: a leader that
cannot reach the store (a network cut, the database down) stops leading *before* another node can
take the lease, so two nodes never lead at once. The leader also ends what dead nodes left: their
running sessions (a node not seen for a lease) are marked interrupted, once the leader itself has
reached the store for two leases (after an outage of the store every node looks unseen). Every node serves the
dashboard and the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
import time
import weakref
from collections.abc import Callable
from pathlib import Path

from app import __version__
from app.clock import shift
from app.logs import oneline
from app.store import nodes as node_store
from app.store import processes, run_queue
from app.store.db import Database

log = logging.getLogger(__name__)

__all__ = ["LEADER", "Node", "current"]

LEADER = "leader"
# The node of each open store, once started: the sessions recorded there name it. Keyed by the
# store, not one per process: tests (and tools) may hold several stores, each with its own node.
_by_store: weakref.WeakKeyDictionary[Database, Node] = weakref.WeakKeyDictionary()
MARGIN = 0.25  # of the lease: a leader that could not renew stops this long before the lease ends


class Node:
    def __init__(self, db: Database, *, lease_s: float, state_dir: Path, labels: str = "",
                 running: Callable[[], int] | None = None) -> None:
        self.db = db
        self.lease_s = lease_s
        self.labels = labels
        self.host = socket.gethostname()
        # The same after a restart (the host and the state directory): a node that comes back finds
        # its own sessions left running and ends them at once, as a lone server always did.
        self.id = f"{self.host}:{hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]}"
        self._running = running
        self._leader_until = 0.0  # monotonic
        self.led_since: float | None = None
        self.became_leader = asyncio.Event()
        self.on_lead: list[Callable[[], None]] = []  # called when this node comes to lead
        self.storage_error: str | None = None
        self._healthy_since: float | None = None  # monotonic: heartbeats succeed since then

    @property
    def is_leader(self) -> bool:
        return time.monotonic() < self._leader_until

    async def start(self) -> None:
        _by_store[self.db] = self
        await node_store.register(self.db, self.id, host=self.host, pid=os.getpid(), version=__version__,
                                  labels=self.labels)
        log.info("node %s (host %s) joined; lease %g s", self.id, self.host, self.lease_s)

    async def wait_leader(self) -> None:
        """Until this node leads (at once when it does)."""
        while not self.is_leader:
            self.became_leader.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.became_leader.wait(), self.lease_s / 3)

    async def tick(self) -> None:
        """One heartbeat and lease renewal (and, leading, the end of dead nodes' sessions)."""
        asked = time.monotonic()
        running = int(self._running()) if self._running is not None else 0
        await node_store.heartbeat(self.db, self.id, running)
        lease = await node_store.take_lease(self.db, LEADER, self.id, self.lease_s)
        self.storage_error = None
        if self._healthy_since is None:
            self._healthy_since = asked
        was = self.is_leader
        if lease.held:
            self._leader_until = asked + self.lease_s * (1 - MARGIN)
            if not was:
                self.led_since = time.monotonic()
                log.warning("node %s leads now (lease until %s)", self.id, lease.expires_at)
                self.became_leader.set()
                for callback in self.on_lead:
                    callback()
            # Only after two leases of heartbeats of its own: after an outage of the store every node
            # looks unseen until it reconnects, and a live node's sessions must not be ended.
            if asked - self._healthy_since >= 2 * self.lease_s:
                await self._end_dead_nodes(lease.now)
        elif was:
            self._leader_until = 0.0
            log.warning("node %s no longer leads: %s holds the lease", self.id, lease.holder)

    async def _end_dead_nodes(self, now: str) -> None:
        before = shift(now, -self.lease_s)
        if returned := await run_queue.requeue_claims_of(self.db, await node_store.dead_nodes(self.db, before)):
            log.warning("%d queued run(s) a dead node had claimed are queued again", returned)
        for pk, node_id in await node_store.abandoned_sessions(self.db, before):
            reason = f"its node {node_id} stopped (not seen for {self.lease_s:g} s)"
            if await processes.mark_interrupted(self.db, pk, reason):
                log.warning("session %d marked interrupted: %s", pk, reason, extra={"session": pk})

    async def run(self) -> None:
        """Heartbeats until cancelled; storage trouble is logged once per outage and never ends it."""
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._healthy_since = None
                if self.storage_error is None:
                    log.warning("node %s: heartbeat failed (%s); %s", self.id, oneline(exc),
                                "it stops leading before its lease ends" if self.is_leader else "not leading")
                self.storage_error = oneline(exc)
            if not self.is_leader and self.led_since is not None:
                self.led_since = None
                log.warning("node %s stopped leading (its lease could not be renewed)", self.id)
            await asyncio.sleep(self.lease_s / 3)

    async def stop(self) -> None:
        """A clean shutdown: give the lease up at once and say so (another node leads without waiting)."""
        self._leader_until = 0.0
        if _by_store.get(self.db) is self:
            del _by_store[self.db]
        with contextlib.suppress(Exception):
            await node_store.release_lease(self.db, LEADER, self.id)
            await node_store.mark_stopped(self.db, self.id)


def current(db: Database) -> Node | None:
    """The node started on store ``db`` (None: none, as for ``tierops run``)."""
    return _by_store.get(db)
