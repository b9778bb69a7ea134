"""The ``activity`` table: every stream line of every session, in order, byte for byte.

Lines arrive in batches (the recorder's buffer); :func:`append_lines` writes one batch, the CLI
identity once it is known, the MCP servers of an init line and the running line count in one
transaction, so a live page never sees a count ahead of its lines.
"""

from __future__ import annotations

import json
import logging
from typing import cast

from app.store.db import Database
from app.store.rows import ActivityRow, McpServerStatus, TranscriptRow
from app.store.sessions import SessionIdentity

log = logging.getLogger(__name__)

# (session_pk, seq, attempt, ts, type, subtype, display, raw): the recorder builds these tuples
# on the hot path (bench/ingest.py); dicts per line cost measurable time.
LineTuple = tuple[int, int, int, str, str, str | None, str, str]

_COLUMNS = "session_pk, seq, attempt, ts, type, subtype, display, raw"


def as_row(line: LineTuple) -> ActivityRow:
    session_pk, seq, attempt, ts, type_, subtype, display, raw = line
    return {"session_pk": session_pk, "seq": seq, "attempt": attempt, "ts": ts, "type": type_,
            "subtype": subtype, "display": display, "raw": raw}


async def append_lines(db: Database, session_pk: int, lines: list[LineTuple], *, line_count: int,
                       identity: SessionIdentity | None = None,
                       mcp_servers: list[McpServerStatus] | None = None) -> None:
    """Store a batch of lines; with ``identity``, record the CLI session id too (first time only);
    with ``mcp_servers``, the session's MCP servers as an init line reported them (the latest wins).

    A CLI session id already stored on another row (a re-ingested stream) is left out rather than
    failing the write; ``tierops ingest`` refuses such duplicates up front.
    """
    async with db.write() as conn:
        if lines:
            await conn.executemany(f"INSERT INTO activity ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", lines)  # noqa: S608
        if identity is not None:
            await conn.execute(
                """UPDATE sessions SET session_id = ?, cli_model = ?, cli_version = ?, cwd = coalesce(cwd, ?)
                   WHERE id = ? AND NOT EXISTS (SELECT 1 FROM sessions WHERE session_id = ?)""",
                (identity.session_id, identity.cli_model, identity.cli_version, identity.cwd, session_pk,
                 identity.session_id))
        if mcp_servers is not None:
            await conn.execute("UPDATE sessions SET mcp_servers = ? WHERE id = ?",
                               (json.dumps(mcp_servers, ensure_ascii=False), session_pk))
        await conn.execute("UPDATE sessions SET line_count = ? WHERE id = ?", (line_count, session_pk))


async def lines_after(db: Database, session_pk: int, after: int, limit: int) -> list[ActivityRow]:
    """Stored lines with ``seq > after``, oldest first (API paging and SSE replay)."""
    rows = await db.fetchall(
        f"SELECT {_COLUMNS} FROM activity WHERE session_pk = ? AND seq > ? ORDER BY seq LIMIT ?",  # noqa: S608
        (session_pk, after, limit))
    return cast(list[ActivityRow], [dict(r) for r in rows])


async def transcript_page(db: Database, session_pk: int, *, before: int | None, limit: int,
                          raw_limit: int) -> list[TranscriptRow]:
    """Up to ``limit`` lines before ``seq`` ``before`` (the newest when None), newest first.

    ``raw`` is NULL for lines longer than ``raw_limit`` so a page of huge lines fits in memory;
    ``raw_len`` says how long they were."""
    rows = await db.fetchall(
        "SELECT session_pk, seq, attempt, ts, type, subtype, display,"
        " CASE WHEN length(raw) > ? THEN NULL ELSE raw END AS raw, length(raw) AS raw_len"
        " FROM activity WHERE session_pk = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
        (raw_limit, session_pk, before if before is not None else 2**62, limit))
    return cast(list[TranscriptRow], [dict(r) for r in rows])


async def count_lines(db: Database, session_pk: int) -> int:
    return int(await db.fetchval("SELECT count(*) FROM activity WHERE session_pk = ?", (session_pk,)) or 0)


async def last_seq(db: Database, session_pk: int) -> int:
    """The newest stored line's ``seq`` (0: none yet), from the ``(session_pk, seq)`` index: where
    the follower of another process's session starts (``supervisor/follow.py``)."""
    return int(await db.fetchval("SELECT max(seq) FROM activity WHERE session_pk = ?", (session_pk,)) or 0)
