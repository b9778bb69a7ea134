"""The PreToolUse guard's rows: each session's policy, each decision, and the actions it let start.

Why a module of its own: the guard runs as a separate short-lived process per tool call
(``tierops guard``, started by the CLI's hook) and reads and writes this database directly, so
it needs no running server. What it deliberately does: a restart-like call is counted against
its cooldown *when it is allowed*, in the same write transaction that checks the limit
(:func:`claim_action`), so two calls the model makes at once cannot both take the last slot; the
row says ``started`` until the session reports the action's result, which then updates that row
instead of adding a second one (``app/store/findings.py``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

from app.clock import utcnow
from app.store.cooldowns import STARTED, TAKEN_OUTCOMES
from app.store.db import Database
from app.store.rows import decode_all

log = logging.getLogger(__name__)

COMMAND_MAX = 2000  # characters of a command kept with its decision
REASON_MAX = 1000


class GuardDecisionRow(TypedDict):
    id: int
    session_pk: int
    tool_use_id: str | None
    tool_name: str
    command: str | None
    decision: str  # allow | deny
    rule: str
    reason: str
    mutating: bool
    kind: str | None
    service: str | None
    created_at: str


class GuardCount(TypedDict):
    tier: int | None
    decision: str
    rule: str
    count: int


class SessionGuard(TypedDict):
    """What the guard reads of a session: its policy, and whether it still runs."""

    id: int
    status: str
    tier: int | None
    guard_policy: Any


async def set_policy(db: Database, session_pk: int, policy: Mapping[str, Any]) -> None:
    async with db.write() as conn:
        await conn.execute("UPDATE sessions SET guard_policy = ? WHERE id = ?", (json.dumps(policy), session_pk))


async def session_guard(db: Database, session_pk: int) -> SessionGuard | None:
    rows = await db.fetchall("SELECT id, status, tier, guard_policy FROM sessions WHERE id = ?", (session_pk,),
                             fresh=True)
    found = decode_all(rows, SessionGuard)
    return found[0] if found else None


async def record_decision(db: Database, session_pk: int, *, tool_use_id: str | None, tool_name: str,
                          command: str | None, decision: str, rule: str, reason: str, mutating: bool,
                          kind: str | None, service: str | None, now: str | None = None) -> int:
    async with db.write() as conn:
        cur = await conn.execute(
            "INSERT INTO guard_decisions (session_pk, tool_use_id, tool_name, command, decision, rule, reason,"
            " mutating, kind, service, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (session_pk, (tool_use_id or None) and tool_use_id[:200], tool_name[:200],
             db.redact(command)[:COMMAND_MAX] if command is not None else None, decision, rule[:100],
             db.redact(reason)[:REASON_MAX], int(mutating), kind, service, now or utcnow()))
        return int(cur.lastrowid or 0)


async def claim_action(db: Database, session_pk: int, *, kind: str, service: str | None, after: str, now: str,
                       limit: int, counts: Callable[[str], bool], note: str) -> tuple[bool, list[str]]:
    """One transaction: the times of the taken (or started) actions on ``service`` after
    ``after`` that ``counts`` (by their action word); below ``limit``, a ``started`` row for this
    one is added. Returns (added, those earlier times, oldest first)."""
    outcomes = (*TAKEN_OUTCOMES, STARTED)
    marks = ",".join("?" * len(outcomes))
    async with db.write() as conn:
        async with conn.execute(
                f"SELECT action, created_at FROM cooldowns WHERE service = ? AND created_at > ? AND created_at <= ?"  # noqa: S608 (placeholders only)
                f" AND outcome IN ({marks})", (service or "", after, now, *outcomes)) as cur:
            rows = await cur.fetchall()
        stamps = sorted(str(r[1]) for r in rows if counts(str(r[0])))
        if len(stamps) >= limit:
            return False, stamps
        await conn.execute(
            "INSERT INTO cooldowns (session_pk, action, service, outcome, note, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (session_pk, kind, service or "", STARTED, db.redact(note)[:COMMAND_MAX], now))
        return True, stamps


async def decisions(db: Database, session_pk: int, *, fresh: bool = False) -> list[GuardDecisionRow]:
    rows = await db.fetchall("SELECT * FROM guard_decisions WHERE session_pk = ? ORDER BY id", (session_pk,),
                             fresh=fresh)
    return _typed(rows)


async def tool_call_lines(db: Database, session_pk: int, tool_use_ids: Sequence[str]) -> dict[str, int]:
    """The transcript line (seq) of each tool call, by its id: the assistant line that carries it."""
    out: dict[str, int] = {}
    for tool_use_id in list(dict.fromkeys(tool_use_ids))[:200]:
        seq = await db.fetchval("SELECT min(seq) FROM activity WHERE session_pk = ? AND type = 'assistant'"
                                " AND instr(raw, ?) > 0", (session_pk, f'"{tool_use_id}"'))
        if seq is not None:
            out[tool_use_id] = int(seq)
    return out


async def denials_for_sessions(db: Database, session_pks: Sequence[int], *, limit: int = 200) -> list[GuardDecisionRow]:
    """The denials in these sessions (an incident's), newest first."""
    if not session_pks:
        return []
    marks = ",".join("?" * len(session_pks))
    rows = await db.fetchall(
        f"SELECT * FROM guard_decisions WHERE decision = 'deny' AND session_pk IN ({marks})"  # noqa: S608 (placeholders only)
        " ORDER BY id DESC LIMIT ?", (*session_pks, limit))
    return _typed(rows)


async def denials_for_incident(db: Database, incident_id: int, *, limit: int = 100) -> list[GuardDecisionRow]:
    """The denials in every chain that worked on the incident (its timeline names their sessions)."""
    rows = await db.fetchall(
        "SELECT * FROM guard_decisions WHERE decision = 'deny' AND session_pk IN (SELECT id FROM sessions WHERE"
        " chain_id IN (SELECT chain_id FROM sessions WHERE id IN (SELECT session_pk FROM incident_timeline"
        " WHERE incident_id = ? AND session_pk IS NOT NULL))) ORDER BY id DESC LIMIT ?", (incident_id, limit))
    return _typed(rows)


async def counts(db: Database) -> list[GuardCount]:
    """Decisions so far by the session's tier, decision and rule (for ``/metrics``)."""
    rows = await db.fetchall(
        "SELECT s.tier AS tier, g.decision AS decision, g.rule AS rule, COUNT(*) AS count FROM guard_decisions g"
        " JOIN sessions s ON s.id = g.session_pk GROUP BY s.tier, g.decision, g.rule")
    return [{"tier": r["tier"], "decision": r["decision"], "rule": r["rule"], "count": int(r["count"])} for r in rows]


def _typed(rows: Sequence[Any]) -> list[GuardDecisionRow]:
    out = decode_all(list(rows), GuardDecisionRow)
    for row in out:
        row["mutating"] = bool(row["mutating"])
    return out
