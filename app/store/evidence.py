"""The stored lines a session's evidence is checked against (``app/engine/evidence.py`` reads them).

Only the lines that can hold a tool call or its result: ``assistant`` and ``user`` lines, and the
one-line arrays of ``--output-format json --verbose``, of every attempt, oldest first. A line longer
than ``raw_limit`` is left out rather than read whole (as the transcript pages do): a call or result
on it is then missing, and a citation of it does not hold. Also the checked findings an incident's
page lists (:func:`incident_findings`).
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import cast

from app.store.db import Database
from app.store.rows import IncidentFindingRow

log = logging.getLogger(__name__)

LINE_RAW_LIMIT = 4_000_000
"""Characters: the CLI's own cuts keep a tool result far below this (30,000 at most for Bash)."""


async def session_tool_lines(db: Database, session_pk: int, *,
                             raw_limit: int = LINE_RAW_LIMIT) -> list[tuple[int, int, str]]:
    """``(seq, attempt, raw)`` of the session's assistant, user and array lines, by ``seq``."""
    rows = await db.fetchall(
        "SELECT seq, attempt, CASE WHEN length(raw) > ? THEN NULL ELSE raw END AS raw FROM activity"
        " WHERE session_pk = ? AND type IN ('assistant', 'user', 'array') ORDER BY seq",
        (raw_limit, session_pk))
    kept = [(int(r["seq"]), int(r["attempt"]), str(r["raw"])) for r in rows if r["raw"] is not None]
    if len(kept) < len(rows):
        log.info("evidence: %d line(s) of session %d over %d characters left out", len(rows) - len(kept),
                 session_pk, raw_limit)
    return kept


INCIDENT_FINDINGS_MAX = 100


async def incident_findings(db: Database, incident_id: int, service: str | None, *,
                            limit: int = INCIDENT_FINDINGS_MAX) -> list[IncidentFindingRow]:
    """The checked problem findings — warning and critical events, services not healthy — of every
    session in the chains that worked on the incident (its timeline names their sessions), newest
    first; only those about ``service`` when the incident has one."""
    sessions = ("SELECT id FROM sessions WHERE chain_id IN (SELECT chain_id FROM sessions WHERE id IN"
                " (SELECT session_pk FROM incident_timeline WHERE incident_id = ? AND session_pk IS NOT NULL))"
                " UNION SELECT session_pk FROM incident_timeline WHERE incident_id = ? AND session_pk IS NOT NULL")
    rows = await db.fetchall(
        "SELECT f.*, s.tier FROM ("  # noqa: S608 (placeholders only)
        " SELECT 'event' AS kind, id, session_pk, level AS status, service, message, evidence_status, evidence,"
        " created_at FROM events WHERE level IN ('warning', 'critical') AND evidence_status IS NOT NULL"
        f" AND session_pk IN ({sessions}) AND (? IS NULL OR lower(service) = lower(?))"
        " UNION ALL SELECT 'check', id, session_pk, status, name, detail, evidence_status, evidence, created_at"
        " FROM check_results WHERE status != 'healthy' AND evidence_status IS NOT NULL"
        f" AND session_pk IN ({sessions}) AND (? IS NULL OR lower(name) = lower(?))"
        ") f LEFT JOIN sessions s ON s.id = f.session_pk ORDER BY f.created_at DESC, f.id DESC LIMIT ?",
        (incident_id, incident_id, service, service, incident_id, incident_id, service, service, limit))
    out: list[IncidentFindingRow] = []
    for r in rows:
        row = cast(IncidentFindingRow, dict(r))
        with contextlib.suppress(ValueError, TypeError):
            row["evidence"] = json.loads(r["evidence"]) if r["evidence"] is not None else None
        out.append(row)
    return out
