"""The stored lines a session's evidence is checked against (``app/engine/evidence.py`` reads them).

Only the lines that can hold a tool call or its result: ``assistant`` and ``user`` lines, and the
one-line arrays of ``--output-format json --verbose``, of every attempt, oldest first. A line longer
than ``raw_limit`` is left out rather than read whole (as the transcript pages do): a call or result
on it is then missing, and a citation of it does not hold.
"""

from __future__ import annotations

import logging

from app.store.db import Database

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
