"""The ``notifications`` table: every message TierOps meant to send, sent or not.

Why a table rather than a queue in memory: the overview lists what was sent, what failed and why,
and what was only recorded (below ``TIEROPS_NOTIFY_MIN_SEVERITY``, in quiet hours, no URLs
configured, folded into a digest); a message still ``pending`` when the process stops is sent at
the next start; and the unique ``dedup_key`` makes "once per state change" hold across restarts
and across the two processes that may run cycles (``serve`` and ``tierops run``): the second
:func:`record` of a key is a no-op that returns None.

Statuses: ``pending`` (the sender has it; ``attempts`` and ``last_error`` say how retries go),
``sent``, ``failed`` (given up, ``last_error`` says why), ``suppressed`` and ``digested`` (``why``
says why, e.g. "sent in digest #12"). Titles, bodies and errors pass the database's redactor; the
notification URLs themselves are never given to this module: a row names the routes it was given
to. What a message is about (``incident_id``, ``source``, ``service``, ``check_name``) is kept so
that a follow-up can find where its incident's opening went (:func:`earlier`) and so that the
incident page and the preview can list what was sent for it (:func:`for_incident`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, TypedDict, cast

from app.clock import utcnow
from app.store.db import Database
from app.store.rows import dumps

log = logging.getLogger(__name__)

PENDING, SENT, FAILED, SUPPRESSED, DIGESTED = "pending", "sent", "failed", "suppressed", "digested"
STATUSES = (PENDING, SENT, FAILED, SUPPRESSED, DIGESTED)

COLUMNS = ("id, created_at, kind, severity, dedup_key, title, body, link, status, why, attempts, last_error, sent_at,"
           " incident_id, source, service, check_name, routes")
# Kinds a follow-up follows: an incident's opening (opened, reopened, after maintenance) and worsening.
OPENING_KINDS = ("incident_opened", "incident_worsened")


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
    incident_id: int | None
    source: str | None  # check | model | alert | monitor
    service: str | None
    check_name: str | None
    routes: list[str]  # the routes it was given to ([] when it was not sent)


class Earlier(TypedDict):
    """The earlier messages a follow-up follows: their statuses, routes and why they were held."""

    status: str
    routes: list[str]
    why: str | None


class NotificationCount(TypedDict):
    status: str
    count: int


def _row(r: Any) -> NotificationRow:
    out = dict(r)
    try:
        routes = json.loads(out.get("routes") or "[]")
    except ValueError:
        routes = []
    out["routes"] = [str(x) for x in routes] if isinstance(routes, list) else []
    return cast(NotificationRow, out)


async def record(db: Database, *, kind: str, severity: str, title: str, body: str, link: str | None = None,
                 dedup_key: str | None = None, status: str = PENDING, why: str | None = None,
                 last_error: str | None = None, now: str | None = None, incident_id: int | None = None,
                 source: str | None = None, service: str | None = None, check_name: str | None = None,
                 routes: Sequence[str] = ()) -> int | None:
    """Store one message; its id, or None when ``dedup_key`` was recorded before (nothing stored).
    ``routes``: the route names it goes to (none when it is not sent)."""
    async with db.write() as conn:
        cur = await conn.execute(
            "INSERT INTO notifications (created_at, kind, severity, dedup_key, title, body, link, status, why,"
            " last_error, incident_id, source, service, check_name, routes)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, (SELECT id FROM incidents WHERE id = ?), ?, ?, ?, ?)"
            " ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING RETURNING id",
            (now or utcnow(), kind, severity, dedup_key, db.redact(title), db.redact(body), link, status, why,
             db.redact(last_error) if last_error else None, incident_id, source,
             db.redact(service) if service else None, db.redact(check_name) if check_name else None,
             dumps(list(routes)) if routes else None))
        row = await cur.fetchone()
        await cur.close()
    return int(row[0]) if row is not None else None


async def earlier(db: Database, *, incident_ids: Sequence[int] = (), dedup_key: str | None = None,
                  limit: int = 200) -> list[Earlier]:
    """The messages a follow-up follows: the openings of ``incident_ids`` (their opened, reopened
    and worsened messages), or the message recorded under ``dedup_key``. Read on the writer, so a
    message recorded a moment ago by this process is seen."""
    ids = sorted({int(i) for i in incident_ids})[:500]
    clauses, params = [], []
    if ids:
        marks = ",".join("?" * len(ids))
        kinds = ",".join("?" * len(OPENING_KINDS))
        clauses.append(f"(incident_id IN ({marks}) AND kind IN ({kinds}))")
        params += [*ids, *OPENING_KINDS]
    if dedup_key is not None:
        clauses.append("dedup_key = ?")
        params.append(dedup_key)
    if not clauses:
        return []
    rows = await db.fetchall(f"SELECT status, routes, why FROM notifications WHERE {' OR '.join(clauses)}"  # noqa: S608 (placeholders only)
                             " ORDER BY id LIMIT ?", [*params, limit], fresh=True)
    out: list[Earlier] = []
    for r in rows:
        try:
            routes = json.loads(r["routes"] or "[]")
        except ValueError:
            routes = []
        out.append({"status": r["status"], "routes": [str(x) for x in routes] if isinstance(routes, list) else [],
                    "why": r["why"]})
    return out


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
                        link: str | None = None, now: str | None = None, routes: Sequence[str] = ()) -> int:
    """One transaction: a pending ``digest`` message, and ``pks`` marked ``digested`` into it."""
    async with db.write() as conn:
        cur = await conn.execute(
            "INSERT INTO notifications (created_at, kind, severity, title, body, link, status, routes)"
            " VALUES (?, 'digest', ?, ?, ?, ?, ?, ?) RETURNING id",
            (now or utcnow(), severity, db.redact(title), db.redact(body), link, PENDING,
             dumps(list(routes)) if routes else None))
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
    return [_row(r) for r in rows]


async def recent(db: Database, limit: int = 8) -> list[NotificationRow]:
    """The newest messages, whatever their status (the overview)."""
    rows = await db.fetchall(f"SELECT {COLUMNS} FROM notifications ORDER BY id DESC LIMIT ?", (limit,))  # noqa: S608
    return [_row(r) for r in rows]


async def for_incident(db: Database, incident_id: int, limit: int = 100) -> list[NotificationRow]:
    """The messages about one incident, oldest first (its page, ``tierops notify preview``)."""
    rows = await db.fetchall(f"SELECT {COLUMNS} FROM notifications WHERE incident_id = ? ORDER BY id LIMIT ?",  # noqa: S608
                             (incident_id, limit))
    return [_row(r) for r in rows]


async def get(db: Database, pk: int) -> NotificationRow | None:
    row = await db.fetchone(f"SELECT {COLUMNS} FROM notifications WHERE id = ?", (pk,), fresh=True)  # noqa: S608
    return _row(row) if row is not None else None


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
