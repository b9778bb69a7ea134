"""What a tier session waits for before it starts: the node it may run on, and its services.

Why: with several cycles at once (``TIEROPS_MAX_CONCURRENT``, several nodes), two tiers that may act
(2 and 3) must never work on the same service at the same time, and a tier pinned by
``TIEROPS_RUNS_ON`` must start only on a node with the label. A chain asks this gate before each
tier: :meth:`TierGate.needs_elsewhere` says when this node may not run it (the chain then queues the rest
of itself for a node that may), and :meth:`TierGate.hold` holds the services' locks
(``store/locks.py``) for an acting tier's session (a chain's, or a chat turn's), waiting while
another run holds one, renewing them while the session works and giving them up when it ends.
Tier 1 and dry runs only read: they take none.
A tier whose incidents name no service takes the whole inventory (``service:*``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Sequence

from app.config import Settings
from app.logs import oneline
from app.placement import labels_of, parse_runs_on
from app.store import incidents as incident_store
from app.store import locks
from app.store.db import Database
from app.supervisor.halt import Halt, StopRequested

log = logging.getLogger(__name__)

__all__ = ["ACTING_TIER", "TierGate"]

ACTING_TIER = 2  # tiers from here on may change things: one at a time per service
WAIT_POLL_S = 0.5  # seconds between looks at a service lock another run holds


class TierGate:
    """The gate of one run (one cycle): ``holder`` names it in the locks it takes."""

    def __init__(self, db: Database, settings: Settings, holder: str, halt: Halt) -> None:
        self.db = db
        self.settings = settings
        self.holder = holder
        self.halt = halt
        self.placement = parse_runs_on(settings.runs_on)
        self.labels = labels_of(settings.node_labels)

    @staticmethod
    def holder_name(node_id: str | None, what: str) -> str:
        """A lock holder: its node (or host and pid) and what runs there (``cycle-3``, ``chat-12``)."""
        return f"{node_id or f'{socket.gethostname()}:{os.getpid()}'}/{what}"

    async def services(self, incident_ids: Sequence[int]) -> list[str | None]:
        return [i["service"] for i in await incident_store.get_incidents(self.db, incident_ids, fresh=True)]

    async def needs_elsewhere(self, tier: int, incident_ids: Sequence[int]) -> frozenset[str] | None:
        """The labels ``tier`` on these incidents needs when this node lacks one (None: it may run here)."""
        if not self.placement.tiers and not self.placement.services:
            return None
        needs = self.placement.needs(tier, await self.services(incident_ids))
        return None if needs <= self.labels else needs

    @contextlib.asynccontextmanager
    async def hold(self, tier: int, incident_ids: Sequence[int], *, dry_run: bool = False) -> AsyncIterator[None]:
        """Around one tier session: for an acting tier, its services' locks, taken (waiting while
        another run holds one; a Stop ends the wait with StopRequested) and renewed until it ends.
        A dry run only reads: it takes none."""
        if tier < ACTING_TIER or dry_run:
            yield
            return
        names = locks.service_lock_names(await self.services(incident_ids))
        lease = self.settings.lease_seconds
        told = False
        while (other := await locks.take_locks(self.db, names, self.holder, lease)) is not None:
            if self.halt.reason is not None:
                raise StopRequested(self.halt.reason)
            if not told:
                log.info("tier %d waits for %s: %s works on it", tier, ", ".join(names), other)
                told = True
            await asyncio.sleep(WAIT_POLL_S)
        renewing = asyncio.create_task(self._renew(lease), name=f"tierops-locks-{self.holder}")
        try:
            yield
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
            try:
                await locks.release_locks(self.db, self.holder)
            except Exception as exc:  # they expire on their own within a lease
                log.warning("releasing the service locks of %s failed (%s); they expire within %g s", self.holder,
                            oneline(exc), lease)

    async def _renew(self, lease: float) -> None:
        while True:
            await asyncio.sleep(lease / 3)
            try:
                await locks.renew_locks(self.db, self.holder, lease)
            except Exception as exc:
                log.warning("renewing the service locks of %s failed: %s", self.holder, oneline(exc))
