"""Stop means stop: once a stop of the chain or a shutdown is requested, no new CLI starts.

Why a module of its own: killing the running session's process group (``SessionHandle.stop``)
stops only what runs now. A stop that lands between two tiers — the session finished, the chain
is deciding — used to be followed by the next, more privileged tier, whose CLI then ran until the
shutdown's grace ended. A :class:`Halt` is the cycle's own flag: the supervisor sets it on Stop
(``Supervisor.stop_session``, ``stop_all``) and on shutdown, the chain reads it before it
escalates, and ``run_tier_session`` checks it before anything of a new session exists, raising
:class:`StopRequested`. It is never cleared: a new cycle gets a new one, and a supervisor that is
shutting down starts no cycle at all.
"""

from __future__ import annotations

import logging

from app.errors import CycleBusy

log = logging.getLogger(__name__)

SHUTTING_DOWN = "the supervisor is shutting down"


class StopRequested(CycleBusy):
    """A session was not started because a stop or a shutdown was requested; the message says
    why. A refusal like :class:`CycleBusy` (409 for the API, a skipped scheduled
    cycle), and, for an escalation, why the escalating session needs a human."""


class Halt:
    """The stop flag of one cycle. :meth:`request` keeps the first reason."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def request(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
            log.debug("no new session starts: %s", reason)

    def check(self) -> None:
        """Raise :class:`StopRequested` (its message: the reason) when a stop was requested."""
        if self.reason is not None:
            raise StopRequested(self.reason)
