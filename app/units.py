"""Sizes and periods for people: ``human_bytes(175_000_000) == "166.9 MiB"``, ``every(3600) == "every hour"``.

Why a module of its own: the progress bar, the doctor and the prune report all print sizes, and
they sit in different layers; one definition keeps them saying the same thing. The dashboard's
intervals (scheduler, checks file, cooldown windows) read the same way, in words a person says.
"""

from __future__ import annotations

import logging
import math

__all__ = ["every", "human_bytes", "human_interval"]

log = logging.getLogger(__name__)


def human_bytes(n: float) -> str:
    """Binary units, one decimal (bytes as a whole number): ``512 B``, ``1.5 KiB``, ``2.0 TiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def human_interval(seconds: float | None) -> str:
    """A period for people ("every hour", not "every 3600 s"): ``hour``, ``5 minutes``,
    ``1 h 30 min``, ``2 days``, ``1 d 6 h``. A whole number of one unit reads as words; a mixed
    period as the largest unit and the largest one that fits the rest (what is left below that,
    e.g. the seconds of ``1 d 2 h 0 min 5 s``, is dropped). Fractions only below a minute
    (``0.5 seconds``). ``—`` when there is no period (None, zero, negative, not a number)."""
    if seconds is None or isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not math.isfinite(seconds) or seconds <= 0:
        return "—"
    if seconds < 60 and seconds != int(seconds):
        return f"{seconds:g} seconds"
    total = max(1, round(seconds))
    size, word, short = next(p for p in _PERIODS if p[0] <= total)
    whole, rest = divmod(total, size)
    if not rest:
        return word if whole == 1 else f"{whole} {word}s"
    small, _, small_short = next(p for p in _PERIODS if p[0] <= rest)
    return f"{whole} {short} {rest // small} {small_short}"


def span(seconds: float | None) -> str:
    """A period as a length: ``4 hours``, ``1 day`` (``human_interval`` says ``day``, which reads
    right after "every" but not as a cooldown window or a timeout)."""
    text = human_interval(seconds)
    return text if text[:1].isdigit() or text == "—" else f"1 {text}"


def every(seconds: float | None) -> str:
    """``every(3600) == "every hour"``, ``every(300) == "every 5 minutes"``, ``every(5400) ==
    "every 1 h 30 min"``; ``—`` for no period (None, zero, negative, not a number)."""
    text = human_interval(seconds)
    return text if text == "—" else f"every {text}"


_PERIODS = ((86_400, "day", "d"), (3_600, "hour", "h"), (60, "minute", "min"), (1, "second", "s"))
