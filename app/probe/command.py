"""One command check's process: ``/bin/sh -c CMD`` in its own process group, bounded in time and
in memory, never outliving the check.

Why a module of its own: a shell command is the one check that starts processes, and those must
all go when the check ends — at its timeout, when the probe is stopped (SIGTERM cancels the
check), and when it exits leaving a background child behind. The shell leads a new session
(``start_new_session``), so its whole tree is one process group: ``stop`` sends SIGTERM to the
group, waits :data:`KILL_GRACE` s, then SIGKILL; on Linux it then kills and reaps what left the
group (``setsid``, a double fork), found by the tag in its environment (``reaper.py``: the probe
adopts orphans). The command sees a minimal environment, its ``env:`` names added
(``environment.py``), never the probe's own. On Linux the shell also gets
``PR_SET_PDEATHSIG``, so a probe killed with SIGKILL takes it along (its own children are left to
finish; the supervisor's sweep does not know them). Stdin is ``/dev/null``; stdout and stderr are
one pipe, of which the first and the last 64 KiB are kept, with 64 KiB more beside each cut so that
what is shown is redacted before it is cut (:meth:`_Output.shown`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import resource
import signal
from collections.abc import Callable, Iterable

from app import children
from app.probe import limits, reaper
from app.probe.environment import command_environment
from app.redact import redact_then_cut

log = logging.getLogger(__name__)

__all__ = ["KILL_GRACE", "CommandRun"]

KILL_GRACE = 0.5  # seconds between SIGTERM and SIGKILL
DRAIN_AFTER_EXIT = 0.5  # seconds to read output after the shell exits (a background child may hold the pipe)
KEEP = 64 * 1024
# Kept beyond each cut (after the head, before the tail): a secret straddling a cut is whole in the
# kept text, so it is masked before the cut is made (:meth:`_Output.shown`).
MARGIN = KEEP


class _Output:
    """The first and last :data:`KEEP` bytes of everything the command wrote, each with
    :data:`MARGIN` bytes more on the side of its cut."""

    def __init__(self) -> None:
        self.head = bytearray()  # the first KEEP + MARGIN bytes
        self.tail = bytearray()  # the last KEEP + MARGIN bytes (overlapping the head while short)
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = KEEP + MARGIN - len(self.head)
        if room > 0:
            self.head += chunk[:room]
        self.tail += chunk
        del self.tail[:-(KEEP + MARGIN)]

    def _whole(self) -> bytes | None:
        """Everything written, while the head and the tail still cover it; else None."""
        overlap = len(self.head) + len(self.tail) - self.total
        return bytes(self.head + self.tail[overlap:]) if overlap >= 0 else None

    def _gap(self) -> str:
        return f"\n[... {self.total - 2 * KEEP} bytes ...]\n"

    def text(self) -> str:
        """What is kept, as written (to look for a text in it; never to be shown)."""
        whole = self._whole()
        if whole is not None and len(whole) <= 2 * KEEP:
            return whole.decode("utf-8", "replace")
        return (self.head[:KEEP].decode("utf-8", "replace") + self._gap()
                + self.tail[-KEEP:].decode("utf-8", "replace"))

    def shown(self, redact: Callable[[str], str]) -> str:
        """What is kept, as it may be shown: each part redacted with its margin, then cut, so a
        secret across a cut is masked whole rather than half left in view."""
        whole = self._whole()
        if whole is not None and len(whole) <= 2 * KEEP:
            return redact(whole.decode("utf-8", "replace"))
        head = redact_then_cut(self.head.decode("utf-8", "replace"), KEEP, redact)
        tail = redact_then_cut(self.tail.decode("utf-8", "replace"), KEEP, redact, keep="tail")
        return head + self._gap() + tail


class CommandRun:
    """``async with CommandRun(cmd) as run: code = await run.wait()``; leaving the block stops
    whatever is left of the process group (also when cancelled)."""

    def __init__(self, command: str, env_names: Iterable[str] = ()) -> None:
        self.command = command
        # A minimal environment (app/probe/environment.py) and the tag its processes are found by.
        self.tag = reaper.new_tag()
        self.env = {**command_environment(env_names), reaper.TAG: self.tag}
        self.output = _Output()
        self.proc: asyncio.subprocess.Process | None = None
        self._pump: asyncio.Task[None] | None = None

    async def __aenter__(self) -> CommandRun:
        creating = asyncio.ensure_future(asyncio.create_subprocess_exec(
            "/bin/sh", "-c", self.command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True, env=self.env, preexec_fn=_preexec()))
        try:
            self.proc = await asyncio.shield(creating)
        except asyncio.CancelledError:
            # Cancelled while asyncio was still wiring up a child that already runs (a busy loop:
            # found by tests/probe/test_checks.py under the full suite): __aexit__ will not run,
            # so finish the creation and stop the group here.
            with contextlib.suppress(Exception):
                self.proc = await creating
                reaper.shell_started(self.proc.pid)
            await asyncio.shield(self.stop())
            raise
        reaper.shell_started(self.proc.pid)
        if self.proc.stdout is None:  # pragma: no cover - PIPE was asked for
            raise RuntimeError("no stdout pipe")
        self._pump = asyncio.ensure_future(self._read(self.proc.stdout))
        return self

    async def __aexit__(self, *exc: object) -> None:
        # Run the stop to its end even if the check is cancelled again meanwhile (a timeout and a
        # SIGTERM at once): a group left between SIGTERM and SIGKILL could outlive the probe.
        stopping = asyncio.ensure_future(self.stop())
        cancelled = False
        while not stopping.done():
            try:
                await asyncio.shield(stopping)
            except asyncio.CancelledError:
                cancelled = True
        if cancelled:
            raise asyncio.CancelledError

    async def _read(self, stdout: asyncio.StreamReader) -> None:
        while chunk := await stdout.read(KEEP):
            self.output.add(chunk)

    async def wait(self) -> int:
        """The shell's exit code, once it exited and its output was read (or
        :data:`DRAIN_AFTER_EXIT` s passed: a background child still holds the pipe)."""
        if self.proc is None or self._pump is None:
            raise RuntimeError("CommandRun.wait() outside its 'async with' block")
        code = await children.exited(self.proc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._pump), DRAIN_AFTER_EXIT)
        return code

    async def stop(self) -> None:
        """SIGTERM the group, SIGKILL it after the grace, reap the shell, then kill and reap what
        the check left outside its group (``reaper.sweep``, Linux). Never raises."""
        proc = self.proc
        if proc is None:
            return
        pgid = proc.pid  # start_new_session: the shell leads its group
        if proc.returncode is None or _group_alive(pgid):
            log.debug("stopping command group %d", pgid)
            _signal_group(pgid, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(children.exited(proc), KILL_GRACE)
            _signal_group(pgid, signal.SIGKILL)
        await children.exited(proc)  # not proc.wait(): a process that left the group may still hold the pipe
        reaper.shell_reaped(proc.pid)
        if reaper.adopting():
            try:
                left = await asyncio.to_thread(reaper.sweep, self.tag, pgid)
            except Exception:  # never raises: what is left goes at the probe's exit
                log.exception("command group %d: the sweep of its leftover processes failed", pgid)
            else:
                if left:
                    log.warning("command group %d: killed %d process(es) it left running outside its group: %s",
                                pgid, len(left), left)
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
        transport = getattr(proc, "_transport", None)
        if transport is not None:  # the pipes, now (not when the loop closes)
            transport.close()


def _preexec() -> Callable[[], None] | None:
    """The shell's ``preexec_fn``: the parent-death signal, and the open-files limit the probe was
    started with (it raised its own, ``limits.py``; a program using ``select()`` needs the low one)."""
    die = children.die_with_parent()
    limit = limits.child_limit()
    if limit is None:
        return die
    return functools.partial(_in_child, die, limit)


def _in_child(die: Callable[[], None] | None, limit: tuple[int, int]) -> None:
    """Runs in the forked child: C calls only (no import, no lock, no I/O), like ``die_with_parent``."""
    if die is not None:
        die()
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, limit)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
