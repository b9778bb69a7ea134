"""One cycle in flight: its stop flag, its sessions, its tier gate, the task running it.

Why a type of its own: a node runs up to ``TIEROPS_MAX_CONCURRENT`` cycles at once, so what used to
be the supervisor's single "current cycle" (the stop flag, the live sessions, the first session's
future) belongs to each cycle. Stop on a session halts its own cycle only; a shutdown halts them all.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from app.store.rows import ChainLink
from app.supervisor.halt import Halt
from app.supervisor.session import SessionHandle
from app.supervisor.tier_gate import TierGate

log = logging.getLogger(__name__)

__all__ = ["Run"]


@dataclass(eq=False)
class Run:
    cycle: int  # this process's count of claimed cycles: the ``cycle`` field of its log lines
    what: str  # e.g. "alert cycle from tier 1"
    scheduled: bool  # the schedule's: two of them never overlap
    first: asyncio.Future[int]  # resolved with the cycle's first session id (POST /runs answers with it)
    gate: TierGate
    halt: Halt = field(default_factory=Halt)
    handles: dict[int, SessionHandle] = field(default_factory=dict)  # its live sessions
    task: asyncio.Task[list[ChainLink]] | None = None  # when started in the background
