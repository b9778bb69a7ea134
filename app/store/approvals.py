"""Approvals: escalations that wait for an operator before the next tier runs.

Why a module of its own: with ``TIEROPS_TIERn_APPROVAL=manual`` a chain that decides to escalate
to tier n does not start it; it stores a *pending* approval carrying the handoff (what the lower
tier found and proposes) and ends. An operator approves it (the rest of the chain then runs from
tier n, ``Supervisor.start_approved``), rejects it, or lets it expire after
``TIEROPS_APPROVAL_TIMEOUT`` seconds. Only a pending approval can be decided, once.

Every decision also writes what it means on the session that escalated, in the same
transaction, so its page and the overview never disagree with the approval: its
``escalation_gate`` says what became of the request, and a rejection or an expiry sets its
``attention`` (a human must look: the problem the lower tier found is still there).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Literal, TypedDict

import aiosqlite

from app.clock import seconds_between, shift, utcnow
from app.store.db import Database
from app.store.rows import decode, decode_all, where
from app.vocab import ApprovalStatus

log = logging.getLogger(__name__)


class ApprovalRow(TypedDict):
    """An approval, every column of ``approvals``."""

    id: int
    created_at: str
    expires_at: str
    session_pk: int | None  # the session that escalated (NULL once pruned)
    chain_id: int | None
    tier: int  # the tier waiting to run
    handoff: str  # what that tier is given: the escalating session's handoff (and its incidents)
    status: str
    decided_at: str | None
    decided_by: str | None
    note: str | None
    child_session_pk: int | None  # the session an approval started
    attached: int  # later escalations of the same incidents attached to it


class ApprovalStateError(ValueError):
    """A decision the approval's state refuses (it is no longer pending, it is past its time, or
    the session that escalated is gone)."""


WAITING = "waiting for approval #"  # how every gate of a pending approval begins (cycle_status reads it)


def waiting_gate(pk: int, tier: int) -> str:
    """The escalating session's ``escalation_gate`` while its approval is pending."""
    return f"{WAITING}{pk} to run tier {tier}"


def is_waiting(gate: str | None) -> bool:
    """Whether a session's ``escalation_gate`` says it waits for an approval."""
    return bool(gate and gate.startswith(WAITING))


def decided_text(row: ApprovalRow) -> str:
    """Why a decided approval cannot be decided again."""
    by = f" by {row['decided_by']}" if row["decided_by"] else ""
    return f"approval #{row['id']} is already {row['status']}{by} (at {row['decided_at']})"


HANDOFF_MAX = 60_000  # characters of handoff an approval keeps (attached escalations append to it)


async def create_approval(db: Database, *, session_pk: int, chain_id: int | None, tier: int, handoff: str,
                          timeout_s: float, now: str | None = None, incident_ids: Sequence[int] = ()) -> ApprovalRow:
    """A new pending approval for ``session_pk``'s escalation to ``tier``, expiring ``timeout_s``
    seconds from now, for ``incident_ids``."""
    approval, _ = await request_approval(db, session_pk=session_pk, chain_id=chain_id, tier=tier, handoff=handoff,
                                         timeout_s=timeout_s, now=now, incident_ids=incident_ids, attach=False)
    return approval


async def request_approval(db: Database, *, session_pk: int, chain_id: int | None, tier: int, handoff: str,
                           timeout_s: float, incident_ids: Sequence[int] = (), now: str | None = None,
                           attach: bool = True) -> tuple[ApprovalRow, bool]:
    """At most one pending approval per incident and tier: when a pending approval to run ``tier``
    is already for one of ``incident_ids``, this escalation attaches to it — its handoff is
    appended (the operator sees every escalation's evidence), its incidents added, its expiry kept —
    and ``(that approval, True)`` is returned; otherwise a new pending approval, ``(it, False)``.
    One transaction: two processes escalating the same incident at once give one approval."""
    now = now or utcnow()
    ids = sorted({int(i) for i in incident_ids})
    async with db.write() as conn:
        existing = None
        if attach and ids:
            marks = ",".join("?" * len(ids))
            async with conn.execute(
                    "SELECT a.id FROM approvals a JOIN approval_incidents ai ON ai.approval_id = a.id"  # noqa: S608 (placeholders only)
                    f" WHERE a.status = ? AND a.tier = ? AND a.expires_at > ? AND ai.incident_id IN ({marks})"
                    " ORDER BY a.id LIMIT 1", (ApprovalStatus.PENDING, tier, now, *ids)) as cur:
                existing = await cur.fetchone()
        if existing is not None:
            pk = int(existing[0])
            row = await _get(conn, pk)
            extra = db.redact(f"\n\n## Also escalated by session #{session_pk} at {now}\n\n{handoff}")
            text = (row["handoff"] + extra)
            if len(text) > HANDOFF_MAX:
                text = text[:HANDOFF_MAX - 60] + "\n\n[… later escalations cut: see their sessions]"
            await conn.execute("UPDATE approvals SET handoff = ?, attached = attached + 1 WHERE id = ?", (text, pk))
        else:
            cur = await conn.execute(
                "INSERT INTO approvals (created_at, expires_at, session_pk, chain_id, tier, handoff, status)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (now, shift(now, timeout_s), session_pk, chain_id, tier, db.redact(handoff)[:HANDOFF_MAX],
                 ApprovalStatus.PENDING))
            if cur.lastrowid is None:  # pragma: no cover - an INSERT always has one
                raise LookupError("the approval was not stored")
            pk = cur.lastrowid
        await conn.executemany("INSERT OR IGNORE INTO approval_incidents (approval_id, incident_id)"
                               " SELECT ?, id FROM incidents WHERE id = ?", [(pk, i) for i in ids])
        return await _get(conn, pk), existing is not None


