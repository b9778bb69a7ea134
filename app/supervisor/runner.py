"""Launching one ``claude`` process and streaming its stdout, with bounded kill escalation.

Why a module of its own: every CLI quirk the supervisor must respect lives here, next to the
code that works around it (reference: ``../shared/reference/claude-code-stream-json.md``):

* **no prompt on the command line**: a command line is readable by every local user
  (``/proc/PID/cmdline``, ``ps``), and prompts carry alert texts, labels and links. The prompt is
  written to the CLI's stdin, a pipe closed right after it (the CLI reads ``-p``'s prompt from
  stdin when no prompt argument is given, §2; a pipe that sends data and closes costs no wait,
  unlike §9's silent open pipe, ``k_stdin_open_pipe``), so ``-p`` has no argument and no variadic
  option (``--allowedTools``, ``--add-dir``: §2, ``l_variadic_option_eats_prompt``) can swallow
  one; the appended system prompt is a file the caller wrote (``--append-system-prompt-file``,
  hidden from ``--help``, §2). Both were checked with the real CLI against the fake API
  (``tests/realcli/test_prompt_channels.py``: the model gets both texts exactly, a resume too).
  This also keeps every argument under the kernel's per-argument limit (``MAX_ARG_STRLEN``,
  128 KiB: ``execve`` fails with E2BIG) whatever the texts' size; the wire schema, which the CLI
  takes inline only (§5.5), is checked against it;
* ``--verbose`` is required with stream-json (§2); ``--json-schema`` takes inline JSON (§5.5);
* ``--resume`` needs the same HOME and cwd and forgets ``--json-schema`` and
  ``--append-system-prompt`` (§8), so a resume repeats every flag;
* the child gets a minimal environment (PATH, its HOME, locale/TZ, ``ANTHROPIC_*``,
  ``CLAUDE_CODE_*``, and an explicit allow-list), not the supervisor's; tier 0, the probe
  (``--model tierops-probe``), gets less (:func:`tier0_env`): none of the CLI's or TierOps'
  variables, nothing secret-named, a HOME of its own instead of the CLI's (which holds its login),
  plus the variables its command checks name (``app/probe/environment.py``);
* its own process group (``start_new_session``) so a timeout, a Stop or an abort (the caller saw
  in the output that the run cannot succeed: rejected credentials, ``session.py``) kills the whole tree:
  SIGTERM to the group, SIGKILL after a grace period, then any descendant that left the group
  (psutil), so nothing is left behind;
* stdout is read in chunks with no line-length limit (asyncio's ``readline`` caps lines at
  64 KiB and discards its buffer past that; real lines exceed 16 MiB).

Processes (issue #9 §4):

* **Bounded drain.** stdout and stderr are pipes this module creates itself (not asyncio's
  ``PIPE``), so it knows their inodes and can stop reading them. After the CLI exits its pipes
  are read to their end for at most :data:`EOF_GRACE` s; if something still holds them open,
  the process group is killed and so is every process holding the write end of either pipe
  (found in ``/proc/*/fd``: a descendant that left the group with ``setsid`` or daemonized is
  not in the group, and after the CLI's exit it is no longer its child either). If a holder
  cannot be killed (another user's process), reading stops :data:`DRAIN_AFTER_KILL` s later:
  lines already read are kept. A descendant that left the group *and* holds none of the pipes
  is a properly detached daemon (e.g. a service a remediation started) and is left alone.
  So a run never blocks its cycle for more than its timeout + the kill grace + these bounds.
* **Parent death.** On Linux the child is started with ``PR_SET_PDEATHSIG = SIGKILL``, so a
  supervisor killed with SIGKILL (or by the OOM killer) takes its CLI with it. It is set by a
  ``preexec_fn`` that only calls a ``prctl`` resolved through ctypes at import time and
  ``os.getppid``. ``preexec_fn`` is documented as unsafe with threads (aiosqlite runs threads):
  the risk is Python code in the forked child needing a lock another thread held at ``fork``;
  this function takes none (no import, no logging, no I/O; CPython re-initialises the GIL and
  import lock in the child), which is the usual, accepted use. The alternative, an exec
  wrapper, costs an extra interpreter start per run and puts every argument through one more
  ``execve``. Two limits, documented rather than hidden: the signal comes when the *thread*
  that forked exits (the event loop's thread, which lives as long as the supervisor), and it
  reaches only the CLI, not its tool processes. Both are covered by the sweep: the CLI's pid,
  process group and start time (psutil ``create_time()``) are handed to ``on_start`` to be
  stored on the session row, and :func:`kill_leftover` kills a recorded CLI still alive at the
  next start (pid and start time must match, so a recycled pid is never killed).

Logging (``app.supervisor.runner``): spawn (pid, binary, cwd; never the prompt, never environment
values) and exit (pid, exit code, duration) at INFO; a timeout, a Stop, the kill escalation and
every stray or leftover process killed (with its pid) at WARNING. Every background task is
started with :func:`app.tasks.spawn`, so an exception it ends with is logged even on a path that
never awaits it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import itertools
import logging
import os
import shutil
import signal
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from app import children
from app.config import PROBE_MODEL
from app.errors import CLIError  # also imported from here by callers (session)
from app.probe.environment import probe_environment
from app.probe.executor import checks_argument
from app.stream.reader import aiter_line_batches
from app.tasks import spawn

log = logging.getLogger(__name__)

STDERR_TAIL_BYTES = 16 * 1024
# After the CLI itself exited, how long a descendant that inherited stdout/stderr may keep the
# pipes open before everything holding them is killed (helpers must not hold a finished session open).
EOF_GRACE = 2.0
# After that kill, how long until reading stops even if a holder could not be killed (issue #9 §4).
DRAIN_AFTER_KILL = 1.0
# How long to wait for the exit status after SIGKILL (only a process stuck in the kernel takes longer).
EXIT_WAIT = 5.0
# The real CLI drops what it has not yet written to stdout when it exits (found by
# tests/realcli/test_issue_9_large_texts.py: a 350 KB result line came out cut at 100-160 KB
# whenever the supervisor was busy storing the line before it, on main too). Its last writes
# must fit in the pipe: the kernel's pipe (F_SETPIPE_SZ, up to /proc/sys/fs/pipe-max-size, 1 MiB by
# default; 64 KiB otherwise) plus what the reader takes in while the sink works (pause at 2 x limit).
PIPE_SIZE = 1024 * 1024
PIPE_LIMIT = 1024 * 1024
# One read (one batch of lines, one commit, one hub publish) stays at most what it was with
# asyncio's pipes (which paused at 2 x 64 KiB): live viewers see the same batch sizes.
READ_CHUNK = 128 * 1024
# The kernel's limit on one argument, terminating NUL included (MAX_ARG_STRLEN = 32 pages).
MAX_ARG_STRLEN = 128 * 1024
# psutil create_time() is boot time (whole seconds, re-read from /proc/stat, which moves when the
# clock is stepped) + start ticks: two readings of one process may differ by up to a second.
START_TIME_TOLERANCE = 1.0
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
    """Everything needed to start one CLI process. ``stdin``: bytes written to the CLI's stdin
    (then closed: the prompt), or None for ``/dev/null``."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]
    timeout: float
    stdin: bytes | None = None


