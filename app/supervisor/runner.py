"""One running claude CLI: start it, feed every stdout batch to a sink, end it within bounds.

Why a module of its own: this is the process control. The CLI starts in its own process group with
a parent-death signal (``app/children.py``); a timeout, a Stop or an :meth:`RunningProcess.abort`
(the output showed the run cannot succeed) kills the whole tree — SIGTERM to the group, SIGKILL
after the grace, then descendants that left it. stdout is read in chunks with no line-length limit
(asyncio's ``readline`` caps lines at 64 KiB; real lines exceed 16 MiB). After the CLI exits its
pipes are drained for at most :data:`EOF_GRACE` s, then every process still holding one is killed,
and reading stops :data:`DRAIN_AFTER_KILL` s later whatever happens: a run never blocks its cycle
for more than its timeout, the kill grace and these bounds (ARCHITECTURE.md, "The supervisor").

Logging: spawn (pid, binary, cwd; never the prompt, never environment values) and exit (pid, exit
code, duration) at INFO; a timeout, a Stop, the kill escalation and every stray process killed
(with its pid) at WARNING. Background tasks are started with :func:`app.tasks.spawn`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import psutil

from app import children
from app.errors import CLIError
from app.stream.reader import aiter_line_batches
from app.supervisor.launch import CLINotFound, Launch, check_arg_sizes, is_probe, resolve_binary, tier0_env
from app.supervisor.pipes import READ_CHUNK, Pipe, feed_stdin, pipe_writers
from app.supervisor.process_groups import ProcessIdentity, group_members, identity, signal_group
from app.tasks import spawn

log = logging.getLogger(__name__)

STDERR_TAIL_BYTES = 16 * 1024
# After the CLI itself exited, how long a descendant that inherited stdout/stderr may keep the
# pipes open before everything holding them is killed (helpers must not hold a finished session open).
EOF_GRACE = 2.0
# After that kill, how long until reading stops even if a holder could not be killed.
DRAIN_AFTER_KILL = 1.0
# How long to wait for the exit status after SIGKILL (only a process stuck in the kernel takes longer).
EXIT_WAIT = 5.0


@dataclass
class ProcessOutcome:
    exit_code: int | None
    timed_out: bool = False
    stopped: bool = False
    aborted: str | None = None  # why the supervisor ended the run itself (abort()), e.g. rejected credentials
    stderr_tail: str = ""
    killed_pids: list[int] = field(default_factory=list)
    duration_s: float = 0.0


LineSink = Callable[[list[bytes]], Awaitable[None]]


class RunningProcess:
    """One started CLI process; :meth:`stop` may be called from anywhere (the Stop button)."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        self.proc: asyncio.subprocess.Process | None = None
        self._stop_requested = asyncio.Event()
        self._abort_reason: str | None = None
        self._stderr: deque[bytes] = deque()
        self._stderr_len = 0
        self._pipes: tuple[Pipe, ...] = ()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def stop(self) -> None:
        self._stop_requested.set()

    def abort(self, why: str) -> None:
        """End the run at once because of what its output said (``why``, logged): the same kill as a
        Stop or a timeout, recorded as :attr:`ProcessOutcome.aborted`, not as an operator's Stop."""
        if self._abort_reason is None and not self._stop_requested.is_set():
            self._abort_reason = why
        self._stop_requested.set()

    async def run(self, sink: LineSink, kill_grace: float,
                  on_start: Callable[[ProcessIdentity], None] | None = None) -> ProcessOutcome:
        """Start the CLI, feed every stdout batch to ``sink``, end it within bounds. ``on_start``
        gets the started process's identity (to record it) before anything is read."""
        launch = self.launch
        env = await asyncio.to_thread(tier0_env, launch) if is_probe(launch.argv) else launch.env
        binary = resolve_binary(launch.argv[0], env.get("PATH"))
        check_arg_sizes(launch.argv)
        out = await Pipe.open()
        try:
            err = await Pipe.open()
        except BaseException:
            out.close()
            raise
        self._pipes = (out, err)
        started = time.monotonic()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                binary, *launch.argv[1:], cwd=str(launch.cwd), env=env,
                stdin=asyncio.subprocess.DEVNULL if launch.stdin is None else asyncio.subprocess.PIPE,
                stdout=out.write_fd, stderr=err.write_fd, start_new_session=True,
                preexec_fn=children.die_with_parent(),
            )
        except (FileNotFoundError, PermissionError) as exc:
            raise CLINotFound(launch.argv[0]) from exc
        except ValueError as exc:  # e.g. a NUL byte in an argument: no process can be started
            raise CLIError(f"cannot start the CLI: {exc}") from None
        except OSError as exc:
            if exc.errno == errno.E2BIG:  # the whole command line and environment exceed ARG_MAX
                raise CLIError(f"cannot start the CLI: {exc.strerror} (the command line and environment "
                               "exceed the kernel's limit)") from None
            raise
        finally:
            for pipe in self._pipes:
                pipe.close_write_end()
                if self.proc is None:
                    pipe.close()
        proc = self.proc
        pid = proc.pid
        log.info("CLI started: pid %d, binary %s, cwd %s", pid, binary, launch.cwd)

        async def pump() -> None:
            async for batch in aiter_line_batches(out.reader, chunk_size=READ_CHUNK):
                await sink(batch)

        pump_task = spawn(pump(), f"cli-{pid}-stdout")
        err_task = spawn(self._read_stderr(err.reader), f"cli-{pid}-stderr")
        exit_task = spawn(children.exited(proc), f"cli-{pid}-exit")
        stop_task = spawn(self._stop_requested.wait(), f"cli-{pid}-stop")
        tasks = [pump_task, err_task, exit_task, stop_task]
        if proc.stdin is not None and launch.stdin is not None:
            tasks.append(spawn(feed_stdin(proc.stdin, launch.stdin), f"cli-{pid}-stdin"))
        outcome = ProcessOutcome(exit_code=None)
        try:
            if on_start is not None:
                on_start(identity(pid))
            deadline = started + launch.timeout
            await asyncio.wait({pump_task, exit_task, stop_task}, timeout=max(0.0, deadline - time.monotonic()),
                               return_when=asyncio.FIRST_COMPLETED)
            sink_failed = pump_task.done() and pump_task.exception() is not None
            if pump_task.done() and not sink_failed and not exit_task.done() and not stop_task.done():
                # stdout closed but the process lingers: give it the rest of its time.
                await asyncio.wait({exit_task, stop_task}, timeout=max(0.0, deadline - time.monotonic()),
                                   return_when=asyncio.FIRST_COMPLETED)
            if not exit_task.done():
                if stop_task.done() and self._abort_reason is not None:
                    outcome.aborted = self._abort_reason
                    log.warning("CLI pid %d: %s; killing its process group", pid, self._abort_reason)
                elif stop_task.done():
                    outcome.stopped = True
                    log.warning("CLI pid %d: stop requested, killing its process group", pid)
                elif sink_failed:
                    # Nothing reads its stdout any more: it would block, then time out under a false reason.
                    log.warning("CLI pid %d: its output could not be stored, killing its process group", pid)
                else:
                    outcome.timed_out = True
                    log.warning("CLI pid %d timed out after %g s, killing its process group", pid, launch.timeout)
                outcome.killed_pids += await self._kill_group(kill_grace)
            await asyncio.wait({exit_task}, timeout=EXIT_WAIT)
            if not exit_task.done():
                log.error("CLI pid %d: no exit status %g s after SIGKILL; going on without it", pid, EXIT_WAIT)
            await self._drain(pid, pump_task, err_task, outcome)
            pump_task.result()  # re-raise a storage error from the sink
        finally:
            # Pipes another process still holds (or that we stopped reading) mean a holder may live on.
            held = not (pump_task.done() and err_task.done()) or out.forced or err.forced
            for task in tasks:
                if not task.done():
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # Whatever happened, no process of this session outlives it.
            outcome.killed_pids += await self._kill_group(0, pipe_holders=held)
            if proc.returncode is None:  # cancelled before its exit was seen: reap it now, not after the
                with contextlib.suppress(TimeoutError):  # loop that started it is gone (a zombie, a warning)
                    await asyncio.wait_for(children.exited(proc), EXIT_WAIT)
            for pipe in self._pipes:
                pipe.close()
        outcome.exit_code = proc.returncode
        outcome.stderr_tail = b"".join(self._stderr).decode("utf-8", "replace")
        outcome.duration_s = time.monotonic() - started
        how = (" (timed out)" if outcome.timed_out else " (stopped)" if outcome.stopped
               else " (aborted)" if outcome.aborted else "")
        log.info("CLI exited: pid %d, exit code %s, %.1f s%s", pid, outcome.exit_code, outcome.duration_s, how)
        return outcome

    async def _drain(self, pid: int, pump_task: asyncio.Task[None], err_task: asyncio.Task[None],
                     outcome: ProcessOutcome) -> None:
        """The CLI has exited: read its pipes to their end, within bounds."""
        await asyncio.wait({pump_task, err_task}, timeout=EOF_GRACE)
        if pump_task.done() and err_task.done():
            return
        log.warning("CLI pid %d exited but its output is still open after %.1f s (a descendant holds it): "
                    "killing its process group and every process holding its pipes", pid, EOF_GRACE)
        outcome.killed_pids += await self._kill_group(0, pipe_holders=True)
        for task, pipe, name in ((pump_task, self._pipes[0], "stdout"), (err_task, self._pipes[1], "stderr")):
            while not task.done():
                await asyncio.wait({task}, timeout=DRAIN_AFTER_KILL)
                if task.done() or pipe.forced or not pipe.transport.is_reading():
                    continue  # ended, or the reader is behind (a slow sink): nothing is held
                writers = await asyncio.to_thread(pipe_writers, {pipe.inode})
                if writers == []:
                    continue  # nobody can write any more: the end is next
                held_by = [p.pid for p in writers] if writers is not None else "a process not visible to us"
                log.warning("CLI pid %d: its %s is still held open by %s after the kill; stopped reading it "
                            "(every line read so far is kept)", pid, name, held_by)
                pipe.stop_reading()

    async def _read_stderr(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(8192):
            self._stderr.append(chunk)
            self._stderr_len += len(chunk)
            while self._stderr_len > STDERR_TAIL_BYTES and len(self._stderr) > 1:
                self._stderr_len -= len(self._stderr.popleft())

    async def _kill_group(self, grace: float, *, pipe_holders: bool = False) -> list[int]:
        """SIGTERM the process group, SIGKILL after ``grace`` s; then strays that left the group
        (descendants of a live CLI; with ``pipe_holders``, every process holding its pipes)."""
        proc = self.proc
        if proc is None:
            return []
        pgid = proc.pid  # start_new_session: the child leads its own group
        try:
            strays = psutil.Process(proc.pid).children(recursive=True) if proc.returncode is None else []
        except psutil.Error:
            strays = []
        killed: list[int] = []
        # Once the leader exited and the group is empty, never signal a pgid the kernel may have reused.
        if proc.returncode is None or group_members(pgid):
            if grace > 0 and proc.returncode is None:
                if signal_group(pgid, signal.SIGTERM):
                    log.warning("SIGTERM sent to process group %d; SIGKILL in %g s if it does not exit", pgid, grace)
                    killed.append(pgid)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(children.exited(proc), timeout=grace)
            still_running = proc.returncode is None
            if signal_group(pgid, signal.SIGKILL):
                if still_running:
                    log.warning("SIGKILL sent to process group %d (pid %d still running)", pgid, pgid)
                else:
                    log.warning("SIGKILL sent to process group %d (members left after pid %d exited)", pgid, pgid)
                killed.append(pgid)
        stray_pids = []
        for p in strays:
            with contextlib.suppress(psutil.Error):
                p.kill()
                stray_pids.append(p.pid)
        if stray_pids:
            log.warning("killed %d descendant(s) of pid %d that may have left its process group: %s",
                        len(stray_pids), pgid, stray_pids)
        killed += stray_pids
        if pipe_holders and self._pipes:
            for p in await asyncio.to_thread(pipe_writers, {pipe.inode for pipe in self._pipes}) or []:
                with contextlib.suppress(psutil.Error, OSError):
                    if p.pid in killed or os.getpgid(p.pid) == pgid:
                        continue  # already sent SIGKILL above (a stray, or a member of the group)
                    p.kill()
                    killed.append(p.pid)
                    log.warning("killed pid %d: it held the output pipe of CLI pid %d open outside its process "
                                "group (setsid or daemonized)", p.pid, pgid)
        return killed
