"""Which runbooks each language-model session was given (``session_runbooks``, 0013_runbooks).

Why a table: a session's system prompt is stored whole, but an operator asking "did tier 1 get the
API runbook, all of it?" should not have to read it. One row per runbook the prompt quoted (read
from a file, or fetched from a URL) or only linked (a URL that could not be fetched, or one the
budget left no room for), with how much of it the model saw. The rows go with their session
(``ON DELETE CASCADE``: retention needs nothing more). The incident page lists the rows matched for
its incident (``incident_ids``). Free text is redacted here, like every store write.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, cast

from app.store.db import Database
from app.store.rows import decode

log = logging.getLogger(__name__)

__all__ = ["DELIVERIES", "Delivery", "IncidentRunbookRow", "RunbookGiven", "SessionRunbookRow", "incident_runbooks",
           "record_given", "session_runbooks"]

Delivery = Literal["file", "fetched", "linked"]
DELIVERIES: tuple[Delivery, ...] = ("file", "fetched", "linked")  # the CHECK of session_runbooks.delivery
TEXT_MAX = 2000  # origin, title, error: what a page shows, never a runbook's text


@dataclass(frozen=True)
class RunbookGiven:
    """One runbook as a session's system prompt holds it (``delivery``: read from a file, fetched,
    or only linked)."""

    source: str  # "the runbooks folder", "extension infra", "check infra/api-health", "alert HighLatency"
    origin: str  # the file as shown (``runbooks/api.md``) or the URL
    delivery: Delivery
    title: str | None = None
    chars_given: int = 0
    chars_total: int | None = None  # None: linked, never read
    truncated: bool = False
    error: str | None = None
    incident_ids: tuple[int, ...] = field(default=())


class SessionRunbookRow(TypedDict):
    id: int
    session_pk: int
    source: str
    title: str | None
    origin: str
    delivery: str  # file | fetched | linked
    chars_given: int
    chars_total: int | None
    truncated: bool
    error: str | None
    incident_ids: list[int]


class IncidentRunbookRow(SessionRunbookRow):
    tier: int | None  # the session's
    started_at: str


def _clip(text: str | None, db: Database) -> str | None:
    return db.redact(text)[:TEXT_MAX] if text else text


async def record_given(db: Database, session_pk: int, given: Sequence[RunbookGiven]) -> None:
    """Store the runbooks of ``session_pk``'s system prompt, in the prompt's order."""
    if not given:
        return
    async with db.write() as conn:
        await conn.executemany(
            "INSERT INTO session_runbooks (session_pk, source, title, origin, delivery, chars_given, chars_total,"
            " truncated, error, incident_ids) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(session_pk, _clip(g.source, db), _clip(g.title, db), _clip(g.origin, db) or "?", g.delivery,
              g.chars_given, g.chars_total, int(g.truncated), _clip(g.error, db), json.dumps(list(g.incident_ids)))
             for g in given])


def _row(raw: sqlite3.Row) -> dict[str, Any]:
    out = decode(raw)
    out["truncated"] = bool(out["truncated"])
    if not isinstance(out.get("incident_ids"), list):
        out["incident_ids"] = []
    return out


async def session_runbooks(db: Database, session_pk: int, *, fresh: bool = False) -> list[SessionRunbookRow]:
    """The runbooks ``session_pk`` was given, in its prompt's order."""
    rows = await db.fetchall("SELECT * FROM session_runbooks WHERE session_pk = ? ORDER BY id", (session_pk,),
                             fresh=fresh)
    return cast(list[SessionRunbookRow], [_row(r) for r in rows])


async def incident_runbooks(db: Database, incident_id: int, *, limit: int = 50) -> list[IncidentRunbookRow]:
    """The runbooks matched for ``incident_id`` in every session that investigated it, newest first."""
    rows = await db.fetchall(
        "SELECT r.*, s.tier, s.started_at FROM session_runbooks r JOIN sessions s ON s.id = r.session_pk"
        " WHERE EXISTS (SELECT 1 FROM json_each(r.incident_ids) WHERE value = ?) ORDER BY r.id DESC LIMIT ?",
        (incident_id, limit))
    return cast(list[IncidentRunbookRow], [_row(r) for r in rows])
