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

import json
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
    runs = await db.fetchval("SELECT coalesce(max(attempt), 0) FROM activity WHERE session_pk = ?", (session_pk,))
    # A few result lines per session: read here, not with a JSON function of one database's SQL.
    results = await db.fetchall("SELECT raw FROM activity WHERE session_pk = ? AND type = 'result'", (session_pk,))
    costs = [cost for r in results if isinstance(cost := _cost(r["raw"]), int | float) and not isinstance(cost, bool)]
    return {"runs": int(runs or 0), "results": len(results), "cost_usd": float(sum(costs)) if costs else None}


def _cost(raw: str | None) -> object:
    try:
        line = json.loads(raw) if raw else None
    except ValueError:
        return None
    return line.get("total_cost_usd") if isinstance(line, dict) else None


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
