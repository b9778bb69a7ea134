"""The CLI's pipes: its stdin (the prompt, written and closed), its stdout and stderr (read).

Why a module of its own: stdout and stderr are pipes created here, not asyncio's ``PIPE``, so the
runner knows their inodes — to find every process still holding a write end after the CLI exited
(:func:`pipe_writers`, from ``/proc``) — and can stop reading one (:meth:`Pipe.stop_reading`). A
pipe is enlarged to :data:`PIPE_SIZE` because the real CLI drops what it has not yet written when it
exits; one read stays :data:`READ_CHUNK`, so live viewers see the batch sizes they always did.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import sys

import psutil

log = logging.getLogger(__name__)

# The real CLI drops what it has not yet written to stdout when it exits (found by
# tests/realcli/test_large_prompts.py: a 350 KB result line came out cut at 100-160 KB
# whenever the supervisor was busy storing the line before it, on main too). Its last writes
# must fit in the pipe: the kernel's pipe (F_SETPIPE_SZ, up to /proc/sys/fs/pipe-max-size, 1 MiB by
# default; 64 KiB otherwise) plus what the reader takes in while the sink works (pause at 2 x limit).
PIPE_SIZE = 1024 * 1024
PIPE_LIMIT = 1024 * 1024
# One read (one batch of lines, one commit, one hub publish) stays at most what it was with
# asyncio's pipes (which paused at 2 x 64 KiB): live viewers see the same batch sizes.
READ_CHUNK = 128 * 1024


class Pipe:
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
    async def open(cls) -> Pipe:
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


async def feed_stdin(writer: asyncio.StreamWriter, data: bytes) -> None:
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


def pipe_writers(inodes: set[int]) -> list[psutil.Process] | None:
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
