"""Screening a batch of stream lines in one pass: which lines need the per-line path, and the
batch decoded, redacted and parsed accordingly.

Why a module of its own: redacting and JSON-decoding every line one by one was the largest cost of
recording a stream (redaction alone was 22 % of the py-spy samples of bench/ingest.py). Instead a
batch is joined and searched once with one RE2 pattern: the redactor's screen pattern (where it
may rewrite a line) plus the parser's (where orjson may decode a line differently from ``json``).
Only the lines where a match starts take the full per-line redaction and the stdlib decoder; the
rest are stored as read and decoded by orjson. The result is the same as redacting and parsing
every line on its own (``tests/engine/test_recorder.py`` pins it against the secrets corpus). A
redactor that is not a :class:`~app.redact.Redactor` has no screen pattern: its lines all take the
per-line path. :func:`flagged_lines` reads no state but the compiled pattern, so it may run in
another thread (ingest does); the RE2 search releases the GIL.
"""

from __future__ import annotations

import functools
import logging
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Any

import re2

from app.redact import Redactor
from app.stream.parser import SCREEN_PATTERN, ParsedLine, parse_line

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=16)
def _compile_screen(pattern: str) -> Any:
    return re2.compile(pattern)


def screen_for(redact: Callable[[str], str]) -> Any:
    """The RE2 pattern a batch of lines is searched with: where the redactor may rewrite a line, or
    where orjson may decode it differently from json. None for a redactor that is not a
    :class:`Redactor` (its lines are redacted one by one)."""
    if not isinstance(redact, Redactor):
        return None
    return _compile_screen(f"{redact.screen_pattern}|{SCREEN_PATTERN}")


def flagged_lines(screen: Any, lines: Sequence[bytes | str]) -> set[int]:
    """The indices of the lines that need the per-line path (every line when ``screen`` is None).

    The batch is joined and searched once; a line is flagged where a match starts, and the search
    goes on from the next line. A line that cannot be encoded (a lone surrogate) is flagged too:
    the per-line path replaces it."""
    if screen is None:  # a redactor of the caller's: per line, as it is
        return set(range(len(lines)))
    dirty: set[int] = set()
    encoded: list[bytes] = []
    for i, line in enumerate(lines):
        if isinstance(line, bytes):
            encoded.append(line)
            continue
        try:
            encoded.append(line.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate: the per-line path replaces it
            encoded.append(b"")
            dirty.add(i)
    blob = encoded[0] if len(encoded) == 1 else b"\n".join(encoded)
    match = screen.search(blob)
    if match is not None:
        starts = list(accumulate((len(b) + 1 for b in encoded), initial=0))
        while match is not None:
            i = bisect_right(starts, match.start()) - 1
            dirty.add(i)
            if i + 1 >= len(encoded):
                break
            match = screen.search(blob, starts[i + 1])
    return dirty


def parse_lines(lines: Sequence[bytes | str], redact: Callable[[str], str],
                dirty: set[int]) -> list[ParsedLine | None]:
    """Decode, redact and parse ``lines``: secrets never reach the database, and a line that is not
    UTF-8 is kept with its bytes escaped. Lines not in ``dirty`` are stored as read and decoded by
    orjson."""
    out: list[ParsedLine | None] = []
    for i, line in enumerate(lines):
        if isinstance(line, bytes):
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                out.append(parse_line(redact(line.decode("utf-8", "backslashreplace"))))
                continue
        else:
            text = line
        out.append(parse_line(redact(text)) if i in dirty else parse_line(text, screened=True))
    return out
