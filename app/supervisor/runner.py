"""Launching one ``claude`` process and streaming its stdout, with bounded kill escalation.

Why a module of its own: every CLI quirk the supervisor must respect lives here, next to the
code that works around it (reference: ``../shared/reference/claude-code-stream-json.md``):

* the prompt goes right after ``-p``: ``--allowedTools``/``--disallowedTools`` are variadic and
  swallow a positional prompt placed after them (§2, ``l_variadic_option_eats_prompt``); every
  variadic list is followed by another option;
* ``--verbose`` is required with stream-json (§2); ``--json-schema`` takes inline JSON (§5.5);
* stdin is ``/dev/null``: an open pipe costs a 3 s wait (§9, ``k_stdin_open_pipe``);
* ``--resume`` needs the same HOME and cwd and forgets ``--json-schema`` and
  ``--append-system-prompt`` (§8), so a resume repeats every flag;
* the child gets a minimal environment (PATH, its HOME, locale/TZ, ``ANTHROPIC_*``,
  ``CLAUDE_CODE_*``, and an explicit allow-list), not the supervisor's;
* its own process group (``start_new_session``) so a timeout or Stop kills the whole tree:
  SIGTERM to the group, SIGKILL after a grace period, then any descendant that left the group
  (psutil), so nothing is left behind;
* stdout is read in chunks with no line-length limit (asyncio's ``readline`` caps lines at
  64 KiB and discards its buffer past that; real lines exceed 16 MiB).

Logging (``app.supervisor.runner``): spawn (pid, binary, cwd; never the prompt, never environment
values) and exit (pid, exit code, duration) at INFO; a timeout, a Stop, the kill escalation and
strays killed at WARNING. Every background task is started with :func:`app.tasks.spawn`, so an
exception it ends with is logged even on a path that never awaits it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from app.errors import CLIError  # also imported from here by callers (session)
from app.stream.reader import aiter_line_batches
from app.tasks import spawn

log = logging.getLogger(__name__)

STDERR_TAIL_BYTES = 16 * 1024
# After the CLI itself exited, how long a grandchild that inherited stdout may keep the pipe open
# before the group is killed (helper processes must not hold a finished session open).
EOF_GRACE = 2.0
ENV_PREFIXES = ("ANTHROPIC_", "CLAUDE_CODE_")
ENV_ALWAYS = ("PATH", "LANG", "LC_ALL", "TZ")
INSTALL_HINT = ("install it with `npm install -g @anthropic-ai/claude-code@2.1.197` (or `bash "
                "scripts/install-claude.sh`) and/or point TIEROPS_CLAUDE_BIN at the binary")


class CLINotFound(CLIError):
    def __init__(self, binary: str) -> None:
        super().__init__(f"claude CLI not found: {binary!r} is not an executable file or on PATH; {INSTALL_HINT}")
        self.binary = binary


@dataclass
class Launch:
    """Everything needed to start one CLI process."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]
    timeout: float


@dataclass
class ProcessOutcome:
    exit_code: int | None
    timed_out: bool = False
    stopped: bool = False
    stderr_tail: str = ""
    killed_pids: list[int] = field(default_factory=list)
    duration_s: float = 0.0


def build_argv(binary: str, *, prompt: str, model: str, wire_schema: str, system_prompt: str,
               allowed_tools: list[str], disallowed_tools: list[str], max_turns: int | None,
               add_dirs: Sequence[str] = (), resume: str | None = None) -> list[str]:
    if prompt.startswith("-"):
        # The CLI's parser would read a leading dash as an option (and fail or misparse).
        prompt = " " + prompt
    argv = [binary, "-p", prompt]  # prompt right after -p: variadic options cannot swallow it
    if resume:
        argv += ["--resume", resume]
    if add_dirs:
        # Read-only commands outside the cwd are blocked without it (found by the realcli tests:
        # `tail /var/log/x` → "may only read ... from the allowed working directories"). Variadic:
        # the next option (--model) ends the list.
        argv += ["--add-dir", *add_dirs]
    argv += ["--model", model, "--output-format", "stream-json", "--verbose", "--json-schema", wire_schema,
             "--append-system-prompt", system_prompt]
    if allowed_tools:
        argv += ["--allowedTools", ",".join(allowed_tools)]
    if disallowed_tools:
        argv += ["--disallowedTools", ",".join(disallowed_tools)]
    if max_turns:
        argv += ["--max-turns", str(max_turns)]
    return argv


def child_env(home: Path, allow: list[str], source: dict[str, str] | None = None) -> dict[str, str]:
    source = dict(os.environ if source is None else source)
    env = {k: v for k, v in source.items()
           if k in ENV_ALWAYS or k.startswith(ENV_PREFIXES) or k in allow}
    env.setdefault("PATH", os.defpath)
    env["HOME"] = str(home)
    return env


def resolve_binary(binary: str, path: str | None) -> str:
    if os.sep in binary:
        if os.path.isfile(binary) and os.access(binary, os.X_OK):
            return binary
        raise CLINotFound(binary)
    found = shutil.which(binary, path=path)
    if not found:
        raise CLINotFound(binary)
    return found


LineSink = Callable[[list[bytes]], Awaitable[None]]


