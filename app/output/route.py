"""Routing a session's findings into the events, memories, check_results and cooldowns tables.

Precedence, as the original design decided: valid structured output wins and text markers are
then NOT parsed into rows (no duplicates). Without valid output the legacy markers and
``handoff.json`` are used instead. This module decides *what* to store; ``app/store/findings.py``
writes it, in the session's final transaction.

Memory keys: ``service:category`` → (service, category); a plain key is a category with no
service. A memory is the same memory when service, category and value match (whitespace
collapsed); repeating it reinforces its confidence instead of adding a row. Operators'
deactivations are left alone; the rest of the memory lifecycle is ``app/store/memories.py``'s.

An interrupted session is routed without its escalation decision (:func:`for_interrupted`): what
it was about to decide is not a decision, and nothing may escalate after a stop. Actions are
routed with their kind lower-cased and their service's whitespace collapsed (as markers' names
are); proposed ones go to ``cooldowns`` with outcome ``proposed``, never counted, and the chain's
cooldown guard reads them from the structured output (:func:`proposed_actions`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from app.output.contract import Action, AgentResponse, Citation, Escalation, Event, Memory, ServiceCheck
from app.output.handoff import Handoff
from app.output.markers import MarkerSet

log = logging.getLogger(__name__)

_M = TypeVar("_M", bound=BaseModel)


Cites = list[dict[str, Any]]
"""A finding's citations as the model gave them: ``{"quote", "tool_use_id"}`` each."""
Verdict = tuple[str, list[dict[str, Any]]]
"""A finding's evidence status (verified | unsupported | uncited) and its citations as checked:
``{"quote", "tool_use_id", "holds", "why"}`` each (``app/engine/evidence_check.py``)."""


@dataclass
class Verdicts:
    """Each routed finding's verdict, aligned with :class:`Routed`'s lists; the escalation's own."""

    events: list[Verdict] = field(default_factory=list)
    checks: list[Verdict] = field(default_factory=list)
    cooldowns: list[Verdict] = field(default_factory=list)
    actions: list[Verdict] = field(default_factory=list)
    escalation: Verdict | None = None


@dataclass
class Routed:
    source: str  # structured_output | markers | handoff | none
    summary: str | None = None
    events: list[tuple[str, str | None, str | None, str]] = field(default_factory=list)  # level, orig, service, msg
    memories: list[tuple[str | None, str, str]] = field(default_factory=list)  # service, category, value
    checks: list[tuple[str, str, str | None]] = field(default_factory=list)  # name, status, detail
    cooldowns: list[tuple[str, str, str, str]] = field(default_factory=list)
    escalation: dict[str, Any] | None = None  # {needed, reason, context, failed_checks}
    actions: list[tuple[str, str | None, str, str | None]] = field(default_factory=list)  # kind, service, result, detail
    # The citations of each event, check and action (aligned; markers and handoff.json cite nothing)
    # and of the escalation; checked by the engine, which sets ``verdicts`` (None: not checked).
    event_cites: list[Cites] = field(default_factory=list)
    check_cites: list[Cites] = field(default_factory=list)
    action_cites: list[Cites] = field(default_factory=list)
    escalation_cites: Cites = field(default_factory=list)
    verdicts: Verdicts | None = None


def action_row(action: Action) -> tuple[str, str | None, str, str | None]:
    """``(kind, service, result, detail)`` as routed: kind lower-cased, names' whitespace collapsed."""
    return (" ".join(action.kind.split()).lower() or action.kind, " ".join((action.service or "").split()) or None,
            action.result, action.detail)


def proposed_actions(output: Any) -> list[tuple[str, str | None, str, str | None]]:
    """The actions a stored structured output proposes (result ``proposed``), each item taken on
    its own (one malformed item does not hide the others); [] for anything else."""
    items = output.get("actions") if isinstance(output, dict) else None
    proposed = []
    for item in items if isinstance(items, list) else []:
        try:
            action = Action.model_validate(item)
        except ValidationError:
            continue
        if action.result == "proposed":
            proposed.append(action_row(action))
    return proposed


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
        actions=[action_row(a) for a in resp.actions],
        event_cites=[_cites(e.evidence) for e in resp.events],
        check_cites=[_cites(c.evidence) for c in resp.services_checked],
        action_cites=[_cites(a.evidence) for a in resp.actions],
        escalation_cites=_cites(resp.escalation.evidence),
    )


