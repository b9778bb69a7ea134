"""Which stream lines of a session produced its findings, and what its CLI runs cost together.

The session page badges the transcript lines that produced events, memories and
cooldowns, and shows cost and duration across all attempts. Nothing at routing time records the
line a finding came from (``app/output/route.py`` routes whole sessions), so it is derived when
the page is shown, from what the recorder stored anyway: the accepted output is the ``result``
line (or, failing that, the last ``StructuredOutput`` call) of the run that produced it, and a
legacy marker lives in an assistant line that contains its tag. These reads only narrow the
candidates (by type and a substring, through the ``(session_pk, seq)`` index); the web layer
parses them the way the recorder did. No migration: old sessions get badges too.
"""

from __future__ import annotations

import logging
from typing import TypedDict, cast

from app.store.db import Database

log = logging.getLogger(__name__)

# The tags app/output/markers.py recognises; none is changed by JSON escaping.
MARKER_TAGS = ("[EVENT:", "[MEMORY:", "[COOLDOWN:")
MARKER_LINES_MAX = 5_000  # candidate lines read for one page (a session repeating markers past this is cut)


class RunTotals(TypedDict):
    runs: int  # CLI runs seen in the stream (the first and each output-recovery resume)
    results: int  # result lines among them
    cost_usd: float | None  # the sum of their result lines' total_cost_usd (None: no result line has one)


async def run_totals(db: Database, session_pk: int) -> RunTotals:
    """What the session's runs cost so far: every ``result`` line's ``total_cost_usd`` added up,
    so a running session's earlier attempts count before the session's row is final."""
    row = await db.fetchone(
        "SELECT ifnull(max(attempt), 0) AS runs,"
        " (SELECT count(*) FROM activity WHERE session_pk = ? AND type = 'result') AS results,"
        " (SELECT sum(c) FROM (SELECT CASE WHEN json_valid(raw) AND typeof(json_extract(raw, '$.total_cost_usd'))"
        "   IN ('integer', 'real') THEN json_extract(raw, '$.total_cost_usd') END AS c"
        "   FROM activity WHERE session_pk = ? AND type = 'result')) AS cost_usd"
        " FROM activity WHERE session_pk = ?", (session_pk, session_pk, session_pk))
    if row is None:
        return {"runs": 0, "results": 0, "cost_usd": None}
    cost = row["cost_usd"]
    return {"runs": int(row["runs"]), "results": int(row["results"]),
            "cost_usd": float(cost) if cost is not None else None}


async def output_line(db: Database, session_pk: int, run: int | None) -> int | None:
    """The seq of the line that carried the session's accepted output in CLI run ``run`` (None:
    the last run): its last ``result`` line, else its last ``StructuredOutput`` call."""
    if run is None:
        run = cast(int | None, await db.fetchval("SELECT max(attempt) FROM activity WHERE session_pk = ?",
                                                 (session_pk,)))
        if run is None:
            return None
    seq = await db.fetchval("SELECT max(seq) FROM activity WHERE session_pk = ? AND attempt = ? AND type = 'result'",
                            (session_pk, run))
    if seq is None:
        seq = await db.fetchval(
            "SELECT max(seq) FROM activity WHERE session_pk = ? AND attempt = ? AND type = 'assistant'"
            " AND instr(raw, '\"StructuredOutput\"') > 0", (session_pk, run))
    return cast(int | None, seq)


class MarkerLine(TypedDict):
    seq: int
    raw: str


async def marker_lines(db: Database, session_pk: int, limit: int = MARKER_LINES_MAX) -> list[MarkerLine]:
    """Assistant lines (and arrays of messages) that contain a marker tag, in stream order."""
    tags = " OR ".join("instr(raw, ?) > 0" for _ in MARKER_TAGS)
    rows = await db.fetchall(
        f"SELECT seq, raw FROM activity WHERE session_pk = ? AND type IN ('assistant', 'array') AND ({tags})"  # noqa: S608 (placeholders only)
        " ORDER BY seq LIMIT ?", (session_pk, *MARKER_TAGS, limit))
    return cast(list[MarkerLine], [dict(r) for r in rows])


async def event_counts(db: Database, session_pk: int) -> dict[str, int]:
    """The session's events by level (all of them: the page lists only the newest 200)."""
    rows = await db.fetchall("SELECT level, count(*) AS n FROM events WHERE session_pk = ? GROUP BY level",
                             (session_pk,))
    return {r["level"]: int(r["n"]) for r in rows}
