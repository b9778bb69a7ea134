"""When cycles run, and that only one runs at a time — across processes too.

* A cycle is one escalation chain (``chain.run_chain``). The first scheduled cycle starts at once,
  then every ``TIEROPS_INTERVAL`` seconds (measured start to start), or at the times of
  ``TIEROPS_CRON`` when set. With a checks file (issue #12) scheduled cycles start at tier 0 (the
  probe) and the file's ``interval``, when it has one, replaces ``TIEROPS_INTERVAL``. A cycle that overruns its slot delays the next one; none is stacked.
* Exclusivity: an asyncio lock inside the process and an ``flock`` on ``STATE_DIR/cycle.lock``
  between processes (``tierops run`` while ``tierops supervise`` works). A second trigger is
  refused at once with :class:`CycleBusy` naming the holder — it never waits, never runs two.
* The sweep (issue #9 §4: no session row stays ``running`` unless its CLI is alive): at start,
  and again at the start of every cycle, each supervised session still ``running`` that is not
  one of this process's live sessions (``handles``) is ended ``interrupted``. Before its row is
  marked, a CLI it recorded (pid, process group, start time) that is still alive is killed —
  only when pid *and* start time match, so a recycled pid is never killed (on Linux the
  parent-death signal usually took it already; see ``runner``). At start it runs only when no
  other process holds the cycle lock, so a live ``tierops run`` is not touched; at a cycle's start
  this process holds the lock itself, so no other process can have a session running. Sessions
  whose folder is under another state dir (so under another cycle lock) are left alone.

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
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.clock import utcnow
from app.config import Settings
from app.errors import CycleBusy
from app.logs import oneline
from app.output.spec import OutputSpec
from app.output.validate import OutputValidator
from app.probe.inventory import InventoryError, load_inventory
from app.store import processes
from app.store.db import Database
from app.store.rows import ChainLink
from app.supervisor.chain import run_chain
from app.supervisor.hub import Hub
from app.supervisor.runner import kill_leftover
from app.supervisor.session import STOPPED_BY_OPERATOR, STOPPED_BY_SHUTDOWN, SessionHandle
from app.vocab import FIRST_MODEL_TIER, SessionStatus, Trigger

log = logging.getLogger(__name__)

__all__ = ["CycleBusy", "Supervisor", "status"]


class _CycleLock:
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
        self._fd = fd

    def held_elsewhere(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing drops our probe lock
        return False

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _read_holder(fd: int) -> str:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {data.get('pid')}, {data.get('what')}, started {data.get('started_at')}"
    except (OSError, ValueError):
        return "holder unknown"


FIRST_SESSION_WAIT = 10.0  # seconds start_cycle waits for the cycle's first session row
NEEDS_ATTENTION = "needs_attention"  # a cycle's status when one of its sessions needs a human


def cycle_status(chain: list[ChainLink]) -> str:
    """One word for a finished cycle: ``needs_attention`` when a session of it does, else the
    status of the session it ended with (``empty`` when it ran none)."""
    if not chain:
        return "empty"
    if any(link["attention"] for link in chain):
        return NEEDS_ATTENTION
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

    @property
    def busy(self) -> bool:
        return self._running

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
        if self._running:
            raise CycleBusy("a cycle is already running in this process; try again when it has finished")
        self._file_lock.acquire(what)
        self._running = True
        self.cycle += 1
        self.first_session = asyncio.get_running_loop().create_future()
        return self.first_session

    async def _run_claimed(self, tier: int, prompt: str | None, trigger: str,
                           spec: OutputSpec | None = None) -> list[ChainLink]:
        cycle = self.cycle
        started = time.monotonic()
        log.info("cycle %d started: %s, tier %d", cycle, trigger, tier,
                 extra={"cycle": cycle, "trigger": trigger, "tier": tier})
        try:
            try:  # this process holds the cycle lock: no other process has a session running
                await self._sweep("found at the start of a later cycle")
            except Exception:  # the sweep must never keep the cycle from running
                log.exception("the sweep of sessions left running failed", extra={"cycle": cycle})
            chain = await run_chain(self.db, self.settings, self.validator, self.hub, start_tier=tier,
                                    prompt=prompt, trigger=trigger, on_session=self._track, spec=spec)
            self.last_chain = chain
            _log_cycle_end(cycle, chain, time.monotonic() - started)
            return chain
        except asyncio.CancelledError:  # a signal, or the server shutting down
            seconds = time.monotonic() - started
            log.warning("cycle %d stopped after %.1f s: this process is stopping", cycle, seconds,
                        extra={"cycle": cycle, "status": SessionStatus.INTERRUPTED, "duration_s": round(seconds, 3)})
            raise
        finally:
            self.handles.clear()
            self._running = False
            self._file_lock.release()

    async def run_cycle(self, *, tier: int = FIRST_MODEL_TIER, prompt: str | None = None,
                        trigger: str = Trigger.MANUAL, spec: OutputSpec | None = None) -> list[ChainLink]:
        """Run one chain now and return it; raises :class:`CycleBusy` at once if one is running.
        ``spec``: the first session's output contract (issue #11; None: the default)."""
        self._claim(f"{trigger} cycle from tier {tier}")
        return await self._run_claimed(tier, prompt, trigger, spec)

    async def start_cycle(self, *, tier: int = FIRST_MODEL_TIER, prompt: str | None = None, trigger: str = Trigger.MANUAL,
                          wait: float = FIRST_SESSION_WAIT, spec: OutputSpec | None = None) -> CycleStart:
        """Start a cycle in the background and wait until its first session exists (the one
        run-start path of POST /runs and the Run Now form). Raises :class:`CycleBusy` at once if
        a cycle runs, and the cycle's own exception if it failed before creating a session."""
        first = self._claim(f"{trigger} cycle from tier {tier}")
        cycle = self.cycle
        started = False

        async def body() -> list[ChainLink]:
            nonlocal started
            started = True
            return await self._run_claimed(tier, prompt, trigger, spec)

        def finished(task: asyncio.Task[list[ChainLink]]) -> None:
            if not started:  # cancelled before its first step: _run_claimed's finally never ran
                self._running = False
                self._file_lock.release()
            if not task.cancelled() and (exc := task.exception()) is not None:
                log.error("cycle %d failed: %s: %s", cycle, type(exc).__name__, oneline(exc), exc_info=exc,
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

    def _track(self, pk: int, handle: SessionHandle) -> None:
        self.handles[pk] = handle
        if self.first_session is not None and not self.first_session.done():
            self.first_session.set_result(pk)

    def stop_session(self, pk: int) -> bool:
        handle = self.handles.get(pk)
        if handle is None:
            return False
        handle.stop()
        return True

    def stop_all(self, reason: str = STOPPED_BY_OPERATOR) -> None:
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
            except CycleBusy as exc:
                log.warning("scheduled cycle skipped: %s", exc)
            except Exception:  # a broken cycle must not stop the schedule; logged here, once
                log.exception("scheduled cycle failed", extra={"cycle": self.cycle, "trigger": Trigger.SCHEDULE})
            done += 1
            if cycles is not None and done >= cycles:
                break
            await asyncio.sleep(self._next_delay(started))

    async def shutdown(self) -> None:
        """Stop running sessions (their process groups) and wait for the cycle to wind down."""
        self.stop_all(STOPPED_BY_SHUTDOWN)
        if self.current_task and not self.current_task.done():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self.current_task, timeout=self.settings.kill_grace + 5)


def _log_cycle_end(cycle: int, chain: list[ChainLink], seconds: float) -> None:
    cost = sum(link["cost_usd"] or 0.0 for link in chain)
    word = cycle_status(chain)
    log.info("cycle %d finished: %s, %d session(s), $%.4f, %.1f s", cycle, word, len(chain), cost, seconds,
             extra={"cycle": cycle, "chain": chain[0]["id"] if chain else None, "status": word,
                    "sessions": len(chain), "cost_usd": round(cost, 6), "duration_s": round(seconds, 3)})


def status(supervisor: Supervisor) -> dict[str, Any]:
    return {"busy": supervisor.busy,
            "next_run_at": supervisor.next_run_at.isoformat() if supervisor.next_run_at else None,
            "running_sessions": sorted(supervisor.handles)}
