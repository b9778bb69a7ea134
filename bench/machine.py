"""What the benchmarks ran on, for their OK/MISSED lines: every figure is reported with its machine.

Imported by the scripts in this folder (``python bench/x.py`` puts ``bench/`` on ``sys.path``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def describe(*, python: bool = False, load: bool = False) -> str:
    """``2 cores, AMD EPYC …`` plus, when asked, the Python version and the load average."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    parts = [f"{os.cpu_count()} cores", model]
    if python:
        parts.append(f"Python {sys.version.split()[0]}")
    if load:
        parts.append("load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    return ", ".join(parts)