async def incident_ids(db: Database, approval_id: int, *, fresh: bool = False) -> list[int]:
    """The incidents an approval is for."""
    rows = await db.fetchall("SELECT incident_id FROM approval_incidents WHERE approval_id = ? ORDER BY incident_id",
                             (approval_id,), fresh=fresh)
    return [int(r[0]) for r in rows]


async def get_approval(db: Database, pk: int, *, fresh: bool = False) -> ApprovalRow | None:
    row = await db.fetchone("SELECT * FROM approvals WHERE id = ?", (pk,), fresh=fresh)
    return decode(row) if row else None  # type: ignore[return-value]


async def list_approvals(db: Database, *, status: str | None = None, session_pk: int | None = None,
                         limit: int = 100, offset: int = 0, fresh: bool = False) -> list[ApprovalRow]:
    """Pending ones oldest first (the order they should be looked at); otherwise newest first."""
    clause, params = where(status=status, session_pk=session_pk)
    order = "id" if status == ApprovalStatus.PENDING else "id DESC"
    rows = await db.fetchall(f"SELECT * FROM approvals{clause} ORDER BY {order} LIMIT ? OFFSET ?",  # noqa: S608 (where() columns)
                             [*params, limit, offset], fresh=fresh)
    return decode_all(rows, ApprovalRow)


Decision = Literal["approved", "rejected"]


async def decide(db: Database, pk: int, decision: Decision, actor: str, note: str | None = None,
                 now: str | None = None) -> ApprovalRow:
    """Approve or reject a pending approval, recording who, when and why. Raises LookupError (no
    such approval) or :class:`ApprovalStateError`. An approval past its time is expired instead
    (and the session told) before the error is raised: a late decision never runs a stale handoff.

    Approved: the session's gate is cleared (its ``escalated_to`` will name the new session).
    Rejected: the session's gate and ``attention`` say who rejected it and why."""
    now = now or utcnow()
    async with db.write() as conn:
        row = await _require(conn, pk)
        if row["status"] != ApprovalStatus.PENDING:
            raise ApprovalStateError(decided_text(row))
        resolved = await _all_resolved(conn, pk)
        if resolved:
            await _expire_resolved(conn, row, now)
        elif row["expires_at"] <= now:
            await _expire(conn, row, now)  # committed: the raise below comes after the transaction
        elif decision == "approved" and row["session_pk"] is None:
            raise ApprovalStateError(f"approval #{pk}: the session that escalated no longer exists (pruned); "
                                     "there is no handoff to continue from")
        else:
            await conn.execute("UPDATE approvals SET status = ?, decided_at = ?, decided_by = ?, note = ?"
                               " WHERE id = ?", (decision, now, actor, db.redact(note) if note else None, pk))
            if row["session_pk"] is not None:
                if decision == "approved":
                    await conn.execute("UPDATE sessions SET escalation_gate = NULL WHERE id = ?", (row["session_pk"],))
                else:
                    why = f"approval #{pk} to run tier {row['tier']} rejected by {actor}" + (f": {note}" if note else "")
                    await _tell_session(conn, row["session_pk"], db.redact(why), pk)
            return await _get(conn, pk)
    if resolved:
        raise ApprovalStateError(f"approval #{pk} expired: {RESOLVED_NOTE}; nothing is left to {decision[:-1]}")
    raise ApprovalStateError(f"approval #{pk} expired at {row['expires_at']}, before it was {decision}")


async def _all_resolved(conn: aiosqlite.Connection, pk: int) -> bool:
    """Whether the approval is for incidents and every one of them is resolved."""
    async with conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(i.status != 'resolved'), 0) FROM approval_incidents ai"
            " JOIN incidents i ON i.id = ai.incident_id WHERE ai.approval_id = ?", (pk,)) as cur:
        total, unresolved = await cur.fetchone() or (0, 0)
    return bool(total) and not unresolved


