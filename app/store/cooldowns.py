"""Reading the actions the tiers reported (the ``cooldowns`` table), for the cooldown limits of
issue #13.

Rows come from two sources, written with a session's findings (``app/store/findings.py``): the
legacy ``[COOLDOWN:restart|redeployment:SERVICE] success|failure`` markers and the contract's
``actions`` (results ``done``, ``failed``, ``dry-run``). Which of them count, and against which
limit, is policy and lives in ``app/engine/cooldowns.py``; this module only selects rows, by the
``(service, action, created_at)`` index of migration 0008 where it can. A host-wide action
(no service) is stored with service ``""``.
"""

from __future__ import annotations

from typing import TypedDict, cast

from app.store.db import Database

# Outcomes of an action that was taken: the contract's results and the markers' outcomes. A
# dry run is recorded but was not taken; a proposal is never in this table.
TAKEN_OUTCOMES = ("done", "failed", "success", "failure")
_TAKEN = ", ".join(f"'{o}'" for o in TAKEN_OUTCOMES)


class ActionRow(TypedDict):
    id: int
    session_pk: int
    tier: int | None
    action: str
    service: str
    outcome: str
    note: str | None
    created_at: str


_COLUMNS = "c.id, c.session_pk, s.tier, c.action, c.service, c.outcome, c.note, c.created_at"


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
    """The newest recorded actions of every outcome (dry runs too), newest first."""
    rows = await db.fetchall(
        f"SELECT {_COLUMNS} FROM cooldowns c LEFT JOIN sessions s ON s.id = c.session_pk"  # noqa: S608 (constants)
        " ORDER BY c.id DESC LIMIT ?", (limit,))
    return cast(list[ActionRow], [dict(r) for r in rows])
