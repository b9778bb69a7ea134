"""Sizes for people: ``human_bytes(175_000_000) == "166.9 MiB"``.

Why a module of its own: the progress bar, the doctor and the prune report all print sizes, and
they sit in different layers; one definition keeps them saying the same thing (issue #10).
"""

from __future__ import annotations

__all__ = ["human_bytes"]


def human_bytes(n: float) -> str:
    """Binary units, one decimal (bytes as a whole number): ``512 B``, ``1.5 KiB``, ``2.0 TiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