@dataclass(frozen=True)
class ProcessIdentity:
    """What identifies a started CLI across a supervisor restart: pid, process group, and start
    time (psutil ``create_time()``; None if the process was gone before it could be read)."""

    pid: int
    pgid: int
    start_time: float | None


@dataclass
class ProcessOutcome:
    exit_code: int | None
    timed_out: bool = False
    stopped: bool = False
    aborted: str | None = None  # why the supervisor ended the run itself (abort()), e.g. rejected credentials
    stderr_tail: str = ""
    killed_pids: list[int] = field(default_factory=list)
    duration_s: float = 0.0


def stdin_bytes(text: str) -> bytes:
    """A prompt as written to the CLI's stdin (valid UTF-8 whatever the text holds)."""
    return text.encode("utf-8", "replace")


def build_argv(binary: str | Sequence[str], *, model: str, wire_schema: str | None, system_prompt_file: str,
               allowed_tools: list[str], disallowed_tools: list[str], max_turns: int | None,
               add_dirs: Sequence[str] = (), resume: str | None = None,
               max_budget_usd: float | None = None) -> list[str]:
    """The command line: no prompt and no system prompt in it. ``-p`` takes no argument (the caller
    writes the prompt to stdin, reference §2) and ``system_prompt_file`` is passed as
    ``--append-system-prompt-file`` (the caller wrote it). ``wire_schema`` None: no
    ``--json-schema`` (prompted output mode: the schema is in the prompt). ``binary``
    may be a command with leading arguments (tier 0: ``python -m app probe --checks F``).
    ``max_budget_usd``: ``--max-budget-usd`` (issue #13; None: none), a single value, not variadic."""
    head = [binary] if isinstance(binary, str) else list(binary)
    argv = [*head, "-p"]  # -p without a prompt argument reads it from stdin
    if resume:
        argv += ["--resume", resume]
    if add_dirs:
        # Read-only commands outside the cwd are blocked without it (found by the realcli tests:
        # `tail /var/log/x` → "may only read ... from the allowed working directories"). Variadic:
        # the next option (--model) ends the list.
        argv += ["--add-dir", *add_dirs]
    argv += ["--model", model, "--output-format", "stream-json", "--verbose"]
    if wire_schema is not None:
        argv += ["--json-schema", wire_schema]
    argv += ["--append-system-prompt-file", system_prompt_file]
    if allowed_tools:
        argv += ["--allowedTools", ",".join(allowed_tools)]
    if disallowed_tools:
        argv += ["--disallowedTools", ",".join(disallowed_tools)]
    if max_turns:
        argv += ["--max-turns", str(max_turns)]
    if max_budget_usd is not None:
        # The CLI refuses 0 or less ("must be a positive number greater than 0") and stops a run
        # once its own spend reaches the amount (tests/realcli/test_budget.py).
        argv += ["--max-budget-usd", repr(float(max_budget_usd))]
    return argv


