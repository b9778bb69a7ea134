"""The legacy ``handoff.json``: how the Go tool's agents asked for escalation.

Used only when a session has no valid structured output. The file is looked up relative to the
session's working directory unless the configured path is absolute. Accepted shapes, because
the old prompts were not consistent::

    {"needed": true, "reason": "...", "context": "...", "failed_checks": ["..."]}
    {"escalate": true, ...}                      # the Go tool's key
    {"escalation": {"needed": true, ...}, ...}   # the new contract's shape

Anything else is reported as a problem, never guessed at. The file is written by the agent, so
any field may hold any JSON value (issue #9 §1): values become storable text (``as_text``), and a
document nested too deeply to decode is a problem like invalid JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.stream.parser import as_text, clean_text

MAX_HANDOFF_BYTES = 1024 * 1024


@dataclass
class Handoff:
    needed: bool
    reason: str | None = None
    context: str | None = None
    failed_checks: list[str] = field(default_factory=list)
    path: str = ""
    raw: str = ""


class HandoffError(Exception):
    pass


def _text(value: Any) -> str | None:
    return None if value is None else as_text(value)


def parse_handoff(raw: str, path: str = "handoff.json") -> Handoff:
    try:
        data = json.loads(raw)
    except RecursionError:
        raise HandoffError(f"{path} is nested too deeply to parse") from None
    except ValueError as exc:
        raise HandoffError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HandoffError(f"{path} must hold a JSON object")
    if isinstance(data.get("escalation"), dict):
        data = data["escalation"]
    needed = data.get("needed", data.get("escalate"))
    if not isinstance(needed, bool):
        raise HandoffError(f"{path} has no boolean 'needed' (or 'escalate') field")
    checks = data.get("failed_checks") or []
    if not isinstance(checks, list):
        checks = [checks]
    return Handoff(
        needed=needed,
        reason=_text(data.get("reason")),
        context=_text(data.get("context")),
        failed_checks=[as_text(c) for c in checks],
        path=path,
        raw=clean_text(raw),
    )


def read_handoff(configured: str, cwd: str | None) -> tuple[Handoff | None, str | None]:
    """Returns (handoff, problem). Both None when there is simply no file."""
    path = Path(configured)
    if not path.is_absolute():
        if not cwd:
            return None, None
        path = Path(cwd) / path
    try:
        if not path.is_file():
            return None, None
        if path.stat().st_size > MAX_HANDOFF_BYTES:
            return None, f"{path} is larger than {MAX_HANDOFF_BYTES} bytes; ignored"
        raw = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror}"
    try:
        return parse_handoff(raw, str(path)), None
    except HandoffError as exc:
        return None, str(exc)