class RunningProcess:
    """One started CLI process; :meth:`stop` may be called from anywhere (the Stop button)."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        self.proc: asyncio.subprocess.Process | None = None
        self._stop_requested = asyncio.Event()
        self._stderr: deque[bytes] = deque()
        self._stderr_len = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def stop(self) -> None:
        self._stop_requested.set()

    async def run(self, sink: LineSink, kill_grace: float) -> ProcessOutcome:
        launch = self.launch
        binary = resolve_binary(launch.argv[0], launch.env.get("PATH"))
        started = time.monotonic()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                binary, *launch.argv[1:], cwd=str(launch.cwd), env=launch.env,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except (FileNotFoundError, PermissionError) as exc:
            raise CLINotFound(launch.argv[0]) from exc
        except ValueError as exc:  # e.g. a NUL byte in an argument: no process can be started
            raise CLIError(f"cannot start the CLI: {exc}") from None
        proc = self.proc
        assert proc.stdout is not None and proc.stderr is not None  # noqa: S101 (both are PIPE above)
        pid = proc.pid
        log.info("CLI started: pid %d, binary %s, cwd %s", pid, binary, launch.cwd)

        async def pump() -> None:
            async for batch in aiter_line_batches(proc.stdout):  # type: ignore[arg-type]
                await sink(batch)

        pump_task = spawn(pump(), f"cli-{pid}-stdout")
        err_task = spawn(self._read_stderr(proc.stderr), f"cli-{pid}-stderr")
        exit_task = spawn(_exited(proc), f"cli-{pid}-exit")
        stop_task = spawn(self._stop_requested.wait(), f"cli-{pid}-stop")
        outcome = ProcessOutcome(exit_code=None)
        try:
            deadline = started + launch.timeout
            done, _ = await asyncio.wait({pump_task, exit_task, stop_task}, timeout=launch.timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
            while exit_task in done and not pump_task.done():
                # The CLI exited; drain what is left in the pipe, unless a grandchild holds it open.
                done, _ = await asyncio.wait({pump_task, stop_task}, timeout=EOF_GRACE,
                                             return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    log.warning("CLI pid %d exited but its stdout is still open after %.1f s "
                                "(a descendant holds it): killing its process group", pid, EOF_GRACE)
                    outcome.killed_pids += await self._kill_group(0)
                    break
            if pump_task.done() and not exit_task.done():
                # stdout closed but the process lingers: give it the rest of its time.
                remaining = max(0.0, deadline - time.monotonic())
                done, _ = await asyncio.wait({exit_task, stop_task}, timeout=remaining,
                                             return_when=asyncio.FIRST_COMPLETED)
            if stop_task.done() and not exit_task.done():
                outcome.stopped = True
                log.warning("CLI pid %d: stop requested, killing its process group", pid)
                outcome.killed_pids += await self._kill_group(kill_grace)
            elif not exit_task.done():
                outcome.timed_out = True
                log.warning("CLI pid %d timed out after %g s, killing its process group", pid, launch.timeout)
                outcome.killed_pids += await self._kill_group(kill_grace)
            await exit_task
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(pump_task), timeout=EOF_GRACE)
            if not pump_task.done():
                log.warning("CLI pid %d: stdout still open %.1f s after the exit, killing its process group",
                            pid, EOF_GRACE)
                outcome.killed_pids += await self._kill_group(0)
                await pump_task
            pump_task.result()  # re-raise a storage error from the sink
        finally:
            for task in (pump_task, err_task, exit_task, stop_task):
                if not task.done():
                    task.cancel()
            await asyncio.gather(pump_task, err_task, exit_task, stop_task, return_exceptions=True)
            # Whatever happened, no process of this session outlives it.
            outcome.killed_pids += await self._kill_group(0)
        outcome.exit_code = proc.returncode
        outcome.stderr_tail = b"".join(self._stderr).decode("utf-8", "replace")
        outcome.duration_s = time.monotonic() - started
        how = " (timed out)" if outcome.timed_out else " (stopped)" if outcome.stopped else ""
        log.info("CLI exited: pid %d, exit code %s, %.1f s%s", pid, outcome.exit_code, outcome.duration_s, how)
        return outcome

    async def _read_stderr(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(8192):
            self._stderr.append(chunk)
            self._stderr_len += len(chunk)
            while self._stderr_len > STDERR_TAIL_BYTES and len(self._stderr) > 1:
                self._stderr_len -= len(self._stderr.popleft())

    async def _kill_group(self, grace: float) -> list[int]:
        """SIGTERM the process group, SIGKILL after ``grace`` s; then strays that left the group."""
        proc = self.proc
        if proc is None:
            return []
        pgid = proc.pid  # start_new_session: the child leads its own group
        try:
            strays = psutil.Process(proc.pid).children(recursive=True) if proc.returncode is None else []
        except psutil.Error:
            strays = []
        killed: list[int] = []
        if proc.returncode is not None and not _group_members(pgid):
            return killed  # group gone: never signal a pgid the kernel may have reused
        if grace > 0 and proc.returncode is None:
            if _signal_group(pgid, signal.SIGTERM):
                log.warning("SIGTERM sent to process group %d; SIGKILL in %g s if it does not exit", pgid, grace)
                killed.append(pgid)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(_exited(proc), timeout=grace)
        still_running = proc.returncode is None
        if _signal_group(pgid, signal.SIGKILL):
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
        return killed


async def _exited(proc: asyncio.subprocess.Process) -> int:
    """The exit status, as soon as the child exited. ``proc.wait()`` started before the exit also
    waits for every pipe to close (CPython 3.11), which a grandchild holding stdout delays; so it
    races a poll of ``returncode`` (set at exit). The usual case returns with ``wait()``, at once."""
    waiter = spawn(proc.wait(), f"cli-{proc.pid}-wait")
    try:
        while proc.returncode is None:
            done, _ = await asyncio.wait({waiter}, timeout=0.05)
            if done:
                break
        return proc.returncode  # type: ignore[return-value]
    finally:
        if not waiter.done():
            waiter.cancel()


def _group_members(pgid: int) -> list[int]:
    members = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(p.pid) == pgid:
                members.append(p.pid)
    return members


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False