def check_arg_sizes(argv: Sequence[str]) -> None:
    """Raise :class:`CLIError` naming the argument that ``execve`` would refuse (E2BIG): the
    wire schema, for one, can only be passed inline (reference §2, ``--json-schema``)."""
    for i, arg in enumerate(argv):
        size = len(arg.encode("utf-8", "surrogatepass")) + 1
        if size > MAX_ARG_STRLEN:
            what = f"the value of {argv[i - 1]}" if i > 1 and argv[i - 1].startswith("-") else f"argument {i}"
            raise CLIError(f"cannot start the CLI: {what} is {size - 1} bytes, over the kernel's limit of "
                           f"{MAX_ARG_STRLEN // 1024} KiB per command-line argument")


def child_env(home: Path, allow: list[str], source: dict[str, str] | None = None) -> dict[str, str]:
    source = dict(os.environ if source is None else source)
    env = {k: v for k, v in source.items()
           if k in ENV_ALWAYS or k.startswith(ENV_PREFIXES) or k in allow}
    env.setdefault("PATH", os.defpath)
    env["HOME"] = str(home)
    return env


def is_probe(argv: Sequence[str]) -> bool:
    """Whether ``argv`` starts tier 0: the probe runs as model ``tierops-probe`` (``config.tier(0)``)."""
    return any(flag == "--model" and value == PROBE_MODEL for flag, value in itertools.pairwise(argv))


def tier0_env(launch: Launch) -> dict[str, str]:
    """The probe's environment instead of the CLI's ``launch.env``: no credential of the CLI or of
    TierOps, its own HOME, the variables its checks file names (``probe_environment``). Blocking
    (reads the checks file): call it in a thread."""
    return probe_environment(launch.env, os.environ, checks_argument(launch.argv[1:]))


def resolve_binary(binary: str, path: str | None) -> str:
    if os.sep in binary:
        if os.path.isfile(binary) and os.access(binary, os.X_OK):
            return binary
        raise CLINotFound(binary)
    found = shutil.which(binary, path=path)
    if not found:
        raise CLINotFound(binary)
    return found


# --- parent-death signal (Linux): app/children.py ----------------------------------------------

