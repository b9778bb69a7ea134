"""Escalation chains: the sessions sharing a ``chain_id``, and what they add up to.

Why a module of its own: a chain has no table of its own — it is the sessions one cycle started,
linked by ``chain_id`` — yet the chain page, the budget guard and the outcome message each read it
as one thing. The budget guard reads on the writer (``fresh``), so a chain's cost includes the
session this process has just finished.
"""

from __future__ import annotations

import logging
from typing import cast

from app.store.db import Database
from app.store.rows import ChainLink, ChainTotals, decode_all

log = logging.getLogger(__name__)


async def chain_links(db: Database, chain_id: int, *, fresh: bool = False) -> list[ChainLink]:
    """The chain oldest first, each with the CLI session id of the session it escalated to."""
    rows = await db.fetchall(
        """SELECT s.id, s.session_id, s.tier, s.model, s.status, s.status_reason, s.degraded, s.source,
                  s.attempts, s.escalated_to, c.session_id AS escalated_to_session_id, s.parent_session_id,
                  s.escalation_needed, s.escalation_reason, s.escalation_gate, s.attention, s.cost_usd, s.input_tokens,
                  s.output_tokens, s.duration_ms, s.started_at, s.ended_at, s.dry_run
           FROM sessions s LEFT JOIN sessions c ON c.id = s.escalated_to
           WHERE s.chain_id = ? ORDER BY s.id""", (chain_id,), fresh=fresh)
    return decode_all(rows, ChainLink)


async def chain_totals(db: Database, chain_id: int) -> ChainTotals:
    row = await db.fetchone(
        """SELECT count(*) AS sessions, coalesce(sum(cost_usd), 0) AS cost_usd,
                  coalesce(sum(input_tokens), 0) AS input_tokens, coalesce(sum(output_tokens), 0) AS output_tokens,
                  coalesce(sum(duration_ms), 0) AS duration_ms FROM sessions WHERE chain_id = ?""", (chain_id,))
    return cast(ChainTotals, dict(row) if row else {})


async def chain_cost(db: Database, chain_id: int) -> float:
    """Dollars spent by the chain so far (read after this process's own writes)."""
    value = await db.fetchval("SELECT coalesce(sum(cost_usd), 0) FROM sessions WHERE chain_id = ?", (chain_id,),
                              fresh=True)
    return float(value or 0)


async def latest_chain_id(db: Database) -> int | None:
    return cast(int | None, await db.fetchval(
        "SELECT chain_id FROM sessions WHERE chain_id IS NOT NULL ORDER BY id DESC LIMIT 1"))
