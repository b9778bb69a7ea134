"""The run queue: runs waiting for a free cycle, kept in ``run_queue`` (migration 0008).

Why a table and not a list in memory: a node runs a bounded number of cycles
(``TIEROPS_MAX_CONCURRENT``), and an alert that opens an incident while they are all taken must
still get its investigation — later, after a restart, or on another node sharing the store. So the
run is written down (``queued``) before the sender is answered, and every node's queue worker
(``app/supervisor/alerts.py``) starts the oldest one it may run (its ``needs`` labels) while it has
a free slot. A row goes ``queued`` → ``started`` (:func:`claim_next`, :func:`mark_started`) or
``failed``; a claim that lost its slot goes back (:func:`requeue`), and one a killed server never
finished is failed at start (:func:`fail_unfinished_claims`). A run may also be the rest of a
chain another node could not run (:func:`enqueue_continuation`).

What it deliberately does: :func:`enqueue_investigation` decides everything in one write
transaction, so concurrent deliveries cannot race past the bound (``TIEROPS_ALERT_QUEUE_MAX``) in
an alert storm: an incident already listed changes nothing, one of a service that already has a
queued run is absorbed by it (coalesced), otherwise a new run is queued, or, when full, the
incident gets its own needs-attention flag — recorded and told, never dropped without a word.
The rules in full: ARCHITECTURE.md, "Alert incidents and the run queue".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal, TypedDict

import aiosqlite

from app.clock import utcnow
from app.placement import labels_of
from app.store.alert_incidents import flag_attention
from app.store.db import Database
from app.store.rows import decode, decode_all

log = logging.getLogger(__name__)

QUEUED, STARTED, FAILED = "queued", "started", "failed"
STATUSES = (QUEUED, STARTED, FAILED)
ERROR_MAX = 2000
PROMPT_MAX = 100_000  # characters of a coalesced run's prompt that may hold whole ## Alert sections
PROMPT_NAMES_MAX = 150_000  # ... and one line per further incident up to this
CLAIM_SCAN = 500  # queued runs a claim looks through for one this node's labels allow


class QueuedRunRow(TypedDict):
    """A ``run_queue`` row, with the key and title of its incident (if it still exists)."""

    id: int
    created_at: str
    source: str
    tier: int
    prompt: str | None
    incident_id: int | None
    status: str
    started_at: str | None
    session_pk: int | None
    error: str | None
    incident_key: str | None
    incident_title: str | None
    incident_ids: list[int]  # every incident the run investigates (several: coalesced by service)
    needs: str  # node labels it needs, comma separated ('' any node: TIEROPS_RUNS_ON)
    claimed_by: str | None  # the node that claimed it
    parent_session_pk: int | None  # the rest of a chain: the session that escalated to ``tier``
    handoff: str | None  # ... and the handoff it gave


_SELECT = ("SELECT q.*, i.key AS incident_key, i.title AS incident_title,"
           " (SELECT json_group_array(r.incident_id) FROM run_queue_incidents r WHERE r.run_id = q.id) AS incident_ids"
           " FROM run_queue q LEFT JOIN incidents i ON i.id = q.incident_id")


async def enqueue(db: Database, *, source: str, tier: int, prompt: str | None, incident_id: int | None, limit: int,
                  now: str | None = None, needs: str = "") -> QueuedRunRow | None:
    """Add a run behind the others; None (nothing written) when ``limit`` runs already wait."""
    now = now or utcnow()
    async with db.write() as conn:
        async with conn.execute("SELECT COUNT(*) FROM run_queue WHERE status = 'queued'") as cur:
            (waiting,) = await cur.fetchone()  # type: ignore[misc]
        if waiting >= limit:
            return None
        pk = await _insert(conn, db, source, tier, prompt, [incident_id] if incident_id is not None else [], now,
                           needs)
        async with conn.execute(f"{_SELECT} WHERE q.id = ?", (pk,)) as cur:
            row = await cur.fetchone()
    return decode(row) if row else None  # type: ignore[return-value]


async def enqueue_continuation(db: Database, *, tier: int, parent_pk: int, handoff: str | None, kind: str,
                               incident_ids: list[int], needs: str, now: str | None = None) -> QueuedRunRow:
    """Queue the rest of a chain: tier ``tier`` continuing session ``parent_pk``, for a node with the
    labels ``needs`` (the node that ran the parent lacks one). ``kind`` ``escalation``: ``handoff``
    is the incidents block the tier gets; ``approval``: the handoff an operator approved. Never
    refused for a full queue: the escalation was decided, and dropping it would lose it."""
    now = now or utcnow()
    async with db.write() as conn:
        pk = await _insert(conn, db, kind, tier, None, incident_ids, now, needs)
        await conn.execute("UPDATE run_queue SET parent_session_pk = ?, handoff = ? WHERE id = ?",
                           (parent_pk, db.redact(handoff) if handoff is not None else None, pk))
        async with conn.execute(f"{_SELECT} WHERE q.id = ?", (pk,)) as cur:
            row = await cur.fetchone()
    if row is None:  # pragma: no cover - written just above, in this transaction
        raise LookupError(f"queued run {pk} vanished in its own transaction")
    return decode(row)  # type: ignore[return-value]


async def _insert(conn: aiosqlite.Connection, db: Database, source: str, tier: int, prompt: str | None,
                  incident_ids: list[int], now: str, needs: str = "") -> int:
    cur = await conn.execute(
        "INSERT INTO run_queue (created_at, source, tier, prompt, incident_id, status, needs)"
        " VALUES (?, ?, ?, ?, ?, 'queued', ?)",
        (now, source, tier, db.redact(prompt) if prompt is not None else None,
         incident_ids[0] if incident_ids else None, needs))
    pk = int(cur.lastrowid or 0)
    for incident_id in dict.fromkeys(incident_ids):
        await conn.execute("INSERT INTO run_queue_incidents (run_id, incident_id) VALUES (?, ?)", (pk, incident_id))
    return pk


@dataclass(frozen=True)
class Enqueued:
    """What :func:`enqueue_investigation` did: ``row`` is the run (None when ``full``)."""

    kind: Literal["queued", "coalesced", "already", "full"]
    row: QueuedRunRow | None


async def enqueue_investigation(db: Database, *, source: str, tier: int, incident_id: int, service: str | None,
                                prompt: str, addition: str, short: str, limit: int, full_reason: str,
                                now: str | None = None, needs: str = "") -> Enqueued:
    """Queue the investigation of incident ``incident_id``, coalesced with a waiting run of the same
    ``service``, within the bound ``limit``, in one transaction (see the module docstring).
    ``prompt`` is a new run's; ``addition`` (else ``short``) what a coalescing run's prompt gains;
    ``full_reason`` what the incident says when there is no room."""
    now = now or utcnow()
    async with db.write() as conn:
        async with conn.execute(
                "SELECT q.id FROM run_queue q JOIN run_queue_incidents r ON r.run_id = q.id"
                " WHERE q.status = 'queued' AND r.incident_id = ? ORDER BY q.id LIMIT 1", (incident_id,)) as cur:
            found = await cur.fetchone()
        run_id: int | None = int(found[0]) if found is not None else None
        kind: Literal["queued", "coalesced", "already", "full"] = "already"
        if run_id is None and service is not None:
            async with conn.execute(
                    "SELECT q.id, q.prompt FROM run_queue q JOIN run_queue_incidents r ON r.run_id = q.id"
                    " JOIN incidents i ON i.id = r.incident_id WHERE q.status = 'queued' AND q.tier = ?"
                    " AND i.service = ? ORDER BY q.id LIMIT 1", (tier, service)) as cur:
                found = await cur.fetchone()
            if found is not None:
                kind, run_id = "coalesced", int(found[0])
                text = str(found[1] or "")
                more = db.redact(addition) if len(text) + len(addition) <= PROMPT_MAX else db.redact(short)
                if len(text) + len(more) <= PROMPT_NAMES_MAX:
                    await conn.execute("UPDATE run_queue SET prompt = ? WHERE id = ?", (text + more, run_id))
                await conn.execute("INSERT INTO run_queue_incidents (run_id, incident_id) VALUES (?, ?)",
                                   (run_id, incident_id))
        if run_id is None:
            async with conn.execute("SELECT COUNT(*) FROM run_queue WHERE status = 'queued'") as cur:
                (waiting,) = await cur.fetchone()  # type: ignore[misc]
            if waiting >= limit:
                await flag_attention(conn, incident_id, db.redact(full_reason), now)
                return Enqueued("full", None)
            run_id, kind = await _insert(conn, db, source, tier, prompt, [incident_id], now, needs), "queued"
        async with conn.execute(f"{_SELECT} WHERE q.id = ?", (run_id,)) as cur:
            row = await cur.fetchone()
    return Enqueued(kind, decode(row) if row else None)  # type: ignore[arg-type]


def may_run(needs: str | None, labels: frozenset[str]) -> bool:
    """A node with ``labels`` may run a queued run that ``needs`` these (comma separated) labels."""
    return labels_of(needs or "") <= labels


async def queued_count(db: Database, labels: frozenset[str] | None = None) -> int:
    """How many runs wait; with ``labels``, how many of the oldest ``CLAIM_SCAN`` a node with these
    labels may run (the others wait for another node)."""
    if labels is None:
        value = await db.fetchval("SELECT COUNT(*) FROM run_queue WHERE status = 'queued'", fresh=True)
        return int(value or 0)
    rows = await db.fetchall("SELECT needs FROM run_queue WHERE status = 'queued' ORDER BY id LIMIT ?", (CLAIM_SCAN,),
                             fresh=True)
    return sum(may_run(r[0], labels) for r in rows)


async def claim_next(db: Database, now: str | None = None, node_id: str | None = None,
                     labels: frozenset[str] | None = None) -> QueuedRunRow | None:
    """The oldest queued run this node may run, now ``started`` (no session yet) by ``node_id``;
    None when nothing waits for it. ``labels``: this node's (a run needing one it lacks is left for
    another node; None: any run). Several nodes may ask at once: writes are serialised, so each run
    is claimed once."""
    now = now or utcnow()
    async with db.write() as conn:
        async with conn.execute("SELECT id, needs FROM run_queue WHERE status = 'queued' ORDER BY id"
                                " LIMIT ?", (CLAIM_SCAN,)) as cur:
            waiting = list(await cur.fetchall())
        first = next((r for r in waiting if labels is None or may_run(r[1], labels)), None)
        if first is None:
            return None
        await conn.execute("UPDATE run_queue SET status = 'started', started_at = ?, claimed_by = ? WHERE id = ?",
                           (now, node_id, first[0]))
        async with conn.execute(f"{_SELECT} WHERE q.id = ?", (first[0],)) as cur:
            row = await cur.fetchone()
    return decode(row) if row else None  # type: ignore[return-value]


async def requeue(db: Database, pk: int) -> None:
    """A claim that could not take the cycle: back in the queue, in its place (ids order it)."""
    async with db.write() as conn:
        await conn.execute("UPDATE run_queue SET status = 'queued', started_at = NULL WHERE id = ? AND status = 'started'",
                           (pk,))


async def mark_started(db: Database, pk: int, session_pk: int | None, note: str | None = None) -> None:
    """The claimed run's cycle started: its first session, or a note why there is none yet."""
    async with db.write() as conn:
        await conn.execute("UPDATE run_queue SET session_pk = ?, error = ? WHERE id = ?",
                           (session_pk, note[:ERROR_MAX] if note else None, pk))