pdeathsig_supported = children.pdeathsig_supported


# --- pipes ---------------------------------------------------------------------------------------

class _Pipe:
    """A pipe for one of the child's outputs: the write end goes to the child, the read end is an
    asyncio transport feeding :attr:`reader`. Owning it (rather than asyncio's ``PIPE``) gives its
    inode, to find who else holds it, and lets the reading stop (:meth:`stop_reading`)."""

    def __init__(self, reader: asyncio.StreamReader, transport: asyncio.ReadTransport, inode: int,
                 write_fd: int) -> None:
        self.reader = reader
        self.transport = transport
        self.inode = inode
        self.write_fd: int | None = write_fd
        self.forced = False  # reading was stopped before the end of the pipe

    @classmethod
    async def open(cls) -> _Pipe:
        loop = asyncio.get_running_loop()
        r, w = os.pipe()  # both O_CLOEXEC: the child only gets the write end, as its fd 1 or 2
        try:
            inode = os.fstat(r).st_ino
            if sys.platform.startswith("linux"):
                with contextlib.suppress(OSError):  # over pipe-max-size: keep the default size
                    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
            reader = asyncio.StreamReader(limit=PIPE_LIMIT)
            protocol = asyncio.StreamReaderProtocol(reader)
            pipe = os.fdopen(r, "rb", buffering=0)
        except BaseException:
            os.close(r)
            os.close(w)
            raise
        try:
            transport, _ = await loop.connect_read_pipe(lambda: protocol, pipe)
        except BaseException:
            pipe.close()
            os.close(w)
            raise
        return cls(reader, transport, inode, w)

    def close_write_end(self) -> None:
        """Our copy of the write end: closed once the child has its own, or the end never comes."""
        if self.write_fd is not None:
            os.close(self.write_fd)
            self.write_fd = None

    def stop_reading(self) -> None:
        """Close the read end: the reader sees the end at once (what it already read is kept)."""
        self.forced = True
        self.transport.close()

    def close(self) -> None:
        self.close_write_end()
        if not self.transport.is_closing():
            self.transport.close()


