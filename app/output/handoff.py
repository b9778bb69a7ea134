"""The legacy ``handoff.json``: how the Go tool's agents asked for escalation.

Used only when a session has no valid structured output. The file is looked up relative to the
session's working directory unless the configured path is absolute. Accepted shapes::

    {"needed": true, "reason": "...", "context": "...", "failed_checks": ["..."]}   # TierOps' own
    {"escalate": true, ...}                                                       # its other key, still read
    {"escalation": {"needed": true, ...}, ...}                                    # the contract's shape
    {"schema_version": 1, "recommended_tier": 2, "reason": "...",                 # the Go original's
     "services_affected": ["nginx"],
     "check_results": [{"name": "nginx_http", "status": "fail", "detail": "502"}]}

The Go original's shape maps onto the same escalation as TierOps' own (how: ARCHITECTURE.md, "The
legacy path"); its other fields are kept only with the whole file in ``handoff_raw``. A file that
is not JSON, not an object, or says neither whether to escalate nor which tier to escalate to is a
problem, never guessed at; a check result that cannot be read is left out and named in
:attr:`Handoff.problems`. The agent writes the file, so any field may hold any JSON value: values
become storable text (``as_text``), and a document nested too deeply is a problem like invalid JSON.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.stream.values import as_text, clean_text
from app.vocab import ServiceStatus

log = logging.getLogger(__name__)

MAX_HANDOFF_BYTES = 1024 * 1024
GO_KEYS = ("schema_version", "recommended_tier", "services_affected", "check_results")
_TIER = re.compile(r"^\s*(?:tier\s*)?(\d{1,3})\s*$", re.IGNORECASE)
# Go check statuses with one clear TierOps meaning; anything else is kept as written.
CHECK_STATUSES = {
    **dict.fromkeys(("ok", "pass", "passed", "passing", "healthy", "up", "success", "green"), ServiceStatus.HEALTHY),
    **dict.fromkeys(("warn", "warning", "degraded", "yellow"), ServiceStatus.DEGRADED),
    **dict.fromkeys(("fail", "failed", "failing", "failure", "error", "critical", "down", "red"), ServiceStatus.DOWN),
    **dict.fromkeys(("unreachable", "timeout", "timed_out", "timed out"), ServiceStatus.UNREACHABLE),
}
_NAME_KEYS = ("name", "check", "service")
_STATUS_KEYS = ("status", "result", "state")
_DETAIL_KEYS = ("detail", "output", "message", "error")


@dataclass
class Handoff:
    needed: bool
    reason: str | None = None
    context: str | None = None
    failed_checks: list[str] = field(default_factory=list)
    path: str = ""
    raw: str = ""
    shape: str = "tierops"  # tierops | go (the Go original's keys were present)
    recommended_tier: int | None = None
    services: list[str] = field(default_factory=list)
    checks: list[tuple[str, str, str | None]] = field(default_factory=list)  # name, status, detail
    schema_version: str | None = None
    problems: list[str] = field(default_factory=list)  # parts left out; the rest was used


class HandoffError(Exception):
    pass


def _text(value: Any) -> str | None:
    return None if value is None else as_text(value)


def _first(obj: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if obj.get(key) is not None:
            return obj[key]
    return None


def _tier(value: Any) -> int | None:
    """A recommended tier: an int, or text like ``"2"``/``"tier 2"``. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int) and 0 <= value < 1000:
        return value
    if isinstance(value, float) and value.is_integer() and 0 <= value < 1000:
        return int(value)
    if isinstance(value, str) and (m := _TIER.match(value)):
        return int(m.group(1))
    raise ValueError


def check_status(written: str) -> str:
    """A Go check status in TierOps' words when it clearly means one, else as written."""
    return CHECK_STATUSES.get(written.strip().lower(), written.strip())


def _checks(raw: Any, path: str) -> tuple[list[tuple[str, str, str | None]], list[str]]:
    """``check_results`` as (name, status, detail) rows, and what could not be read."""
    if isinstance(raw, dict):
        items: list[tuple[str, Any]] = [(f"check_results.{k}", {"name": k, **v} if isinstance(v, dict)
                                         else {"name": k, "status": v}) for k, v in raw.items()]
    elif isinstance(raw, list):
        items = [(f"check_results[{i}]", v) for i, v in enumerate(raw)]
    else:
        return [], [f"{path}: check_results ignored: neither a list nor an object"]
    checks: list[tuple[str, str, str | None]] = []
    problems: list[str] = []
    for where, item in items:
        if not isinstance(item, dict):
            problems.append(f"{path}: {where} ignored: not an object")
            continue
        name, status = _first(item, _NAME_KEYS), _first(item, _STATUS_KEYS)
        if name is None or status is None or not as_text(name).strip() or not as_text(status).strip():
            problems.append(f"{path}: {where} ignored: it needs a name and a status")
            continue
        checks.append((as_text(name).strip(), check_status(as_text(status)), _text(_first(item, _DETAIL_KEYS))))
    return checks, problems


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
    go = any(key in data for key in GO_KEYS)
    problems: list[str] = []
    tier: int | None = None
    tier_usable = "recommended_tier" in data
    if data.get("recommended_tier") is not None:
        try:
            tier = _tier(data["recommended_tier"])
        except ValueError:
            tier_usable = False
            problems.append(f"{path}: recommended_tier {as_text(data['recommended_tier'])!r} is not a tier number")
    needed = data.get("needed", data.get("escalate"))
    if not isinstance(needed, bool):
        if not tier_usable:
            what = " nor a usable 'recommended_tier'" if go else ""
            raise HandoffError(f"{path} has no boolean 'needed' (or 'escalate') field{what}")
        # The Go original: a recommended tier asks for escalation; null or 0 does not.
        needed = tier is not None and tier > 0
    checks, check_problems = _checks(data["check_results"], path) if data.get("check_results") is not None else ([], [])
    problems += check_problems
    failed = data.get("failed_checks") or []
    if not isinstance(failed, list):
        failed = [failed]
    failed_checks = [as_text(c) for c in failed]
    failed_checks += [name for name, status, _ in checks
                      if status != ServiceStatus.HEALTHY and name not in failed_checks]
    services = data.get("services_affected") or []
    if not isinstance(services, list):
        services = [services]
    return Handoff(
        needed=needed,
        reason=_text(data.get("reason")),
        context=_text(data.get("context")),
        failed_checks=failed_checks,
        path=path,
        raw=clean_text(raw),
        shape="go" if go else "tierops",
        recommended_tier=tier,
        services=[as_text(s) for s in services if s is not None],
        checks=checks,
        schema_version=_text(data.get("schema_version")),
        problems=problems,
    )


def read_handoff(configured: str, cwd: str | None) -> tuple[Handoff | None, str | None]:
    """Returns (handoff, problem). Both None when there is simply no file; a handoff *and* a
    problem when parts of the file were left out (:attr:`Handoff.problems`)."""
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
        handoff = parse_handoff(raw, str(path))
    except HandoffError as exc:
        return None, str(exc)
    return handoff, "; ".join(handoff.problems) or None
