"""Routing a session's findings into the events, memories, check_results and cooldowns tables.

Precedence, as the original design decided: valid structured output wins and text markers are
then NOT parsed into rows (no duplicates). Without valid output the legacy markers and
``handoff.json`` are used instead. Everything is written in the caller's single transaction.

Memory keys: ``service:category`` → (service, category); a plain key is a category with no
service. A memory is the same memory when service, category and value match (whitespace
collapsed); repeating it reinforces its confidence instead of adding a row. Operators'
deactivations are left alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import aiosqlite

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
    escalation: dict | None = None  # {needed, reason, context, failed_checks}


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


async def write_routed(conn: aiosqlite.Connection, session_pk: int, routed: Routed, now: str,
                       initial_confidence: float, reinforce: float) -> None:
    if routed.events:
        await conn.executemany(
            "INSERT INTO events (session_pk, level, original_level, service, message, source, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(session_pk, lvl, orig, svc, msg, routed.source, now) for lvl, orig, svc, msg in routed.events],
        )
    for service, category, value in routed.memories:
        value = " ".join(value.split())
        await conn.execute(
            """INSERT INTO memories (service, category, value, confidence, created_at, updated_at,
                                     created_by_session, reinforced_by_session)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (ifnull(service, ''), category, value) DO UPDATE SET
                   confidence = min(1.0, confidence + (1.0 - confidence) * ?),
                   times_seen = times_seen + 1,
                   updated_at = excluded.updated_at,
                   reinforced_by_session = excluded.created_by_session""",
            (service, category, value, initial_confidence, now, now, session_pk, None, reinforce),
        )
    if routed.checks:
        await conn.executemany(
            "INSERT INTO check_results (session_pk, name, status, detail, created_at) VALUES (?, ?, ?, ?, ?)",
            [(session_pk, n, s, d, now) for n, s, d in routed.checks],
        )
    if routed.cooldowns:
        await conn.executemany(
            "INSERT INTO cooldowns (session_pk, action, service, outcome, note, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            [(session_pk, a, s, o, n, now) for a, s, o, n in routed.cooldowns],
        )
    esc = routed.escalation
    await conn.execute(
        """UPDATE sessions SET source = ?, summary = ?, escalation_needed = ?, escalation_reason = ?,
                  escalation_context = ?, escalation_failed_checks = ? WHERE id = ?""",
        (
            routed.source,
            routed.summary,
            None if esc is None else int(bool(esc["needed"])),
            None if esc is None else esc.get("reason"),
            None if esc is None else esc.get("context"),
            None if esc is None else json.dumps(esc.get("failed_checks") or []),
            session_pk,
        ),
    )