async def _feed_stdin(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Write the prompt and close stdin: the CLI reads it to its end (§9: only a pipe that stays
    open without data costs a wait)."""
    try:
        writer.write(data)
        await writer.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the CLI exited without reading it (a usage error): its stderr says why
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


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
        self._pipes: tuple[_Pipe, ...] = ()

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
        out = await _Pipe.open()
        try:
            err = await _Pipe.open()
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
            tasks.append(spawn(_feed_stdin(proc.stdin, launch.stdin), f"cli-{pid}-stdin"))
        outcome = ProcessOutcome(exit_code=None)
        try:
            if on_start is not None:
                on_start(_identity(pid))
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
        """The CLI has exited: read its pipes to their end, within bounds (issue #9 §4)."""
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
                writers = await asyncio.to_thread(_pipe_writers, {pipe.inode})
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
        if proc.returncode is None or _group_members(pgid):
            if grace > 0 and proc.returncode is None:
                if _signal_group(pgid, signal.SIGTERM):
                    log.warning("SIGTERM sent to process group %d; SIGKILL in %g s if it does not exit", pgid, grace)
                    killed.append(pgid)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(children.exited(proc), timeout=grace)
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
        if pipe_holders and self._pipes:
            for p in await asyncio.to_thread(_pipe_writers, {pipe.inode for pipe in self._pipes}) or []:
                with contextlib.suppress(psutil.Error, OSError):
                    if p.pid in killed or os.getpgid(p.pid) == pgid:
                        continue  # already sent SIGKILL above (a stray, or a member of the group)
                    p.kill()
                    killed.append(p.pid)
                    log.warning("killed pid %d: it held the output pipe of CLI pid %d open outside its process "
                                "group (setsid or daemonized)", p.pid, pgid)
        return killed


def _identity(pid: int) -> ProcessIdentity:
    try:
        start: float | None = psutil.Process(pid).create_time()
    except psutil.Error:
        start = None  # already gone (and reaped): nothing left to recognise
    return ProcessIdentity(pid=pid, pgid=pid, start_time=start)


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


def _pipe_writers(inodes: set[int]) -> list[psutil.Process] | None:
    """Processes other than this one holding the write end of a pipe with one of ``inodes``
    (from ``/proc/<pid>/fd`` and ``fdinfo``); None when ``/proc`` cannot be read at all. Processes
    whose fds cannot be read (another user's) are not seen."""
    targets = {f"pipe:[{inode}]" for inode in inodes}
    me = os.getpid()
    try:
        entries = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    found: list[psutil.Process] = []
    for pid in entries:
        if pid == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") not in targets or not _opened_for_writing(pid, fd):
                    continue
                found.append(psutil.Process(pid))
            except (OSError, psutil.Error):
                continue
            break
    return found


def _opened_for_writing(pid: int, fd: str) -> bool:
    with open(f"/proc/{pid}/fdinfo/{fd}") as fh:
        for line in fh:
            if line.startswith("flags:"):
                return int(line.split()[1], 8) & os.O_ACCMODE != os.O_RDONLY
    return False


# --- leftovers of a supervisor that died ----------------------------------------------------------

def kill_leftover(pid: int, pgid: int | None, start_time: float | None, home: Path | None = None) -> list[int]:
    """Kill a CLI a dead supervisor left running (issue #9 §4), and its process group; return the
    pids killed. Blocking (psutil): call it in a thread.

    Only when the process with ``pid`` started at ``start_time`` (within START_TIME_TOLERANCE): a
    recycled pid is someone else's, and so is the group it leads. When the CLI itself is gone (the
    parent-death signal reaches only the CLI), the members of its recorded group that started after
    it and carry the HOME the supervisor gives its CLIs are its orphaned tool processes: killed too.
    """
    if start_time is None:
        return []
    targets: dict[int, psutil.Process] = {}
    try:
        leader: psutil.Process | None = psutil.Process(pid)
    except psutil.Error:
        leader = None
    if leader is not None:
        try:
            if not _started_at(leader, start_time):
                return []  # the pid was recycled: not ours
            targets[pid] = leader
            for child in leader.children(recursive=True):
                targets[child.pid] = child
        except psutil.Error:
            leader = None
    if pgid is not None:
        for member_pid in _group_members(pgid):
            if member_pid in targets:
                continue
            with contextlib.suppress(psutil.Error):
                member = psutil.Process(member_pid)
                if leader is not None or (home is not None and _orphan_of(member, start_time, home)):
                    targets[member_pid] = member
    killed = []
    for p in targets.values():
        with contextlib.suppress(psutil.Error):
            p.kill()
            killed.append(p.pid)
            what = "CLI" if p.pid == pid else f"process of CLI pid {pid}"
            log.warning("killed pid %d: a leftover %s of a session a stopped supervisor left running", p.pid, what)
    _wait_dead([targets[k] for k in killed], timeout=2)
    return killed


def recorded_process(pid: int, start_time: float | None) -> psutil.Process | None:
    """The live process ``pid`` when it is the one recorded with ``start_time``, else None (gone,
    a zombie, or a recycled pid: someone else's). The one rule :func:`kill_leftover` and a Stop
    from another process (issue #14, ``remote_stop``) apply before signalling a recorded CLI."""
    if start_time is None:
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or not _started_at(proc, start_time):
            return None
    except psutil.Error:
        return None
    return proc


def _started_at(proc: psutil.Process, start_time: float) -> bool:
    return abs(proc.create_time() - start_time) <= START_TIME_TOLERANCE


def _wait_dead(procs: list[psutil.Process], timeout: float) -> None:
    """Until each process is gone or a zombie. Never ``waitpid`` (``psutil.wait_procs`` reaps our
    own children, whose exit status asyncio's child watcher must get)."""
    deadline = time.monotonic() + timeout
    for p in procs:
        while time.monotonic() < deadline:
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.Error:
                break
            time.sleep(0.02)


def _orphan_of(member: psutil.Process, start_time: float, home: Path) -> bool:
    if member.create_time() < start_time - START_TIME_TOLERANCE:
        return False
    try:
        return member.environ().get("HOME") == str(home)
    except psutil.Error:
        return False
