"""A one-line progress bar on stderr for long work a person waits for.

Why not click's ``progressbar``: it shows one quantity; an ingest is measured in bytes (how far
through the file) and lines (what was stored). The bar redraws at most every 0.1 s, so a fast
ingest pays nothing for it, and ends with a newline so the report starts on its own line.
Only used when stderr is a terminal (or ``--progress``); never with ``--json``.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

from app.units import human_bytes

log = logging.getLogger(__name__)

WIDTH = 24
REDRAW_EVERY = 0.1  # seconds


class ProgressBar:
    """``update(bytes_done, lines)`` redraws ``[#####.....]  42%  70.1/168.0 MiB  41,000 lines  35.2 MiB/s``."""

    def __init__(self, total_bytes: int, stream: TextIO | None = None) -> None:
        self.total = max(0, total_bytes)
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.monotonic()
        self._drawn_at = 0.0
        self._last = ""
        self._done = (0, 0)

    def update(self, done: int, lines: int) -> None:
        self._done = (done, lines)
        now = time.monotonic()
        if now - self._drawn_at >= REDRAW_EVERY:
            self._drawn_at = now
            self._draw(done, lines, now)

    def _draw(self, done: int, lines: int, now: float) -> None:
        elapsed = max(now - self.started, 1e-6)
        rate = f"{human_bytes(done / elapsed)}/s"
        if self.total:
            share = min(done / self.total, 1.0)
            filled = int(share * WIDTH)
            text = (f"[{'#' * filled}{'.' * (WIDTH - filled)}] {share * 100:3.0f}%  "
                    f"{human_bytes(done)}/{human_bytes(self.total)}  {lines:,} lines  {rate}")
        else:  # standard input: the size is not known in advance
            text = f"{human_bytes(done)}  {lines:,} lines  {rate}"
        pad = " " * max(0, len(self._last) - len(text))
        self.stream.write(f"\r{text}{pad}")
        self.stream.flush()
        self._last = text

    def close(self) -> None:
        """Draw the final state (if anything was drawn or done) and end the line."""
        if self._done != (0, 0) or self._last:
            self._draw(*self._done, time.monotonic())
            self.stream.write("\n")
            self.stream.flush()