def _cites(evidence: list[Citation]) -> Cites:
    return [{"quote": c.quote, "tool_use_id": c.tool_use_id} for c in evidence]


def handoff_context(handoff: Handoff) -> str | None:
    """The escalation context of a ``handoff.json``: its own context, then what the Go original's
    shape says beyond TierOps' fields — the recommended tier and the services
    affected — so the next tier is told them (``app/supervisor/context.py`` shows the context)."""
    parts = [handoff.context] if handoff.context else []
    if handoff.recommended_tier is not None:
        parts.append(f"Recommended tier: {handoff.recommended_tier}")
    if handoff.services:
        parts.append("Services affected: " + ", ".join(handoff.services))
    return "\n".join(parts) or None


def from_fallback(markers: MarkerSet, handoff: Handoff | None) -> Routed:
    """The legacy path: markers give events, memories and cooldowns (each distinct marker once,
    ``app/output/markers.py``); ``handoff.json`` gives the escalation and, in the Go original's
    shape, the service checks (its ``check_results``)."""
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
            "context": handoff_context(handoff),
            "failed_checks": handoff.failed_checks,
        }
        routed.checks = list(handoff.checks)
    return routed


STOPPED_ESCALATION_NOTE = ("escalation not routed: the session was interrupted (stopped by an operator or a "
                           "shutdown) before it finished, and an interrupted session never escalates")


def for_interrupted(routed: Routed) -> tuple[Routed, list[str]]:
    """What an interrupted session's findings are: its events, memories, service checks,
    cooldowns and actions are what it saw and did before the stop, and are routed; its escalation
    decision never is — a ``handoff.json`` the model had already written, or an output, decided
    nothing the stopped run finished, and a stop must never be followed by the next, more
    privileged tier. Returns the findings without the escalation and the note saying so."""
    if routed.escalation is None:
        return routed, []
    return replace(routed, escalation=None, escalation_cites=[]), [STOPPED_ESCALATION_NOTE]


def from_output(output: Any) -> tuple[Routed, list[str]]:
    """Route a validated structured output, taking what fits the built-in contract.

    An operator schema (``TIEROPS_SCHEMA_FILE``) may be looser than the contract routing needs:
    then each event, memory and service check that fits is routed on its own (one bad item never
    costs the others), and what could not be used is named in the returned notes instead of
    failing the session."""
    try:
        return from_structured(AgentResponse.model_validate(output)), []
    except ValidationError:
        pass
    if not isinstance(output, dict):
        return Routed(source="structured_output"), [
            f"structured output not routed: a {type(output).__name__}, not an object"]
    notes: list[str] = []

    def take(field_name: str, model: type[_M]) -> list[_M]:
        items = output.get(field_name)
        if items is None:
            return []
        if not isinstance(items, list):
            notes.append(f"{field_name} not routed: not a list")
            return []
        taken = []
        for i, item in enumerate(items):
            try:
                taken.append(model.model_validate(item))
            except ValidationError as exc:
                notes.append(f"{field_name}[{i}] not routed: {exc.errors()[0]['msg']}")
        return taken

    events = take("events", Event)
    memories = take("memories", Memory)
    checks = take("services_checked", ServiceCheck)
    actions = take("actions", Action)
    escalation = None
    if "escalation" in output:
        try:
            escalation = Escalation.model_validate(output["escalation"])
        except ValidationError as exc:
            notes.append(f"escalation not routed: {exc.errors()[0]['msg']}")
    summary = output.get("summary")
    if summary is not None and not isinstance(summary, str):
        notes.append("summary not routed: not a string")
        summary = None
    routed = Routed(
        source="structured_output", summary=summary,
        events=[(e.level, None, e.service or None, e.message) for e in events],
        memories=[(*split_memory_key(m.key), m.value) for m in memories],
        checks=[(c.name, c.status, c.detail) for c in checks],
        actions=[action_row(a) for a in actions],
        event_cites=[_cites(e.evidence) for e in events],
        check_cites=[_cites(c.evidence) for c in checks],
        action_cites=[_cites(a.evidence) for a in actions],
    )
    if escalation is not None:
        routed.escalation = {"needed": escalation.needed, "reason": escalation.reason,
                             "context": escalation.context, "failed_checks": list(escalation.failed_checks)}
        routed.escalation_cites = _cites(escalation.evidence)
    return routed, notes
