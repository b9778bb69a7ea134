"""Routing a session's findings into the events, memories, check_results and cooldowns tables.

Precedence, as the original design decided: valid structured output wins and text markers are
then NOT parsed into rows (no duplicates). Without valid output the legacy markers and
``handoff.json`` are used instead. This module decides *what* to store; ``app/store/findings.py``
writes it, in the session's final transaction.

Memory keys: ``service:category`` → (service, category); a plain key is a category with no
service. A memory is the same memory when service, category and value match (whitespace
collapsed); repeating it reinforces its confidence instead of adding a row. Operators'
deactivations are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.output.contract import AgentResponse
from app.output.handoff import Handoff
from app.output.markers import MarkerSet


@dataclass
class Routed:
    source: str  # structured_output | markers | handoff | none
    summary: str | None = None
    events: list[tuple[str, str | None, str | None, str]] = field(default_factory=list)  # level, orig, service, msg
    memories: list[tuple[str | None, str, str]] = field(default_factory=list)  # service, category, value
    checks: list[tuple[str, str, str | None]] = field(default_factory=list)  # name, status, detail
    cooldowns: list[tuple[str, str, str, str]] = field(default_factory=list)
    escalation: dict[str, Any] | None = None  # {needed, reason, context, failed_checks}


def split_memory_key(key: str) -> tuple[str | None, str]:
    service, sep, category = key.partition(":")
    if sep and service.strip() and category.strip():
        return service.strip(), category.strip()
    return None, key.strip()


def from_structured(resp: AgentResponse) -> Routed:
    return Routed(
        source="structured_output",
        summary=resp.summary,
        events=[(e.level, None, e.service or None, e.message) for e in resp.events],
        memories=[(*split_memory_key(m.key), m.value) for m in resp.memories],
        checks=[(c.name, c.status, c.detail) for c in resp.services_checked],
        escalation={
            "needed": resp.escalation.needed,
            "reason": resp.escalation.reason,
            "context": resp.escalation.context,
            "failed_checks": list(resp.escalation.failed_checks),
        },
    )


def from_fallback(markers: MarkerSet, handoff: Handoff | None) -> Routed:
    source = "markers" if markers else ("handoff" if handoff else "none")
    routed = Routed(
        source=source,
        events=[(e.level, e.original_level, e.service, e.message) for e in markers.events],
        memories=[(m.service, m.category, m.value) for m in markers.memories],
        cooldowns=[(c.action, c.service, c.outcome, c.note) for c in markers.cooldowns],
    )
    if handoff:
        routed.escalation = {
            "needed": handoff.needed,
            "reason": handoff.reason,
            "context": handoff.context,
            "failed_checks": handoff.failed_checks,
        }
    return routed