async def expire_due(db: Database, now: str | None = None) -> list[ApprovalRow]:
    """Expire every pending approval whose time is up, telling each one's session (a human must
    look), and every one whose incidents are all resolved (nothing is left to approve; its session
    is told why, no human is needed). Returns them; ``note`` says which."""
    now = now or utcnow()
    async with db.write() as conn:
        async with conn.execute("SELECT * FROM approvals WHERE status = ? AND expires_at <= ? ORDER BY id",
                                (ApprovalStatus.PENDING, now)) as cur:
            due: list[ApprovalRow] = [decode(r) for r in await cur.fetchall()]  # type: ignore[misc]
        out = [await _expire(conn, row, now) for row in due]
        async with conn.execute(
                "SELECT a.* FROM approvals a WHERE a.status = ? AND EXISTS (SELECT 1 FROM approval_incidents ai"
                " WHERE ai.approval_id = a.id) AND NOT EXISTS (SELECT 1 FROM approval_incidents ai JOIN incidents i"
                " ON i.id = ai.incident_id WHERE ai.approval_id = a.id AND i.status != 'resolved') ORDER BY a.id",
                (ApprovalStatus.PENDING,)) as cur:
            moot: list[ApprovalRow] = [decode(r) for r in await cur.fetchall()]  # type: ignore[misc]
        out += [await _expire_resolved(conn, row, now) for row in moot]
        return out


RESOLVED_NOTE = "its incidents resolved before anyone decided"


async def _expire_resolved(conn: aiosqlite.Connection, row: ApprovalRow, now: str) -> ApprovalRow:
    async with conn.execute(
            "SELECT group_concat('#' || i.id, ', ') FROM approval_incidents ai JOIN incidents i ON i.id = ai.incident_id"
            " WHERE ai.approval_id = ?", (row["id"],)) as cur:
        names = (await cur.fetchone() or [None])[0] or ""
    note = f"{RESOLVED_NOTE} (incident {names})" if names else RESOLVED_NOTE
    await conn.execute("UPDATE approvals SET status = ?, decided_at = ?, note = ? WHERE id = ?",
                       (ApprovalStatus.EXPIRED, now, note, row["id"]))
    if row["session_pk"] is not None:
        await conn.execute("UPDATE sessions SET escalation_gate = ? WHERE id = ?",
                           (f"approval #{row['id']} to run tier {row['tier']} expired: {note}", row["session_pk"]))
    return await _get(conn, row["id"])


async def set_child(db: Database, pk: int, child_session_pk: int) -> None:
    """Record the session an approval started."""
    async with db.write() as conn:
        await conn.execute("UPDATE approvals SET child_session_pk = ? WHERE id = ?", (child_session_pk, pk))


async def _expire(conn: aiosqlite.Connection, row: ApprovalRow, now: str) -> ApprovalRow:
    await conn.execute("UPDATE approvals SET status = ?, decided_at = ? WHERE id = ?",
                       (ApprovalStatus.EXPIRED, now, row["id"]))
    if row["session_pk"] is not None:
        seconds = round(seconds_between(row["created_at"], row["expires_at"]))
        await _tell_session(conn, row["session_pk"],
                            f"approval #{row['id']} to run tier {row['tier']} expired after {seconds} s", row["id"])
    return await _get(conn, row["id"])


async def _tell_session(conn: aiosqlite.Connection, session_pk: int, why: str, approval_id: int) -> None:
    """The escalation will not happen: say so as the session's gate, and ask a human to look; the
    flag follows the approval's incidents (acknowledged once none of them is open)."""
    await conn.execute("UPDATE sessions SET escalation_gate = ?, attention = ?, attention_acked_at = NULL,"
                       " attention_acked_by = NULL WHERE id = ?", (why, why, session_pk))
    await conn.execute("INSERT OR IGNORE INTO attention_incidents (session_pk, incident_id)"
                       " SELECT ?, incident_id FROM approval_incidents WHERE approval_id = ?", (session_pk, approval_id))


async def _get(conn: aiosqlite.Connection, pk: int) -> ApprovalRow:
    async with conn.execute("SELECT * FROM approvals WHERE id = ?", (pk,)) as cur:
        row = await cur.fetchone()
    if row is None:  # pragma: no cover - read back inside the transaction that wrote it
        raise LookupError(f"approval {pk} vanished")
    return decode(row)  # type: ignore[return-value]


async def _require(conn: aiosqlite.Connection, pk: int) -> ApprovalRow:
    async with conn.execute("SELECT * FROM approvals WHERE id = ?", (pk,)) as cur:
        row = await cur.fetchone()
    if row is None:
        raise LookupError(f"no approval {pk}")
    return decode(row)  # type: ignore[return-value]


