"""The session report: what is stored for one session, as ``tierops ingest`` prints it (and its
``--json`` output). Read back from the store after the final write, so it shows what is really
there, not what the recorder meant to write. It passes through ``values.json_safe`` last, so it is
valid JSON whatever was stored (no ``NaN``/``Infinity``, no lone surrogate)."""

from __future__ import annotations

import logging
from typing import Any, TypedDict, cast

from app.store import activity, findings, memories, sessions
from app.store.db import Database
from app.store.rows import CooldownRow, ReportEvent
from app.stream.values import json_safe

log = logging.getLogger(__name__)


class ReportMemory(TypedDict):
    id: int
    service: str | None
    category: str
    value: str
    confidence: float
    active: bool
    times_seen: int


class ReportCheck(TypedDict):
    name: str
    status: str
    detail: str | None


class ReportEscalation(TypedDict):
    needed: bool
    reason: str | None
    context: str | None
    failed_checks: list[str]


class ReportValidation(TypedDict):
    valid: bool | None
    errors: list[dict[str, str]]


class SessionReport(TypedDict, total=False):
    id: int
    session_id: str | None
    tier: int | None
    status: str
    status_reason: str | None
    degraded: bool
    is_error: bool | None
    result_subtype: str | None
    api_error_status: int | None
    source: str | None
    validation: ReportValidation
    attempts: int
    summary: str | None
    events: list[ReportEvent]
    memories: list[ReportMemory]
    escalation: ReportEscalation | None
    services_checked: list[ReportCheck]
    cooldowns: list[CooldownRow]
    cost_usd: float | None
    num_turns: int | None
    activity_count: int
    notes: list[str]
    already_stored: bool  # set by `tierops ingest`


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


async def build_report(db: Database, session_pk: int) -> SessionReport:
    s = await sessions.get_session(db, session_pk, fresh=True)
    if s is None:
        raise KeyError(session_pk)
    escalation: ReportEscalation | None = None
    if s["escalation_needed"] is not None:
        escalation = {"needed": bool(s["escalation_needed"]), "reason": s["escalation_reason"],
                      "context": s["escalation_context"], "failed_checks": _list(s["escalation_failed_checks"])}
    mems: list[ReportMemory] = [
        {"id": m["id"], "service": m["service"], "category": m["category"], "value": m["value"],
         "confidence": m["confidence"], "active": m["active"], "times_seen": m["times_seen"]}
        for m in await memories.session_memories(db, session_pk)]
    checks: list[ReportCheck] = [{"name": c["name"], "status": c["status"], "detail": c["detail"]}
                                 for c in await findings.session_checks(db, session_pk)]
    report: SessionReport = {
        "id": s["id"],
        "session_id": s["session_id"],
        "tier": s["tier"],
        "status": s["status"],
        "status_reason": s["status_reason"],
        "degraded": bool(s["degraded"]),
        "is_error": s["is_error"],
        "result_subtype": s["result_subtype"],
        "api_error_status": s["api_error_status"],
        "source": s["source"],
        "validation": {"valid": s["validation_valid"], "errors": _list(s["validation_errors"])},
        "attempts": s["attempts"],
        "summary": s["summary"],
        "events": await findings.session_events(db, session_pk),
        "memories": mems,
        "escalation": escalation,
        "services_checked": checks,
        "cooldowns": await findings.session_cooldowns(db, session_pk),
        "cost_usd": s["cost_usd"],
        "num_turns": s["num_turns"],
        "activity_count": await activity.count_lines(db, session_pk),
        "notes": _list(s["notes"]),
    }
    return cast(SessionReport, json_safe(report))
