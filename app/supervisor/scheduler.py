"""When cycles run, and that only one runs at a time — across processes too.

* A cycle is one escalation chain (``chain.run_chain``). The first scheduled cycle starts at once,
  then every ``TIEROPS_INTERVAL`` seconds (measured start to start), or at the times of
  ``TIEROPS_CRON`` when set. With a checks file (issue #12) scheduled cycles start at tier 0 (the
  probe) and the file's ``interval``, when it has one, replaces ``TIEROPS_INTERVAL``. A cycle that overruns its slot delays the next one; none is stacked.
* Exclusivity: an asyncio lock inside the process and an ``flock`` on ``STATE_DIR/cycle.lock``
  between processes (``tierops run`` while ``tierops supervise`` works). A second trigger is
  refused at once with :class:`CycleBusy` naming the holder — it never waits, never runs two.
  Asking whether a cycle runs never takes the lock (:class:`_CycleLock`: an OFD record lock beside
  the ``flock`` that probes only test), so a probe cannot make a claim fail.
* Stop means stop (``halt.py``): :meth:`Supervisor.stop_session`, :meth:`Supervisor.stop_all` and
  :meth:`Supervisor.shutdown` set the running cycle's ``Halt`` besides killing the running CLI,
  so no later tier starts; after ``shutdown`` no cycle is claimed (:class:`StopRequested`).
* The sweep (issue #9 §4: no session row stays ``running`` unless its CLI is alive): at start,
  and again at the start of every cycle, each supervised session still ``running`` that is not
  one of this process's live sessions (``handles``) is ended ``interrupted``. Before its row is
  marked, a CLI it recorded (pid, process group, start time) that is still alive is killed —
  only when pid *and* start time match, so a recycled pid is never killed (on Linux the
  parent-death signal usually took it already; see ``runner``). At start it runs only when no
  other process holds the cycle lock, so a live ``tierops run`` is not touched; at a cycle's start
  this process holds the lock itself, so no other process can have a session running. Sessions
  whose folder is under another state dir (so under another cycle lock) are left alone.
* One view across processes (issue #14): :attr:`Supervisor.busy` ("Cycle running": overview,
  ``/metrics``, ``/healthz``) is true while *any* process holds the cycle lock, and
  :attr:`Supervisor.cycle_holder` names it (the holder the lock file records). The server follows
  other processes' sessions (``follow.py``, which uses :meth:`Supervisor.owns` and
  :meth:`Supervisor.sweep_abandoned`) and stops them (``remote_stop.py``).
* Approvals (issue #13): an approved escalation runs as a cycle of its own
  (:meth:`Supervisor.start_approved`, :meth:`Supervisor.run_approved`): the rest of the chain from
  the approved tier, the escalating session as parent. It takes the cycle lock like any cycle;
  while another cycle runs it is refused with :class:`CycleBusy` and the approval stays pending
  (the operator approves again later). Pending approvals past their time expire at the start of
  every cycle (and every 30 s in the server).
* Health (issue #13): every finished cycle updates ``last_cycle_at``, ``last_cycle_status`` and
  ``consecutive_failures`` (what ``/healthz`` reports, :meth:`Supervisor.health`) and pings the
  dead-man heartbeat (``heartbeat.py``: start, then ok or fail). A cycle *failed* when it raised (a
  bug, storage, a first tier that could not start) or the session it started with ended
  ``failed``: the check itself did not run. A cycle that ran its check and then needs attention,
  waits for an approval or escalated did its job (the chain's own notices say what it found). When
  ``TIEROPS_UNHEALTHY_AFTER`` cycles in a row failed, or one failed on a storage error, one
  critical "monitor unhealthy" notification goes out per episode, and an info "monitor healthy
  again" when a cycle succeeds after it.
* Skips are not failures: a cycle whose first tier may not start — the daily budget is spent, or
  the model tiers are paused because the API rejected the credentials (``credentials.py``) — is
  logged at WARNING and recorded as the last cycle with status ``skipped: why``; it pings the
  heartbeat's success URL (the monitor is alive), and neither counts towards
  ``TIEROPS_UNHEALTHY_AFTER`` nor resets it.
* Staleness (``/healthz``): with an interval, a cycle must finish within twice the period plus the
  longest tier timeout; with ``TIEROPS_CRON`` it is measured from when the next cycle was due after
  the last one (croniter), so a weekday-only or office-hours cron is not stale every weekend or
  night.

Log lines (issue #10: "the server logs nothing about cycles"): a cycle's start (trigger, tier)
and its end (status, sessions, cost, duration) at INFO, with ``cycle`` (this process's count) and
at the end ``chain`` as fields; a cycle stopped by a signal or shutdown at WARNING; a failed one is
logged once, by whoever started it (``run_forever``, the background task of ``start_cycle``; for
``tierops run`` the command's own error line). The sweep logs each session it marks (WARNING)
and how many it marked (INFO).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from app.clock import utcnow
from app.config import Settings
from app.errors import CycleBusy, StorageUnavailable
from app.logs import oneline
from app.notify import messages as notices
from app.notify.heartbeat import Heartbeat
from app.notify.sender import Notifier
from app.output.spec import OutputSpec
from app.output.validate import OutputValidator
from app.probe.inventory import InventoryError, load_inventory
from app.store import approvals as approval_store
from app.store import incidents as incident_store
from app.store import processes
from app.store import sessions as session_store
from app.store.approvals import ApprovalRow, ApprovalStateError
from app.store.db import Database, is_transient
from app.store.rows import ChainLink, SessionRow
from app.supervisor.alerts import run_next_queued
from app.supervisor.chain import BudgetSpent, run_chain
from app.supervisor.credentials import ModelTiersPaused
from app.supervisor.halt import SHUTTING_DOWN, Halt, StopRequested
from app.supervisor.hub import Hub
from app.supervisor.runner import kill_leftover
from app.supervisor.session import STOPPED_BY_OPERATOR, STOPPED_BY_SHUTDOWN, SessionHandle
from app.supervisor.windows import end_of_windows
from app.vocab import FIRST_MODEL_TIER, ApprovalStatus, SessionStatus, Trigger

log = logging.getLogger(__name__)

__all__ = ["CycleBusy", "Supervisor", "status"]


# ``struct flock`` (Linux): l_type, l_whence, l_start, l_len, l_pid and the padding to 32 bytes.
_FLOCK = struct.Struct("hhqqi4x")
_OFD_LOCKS = hasattr(fcntl, "F_OFD_GETLK") and _FLOCK.size == 32


class _CycleLock:
    """The cycle's ``flock`` on ``cycle.lock``, plus a probe that never takes it.

    The claim is the ``flock`` (refused at once while another open file holds it). Beside it the
    holder keeps an open-file-description record lock (``F_OFD_SETLK``, Linux) on the whole file:
    a probe (``/healthz``, ``/metrics``, the overview, the sweep's "is anyone running?") asks the
    kernel with ``F_OFD_GETLK`` whether that lock is held, which takes nothing. A probe that took
    the ``flock`` itself, even for an instant, made a claim in another process at that moment
    fail with :class:`CycleBusy` and its scheduled cycle be skipped. The two kinds of lock do not
    interact on Linux, and both end when the holder's file is closed (or the holder dies). Where
    OFD locks are missing the probe falls back to trying the ``flock``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, what: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise CycleBusy(f"a cycle is already running ({holder}); try again when it has finished") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "started_at": utcnow(), "what": what}).encode())
        if _OFD_LOCKS:
            try:  # the probes' beacon; the flock alone still excludes every other claim
                fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
            except OSError as exc:
                log.warning("cycle lock %s: no probe lock (%s); probes try the flock instead", self.path,
                            exc.strerror or exc)
        self._fd = fd

    def holder(self) -> str | None:
        """Issue #14: who runs a cycle (the holder the lock file records: this process's own when it
        holds the lock, another's when its probe finds it taken), or None when none runs. Takes no
        lock (see the class)."""
        if self._fd is not None:
            return _read_holder(self._fd)
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None  # no process ever claimed a cycle here
        try:
            held = _probe(fd)
            if held is None:  # no OFD locks here: try the flock, as a claim would
                fallback = os.open(self.path, os.O_RDWR)
                try:
                    fcntl.flock(fallback, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    held = False
                except BlockingIOError:
                    held = True
                finally:
                    os.close(fallback)
            return _read_holder(fd) if held else None
        finally:
            os.close(fd)

    def held_elsewhere(self) -> bool:
        return self.holder() is not None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _probe(fd: int) -> bool | None:
    """Whether another open file holds the cycle's probe lock (``F_OFD_GETLK``: nothing is taken);
    None when this system cannot tell (no OFD locks)."""
    if not _OFD_LOCKS:
        return None
    try:
        answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
    except OSError:
        return None
    return bool(_FLOCK.unpack(answer)[0] != fcntl.F_UNLCK)


def _read_holder(fd: int) -> str:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {data.get('pid')}, {data.get('what')}, started {data.get('started_at')}"
    except (OSError, ValueError):
        return "holder unknown"


FIRST_SESSION_WAIT = 10.0  # seconds start_cycle waits for the cycle's first session row
NEEDS_ATTENTION = "needs_attention"  # a cycle's status when one of its sessions needs a human
AWAITING_APPROVAL = "awaiting_approval"  # issue #13: it ended waiting for an operator's approval
APPROVAL_CHECK_INTERVAL = 15.0  # seconds between the server's looks for approvals and windows past their time


def cycle_status(chain: list[ChainLink]) -> str:
    """One word for a finished cycle: ``needs_attention`` when a session of it does,
    ``awaiting_approval`` when its last session waits for an approval to escalate, else the
    status of the session it ended with (``empty`` when it ran none)."""
    if not chain:
        return "empty"
    if any(link["attention"] for link in chain):
        return NEEDS_ATTENTION
    if approval_store.is_waiting(chain[-1]["escalation_gate"]):
        return AWAITING_APPROVAL
    return chain[-1]["status"]


@dataclass(frozen=True)
class CycleStart:
    """A cycle started in the background: its first session (None if it has none yet, or
    finished without one) and the task running it."""

    session_pk: int | None
    task: asyncio.Task[list[ChainLink]]


class Supervisor:
    def __init__(self, db: Database, settings: Settings, validator: OutputValidator, hub: Hub | None = None) -> None:
        self.db = db
        self.settings = settings
        self.validator = validator
        self.hub = hub or Hub()
        self._running = False
        self._file_lock = _CycleLock(settings.state_dir / "cycle.lock")
        self.handles: dict[int, SessionHandle] = {}
        self.next_run_at: datetime | None = None
        self.last_chain: list[ChainLink] = []
        self.current_task: asyncio.Task[list[ChainLink]] | None = None
        # Resolved with the first session's id of the cycle started last (POST /runs answers with it).
        self.first_session: asyncio.Future[int] | None = None
        self.cycle = 0  # cycles claimed by this process; the ``cycle`` field of their log lines
        self.queue_wake = asyncio.Event()  # issue #13: set when a cycle ends; the run queue's worker looks again
        # Issue #13: notifications, the dead-man heartbeat, and the cycle health /healthz reports.
        self.notifier = Notifier(db, settings)
        self.heartbeat = Heartbeat(settings)
        self.started_monotonic = time.monotonic()  # /healthz measures from here until a cycle finished
        self.started_wall = datetime.now(UTC)  # the same moment, for cron's due times
        self.last_cycle_wall: datetime | None = None  # when the last cycle finished (or was skipped)
        self.last_cycle_at: str | None = None  # when the last cycle finished (UTC, ISO 8601)
        self.last_cycle_monotonic: float | None = None
        self.last_cycle_status: str | None = None  # its cycle_status() word, or "error" when it raised
        self.last_ok_at: str | None = None  # when the last cycle that did not fail finished
        self.consecutive_failures = 0
        self._unhealthy_since: str | None = None  # an open "monitor unhealthy" episode (its dedup key)
        self._halt = Halt()  # the running cycle's stop flag (halt.py): a new one per claimed cycle
        self._stopping: str | None = None  # set by shutdown(): no cycle is claimed any more

    @property
    def busy(self) -> bool:
        """A cycle runs: in this process, or (issue #14) in another one holding the cycle lock of
        this state directory (``tierops run``, ``tierops supervise``)."""
        return self._running or self._file_lock.holder() is not None

    @property
    def cycle_holder(self) -> str | None:
        """Issue #14: "pid N, what, started T" of the process running a cycle, or None."""
        return self._file_lock.holder()

    def owns(self, pk: int, cli_pid: int | None) -> bool:
        """Issue #14: session ``pk`` (whose row records ``cli_pid``) runs, or is being started, in
        this process: the follower leaves it to the recorder. While this process runs a cycle, a
        running row with no CLI yet that is not among its handles is its own next session (created,
        not yet tracked); one with a CLI is another state dir's, sharing this database."""
        return pk in self.handles or (self._running and cli_pid is None)

    async def sweep_abandoned(self) -> int:
        """Issue #14: end the sessions whose process died (a ``tierops run`` killed with SIGKILL) —
        seen by the follower as rows still ``running`` while nobody holds the cycle lock. Done
        holding the lock, so a process starting a cycle meanwhile is never swept; 0 when busy."""
        if self._running:
            return 0
        try:
            self._file_lock.acquire("sweep of sessions left running")
        except CycleBusy:
            return 0
        try:
            return await self._sweep("its process is gone")
        finally:
            self._file_lock.release()

    async def recover_interrupted(self) -> int:
        """At start: kill the live CLIs of sessions a killed supervisor left ``running``, then mark
        those sessions ``interrupted``. Returns how many were marked."""
        if self._file_lock.held_elsewhere():
            log.debug("sweep skipped: another process holds the cycle lock")
            return 0
        return await self._sweep("found at restart")

    async def _sweep(self, when: str) -> int:
        """End every supervised session still ``running`` that is not this process's own (the
        caller holds the cycle lock, or made sure nobody does), killing its recorded CLI first."""
        state = self.settings.state_dir.resolve()
        home = state / "home"  # the HOME every CLI of ours gets
        count = 0
        for row in await processes.running_sessions_with_process(self.db):
            if row.id in self.handles:
                continue  # a live session of this process
            if row.cwd is not None and Path(row.cwd).parent != state / "sessions":
                continue  # started with another state dir (another cycle lock): not ours to judge
            reason = f"the supervisor stopped while this session ran ({when})"
            if row.cli_pid is not None:
                killed = await asyncio.to_thread(kill_leftover, row.cli_pid, row.cli_pgid, row.cli_start_time, home)
                if row.cli_pid in killed:
                    reason += f"; its CLI (pid {row.cli_pid}) was still running and was killed"
                elif killed:
                    reason += f"; processes it left ({', '.join(map(str, killed))}) were killed"
            if await processes.mark_interrupted(self.db, row.id, reason):
                count += 1
                log.warning("session %d marked interrupted: %s", row.id, reason,
                            extra={"session": row.id, "status": SessionStatus.INTERRUPTED})
        log.log(logging.INFO if count else logging.DEBUG, "sweep (%s): %d session(s) left running marked interrupted",
                when, count, extra={"count": count})
        return count

    def _claim(self, what: str) -> asyncio.Future[int]:
        """Take the cycle, or raise CycleBusy at once. The flock also excludes this process
        itself (flock locks belong to the open file), so two claims can never both succeed."""
        if self._stopping is not None:
            raise StopRequested(f"no cycle starts: {self._stopping}")
        if self._running:
            raise CycleBusy("a cycle is already running in this process; try again when it has finished")
        self._file_lock.acquire(what)
        self._running = True
        self._halt = Halt()
        self.cycle += 1
        self.first_session = asyncio.get_running_loop().create_future()
        return self.first_session

    async def _run_claimed(self, tier: int, prompt: str | None, trigger: str,
                           spec: OutputSpec | None = None, *, parent: SessionRow | None = None,
                           handoff: str | None = None, dry_run: bool = False,
                           incidents: Sequence[int] = ()) -> list[ChainLink]:
        cycle = self.cycle
        started = time.monotonic()
        log.info("cycle %d started: %s, tier %d", cycle, trigger, tier,
                 extra={"cycle": cycle, "trigger": trigger, "tier": tier})
        await self.heartbeat.start_cycle()  # queued: never holds the cycle up
        try:
            try:  # this process holds the cycle lock: no other process has a session running
                await self._sweep("found at the start of a later cycle")
            except Exception:  # the sweep must never keep the cycle from running
                log.exception("the sweep of sessions left running failed", extra={"cycle": cycle})
            try:  # issue #13: approvals past their time end before anything new runs
                await self.expire_approvals()
            except Exception:
                log.exception("expiring approvals failed", extra={"cycle": cycle})
            chain = await run_chain(self.db, self.settings, self.validator, self.hub, start_tier=tier,
                                    prompt=prompt, trigger=trigger, on_session=self._track, spec=spec,
                                    parent=parent, handoff=handoff, dry_run=dry_run, notifier=self.notifier,
                                    incidents=incidents, halt=self._halt)
            self.last_chain = chain
            _log_cycle_end(cycle, chain, time.monotonic() - started)
            await self._cycle_finished(chain, None)
            return chain
        except asyncio.CancelledError:  # a signal, or the server shutting down
            seconds = time.monotonic() - started
            log.warning("cycle %d stopped after %.1f s: this process is stopping", cycle, seconds,
                        extra={"cycle": cycle, "status": SessionStatus.INTERRUPTED, "duration_s": round(seconds, 3)})
            raise
        except (BudgetSpent, ModelTiersPaused) as exc:  # no session could start: a skip, not a failure
            await self._cycle_skipped(cycle, exc)
            raise
        except StopRequested as exc:  # stopped before its first session started: nothing ran, nothing failed
            log.warning("cycle %d stopped before its first session: %s", cycle, oneline(exc),
                        extra={"cycle": cycle, "status": SessionStatus.INTERRUPTED})
            raise
        except Exception as exc:  # logged once by whoever started the cycle; here only its health
            await self._cycle_finished(None, exc)
            raise
        finally:
            self.handles.clear()
            self._running = False
            self._file_lock.release()
            self.queue_wake.set()

    async def run_cycle(self, *, tier: int = FIRST_MODEL_TIER, prompt: str | None = None,
                        trigger: str = Trigger.MANUAL, spec: OutputSpec | None = None,
                        dry_run: bool = False) -> list[ChainLink]:
        """Run one chain now and return it; raises :class:`CycleBusy` at once if one is running.
        ``spec``: the first session's output contract (issue #11; None: the default); ``dry_run``:
        the whole chain is a dry run (issue #13; always with TIEROPS_DRY_RUN)."""
        self._claim(f"{trigger} cycle from tier {tier}")
        return await self._run_claimed(tier, prompt, trigger, spec, dry_run=dry_run)

    async def start_cycle(self, *, tier: int = FIRST_MODEL_TIER, prompt: str | None = None, trigger: str = Trigger.MANUAL,
                          wait: float = FIRST_SESSION_WAIT, spec: OutputSpec | None = None,
                          dry_run: bool = False, incidents: Sequence[int] = ()) -> CycleStart:
        """Start a cycle in the background and wait until its first session exists (the one
        run-start path of POST /runs and the Run Now form). Raises :class:`CycleBusy` at once if
        a cycle runs, and the cycle's own exception if it failed before creating a session.
        ``incidents``: what the cycle investigates (an alert's incident), for its messages."""
        first = self._claim(f"{trigger} cycle from tier {tier}")
        return await self._start_claimed(first, lambda: self._run_claimed(tier, prompt, trigger, spec,
                                                                          dry_run=dry_run, incidents=incidents),
                                         trigger, tier, wait)

    async def _start_claimed(self, first: asyncio.Future[int], run: Callable[[], Awaitable[list[ChainLink]]],
                             trigger: str, tier: int, wait: float) -> CycleStart:
        """The claimed cycle ``run`` as a background task; returns once its first session exists
        (see :meth:`start_cycle`)."""
        cycle = self.cycle
        started = False

        async def body() -> list[ChainLink]:
            nonlocal started
            started = True
            return await run()

        def finished(task: asyncio.Task[list[ChainLink]]) -> None:
            if not started:  # cancelled before its first step: _run_claimed's finally never ran
                self._running = False
                self._file_lock.release()
            if not task.cancelled() and (exc := task.exception()) is not None and not _skip(exc):
                # A storage condition (a full disk) is not a bug: its line says it, without a traceback.
                log.error("cycle %d failed: %s: %s", cycle, type(exc).__name__, oneline(exc),
                          exc_info=None if _storage_error(None, exc) else exc,
                          extra={"cycle": cycle, "trigger": trigger, "tier": tier})

        task = asyncio.create_task(body(), name=f"tierops-cycle-{trigger}")
        task.add_done_callback(finished)
        self.current_task = task
        waiting: set[asyncio.Future[Any]] = {first, task}
        await asyncio.wait(waiting, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        if first.done():
            return CycleStart(first.result(), task)
        if task.done() and not task.cancelled() and (exc := task.exception()) is not None:
            raise exc
        return CycleStart(None, task)  # finished without a session, or still preparing after `wait` s

    # -- approvals (issue #13) -------------------------------------------------------------------

    async def expire_approvals(self) -> list[ApprovalRow]:
        """Expire the pending approvals past their time (each one's session then needs attention,
        and people are told, following the messages of its incidents) and those whose incidents
        all resolved (nothing left to run; the resolution was the message)."""
        expired = await approval_store.expire_due(self.db)
        for a in expired:
            if (a["note"] or "").startswith(approval_store.RESOLVED_NOTE):
                log.info("approval #%d to run tier %d expired: %s", a["id"], a["tier"], a["note"],
                         extra={"session": a["session_pk"], "chain": a["chain_id"], "tier": a["tier"]})
                continue
            log.warning("approval #%d to run tier %d expired; session %s needs attention", a["id"], a["tier"],
                        a["session_pk"], extra={"session": a["session_pk"], "chain": a["chain_id"], "tier": a["tier"]})
            ids = await approval_store.incident_ids(self.db, a["id"], fresh=True)
            why = f"Approval #{a['id']} to run tier {a['tier']} expired: nobody approved or rejected it in time."
            incidents = await incident_store.get_incidents(self.db, ids, fresh=True)
            await notices.send(self.notifier, [notices.approval_expired_notice(a, incidents, why)])
        return expired

    async def watch(self, every: float = APPROVAL_CHECK_INTERVAL) -> None:
        """Now, then every ``every`` s until cancelled (the server's lifespan): expire due approvals
        (an approval expires on time even when no cycle starts) and act on the maintenance windows
        that ended over alert and model incidents (``windows.py``)."""
        while True:
            try:
                await self.expire_approvals()
            except Exception:  # storage trouble now must not end the watch
                log.exception("expiring approvals failed")
            try:
                await end_of_windows(self)
            except Exception:
                log.exception("acting on the end of maintenance windows failed")
            await asyncio.sleep(every)

    async def start_approved(self, approval_id: int, actor: str, note: str | None = None, *,
                             wait: float = FIRST_SESSION_WAIT) -> CycleStart:
        """Approve a pending approval and start the rest of its chain in the background (POST
        /api/v1/approvals/{id}/approve, the dashboard's Approve), like :meth:`start_cycle`. Raises
        LookupError, :class:`ApprovalStateError`, or :class:`CycleBusy` while a cycle runs — the
        approval then stays pending."""
        first, approval, parent = await self._approve(approval_id, actor, note)
        started = await self._start_claimed(first, lambda: self._run_approved(approval, parent), Trigger.ESCALATION,
                                            approval["tier"], wait)
        if started.session_pk is not None:  # at once, so the approval links its session while it runs
            await approval_store.set_child(self.db, approval_id, started.session_pk)
        return started

    async def run_approved(self, approval_id: int, actor: str, note: str | None = None) -> list[ChainLink]:
        """:meth:`start_approved`, run to its end in this process (``tierops approvals approve``)."""
        _first, approval, parent = await self._approve(approval_id, actor, note)
        return await self._run_approved(approval, parent)

    async def _approve(self, approval_id: int, actor: str,
                       note: str | None) -> tuple[asyncio.Future[int], ApprovalRow, SessionRow]:
        """Claim the cycle, then mark the approval approved: in this order, so an approval is never
        approved without the cycle that runs it."""
        current = await approval_store.get_approval(self.db, approval_id, fresh=True)
        if current is None:
            raise LookupError(f"no approval {approval_id}")
        if current["status"] != ApprovalStatus.PENDING:
            raise ApprovalStateError(approval_store.decided_text(current))
        try:
            first = self._claim(f"approval #{approval_id}: tier {current['tier']}")
        except CycleBusy:
            raise CycleBusy(f"a cycle is running; approve again when it has finished (approval #{approval_id} "
                            "stays pending)") from None
        try:
            approval = await approval_store.decide(self.db, approval_id, "approved", actor, note)
            parent = (await session_store.get_session(self.db, approval["session_pk"], fresh=True)
                      if approval["session_pk"] is not None else None)
            if parent is None:  # pragma: no cover - decide() refuses a pruned session; a prune racing it
                raise ApprovalStateError(f"approval #{approval_id}: the session that escalated no longer exists")
        except BaseException:
            self._running = False
            self._file_lock.release()
            raise
        log.info("approval #%d approved by %s: tier %d continues the chain of session %d", approval_id, actor,
                 approval["tier"], parent["id"],
                 extra={"session": parent["id"], "chain": approval["chain_id"], "to_tier": approval["tier"]})
        return first, approval, parent

    async def _run_approved(self, approval: ApprovalRow, parent: SessionRow) -> list[ChainLink]:
        first = self.first_session
        try:
            chain = await self._run_claimed(approval["tier"], None, Trigger.ESCALATION, parent=parent,
                                            incidents=await approval_store.incident_ids(self.db, approval["id"]),
                                            handoff=approval["handoff"])
        except Exception as exc:
            if first is None or not first.done():  # the approved tier never started: a human must know
                await session_store.set_attention(
                    self.db, parent["id"], f"approval #{approval['id']}: tier {approval['tier']} could not start: "
                                           f"{type(exc).__name__}: {oneline(exc)}")
            raise
        child = next((link["id"] for link in chain if link["parent_session_id"] == parent["id"]), None)
        if child is not None:
            await approval_store.set_child(self.db, approval["id"], child)
        return chain

    async def run_queued(self) -> int:
        """Issue #13: start the oldest queued run (an alert that came while a cycle ran) when no
        cycle is running; 1 if one started, else 0 (``app/supervisor/alerts.py``)."""
        return await run_next_queued(self)

    def _track(self, pk: int, handle: SessionHandle) -> None:
        self.handles[pk] = handle
        if self._halt.reason is not None:  # stopped while this session was being created: its CLI ends at once
            handle.stop(STOPPED_BY_SHUTDOWN if self._stopping is not None else STOPPED_BY_OPERATOR)
        if self.first_session is not None and not self.first_session.done():
            self.first_session.set_result(pk)

    def stop_session(self, pk: int) -> bool:
        """Stop session ``pk`` of this process's cycle, and the chain with it: no later tier starts
        (an operator who stops a session does not want the next, more privileged one)."""
        handle = self.handles.get(pk)
        if handle is None:
            return False
        self._halt.request(f"session {pk} was {STOPPED_BY_OPERATOR}")
        handle.stop()
        return True

    def stop_all(self, reason: str = STOPPED_BY_OPERATOR) -> None:
        """Stop the running cycle: its sessions' process groups, and every tier not started yet."""
        self._halt.request(reason)
        for handle in list(self.handles.values()):
            handle.stop(reason)

    def _next_delay(self, started: float) -> float:
        """Seconds until the next cycle: cron's next time, or ``interval`` after ``started``."""
        if self.settings.cron:
            from croniter import croniter

            now = datetime.now(UTC)
            nxt: datetime = croniter(self.settings.cron, now).get_next(datetime)
            delay = (nxt - now).total_seconds()
        else:
            delay = self.cycle_interval() - (time.monotonic() - started)
        delay = max(0.0, delay)
        self.next_run_at = datetime.fromtimestamp(time.time() + delay, UTC)
        return delay

    def cycle_interval(self) -> float:
        """Seconds between scheduled cycles: the checks file's ``interval`` when it sets one (read
        again every cycle, so an edit takes effect without a restart; issue #12), else
        ``TIEROPS_INTERVAL``."""
        if self.settings.checks is not None:
            try:
                interval = load_inventory(self.settings.checks).interval_s
            except InventoryError as exc:  # the probe session reports it in full, as its failure
                log.warning("checks file: %s; cycles keep TIEROPS_INTERVAL=%d s", oneline(exc), self.settings.interval)
                return float(self.settings.interval)
            if interval is not None:
                return float(interval)
        return float(self.settings.interval)

    async def run_forever(self, *, cycles: int | None = None) -> None:
        """Scheduled cycles until cancelled (or ``cycles`` have run). With an interval the first
        cycle starts at once; with cron at the first matching time."""
        await self.recover_interrupted()
        if self.settings.cron:
            await asyncio.sleep(self._next_delay(time.monotonic()))
        done = 0
        while cycles is None or done < cycles:
            started = time.monotonic()
            try:
                await self.run_cycle(tier=self.settings.first_tier, trigger=Trigger.SCHEDULE)
            except StopRequested:  # this process is stopping (logged where that was decided)
                pass
            except CycleBusy as exc:
                log.warning("scheduled cycle skipped: %s", exc)
            except (BudgetSpent, ModelTiersPaused):  # tier 1 first, and it may not start: logged as a skip
                pass
            except Exception:  # a broken cycle must not stop the schedule; logged here, once
                log.exception("scheduled cycle failed", extra={"cycle": self.cycle, "trigger": Trigger.SCHEDULE})
            done += 1
            if cycles is not None and done >= cycles:
                break
            await asyncio.sleep(self._next_delay(started))

    async def shutdown(self) -> None:
        """Stop running sessions (their process groups) and wait for the cycle to wind down; then
        let the heartbeat and the notifications out (a few seconds at most). From here on
        no CLI starts: not the next tier of the running chain, not a new cycle (``halt.py``)."""
        self._stopping = SHUTTING_DOWN
        self._halt.request(SHUTTING_DOWN)
        self.stop_all(STOPPED_BY_SHUTDOWN)
        if self.current_task and not self.current_task.done():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self.current_task, timeout=self.settings.kill_grace + 5)
        await self.heartbeat.close()
        await self.notifier.close()

    async def start(self) -> None:
        """Start what runs beside the cycles: the notification sender (issue #13). :meth:`shutdown`
        stops it; without ``start`` messages are recorded and wait for a process that sends."""
        await self.notifier.start()

    # -- health (issue #13) ----------------------------------------------------------------------

    async def _cycle_finished(self, chain: list[ChainLink] | None, exc: BaseException | None) -> None:
        """Record the cycle's health, ping the heartbeat, tell about the monitor's own health.
        Never raises: the cycle's result is what its caller gets."""
        try:
            word = "error" if exc is not None else cycle_status(chain or [])
            first = chain[0] if chain else None
            failed = exc is not None or word == SessionStatus.FAILED or (
                first is not None and first["status"] == SessionStatus.FAILED)
            self.last_cycle_at, self.last_cycle_monotonic, self.last_cycle_status = utcnow(), time.monotonic(), word
            self.last_cycle_wall = datetime.now(UTC)
            if failed:
                self.consecutive_failures += 1
                await self.heartbeat.cycle_failed()
            else:
                self.consecutive_failures = 0
                self.last_ok_at = self.last_cycle_at
                await self.heartbeat.cycle_ok()
            await self._monitor_notices(failed, _storage_error(chain, exc), _failure(chain, exc))
        except Exception:
            log.exception("cycle %d: its health could not be recorded", self.cycle, extra={"cycle": self.cycle})

    async def _cycle_skipped(self, cycle: int, exc: BaseException) -> None:
        """A cycle whose first tier may not start (the daily budget is spent, the model tiers are
        paused) did what it must: nothing. Not a failure — no ``/fail`` ping, no count towards
        ``TIEROPS_UNHEALTHY_AFTER``, no "monitor unhealthy" — but the last cycle's status says
        ``skipped: why``, and the heartbeat hears that the monitor is alive. Never raises."""
        try:
            why = oneline(exc)
            self.last_cycle_at, self.last_cycle_monotonic = utcnow(), time.monotonic()
            self.last_cycle_wall, self.last_cycle_status = datetime.now(UTC), f"skipped: {why}"
            log.warning("cycle %d skipped: %s", cycle, why, extra={"cycle": cycle, "status": "skipped"})
            await self.heartbeat.cycle_ok()
        except Exception:
            log.exception("cycle %d: its skip could not be recorded", cycle, extra={"cycle": cycle})

    async def _monitor_notices(self, failed: bool, storage: str | None, failure: str) -> None:
        n, limit = self.consecutive_failures, self.settings.unhealthy_after
        if failed and self._unhealthy_since is None and (storage is not None or n >= limit):
            self._unhealthy_since = self.last_cycle_at or utcnow()
            what = "storage error" if storage is not None else f"{n} cycles in a row failed"
            body = (f"{n} cycle(s) in a row failed (TIEROPS_UNHEALTHY_AFTER={limit}); the last: "
                    f"{storage or failure}.\nLast cycle that did not fail: {self.last_ok_at or 'none since start'}. "
                    "/healthz answers 503 while this lasts.")
            await self.notifier.post(notices.monitor_notice(
                "monitor", "critical", f"monitor unhealthy — {what}", body, f"monitor:unhealthy:{self._unhealthy_since}"))
        elif not failed and self._unhealthy_since is not None:
            since, self._unhealthy_since = self._unhealthy_since, None
            # A follow-up: it goes wherever "unhealthy" went, whatever the minimum severity.
            await self.notifier.post(notices.monitor_notice(
                "monitor", "info", "monitor healthy again",
                f"A cycle finished ({self.last_cycle_status}) at {self.last_cycle_at}; cycles had failed since {since}.",
                f"monitor:healthy:{since}", follows_key=f"monitor:unhealthy:{since}"))

    def schedule_period(self) -> float:
        """Seconds between scheduled cycles: the cron's gap between its next two times, else
        :meth:`cycle_interval`."""
        if self.settings.cron:
            from croniter import croniter

            it = croniter(self.settings.cron, datetime.now(UTC))
            first: datetime = it.get_next(datetime)
            second: datetime = it.get_next(datetime)
            return (second - first).total_seconds()
        return self.cycle_interval()

    def _cron_stale(self, now: datetime) -> str | None:
        """With cron, staleness is measured from when a cycle was *due*: the first cron time after
        the last cycle (or after the start, before any) may be missed; by the cron time after that
        one plus the longest tier timeout a cycle must have finished. A weekday-only or office-hours
        cron is then never "stale" on a weekend or at night. None: not stale."""
        from croniter import croniter

        since = self.last_cycle_wall or self.started_wall
        times = croniter(self.settings.cron, since)
        due: datetime = times.get_next(datetime)
        following: datetime = times.get_next(datetime)
        deadline = following + timedelta(seconds=self.longest_tier_timeout())
        if now <= deadline:
            return None
        what = "no cycle finished since the start" if self.last_cycle_wall is None else "no cycle finished since"
        return (f"{what} {since:%Y-%m-%dT%H:%M:%SZ}: one was due at {due:%Y-%m-%dT%H:%M:%SZ} "
                f"(TIEROPS_CRON {self.settings.cron!r}); allowed until {deadline:%Y-%m-%dT%H:%M:%SZ}, the cron time "
                "after it plus the longest tier timeout")

    def longest_tier_timeout(self) -> int:
        """The longest a session of a scheduled cycle may run (tiers first_tier..max_tier)."""
        first = self.settings.first_tier
        return max(self.settings.tier(n).timeout for n in range(first, max(first, self.settings.max_tier) + 1))

    def health(self, *, scheduled: bool, now: datetime | None = None) -> dict[str, Any]:
        """For ``/healthz``: the cycle facts and ``problems`` (empty: healthy). ``scheduled``: this
        process runs the schedule; then, with an interval, a cycle must have finished within twice
        the schedule's period plus the longest tier timeout (counted from the start until one has);
        with ``TIEROPS_CRON`` (:meth:`_cron_stale`) by the cron time after the one that was due next
        after the last cycle, plus the longest tier timeout. ``now``: the wall clock (tests)."""
        problems: list[str] = []
        scheduler = "off"
        if scheduled:
            scheduler = "ok"
            if self.settings.cron:
                if (stale := self._cron_stale(now or datetime.now(UTC))) is not None:
                    scheduler = "stale"
                    problems.append(stale)
            else:
                allowed = 2 * self.schedule_period() + self.longest_tier_timeout()
                age = time.monotonic() - (self.last_cycle_monotonic or self.started_monotonic)
                if age > allowed:
                    scheduler = "stale"
                    what = "no cycle finished" if self.last_cycle_monotonic is None else "no cycle finished since"
                    problems.append(f"{what} in {age:.0f} s (allowed: {allowed:.0f} s, twice the schedule's period "
                                    "plus the longest tier timeout)")
        if self.consecutive_failures >= self.settings.unhealthy_after:
            problems.append(f"the last {self.consecutive_failures} cycles failed "
                            f"(TIEROPS_UNHEALTHY_AFTER={self.settings.unhealthy_after})")
        return {"scheduler": scheduler, "cycle_running": self.busy, "cycle_holder": self.cycle_holder,
                "last_cycle_at": self.last_cycle_at,
                "last_cycle_status": self.last_cycle_status, "consecutive_failures": self.consecutive_failures,
                "problems": problems}


def _skip(exc: BaseException) -> bool:
    """A cycle that raised this was skipped (logged as such by ``_run_claimed``), not failed."""
    return isinstance(exc, (BudgetSpent, ModelTiersPaused, StopRequested))


def _storage_error(chain: list[ChainLink] | None, exc: BaseException | None) -> str | None:
    """The storage error a cycle ended with (raised, or a session's "storage error: …"), if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, StorageUnavailable) or (is_transient(seen) and not isinstance(seen, OSError)):
            text = oneline(seen)
            return text if text.startswith("storage error") else f"storage error: {type(seen).__name__}: {text}"
        seen = seen.__cause__ or seen.__context__
    for link in chain or []:
        if (link["status_reason"] or "").startswith("storage error"):
            return oneline(link["status_reason"])
    return None


def _failure(chain: list[ChainLink] | None, exc: BaseException | None) -> str:
    """What went wrong, in one line, for the monitor's notice."""
    if exc is not None:
        return f"{type(exc).__name__}: {oneline(exc)}"
    if chain:
        first = chain[0]
        return f"session {first['id']} (tier {first['tier']}) ended {first['status']}: {oneline(first['status_reason'] or '')}"
    return "no session ran"


def _log_cycle_end(cycle: int, chain: list[ChainLink], seconds: float) -> None:
    cost = sum(link["cost_usd"] or 0.0 for link in chain)
    word = cycle_status(chain)
    log.info("cycle %d finished: %s, %d session(s), $%.4f, %.1f s", cycle, word, len(chain), cost, seconds,
             extra={"cycle": cycle, "chain": chain[0]["id"] if chain else None, "status": word,
                    "sessions": len(chain), "cost_usd": round(cost, 6), "duration_s": round(seconds, 3)})


def status(supervisor: Supervisor) -> dict[str, Any]:
    return {"busy": supervisor.busy, "cycle_holder": supervisor.cycle_holder,
            "next_run_at": supervisor.next_run_at.isoformat() if supervisor.next_run_at else None,
            "running_sessions": sorted(supervisor.handles)}
