"""Starting a cycle from outside the schedule, as the modules that do it see the supervisor.

Why a module of its own: alerts (``alerts.py``) and the end of maintenance windows
(``windows.py``) start or queue cycles, and the supervisor (``scheduler.py``) runs their queue
worker and watch. Typed against :class:`CycleStarter` — what they use of the Supervisor — rather
than the Supervisor itself, they import nothing of the scheduler, so no import circle exists.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from app.config import Settings
from app.notify.messages import NoticeSink
from app.output.spec import OutputSpec
from app.store.db import Database
from app.store.rows import ChainLink, SessionRow

log = logging.getLogger(__name__)

FIRST_SESSION_WAIT = 10.0  # seconds start_cycle waits for the cycle's first session row


@dataclass(frozen=True)
class CycleStart:
    """A cycle started in the background: its first session (None if it has none yet, or
    finished without one) and the task running it."""

    session_pk: int | None
    task: asyncio.Task[list[ChainLink]]


class CycleStarter(Protocol):
    """What alerts and the end of maintenance windows need of the supervisor
    (``scheduler.Supervisor``): its database, settings and notices, the run queue's wake-up, whether
    a cycle runs or another may start, and the one run-start path."""

    @property
    def db(self) -> Database: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def notifier(self) -> NoticeSink: ...

    @property
    def queue_wake(self) -> asyncio.Event: ...

    @property
    def busy(self) -> bool: ...

    @property
    def has_capacity(self) -> bool: ...

    async def start_cycle(self, *, tier: int = ..., prompt: str | None = ..., trigger: str = ...,
                          wait: float = ..., spec: OutputSpec | None = ..., dry_run: bool = ...,
                          incidents: Sequence[int] = ..., parent: SessionRow | None = ...,
                          handoff: str | None = ..., handoff_incidents: str = ...) -> CycleStart: ...
