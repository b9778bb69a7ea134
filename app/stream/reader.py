"""Splitting a byte stream into lines without a line-length limit.

Why not ``for line in file``: the ingest path also hashes every byte (idempotency) and reading
in large chunks lets hashing run once per chunk instead of once per line. Lines of any length
are returned whole (the CLI prints single lines above 16 MiB: a 20 MB tool result is one line);
memory is bounded by the longest line plus one chunk.
"""

from __future__ import annotations

from collections.abc import Iterator
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
