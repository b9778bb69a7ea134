"""Reading the actions the tiers reported (the ``cooldowns`` table), for the cooldown limits
(``app/engine/cooldowns.py``), and the proposals among them.

Rows come from two sources, written with a session's findings (``app/store/findings.py``): the
legacy ``[COOLDOWN:restart|redeployment:SERVICE] success|failure`` markers and the contract's
``actions`` (results ``done``, ``failed``, ``dry-run``, ``proposed``). Which of them count, and
against which limit, is policy and lives in ``app/engine/cooldowns.py``; this module only selects
rows, by the ``(service, action, created_at)`` index of migration 0008 where it can. A host-wide
action (no service) is stored with service ``""``.

Proposals (outcome ``proposed``) are what a tier asks a human to do: they are read apart from the
actions taken (:func:`proposals`, :class:`ProposalRow` with the contract's names ``kind`` and
``detail``) and linked to an incident once the session's findings were applied to the incidents
(:func:`link_proposals`, called by ``app/engine/incidents.track``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TypedDict, cast

from app.store.db import Database
from app.store.incidents import SEVERITY_RANK
from app.store.rows import IncidentRow, decode_all

log = logging.getLogger(__name__)

# Outcomes of an action that was taken: the contract's results and the markers' outcomes. Dry
# runs and proposals are recorded but were not taken.
TAKEN_OUTCOMES = ("done", "failed", "success", "failure", "started")
# An action the guard let start (app/store/guard.py), its result not reported yet: counted as taken.
STARTED = "started"
# The markers' words for the limits' kinds: a reported action matches the guard's row by either.
KIND_ALIASES = {"redeployment": "redeploy"}
_TAKEN = ", ".join(f"'{o}'" for o in TAKEN_OUTCOMES)
PROPOSED = "proposed"


class ActionRow(TypedDict):
    id: int
    session_pk: int
    tier: int | None
    action: str
    service: str
    outcome: str
    note: str | None
    created_at: str
    incident_id: int | None


class ProposalRow(TypedDict):
    """An action a tier proposed and did not take, with the session that proposed it."""

    id: int
    session_pk: int
    tier: int | None
    dry_run: bool  # proposed by a dry-run session
    kind: str
    service: str | None  # None: host-wide
    detail: str | None
    created_at: str
    incident_id: int | None  # the incident it was linked to (None: none fitted)


_COLUMNS = "c.id, c.session_pk, s.tier, c.action, c.service, c.outcome, c.note, c.created_at, c.incident_id"
_PROPOSAL_COLUMNS = ("c.id, c.session_pk, s.tier, s.dry_run, c.action AS kind, NULLIF(c.service, '') AS service,"
                     " c.note AS detail, c.created_at, c.incident_id")


async def taken_between(db: Database, after: str, until: str, *, fresh: bool = False) -> list[ActionRow]:
    """Actions taken with ``after < created_at <= until`` (timestamps in the store's format),
    oldest first. ``fresh``: read after this process's own last write (the chain's checks)."""
    rows = await db.fetchall(
        f"SELECT {_COLUMNS} FROM cooldowns c LEFT JOIN sessions s ON s.id = c.session_pk"  # noqa: S608 (constants)
        f" WHERE c.created_at > ? AND c.created_at <= ? AND c.outcome IN ({_TAKEN}) ORDER BY c.created_at, c.id",
        (after, until), fresh=fresh)
    return cast(list[ActionRow], [dict(r) for r in rows])


async def session_taken(db: Database, session_pk: int, *, fresh: bool = False) -> list[ActionRow]:
    """The actions one session reported as taken, in its order."""
    rows = await db.fetchall(
        f"SELECT {_COLUMNS} FROM cooldowns c LEFT JOIN sessions s ON s.id = c.session_pk"  # noqa: S608 (constants)
        f" WHERE c.session_pk = ? AND c.outcome IN ({_TAKEN}) ORDER BY c.id", (session_pk,), fresh=fresh)
    return cast(list[ActionRow], [dict(r) for r in rows])


async def recent_actions(db: Database, limit: int = 20) -> list[ActionRow]:
    """The newest recorded actions, taken or dry runs (proposals: :func:`proposals`), newest first."""
    rows = await db.fetchall(
        f"SELECT {_COLUMNS} FROM cooldowns c LEFT JOIN sessions s ON s.id = c.session_pk"  # noqa: S608 (constants)
        " WHERE c.outcome != ? ORDER BY c.id DESC LIMIT ?", (PROPOSED, limit))
    return cast(list[ActionRow], [dict(r) for r in rows])


# -- proposals ---------------------------------------------------------------------------------

async def proposals(db: Database, *, session_pk: int | None = None, incident_id: int | None = None,
                    limit: int = 100, fresh: bool = False) -> list[ProposalRow]:
    """Proposed actions with the session and tier that proposed them: one session's in the order it
    reported them, otherwise (an incident's, or all) newest first. ``fresh``: read after this
    process's own last write (the chain, right after the session ended)."""
    clauses: list[str] = ["c.outcome = ?"]
    params: list[object] = [PROPOSED]
    if session_pk is not None:
        clauses.append("c.session_pk = ?")
        params.append(session_pk)
    if incident_id is not None:
        clauses.append("c.incident_id = ?")
        params.append(incident_id)
    order = "c.id" if session_pk is not None else "c.id DESC"
    rows = await db.fetchall(
        f"SELECT {_PROPOSAL_COLUMNS} FROM cooldowns c JOIN sessions s ON s.id = c.session_pk"  # noqa: S608 (constants)
        f" WHERE {' AND '.join(clauses)} ORDER BY {order} LIMIT ?", [*params, limit], fresh=fresh)
    return decode_all(rows, ProposalRow)


def _fold(name: str | None) -> str:
    return " ".join((name or "").split()).casefold()


def incident_for(service: str | None, touched: Sequence[IncidentRow]) -> int | None:
    """The incident a proposal on ``service`` belongs to, among the incidents its session touched:
    the one of the same service (several: unresolved first, then the most severe, then the newest),
    else the only one touched, else None."""
    unique = list({i["id"]: i for i in touched}.values())
    same = [i for i in unique if service and i["service"] and _fold(i["service"]) == _fold(service)]
    if same:
        best = max(same, key=lambda i: (i["status"] != "resolved", SEVERITY_RANK.get(i["severity"], 1), i["id"]))
        return best["id"]
    return unique[0]["id"] if len(unique) == 1 else None


async def link_proposals(db: Database, session_pk: int, touched: Sequence[IncidentRow]) -> int:
    """Set ``incident_id`` on the session's proposals not linked yet (:func:`incident_for`);
    returns how many were linked."""
    if not touched:
        return 0
    rows = await db.fetchall("SELECT id, service FROM cooldowns WHERE session_pk = ? AND outcome = ?"
                             " AND incident_id IS NULL ORDER BY id", (session_pk, PROPOSED), fresh=True)
    links = [(incident, pk) for pk, service in rows
             if (incident := incident_for(service or None, touched)) is not None]
    if links:  # no write transaction for a session without proposals (every tier-0 cycle)
        async with db.write() as conn:
            await conn.executemany("UPDATE cooldowns SET incident_id = ? WHERE id = ? AND incident_id IS NULL", links)
    return len(links)
