"""Conversations with the ops agent and their turns (``chat_conversations``, ``chat_turns``, 0016_chat).

Why a table of its own: a chat turn is a session like any other (its transcript, cost and findings
are the session's), but a conversation spans sessions. It is one claude CLI session continued with
``--resume`` from one folder (``cwd``), and a stateless client (the openai and ollama clients send
the whole history each time) finds it again by the hash of the messages so far
(``history_sha256``). Questions, answers and titles are redacted here, like every store write.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import TypedDict

from app.clock import utcnow
from app.store.db import Database

log = logging.getLogger(__name__)

__all__ = ["ConversationRow", "TurnRow", "conversation_of_session", "create_conversation", "find_by_history", "finish_turn",
           "get_conversation", "interrupt_running", "list_conversations", "resumable_cwds", "set_turn_session",
           "start_turn", "turns"]

TITLE_MAX = 120
TEXT_MAX = 200_000  # one question or answer as stored (the session's transcript keeps every line)


class ConversationRow(TypedDict):
    id: int
    public_id: str
    title: str
    model: str
    tier: int
    client: str  # page | openai | ollama
    incident_id: int | None
    cwd: str
    cli_session_id: str | None
    history_sha256: str | None
    created_by: str | None
    created_at: str
    updated_at: str
    turn_count: int
    last_status: str | None


class TurnRow(TypedDict):
    id: int
    conversation_id: int
    session_id: int | None
    question: str
    answer: str | None
    status: str  # running | completed | failed | interrupted
    asked_by: str | None
    created_at: str
    finished_at: str | None
    cost_usd: float | None  # the session's, while it is kept
    session_status: str | None


_CONVERSATION = """
    SELECT c.*, (SELECT count(*) FROM chat_turns t WHERE t.conversation_id = c.id) AS turn_count,
           (SELECT t.status FROM chat_turns t WHERE t.conversation_id = c.id ORDER BY t.id DESC LIMIT 1) AS last_status
    FROM chat_conversations c"""


def _conversation(row: sqlite3.Row) -> ConversationRow:
    return ConversationRow(
        id=row["id"], public_id=row["public_id"], title=row["title"], model=row["model"], tier=row["tier"],
        client=row["client"], incident_id=row["incident_id"], cwd=row["cwd"], cli_session_id=row["cli_session_id"],
        history_sha256=row["history_sha256"], created_by=row["created_by"], created_at=row["created_at"],
        updated_at=row["updated_at"], turn_count=row["turn_count"], last_status=row["last_status"])


def _clip(db: Database, text: str, limit: int) -> str:
    return db.redact(text)[:limit]


async def create_conversation(db: Database, *, public_id: str, title: str, model: str, tier: int, client: str,
                              cwd: str, incident_id: int | None = None, created_by: str | None = None) -> ConversationRow:
    now = utcnow()
    async with db.write() as conn:
        cur = await conn.execute(
            "INSERT INTO chat_conversations (public_id, title, model, tier, client, incident_id, cwd, created_by,"
            " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (public_id, _clip(db, " ".join(title.split()), TITLE_MAX) or "(untitled)", model, tier, client,
             incident_id, cwd, _clip(db, created_by, 200) if created_by else None, now, now))
        pk = cur.lastrowid
    row = await db.fetchone(f"{_CONVERSATION} WHERE c.id = ?", (pk,), fresh=True)
    assert row is not None  # noqa: S101 (just written, behind the write lock)
    return _conversation(row)


async def get_conversation(db: Database, public_id: str, *, fresh: bool = False) -> ConversationRow | None:
    row = await db.fetchone(f"{_CONVERSATION} WHERE c.public_id = ?", (public_id,), fresh=fresh)
    return _conversation(row) if row else None


async def find_by_history(db: Database, history_sha256: str, model: str) -> ConversationRow | None:
    """The conversation whose messages so far hash to ``history_sha256`` (the newest, if several)."""
    row = await db.fetchone(f"{_CONVERSATION} WHERE c.history_sha256 = ? AND c.model = ?"
                            " ORDER BY c.updated_at DESC, c.id DESC LIMIT 1", (history_sha256, model), fresh=True)
    return _conversation(row) if row else None


async def list_conversations(db: Database, *, limit: int = 50, incident_id: int | None = None) -> list[ConversationRow]:
    where, params = ("WHERE c.incident_id = ?", [incident_id]) if incident_id is not None else ("", [])
    rows = await db.fetchall(f"{_CONVERSATION} {where} ORDER BY c.updated_at DESC, c.id DESC LIMIT ?",
                             [*params, limit])
    return [_conversation(r) for r in rows]


async def start_turn(db: Database, conversation_pk: int, question: str, asked_by: str | None) -> int:
    now = utcnow()
    async with db.write() as conn:
        cur = await conn.execute(
            "INSERT INTO chat_turns (conversation_id, question, status, asked_by, created_at)"
            " VALUES (?, ?, 'running', ?, ?)",
            (conversation_pk, _clip(db, question, TEXT_MAX), _clip(db, asked_by, 200) if asked_by else None, now))
        await conn.execute("UPDATE chat_conversations SET updated_at = ? WHERE id = ?", (now, conversation_pk))
        return int(cur.lastrowid or 0)


async def set_turn_session(db: Database, turn_pk: int, session_pk: int) -> None:
    async with db.write() as conn:
        await conn.execute("UPDATE chat_turns SET session_id = ? WHERE id = ?", (session_pk, turn_pk))


async def finish_turn(db: Database, turn_pk: int, *, answer: str | None, status: str, cli_session_id: str | None,
                      history_sha256: str | None) -> None:
    """Close a turn; the conversation remembers the CLI session to resume and the hash of its
    messages so far (``history_sha256`` None: the turn failed, the next request cannot follow it)."""
    now = utcnow()
    async with db.write() as conn:
        await conn.execute("UPDATE chat_turns SET answer = ?, status = ?, finished_at = ? WHERE id = ?",
                           (_clip(db, answer, TEXT_MAX) if answer is not None else None, status, now, turn_pk))
        await conn.execute(
            "UPDATE chat_conversations SET cli_session_id = coalesce(?, cli_session_id),"
            " history_sha256 = coalesce(?, history_sha256), updated_at = ?"
            " WHERE id = (SELECT conversation_id FROM chat_turns WHERE id = ?)",
            (cli_session_id, history_sha256, now, turn_pk))


async def turns(db: Database, conversation_pk: int, *, fresh: bool = False) -> list[TurnRow]:
    rows = await db.fetchall(
        "SELECT t.*, s.cost_usd AS cost_usd, s.status AS session_status FROM chat_turns t"
        " LEFT JOIN sessions s ON s.id = t.session_id WHERE t.conversation_id = ? ORDER BY t.id",
        (conversation_pk,), fresh=fresh)
    return [TurnRow(id=r["id"], conversation_id=r["conversation_id"], session_id=r["session_id"],
                    question=r["question"], answer=r["answer"], status=r["status"], asked_by=r["asked_by"],
                    created_at=r["created_at"], finished_at=r["finished_at"], cost_usd=r["cost_usd"],
                    session_status=r["session_status"]) for r in rows]


async def conversation_of_session(db: Database, session_pk: int) -> str | None:
    """The public id of the conversation whose turn session ``session_pk`` answered, if any."""
    value = await db.fetchval("SELECT c.public_id FROM chat_turns t JOIN chat_conversations c ON c.id = t.conversation_id"
                              " WHERE t.session_id = ?", (session_pk,))
    return str(value) if value is not None else None


async def interrupt_running(db: Database, reason: str, node_id: str | None = None) -> int:
    """Turns a dead server left ``running`` (its sessions are swept the same way): ``interrupted``.
    With ``node_id``, only that node's (and those of no node): other nodes' turns may be alive."""
    mine = (" AND (session_id IS NULL OR session_id IN (SELECT id FROM sessions WHERE node_id IS NULL"
            " OR node_id = ?))") if node_id is not None else ""
    async with db.write() as conn:
        cur = await conn.execute(
            "UPDATE chat_turns SET status = 'interrupted', finished_at = ?, answer = coalesce(answer, ?)"  # noqa: S608
            f" WHERE status = 'running'{mine}", (utcnow(), reason, *([node_id] if node_id is not None else [])))
        return cur.rowcount


async def resumable_cwds(db: Database, since: str) -> list[str]:
    """The folders of conversations active since ``since``: their CLI transcripts stay (a next
    turn resumes them); older ones go with the daily prune, and their next turn starts afresh."""
    rows = await db.fetchall("SELECT cwd FROM chat_conversations WHERE updated_at >= ?", (since,))
    return [r["cwd"] for r in rows]