async def mark_failed(db: Database, pk: int, error: str, now: str | None = None) -> None:
    async with db.write() as conn:
        await conn.execute("UPDATE run_queue SET status = 'failed', error = ?, started_at = COALESCE(started_at, ?)"
                           " WHERE id = ?", (db.redact(error)[:ERROR_MAX], now or utcnow(), pk))


async def fail_unfinished_claims(db: Database, reason: str, node_id: str | None = None) -> int:
    """At start: runs a killed server claimed (``started``) but never gave a session are failed;
    with ``node_id``, only this node's claims (and those of no node): other nodes' may be starting."""
    mine = " AND (claimed_by IS NULL OR claimed_by = ?)" if node_id is not None else ""
    async with db.write() as conn:
        cur = await conn.execute(
            "UPDATE run_queue SET status = 'failed', error = ? WHERE status = 'started' AND session_pk IS NULL"  # noqa: S608
            f" AND error IS NULL{mine}", (reason[:ERROR_MAX], *([node_id] if node_id is not None else [])))
        return cur.rowcount or 0


async def requeue_claims_of(db: Database, node_ids: list[str]) -> int:
    """Runs dead nodes claimed and never started: back in the queue, in their place."""
    if not node_ids:
        return 0
    marks = ", ".join("?" * len(node_ids))
    async with db.write() as conn:
        cur = await conn.execute(
            "UPDATE run_queue SET status = 'queued', started_at = NULL, claimed_by = NULL WHERE status = 'started'"  # noqa: S608
            f" AND session_pk IS NULL AND error IS NULL AND claimed_by IN ({marks})", tuple(node_ids))
        return cur.rowcount or 0


async def list_runs(db: Database, *, status: str | None = None, limit: int = 100, offset: int = 0,
                    fresh: bool = False) -> list[QueuedRunRow]:
    """Newest first. ``status``: queued, started or failed; None: queued and started."""
    if status is None:
        clause, params = "q.status IN ('queued', 'started')", []
    else:
        clause, params = "q.status = ?", [status]
    rows = await db.fetchall(f"{_SELECT} WHERE {clause} ORDER BY q.id DESC LIMIT ? OFFSET ?",
                             [*params, limit, offset], fresh=fresh)
    return decode_all(rows, QueuedRunRow)


async def waiting(db: Database, limit: int = 20) -> list[QueuedRunRow]:
    """The queued runs, oldest (next to start) first: the overview's list."""
    rows = await db.fetchall(f"{_SELECT} WHERE q.status = 'queued' ORDER BY q.id LIMIT ?", (limit,))
    return decode_all(rows, QueuedRunRow)


async def get_run(db: Database, pk: int, *, fresh: bool = False) -> QueuedRunRow | None:
    row = await db.fetchone(f"{_SELECT} WHERE q.id = ?", (pk,), fresh=fresh)
    return decode(row) if row else None  # type: ignore[return-value]
