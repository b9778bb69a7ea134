"""The ``notifications`` table (issue #13): every message TierOps meant to send, sent or not.

Why a table rather than a queue in memory: the overview lists what was sent, what failed and why,
and what was only recorded (below ``TIEROPS_NOTIFY_MIN_SEVERITY``, in quiet hours, no URLs
configured, folded into a digest); a message still ``pending`` when the process stops is sent at
the next start; and the unique ``dedup_key`` makes "once per state change" hold across restarts
and across the two processes that may run cycles (``serve`` and ``tierops run``): the second
:func:`record` of a key is a no-op that returns None.

Statuses: ``pending`` (the sender has it; ``attempts`` and ``last_error`` say how retries go),
``sent``, ``failed`` (given up, ``last_error`` says why), ``suppressed`` and ``digested`` (``why``
says why, e.g. "sent in digest #12"). Titles, bodies and errors pass the database's redactor; the
notification URLs themselves are never given to this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict, cast

from app.clock import utcnow
from app.store.db import Database

PENDING, SENT, FAILED, SUPPRESSED, DIGESTED = "pending", "sent", "failed", "suppressed", "digested"
STATUSES = (PENDING, SENT, FAILED, SUPPRESSED, DIGESTED)

COLUMNS = "id, created_at, kind, severity, dedup_key, title, body, link, status, why, attempts, last_error, sent_at"


class NotificationRow(TypedDict):
    """One row of ``notifications``."""

    id: int
    created_at: str
    kind: str
    severity: str
    dedup_key: str | None
    title: str
    body: str
    link: str | None
    status: str
    why: str | None
    attempts: int
    last_error: str | None
    sent_at: str | None


class NotificationCount(TypedDict):
    status: str
    count: int


async def record(db: Database, *, kind: str, severity: str, title: str, body: str, link: str | None = None,
                 dedup_key: str | None = None, status: str = PENDING, why: str | None = None,
                 last_error: str | None = None, now: str | None = None) -> int | None:
    """Store one message; its id, or None when ``dedup_key`` was recorded before (nothing stored)."""
    async with db.write() as conn:
        cur = await conn.execute(
            "INSERT INTO notifications (created_at, kind, severity, dedup_key, title, body, link, status, why,"
            " last_error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL"
            " DO NOTHING RETURNING id",
            (now or utcnow(), kind, severity, dedup_key, db.redact(title), db.redact(body), link, status, why,
             db.redact(last_error) if last_error else None))
        row = await cur.fetchone()
        await cur.close()
    return int(row[0]) if row is not None else None


async def mark_sent(db: Database, pk: int, attempts: int, now: str | None = None) -> None:
    async with db.write() as conn:
        await conn.execute("UPDATE notifications SET status = ?, attempts = ?, sent_at = ?, last_error = NULL"
                           " WHERE id = ?", (SENT, attempts, now or utcnow(), pk))


async def note_failure(db: Database, pk: int, attempts: int, error: str) -> None:
    """A send failed and will be retried: the row stays pending with the attempt and the error."""
    async with db.write() as conn:
        await conn.execute("UPDATE notifications SET attempts = ?, last_error = ? WHERE id = ?",
                           (attempts, db.redact(error), pk))


async def mark_failed(db: Database, pk: int, attempts: int, error: str) -> None:
    """Given up on: ``failed`` with the last error."""
    async with db.write() as conn:
        await conn.execute("UPDATE notifications SET status = ?, attempts = ?, last_error = ? WHERE id = ?",
                           (FAILED, attempts, db.redact(error), pk))


async def mark_suppressed(db: Database, pks: Sequence[int], why: str) -> None:
    """Pending messages that will not be sent after all (e.g. the URLs are gone at a restart)."""
    async with db.write() as conn:
        await conn.executemany("UPDATE notifications SET status = ?, why = ? WHERE id = ? AND status = ?",
                               [(SUPPRESSED, why, pk, PENDING) for pk in pks])


async def record_digest(db: Database, pks: Sequence[int], *, severity: str, title: str, body: str,
                        link: str | None = None, now: str | None = None) -> int:
    """One transaction: a pending ``digest`` message, and ``pks`` marked ``digested`` into it."""
    async with db.write() as conn:
        cur = await conn.execute(
            "INSERT INTO notifications (created_at, kind, severity, title, body, link, status)"
            " VALUES (?, 'digest', ?, ?, ?, ?, ?) RETURNING id",
            (now or utcnow(), severity, db.redact(title), db.redact(body), link, PENDING))
        row = await cur.fetchone()
        await cur.close()
        if row is None:  # pragma: no cover - INSERT … RETURNING always returns the row
            raise LookupError("the digest row was not created")
        digest_id = int(row[0])
        await conn.executemany("UPDATE notifications SET status = ?, why = ? WHERE id = ? AND status = ?",
                               [(DIGESTED, f"sent in digest #{digest_id}", pk, PENDING) for pk in pks])
    return digest_id


async def pending(db: Database, limit: int = 500) -> list[NotificationRow]:
    """Messages waiting to be sent, oldest first (read on the writer: the sender's own writes)."""
    rows = await db.fetchall(f"SELECT {COLUMNS} FROM notifications WHERE status = ? ORDER BY id LIMIT ?",  # noqa: S608
                             (PENDING, limit), fresh=True)
    return cast(list[NotificationRow], [dict(r) for r in rows])


async def recent(db: Database, limit: int = 8) -> list[NotificationRow]:
    """The newest messages, whatever their status (the overview)."""
    rows = await db.fetchall(f"SELECT {COLUMNS} FROM notifications ORDER BY id DESC LIMIT ?", (limit,))  # noqa: S608
    return cast(list[NotificationRow], [dict(r) for r in rows])


async def get(db: Database, pk: int) -> NotificationRow | None:
    row = await db.fetchone(f"SELECT {COLUMNS} FROM notifications WHERE id = ?", (pk,), fresh=True)  # noqa: S608
    return cast(NotificationRow, dict(row)) if row is not None else None


async def failure_times(db: Database, since: str, limit: int = 1000) -> list[str]:
    """``created_at`` of the messages that failed since ``since`` (an ISO time as stored)."""
    rows = await db.fetchall("SELECT created_at FROM notifications WHERE status = ? AND created_at >= ?"
                             " ORDER BY id DESC LIMIT ?", (FAILED, since, limit))
    return [str(r[0]) for r in rows]


async def count_failed_since(db: Database, since: str) -> int:
    return int(await db.fetchval("SELECT count(*) FROM notifications WHERE status = ? AND created_at >= ?",
                                 (FAILED, since)) or 0)


async def counts(db: Database) -> list[NotificationCount]:
    """Messages per status (``/metrics``)."""
    rows = await db.fetchall("SELECT status, count(*) AS count FROM notifications GROUP BY status")
    return cast(list[NotificationCount], [dict(r) for r in rows])
