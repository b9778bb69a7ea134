"""Cycles: claiming one (never two at a time, across processes too), running it, stopping it,
and the sweep of sessions left running.

* A cycle is one escalation chain (``chain.run_chain``), started by the schedule
  (:meth:`Supervisor.run_forever`, ``schedule.py``), by an operator or an alert
  (:meth:`Supervisor.start_cycle`, the one run-start path), or by an approval
  (:meth:`Supervisor.start_approved`: the rest of the chain from the approved tier).
* A second claim is refused at once with :class:`CycleBusy` naming the holder (``cycle_lock.py``).
* Stop means stop (``halt.py``): a Stop, stopping all, or a shutdown sets the cycle's ``Halt``
  besides killing the running CLI, so no later tier starts; after ``shutdown`` no cycle is claimed.
* Up to ``TIEROPS_MAX_CONCURRENT`` cycles at once, each a :class:`~app.supervisor.runs.Run` with its
  own stop flag, sessions and tier gate (``tier_gate.py``: service locks, node labels).
* The sweep (``sweep.py``), at start and at a cycle's start when it is the only one: a supervised
  session still ``running`` that is not one of this process's live sessions is ended ``interrupted``.
* Each cycle's end is judged by ``cycle_health.py``; alerts and their queue are ``alerts.py``.

Log lines: a cycle's start and end at INFO (``cycle``, and ``chain`` at the end, as fields); one
stopped by a signal or a shutdown, or skipped, at WARNING; a failed one once, by whoever started it
(``run_forever``, the task of ``start_cycle``, ``tierops run``'s error line). The sweep logs each
session it marks (WARNING) and how many (INFO).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from app.clock import seconds_between, utcnow
from app.config import Settings
from app.errors import CycleBusy
from app.logs import oneline
from app.notify.heartbeat import Heartbeat
from app.notify.sender import Notifier
from app.output.spec import OutputSpec
from app.output.validate import OutputValidator
from app.store import approvals as approval_store
from app.store import sessions as session_store
from app.store.approvals import ApprovalRow, ApprovalStateError
from app.store.db import Database
from app.store.rows import ChainLink, SessionRow
from app.supervisor.approvals import expire_approvals
from app.supervisor.chain import run_chain
from app.supervisor.credentials import ModelTiersPaused
from app.supervisor.cycle_health import CycleHealth, cycle_status, storage_error
from app.supervisor.cycle_lock import CycleLock
from app.supervisor.cycle_start import FIRST_SESSION_WAIT, CycleStart
from app.supervisor.guards import BudgetSpent
from app.supervisor.halt import SHUTTING_DOWN, Halt, StopRequested
from app.supervisor.hub import Hub
from app.supervisor.node import Node
from app.supervisor.runs import Run
from app.supervisor.runtime_settings import effective_settings
from app.supervisor.schedule import cycle_interval, next_delay, wait_until_due
from app.supervisor.session import STOPPED_BY_OPERATOR, STOPPED_BY_SHUTDOWN, SessionHandle
from app.supervisor.sweep import sweep_left_running
from app.supervisor.tier_gate import TierGate
from app.supervisor.upstream_models import ModelCatalog
from app.supervisor.windows import end_of_windows
from app.vocab import FIRST_MODEL_TIER, ApprovalStatus, SessionStatus, Trigger

log = logging.getLogger(__name__)

__all__ = ["CycleBusy", "Supervisor", "status"]

APPROVAL_CHECK_INTERVAL = 15.0  # seconds between the server's looks for approvals and windows past their time


class Supervisor:
    def __init__(self, db: Database, settings: Settings, validator: OutputValidator, hub: Hub | None = None) -> None:
        self.db = db
        # The settings in force: ``base_settings`` (as loaded at start: what needs a restart) with the
        # run-time changes (runtime_settings.py), read again at every cycle's start and on every change.
        self.base_settings = self.settings = settings
        self.settings_changed = asyncio.Event()  # set by reload_settings(): the schedule's wait looks again
        self.models = ModelCatalog(settings)  # the models the upstream offers (GET /api/v1/models)
        self.validator = validator
        self.hub = hub or Hub()
        self._file_lock = CycleLock(settings.state_dir / "cycle.lock")  # held while any cycle of this process runs
        self.runs: dict[int, Run] = {}  # the cycles in flight here, by cycle number (TIEROPS_MAX_CONCURRENT)
        # Chat turns (``chat.py``) run beside the cycles: their sessions' handles, and how many are
        # being created (a row with no CLI yet that no sweep may take for abandoned).
        self.chat_handles: dict[int, SessionHandle] = {}
        self.chat_starting = 0
        self.node: Node | None = None  # with several nodes on one store: only the leader schedules
        self.next_run_at: datetime | None = None
        self.last_chain: list[ChainLink] = []
        self.current_task: asyncio.Task[list[ChainLink]] | None = None  # of the cycle started last in the background
        self.cycle = 0  # cycles claimed by this process; the ``cycle`` field of their log lines
        self.queue_wake = asyncio.Event()  # set when a cycle ends: the run queue's worker looks again
        # Notifications, the dead-man heartbeat, and the cycle health /healthz reports.
        self.notifier = Notifier(db, settings)
        self.heartbeat = Heartbeat(settings)
        self.cycle_health = CycleHealth(settings, self.notifier, self.heartbeat)
        self.started_monotonic = time.monotonic()  # /healthz measures from here until a cycle finished
        self.started_wall = datetime.now(UTC)  # the same moment, for cron's due times
        self._stopping: str | None = None  # set by shutdown(): no cycle is claimed any more

    @property
    def busy(self) -> bool:
        """A cycle runs: in this process, or in another one holding the cycle lock of this state
        directory (``tierops run``, ``tierops supervise``)."""
        return bool(self.runs) or self._file_lock.holder() is not None

    @property
    def has_capacity(self) -> bool:
        """Another cycle may start here now: fewer than ``TIEROPS_MAX_CONCURRENT`` run, and no other
        process of this state directory holds the cycle lock."""
        if self.runs:
            return self._taken() < self.settings.max_concurrent and self._stopping is None
        return self._stopping is None and not self._file_lock.held_elsewhere()

    def _taken(self) -> int:
        """Cycle slots taken. With ``TIEROPS_MAX_CONCURRENT`` above 1 the schedule's cycle runs beside
        the slots (an alert storm must not stop the probe); with 1, one cycle of any kind at a time."""
        if self.settings.max_concurrent == 1:
            return len(self.runs)
        return sum(not run.scheduled for run in self.runs.values())

    @property
    def handles(self) -> dict[int, SessionHandle]:
        """The live sessions of every cycle of this process (a copy), by session id."""
        return {pk: handle for run in self.runs.values() for pk, handle in run.handles.items()}

    @property
    def cycle_holder(self) -> str | None:
        """"pid N, what, started T" of the process running a cycle, or None."""
        return self._file_lock.holder()

    @property
    def last_cycle_at(self) -> str | None:
        """When this process's last cycle finished or was skipped (UTC, ISO 8601), or None."""
        return self.cycle_health.last_cycle_at

    @property
    def last_cycle_status(self) -> str | None:
        """The last cycle's :func:`~app.supervisor.cycle_health.cycle_status` word, "error", or
        "skipped: why"."""
        return self.cycle_health.last_cycle_status

    @property
    def consecutive_failures(self) -> int:
        return self.cycle_health.consecutive_failures

    def health(self, *, scheduled: bool, now: datetime | None = None) -> dict[str, Any]:
        """For ``/healthz``: the cycle facts and ``problems`` (empty: healthy), as
        :meth:`~app.supervisor.cycle_health.CycleHealth.report` judges them."""
        return self.cycle_health.report(scheduled=scheduled, busy=self.busy, holder=self.cycle_holder,
                                        started_wall=self.started_wall, started_monotonic=self.started_monotonic,
                                        now=now)

    def owns(self, pk: int, cli_pid: int | None) -> bool:
        """Session ``pk`` (whose row records ``cli_pid``) runs, or is being started, in this
        process: the follower leaves it to the recorder. While this process runs a cycle, a
        running row with no CLI yet that is not among its handles is its own next session (created,
        not yet tracked); one with a CLI is another state dir's, sharing this database."""
        return (pk in self.handles or pk in self.chat_handles
                or ((bool(self.runs) or self.chat_starting > 0) and cli_pid is None))

    async def sweep_abandoned(self) -> int:
        """End the sessions whose process died (a ``tierops run`` killed with SIGKILL) — seen by
        the follower as rows still ``running`` while nobody holds the cycle lock. Done holding the
        lock, so a process starting a cycle meanwhile is never swept; 0 when busy."""
        if self.runs or self.chat_starting > 0:
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
        return await sweep_left_running(self.db, self.settings, self.node.id if self.node is not None else None,
                                        {*self.handles, *self.chat_handles}, when)

    def _claim(self, what: str, *, scheduled: bool = False) -> Run:
        """Take a cycle slot, or raise CycleBusy at once: the slots are taken (``TIEROPS_MAX_CONCURRENT``;
        see :meth:`_taken` for the schedule's), a scheduled one still runs (scheduled cycles never
        overlap), or another process of this state directory holds the cycle lock (taken with the
        first cycle, kept until the last ends)."""
        if self._stopping is not None:
            raise StopRequested(f"no cycle starts: {self._stopping}")
        limit = self.settings.max_concurrent
        if limit == 1 and self.runs:
            raise CycleBusy("a cycle is already running in this process; try again when it has finished")
        if not scheduled and self._taken() >= limit:
            raise CycleBusy(f"{self._taken()} cycles run on this node (TIEROPS_MAX_CONCURRENT={limit}); try again "
                            "when one has finished")
        if scheduled and any(run.scheduled for run in self.runs.values()):
            raise CycleBusy("the last scheduled cycle is still running")
        if not self.runs:
            self._file_lock.acquire(what)
        self.cycle += 1
        node = self.node.id if self.node is not None else None
        halt = Halt()
        run = Run(self.cycle, what, scheduled, asyncio.get_running_loop().create_future(),
                  TierGate(self.db, self.settings, TierGate.holder_name(node, f"cycle-{self.cycle}"), halt), halt)
        self.runs[run.cycle] = run
        return run

    def _release(self, run: Run) -> None:
        """``run`` ended (or never started): its slot is free; the last one gives the cycle lock up."""
        if self.runs.pop(run.cycle, None) is not None and not self.runs:
            self._file_lock.release()
        self.queue_wake.set()

    async def _run_claimed(self, run: Run, tier: int, prompt: str | None, trigger: str,
                           spec: OutputSpec | None = None, *, parent: SessionRow | None = None,
                           handoff: str | None = None, dry_run: bool = False,
                           incidents: Sequence[int] = (), handoff_incidents: str = "") -> list[ChainLink]:
        cycle = run.cycle
        started = time.monotonic()
        log.info("cycle %d started: %s, tier %d", cycle, trigger, tier,
                 extra={"cycle": cycle, "trigger": trigger, "tier": tier})
        await self.heartbeat.start_cycle()  # queued: never holds the cycle up
        try:
            if len(self.runs) == 1:  # alone: no other cycle's session is being created (its row, no CLI yet)
                try:  # this process holds the cycle lock: no other process has a session running
                    await self._sweep("found at the start of a later cycle")
                except Exception:  # the sweep must never keep the cycle from running
                    log.exception("the sweep of sessions left running failed", extra={"cycle": cycle})
            try:  # approvals past their time end before anything new runs
                await expire_approvals(self.db, self.notifier)
            except Exception:
                log.exception("expiring approvals failed", extra={"cycle": cycle})
            await self.reload_settings()  # run-time changes apply from the next cycle on
            run.gate.settings = self.settings
            chain = await run_chain(self.db, self.settings, self.validator, self.hub, start_tier=tier,
                                    prompt=prompt, trigger=trigger, on_session=functools.partial(self._track, run),
                                    spec=spec, parent=parent, handoff=handoff, dry_run=dry_run, notifier=self.notifier,
                                    incidents=incidents, halt=run.halt, gate=run.gate,
                                    handoff_incidents=handoff_incidents)
            self.last_chain = chain
            _log_cycle_end(cycle, chain, time.monotonic() - started)
            await self.cycle_health.finished(cycle, chain, None)
            return chain
        except asyncio.CancelledError:  # a signal, or the server shutting down
            seconds = time.monotonic() - started
            log.warning("cycle %d stopped after %.1f s: this process is stopping", cycle, seconds,
                        extra={"cycle": cycle, "status": SessionStatus.INTERRUPTED, "duration_s": round(seconds, 3)})
            raise
        except (BudgetSpent, ModelTiersPaused) as exc:  # no session could start: a skip, not a failure
            why = oneline(exc)
            log.warning("cycle %d skipped: %s", cycle, why, extra={"cycle": cycle, "status": "skipped"})
            await self.cycle_health.skipped(cycle, why)
            raise
        except StopRequested as exc:  # stopped before its first session started: nothing ran, nothing failed
            log.warning("cycle %d stopped before its first session: %s", cycle, oneline(exc),
                        extra={"cycle": cycle, "status": SessionStatus.INTERRUPTED})
            raise
        except Exception as exc:  # logged once by whoever started the cycle; here only its health
            await self.cycle_health.finished(cycle, None, exc)
            raise
        finally:
            self._release(run)

    async def run_cycle(self, *, tier: int = FIRST_MODEL_TIER, prompt: str | None = None,
                        trigger: str = Trigger.MANUAL, spec: OutputSpec | None = None,
                        dry_run: bool = False) -> list[ChainLink]:
        """Run one chain now and return it; raises :class:`CycleBusy` at once if one is running.
        ``spec``: the first session's output contract (None: the default); ``dry_run``: the whole
        chain is a dry run (always with TIEROPS_DRY_RUN)."""
        run = self._claim(f"{trigger} cycle from tier {tier}", scheduled=trigger == Trigger.SCHEDULE)
        return await self._run_claimed(run, tier, prompt, trigger, spec, dry_run=dry_run)

    async def start_cycle(self, *, tier: int = FIRST_MODEL_TIER, prompt: str | None = None, trigger: str = Trigger.MANUAL,
                          wait: float = FIRST_SESSION_WAIT, spec: OutputSpec | None = None,
                          dry_run: bool = False, incidents: Sequence[int] = (), parent: SessionRow | None = None,
                          handoff: str | None = None, handoff_incidents: str = "") -> CycleStart:
        """Start a cycle in the background and wait until its first session exists (the one
        run-start path of POST /runs and the Run Now form). Raises :class:`CycleBusy` at once if
        a cycle runs, and the cycle's own exception if it failed before creating a session.
        ``incidents``: what the cycle investigates (an alert's incident), for its messages.
        ``parent``, ``handoff``, ``handoff_incidents``: the rest of a chain a queued run continues
        (``run_chain``)."""
        run = self._claim(f"{trigger} cycle from tier {tier}")
        return await self._start_claimed(run, lambda: self._run_claimed(
            run, tier, prompt, trigger, spec, dry_run=dry_run, incidents=incidents, parent=parent, handoff=handoff,
            handoff_incidents=handoff_incidents), trigger, tier, wait)

    async def _start_claimed(self, run: Run, body_of: Callable[[], Awaitable[list[ChainLink]]],
                             trigger: str, tier: int, wait: float) -> CycleStart:
        """The claimed cycle ``run`` as a background task; returns once its first session exists
        (see :meth:`start_cycle`)."""
        cycle, first = run.cycle, run.first
        started = False

        async def body() -> list[ChainLink]:
            nonlocal started
            started = True
            return await body_of()

        def finished(task: asyncio.Task[list[ChainLink]]) -> None:
            if not started:  # cancelled before its first step: _run_claimed's finally never ran
                self._release(run)
            if not task.cancelled() and (exc := task.exception()) is not None and not _skip(exc):
                # A storage condition (a full disk) is not a bug: its line says it, without a traceback.
                log.error("cycle %d failed: %s: %s", cycle, type(exc).__name__, oneline(exc),
                          exc_info=None if storage_error(None, exc) else exc,
                          extra={"cycle": cycle, "trigger": trigger, "tier": tier})

        task = asyncio.create_task(body(), name=f"tierops-cycle-{trigger}")
        task.add_done_callback(finished)
        run.task = self.current_task = task
        waiting: set[asyncio.Future[Any]] = {first, task}
        await asyncio.wait(waiting, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        if first.done():
            return CycleStart(first.result(), task)
        if task.done() and not task.cancelled() and (exc := task.exception()) is not None:
            raise exc
        return CycleStart(None, task)  # finished without a session, or still preparing after `wait` s

    # -- approvals -------------------------------------------------------------------------------

    async def watch(self, every: float = APPROVAL_CHECK_INTERVAL) -> None:
        """Now, then every ``every`` s until cancelled (the server's lifespan): expire due approvals
        (an approval expires on time even when no cycle starts) and act on the maintenance windows
        that ended over alert and model incidents (``windows.py``)."""
        while True:
            if self.node is not None and not self.node.is_leader:  # the leader's work
                await asyncio.sleep(every)
                continue
            try:
                await expire_approvals(self.db, self.notifier)
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
        run, approval, parent = await self._approve(approval_id, actor, note)
        started = await self._start_claimed(run, lambda: self._run_approved(run, approval, parent), Trigger.ESCALATION,
                                            approval["tier"], wait)
        if started.session_pk is not None:  # at once, so the approval links its session while it runs
            await approval_store.set_child(self.db, approval_id, started.session_pk)
        return started

    async def run_approved(self, approval_id: int, actor: str, note: str | None = None) -> list[ChainLink]:
        """:meth:`start_approved`, run to its end in this process (``tierops approvals approve``)."""
        run, approval, parent = await self._approve(approval_id, actor, note)
        return await self._run_approved(run, approval, parent)

    async def _approve(self, approval_id: int, actor: str,
                       note: str | None) -> tuple[Run, ApprovalRow, SessionRow]:
        """Claim the cycle, then mark the approval approved: in this order, so an approval is never
        approved without the cycle that runs it."""
        current = await approval_store.get_approval(self.db, approval_id, fresh=True)
        if current is None:
            raise LookupError(f"no approval {approval_id}")
        if current["status"] != ApprovalStatus.PENDING:
            raise ApprovalStateError(approval_store.decided_text(current))
        try:
            run = self._claim(f"approval #{approval_id}: tier {current['tier']}")
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
            self._release(run)
            raise
        log.info("approval #%d approved by %s: tier %d continues the chain of session %d", approval_id, actor,
                 approval["tier"], parent["id"],
                 extra={"session": parent["id"], "chain": approval["chain_id"], "to_tier": approval["tier"]})
        return run, approval, parent

    async def _run_approved(self, run: Run, approval: ApprovalRow, parent: SessionRow) -> list[ChainLink]:
        first = run.first
        try:
            chain = await self._run_claimed(run, approval["tier"], None, Trigger.ESCALATION, parent=parent,
                                            incidents=await approval_store.incident_ids(self.db, approval["id"]),
                                            handoff=approval["handoff"])
        except Exception as exc:
            if not first.done():  # the approved tier never started: a human must know
                await session_store.set_attention(
                    self.db, parent["id"], f"approval #{approval['id']}: tier {approval['tier']} could not start: "
                                           f"{type(exc).__name__}: {oneline(exc)}")
            raise
        child = next((link["id"] for link in chain if link["parent_session_id"] == parent["id"]), None)
        if child is not None:
            await approval_store.set_child(self.db, approval["id"], child)
        return chain

    def _track(self, run: Run, pk: int, handle: SessionHandle) -> None:
        run.handles[pk] = handle
        if run.halt.reason is not None:  # stopped while this session was being created: its CLI ends at once
            handle.stop(STOPPED_BY_SHUTDOWN if self._stopping is not None else STOPPED_BY_OPERATOR)
        if not run.first.done():
            run.first.set_result(pk)

    def stop_session(self, pk: int) -> bool:
        """Stop session ``pk`` of this process, and its chain with it: no later tier of that cycle
        starts (an operator who stops a session does not want the next, more privileged one). The
        other cycles running here go on."""
        for run in self.runs.values():
            if (handle := run.handles.get(pk)) is not None:
                run.halt.request(f"session {pk} was {STOPPED_BY_OPERATOR}")
                handle.stop()
                return True
        return False

    def stop_all(self, reason: str = STOPPED_BY_OPERATOR) -> None:
        """Stop every running cycle: their sessions' process groups, and every tier not started yet."""
        for run in list(self.runs.values()):
            run.halt.request(reason)
            for handle in list(run.handles.values()):
                handle.stop(reason)

    def _next_delay(self, started: float) -> float:
        """Seconds until the next cycle (``schedule.next_delay``), and when it is (:attr:`next_run_at`)."""
        delay = next_delay(self.settings, started)
        self.next_run_at = datetime.fromtimestamp(time.time() + delay, UTC)
        return delay

    def cycle_interval(self) -> float:
        """Seconds between scheduled cycles (``schedule.cycle_interval``: the checks file's, or
        ``TIEROPS_INTERVAL``)."""
        return cycle_interval(self.settings)

    async def run_forever(self, *, cycles: int | None = None) -> None:
        """Scheduled cycles until cancelled (or ``cycles`` have run). With an interval the first
        cycle starts at once; with cron at the first matching time."""
        if self.settings.cron:  # known before anything is awaited: the first page already shows it
            self._next_delay(time.monotonic())
        await self.recover_interrupted()
        await self.reload_settings()
        if self.settings.cron:
            await wait_until_due(functools.partial(self._next_delay, time.monotonic()), self.settings_changed,
                                 self.reload_settings)
        done = 0
        while cycles is None or done < cycles:
            await self._leading_and_due()
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
            await wait_until_due(functools.partial(self._next_delay, started), self.settings_changed,
                                 self.reload_settings)

    async def _leading_and_due(self) -> None:
        """With a node: wait to lead, then (a node that just took over) until the next cycle is due
        after the last scheduled one any node started, so a failover neither skips nor doubles one."""
        if self.node is None:
            return
        while True:
            await self.node.wait_leader()
            if self.settings.cron:
                return  # the cron wait after each cycle already says when
            last = await session_store.last_scheduled_start(self.db)
            wait = self.cycle_interval() - seconds_between(last, utcnow()) if last else 0.0
            if wait <= 0:
                if self.node.is_leader:
                    return
                continue
            await asyncio.sleep(min(wait, self.node.lease_s / 3))

    async def reload_settings(self) -> Settings:
        """The base settings with the stored run-time changes, in force from now on here, in the
        notifier and the health judge; wakes the schedule's wait. Storage failing keeps the old ones."""
        try:
            settings = await effective_settings(self.db, self.base_settings)
        except Exception as exc:
            log.warning("the settings changed at run time cannot be read (%s); the ones in force stay", oneline(exc))
            return self.settings
        self.settings = self.notifier.settings = self.cycle_health.settings = settings
        self.settings_changed.set()
        return settings

    async def shutdown(self) -> None:
        """Stop running sessions (their process groups) and wait for the cycle to wind down; then
        let the heartbeat and the notifications out (a few seconds at most). From here on
        no CLI starts: not the next tier of the running chain, not a new cycle (``halt.py``)."""
        self._stopping = SHUTTING_DOWN
        for run in list(self.runs.values()):
            run.halt.request(SHUTTING_DOWN)
        self.stop_all(STOPPED_BY_SHUTDOWN)
        if tasks := [run.task for run in self.runs.values() if run.task is not None and not run.task.done()]:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True),
                                       timeout=self.settings.kill_grace + 5)
        await self.heartbeat.close()
        await self.notifier.close()

    async def start(self) -> None:
        """Start what runs beside the cycles: the notification sender. :meth:`shutdown`
        stops it; without ``start`` messages are recorded and wait for a process that sends."""
        await self.reload_settings()
        await self.notifier.start()


def _skip(exc: BaseException) -> bool:
    """A cycle that raised this was skipped (logged as such by ``_run_claimed``), not failed."""
    return isinstance(exc, (BudgetSpent, ModelTiersPaused, StopRequested))


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
