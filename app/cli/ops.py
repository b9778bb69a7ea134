"""The commands that keep an installation healthy: ``prune`` and ``backup`` (issue #10)."""

from __future__ import annotations
