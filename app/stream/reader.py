"""Splitting a byte stream into lines without asyncio's line-length limit.

One framer, :class:`LineFramer`, for both readers: :func:`iter_lines` (a stream file, for
``tierops ingest``) and :func:`aiter_line_batches` (a child's stdout, for the supervisor). The
two used to carry their own copy of the splitting code, and every fix (the quadratic re-joining of
a long line, CRLF) had to be made twice. The framer does no I/O, so it is tested on its own at
every chunk boundary; the wrappers only read and hand it chunks.

What the two readers deliberately do differently:

* **a file has no cap**: a line of any length is returned whole (the CLI prints single lines above
  16 MiB: a 20 MB tool result is one line), and the ingest wrapper also hashes every byte it reads
  (idempotency), once per chunk rather than once per line;
* **a child has a cap** (:data:`MAX_LINE`): asyncio's ``readline`` caps lines at 64 KiB and
  discards its buffer past that, so the child's stdout is read in chunks instead; a runaway child
  printing a line longer than the cap must not grow memory without bound, so that line is passed
  on in pieces of ``max_line`` bytes: nothing is dropped, the pieces join back to the line.

Memory is bounded by the longest line (or the cap) plus one chunk.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from typing import BinaryIO, Protocol

log = logging.getLogger(__name__)

CHUNK = 1024 * 1024
MAX_LINE = 256 * 1024 * 1024


class _Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...


class LineFramer:
    """Bytes in, complete lines out; pure (no I/O), one instance per stream.

    :meth:`feed` takes the next chunk (any size, any boundary) and returns the lines it completed,
    each without its line ending; :meth:`finish` returns the unterminated last line, if any.

    * Line ending: ``\\n``. A line ending ``\\r\\n`` is framed without the ``\\r``: the CLI prints
      ``\\n``, but a stream file saved on Windows must not leave ``\\r`` on every stored line. A
      lone ``\\r`` (not followed by ``\\n``) is content and kept, also at the end of an
      unterminated last line.
    * Empty lines are returned as ``b""``: dropping them is the parser's decision, not the
      framer's (``parse_line`` returns None for them).
    * ``max_line`` (``None``: no cap): a line longer than that comes out as several items, pieces
      of exactly ``max_line`` bytes and a last, non-empty piece with the rest; joined, they give
      the line back. A line of at most ``max_line`` bytes is one item.
    * A chunk with no newline is only appended to a list (joined once when the line ends), so a
      long line fed in many chunks costs linear, not quadratic, time.
    """

    __slots__ = ("_len", "_parts", "_spilled", "max_line")

    def __init__(self, max_line: int | None = None) -> None:
        if max_line is not None and max_line < 1:
            raise ValueError(f"max_line must be at least 1 (or None for no cap), not {max_line}")
        self.max_line = max_line
        self._parts: list[bytes] = []  # the unterminated line so far
        self._len = 0
        self._spilled = False  # pieces of the current line were already returned (the cap)

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines completed by ``chunk`` (possibly none), in order."""
        if not chunk:
            return []
        if chunk.find(b"\n") == -1:  # the middle of a long line: no joining yet
            self._parts.append(chunk)
            self._len += len(chunk)
            if self.max_line is not None and self._len > self.max_line:
                return self._spill()
            return []
        lines = chunk.split(b"\n")
        tail = lines.pop()
        partial_len = self._len
        spilled = self._spilled
        if self._parts:
            self._parts.append(lines[0])
            lines[0] = b"".join(self._parts)
        self._parts, self._len, self._spilled = [], 0, False
        if b"\r" in chunk or lines[0].endswith(b"\r"):  # rare: the CLI prints bare \n
            lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
        if spilled and not lines[0]:
            # The cap already passed on the whole line (its last piece ended right before the
            # newline, or before "\r\n"): no empty piece for it.
            del lines[0]
        cap = self.max_line
        if cap is not None and partial_len + len(chunk) > cap:
            lines = [piece for line in lines for piece in _pieces(line, cap)]
        if tail:
            self._parts.append(tail)
            self._len = len(tail)
            if cap is not None and self._len > cap:
                lines += self._spill()
        return lines

    def finish(self) -> list[bytes]:
        """The unterminated last line (as is: a trailing lone ``\\r`` is kept), or nothing."""
        if not self._parts:
            return []
        line = b"".join(self._parts)
        self._parts, self._len, self._spilled = [], 0, False
        return [line]

    def _spill(self) -> list[bytes]:
        """Pass on the buffered part of an over-long line in ``max_line`` pieces, keeping a
        non-empty rest of at most ``max_line`` bytes (so a trailing ``\\r`` stays buffered until
        we know whether ``\\n`` follows)."""
        cap = self.max_line
        assert cap is not None  # noqa: S101 (only called when a cap is set; narrows the type)
        data = b"".join(self._parts)
        n = (len(data) - 1) // cap  # whole pieces that leave a non-empty rest
        pieces = [data[i * cap:(i + 1) * cap] for i in range(n)]
        rest = data[n * cap:]
        self._parts, self._len, self._spilled = [rest], len(rest), True
        return pieces


def _pieces(line: bytes, cap: int) -> list[bytes]:
    if len(line) <= cap:
        return [line]
    return [line[i:i + cap] for i in range(0, len(line), cap)]


def iter_lines(f: BinaryIO, hasher: _Hasher | None = None, chunk_size: int = CHUNK) -> Iterator[bytes]:
    """Yield each line of a file without its line ending (see :class:`LineFramer`); a last line
    without newline is yielded too. No length cap. ``hasher`` (e.g. ``hashlib.sha256()``) is
    updated with every byte read, CR and newlines included."""
    framer = LineFramer()
    while chunk := f.read(chunk_size):
        if hasher is not None:
            hasher.update(chunk)
        yield from framer.feed(chunk)
    yield from framer.finish()


async def aiter_line_batches(stream: asyncio.StreamReader, chunk_size: int = CHUNK,
                             max_line: int = MAX_LINE) -> AsyncIterator[list[bytes]]:
    """Lines of a child's stdout, a batch per read, as soon as they are complete.

    Capped at ``max_line`` (see :class:`LineFramer`: longer lines come out in pieces, nothing is
    dropped). Each batch holds the lines completed by one read (never an empty batch), so the
    caller can store them and flush once per batch: live pages see a line as soon as the child has
    printed it.
    """
    framer = LineFramer(max_line)
    while chunk := await stream.read(chunk_size):
        if batch := framer.feed(chunk):
            yield batch
    if rest := framer.finish():
        yield rest
