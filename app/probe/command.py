"""One command check's process: ``/bin/sh -c CMD`` in its own process group, bounded in time and
in memory, never outliving the check.

Why a module of its own: a shell command is the one check that starts processes, and those must
all go when the check ends — at its timeout, when the probe is stopped (SIGTERM cancels the
check), and when it exits leaving a background child behind. The shell leads a new session
(``start_new_session``), so its whole tree is one process group: ``stop`` sends SIGTERM to the
group, waits :data:`KILL_GRACE` s, then SIGKILL. On Linux the shell also gets
``PR_SET_PDEATHSIG``, so a probe killed with SIGKILL takes it along (its own children are left to
finish; the supervisor's sweep does not know them). Stdin is ``/dev/null``; stdout and stderr are
one pipe, of which the first and the last 64 KiB are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal

from app import children

log = logging.getLogger(__name__)

__all__ = ["KILL_GRACE", "CommandRun"]

KILL_GRACE = 0.5  # seconds between SIGTERM and SIGKILL
DRAIN_AFTER_EXIT = 0.5  # seconds to read output after the shell exits (a background child may hold the pipe)
KEEP = 64 * 1024

class _Output:
    """The first and last :data:`KEEP` bytes of everything the command wrote."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = KEEP - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            del self.tail[:-KEEP]

    def text(self) -> str:
        skipped = self.total - len(self.head) - len(self.tail)
        gap = f"\n[... {skipped} bytes ...]\n" if skipped > 0 else ""
        return self.head.decode("utf-8", "replace") + gap + self.tail.decode("utf-8", "replace")


class CommandRun:
    """``async with CommandRun(cmd) as run: code = await run.wait()``; leaving the block stops
    whatever is left of the process group (also when cancelled)."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.output = _Output()
        self.proc: asyncio.subprocess.Process | None = None
        self._pump: asyncio.Task[None] | None = None

    async def __aenter__(self) -> CommandRun:
        creating = asyncio.ensure_future(asyncio.create_subprocess_exec(
            "/bin/sh", "-c", self.command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True,
            preexec_fn=children.die_with_parent()))
        try:
            self.proc = await asyncio.shield(creating)
        except asyncio.CancelledError:
            # Cancelled while asyncio was still wiring up a child that already runs (a busy loop:
            # found by tests/probe/test_checks.py under the full suite): __aexit__ will not run,
            # so finish the creation and stop the group here.
            with contextlib.suppress(Exception):
                self.proc = await creating
            await asyncio.shield(self.stop())
            raise
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
        """SIGTERM the group, SIGKILL it after the grace, reap the shell. Never raises."""
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
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
        transport = getattr(proc, "_transport", None)
        if transport is not None:  # the pipes, now (not when the loop closes)
            transport.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
