"""Splitting a byte stream into lines without a line-length limit.

Why not ``for line in file``: the ingest path also hashes every byte (idempotency) and reading
in large chunks lets hashing run once per chunk instead of once per line. Lines of any length
are returned whole (the CLI prints single lines above 16 MiB: a 20 MB tool result is one line);
memory is bounded by the longest line plus one chunk.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import BinaryIO, Protocol

CHUNK = 1024 * 1024


class _Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...


def iter_lines(f: BinaryIO, hasher: _Hasher | None = None, chunk_size: int = CHUNK) -> Iterator[bytes]:
    """Yield each line without its trailing newline; a last line without newline is yielded too."""
    partial: list[bytes] = []
    while chunk := f.read(chunk_size):
        if hasher is not None:
            hasher.update(chunk)
        if chunk.find(b"\n") == -1:  # the middle of a long line: no quadratic re-joining
            partial.append(chunk)
            continue
        lines = chunk.split(b"\n")
        if partial:
            lines[0] = b"".join(partial) + lines[0]
            partial = []
        tail = lines.pop()
        if tail:
            partial.append(tail)
        yield from lines
    if partial:
        yield b"".join(partial)


MAX_LINE = 256 * 1024 * 1024


async def aiter_line_batches(stream: asyncio.StreamReader, chunk_size: int = CHUNK,
                             max_line: int = MAX_LINE) -> AsyncIterator[list[bytes]]:
    """Lines of a child's stdout, a batch per read, as soon as they are complete.

    asyncio's ``readline`` refuses lines above the reader's ``limit`` (64 KiB by default) and
    discards its buffer when it does; real sessions print lines of many MiB. Reading chunks and
    splitting here has no such limit. A line longer than ``max_line`` (a runaway child) is
    passed on in ``max_line`` pieces rather than growing memory without bound; nothing is dropped.
    Each batch holds the lines completed by one read, so the caller can store them and flush
    once per batch: live pages see a line as soon as the child has printed it.
    """
    partial: list[bytes] = []
    partial_len = 0
    while chunk := await stream.read(chunk_size):
        if chunk.find(b"\n") == -1:
            partial.append(chunk)
            partial_len += len(chunk)
            if partial_len >= max_line:
                yield [b"".join(partial)]
                partial, partial_len = [], 0
            continue
        lines = chunk.split(b"\n")
        if partial:
            lines[0] = b"".join(partial) + lines[0]
            partial, partial_len = [], 0
        tail = lines.pop()
        if tail:
            partial, partial_len = [tail], len(tail)
        yield lines
    if partial:
        yield [b"".join(partial)]
