"""Wall-clock timestamps as TierOps stores them: ISO 8601, UTC, millisecond precision, ``Z``.

Why a module of its own: every layer stamps rows (the store, the engine, the supervisor's cycle
lock) and they must agree on one format, which sorts as text. It sits at the bottom of the
import line so nothing has to reach upwards for it (no layer imports a timestamp from the
recorder or the store).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

log = logging.getLogger(__name__)


def utcnow() -> str:
    """Now, e.g. ``2026-11-23T09:14:03.512Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class LineClock:
    """Per-line timestamps in the :func:`utcnow` format, formatted once per millisecond.

    Formatting a datetime for every stream line cost ~20 % of bulk ingest time (bench/ingest.py);
    a burst of lines in the same millisecond reuses the text.
    """

    __slots__ = ("_ms", "_text")

    def __init__(self) -> None:
        self._ms = -1
        self._text = ""

    def now(self) -> str:
        ms = time.time_ns() // 1_000_000
        if ms != self._ms:
            self._ms = ms
            self._text = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"
        return self._text


def parse_stamp(stamp: str) -> datetime:
    """A :func:`utcnow`-format timestamp (or any ISO 8601 time with a zone) as an aware datetime."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def shift(stamp: str, seconds: float) -> str:
    """``stamp`` moved by ``seconds``, in the :func:`utcnow` format (windows, expiry times)."""
    moved = parse_stamp(stamp) + timedelta(seconds=seconds)
    return moved.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def seconds_between(start: str, end: str) -> float:
    """Seconds from ``start`` to ``end`` (two stored timestamps), to the millisecond."""
    return round((parse_stamp(end) - parse_stamp(start)).total_seconds(), 3)
