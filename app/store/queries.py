"""Read-side queries shared by the command line (and later the web pages).

Rows come back as plain dicts keyed by column name; JSON columns are decoded and 0/1 flags are
booleans, so ``--json`` output carries the stored fields under their column names.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from app.store.db import Database

_JSON_COLUMNS = {"result_errors", "permission_denials", "model_usage", "validation_errors",
                 "structured_output", "escalation_failed_checks", "notes"}
_BOOL_COLUMNS = {"degraded", "is_error", "validation_valid", "escalation_needed", "active"}

SESSION_LIST_COLUMNS = (
    "id, session_id, tier, model, cli_model, trigger, status, status_reason, degraded, source, attempts,"
    " parent_session_id, escalated_to, started_at, ended_at, duration_ms, cost_usd, input_tokens,"
    " output_tokens, num_turns, result_subtype, is_error, api_error_status, exit_code, validation_valid,"
    " escalation_needed, escalation_reason, summary, line_count"
)


def _decode(row: Any) -> dict:
    out = dict(row)
    for key, value in out.items():
        if key in _JSON_COLUMNS and isinstance(value, str):
            with contextlib.suppress(ValueError):
                out[key] = json.loads(value)
        elif key in _BOOL_COLUMNS and value is not None:
            out[key] = bool(value)
    return out


async def list_sessions(db: Database, *, status: str | None = None, tier: int | None = None,
                        limit: int = 50, offset: int = 0) -> list[dict]:
    where, params = [], []
    if status:
        where.append("status = ?")
        params.append(status)
    if tier is not None:
        where.append("tier = ?")
        params.append(tier)
    sql = f"SELECT {SESSION_LIST_COLUMNS} FROM sessions"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY id DESC LIMIT ? OFFSET ?"
    return [_decode(r) for r in await db.fetchall(sql, [*params, limit, offset])]


async def get_session(db: Database, pk: int) -> dict | None:
    row = await db.fetchone("SELECT * FROM sessions WHERE id = ?", (pk,))
    return _decode(row) if row else None


async def list_events(db: Database, *, level: str | None = None, service: str | None = None,
                      session: int | None = None, limit: int = 100, offset: int = 0) -> list[dict]:
    where, params = [], []
    if level:
        where.append("e.level = ?")
        params.append(level)
    if service:
        where.append("e.service = ?")
        params.append(service)
    if session is not None:
        where.append("e.session_pk = ?")
        params.append(session)
    sql = ("SELECT e.id, e.session_pk, s.session_id, s.tier, e.level, e.original_level, e.service, e.message,"
           " e.source, e.created_at FROM events e JOIN sessions s ON s.id = e.session_pk")
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY e.id DESC LIMIT ? OFFSET ?"
    return [_decode(r) for r in await db.fetchall(sql, [*params, limit, offset])]


async def list_memories(db: Database, *, service: str | None = None, category: str | None = None,
                        active: bool | None = None, limit: int = 200, offset: int = 0) -> list[dict]:
    where, params = [], []
    if service:
        where.append("service = ?")
        params.append(service)
    if category:
        where.append("category = ?")
        params.append(category)
    if active is not None:
        where.append("active = ?")
        params.append(int(active))
    sql = ("SELECT id, service, category, value, confidence, active, times_seen, created_at, updated_at,"
           " created_by_session, reinforced_by_session FROM memories")
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY updated_at DESC, id DESC LIMIT ? OFFSET ?"
    return [_decode(r) for r in await db.fetchall(sql, [*params, limit, offset])]
