"""Named locks held by a run across nodes: ``service:NAME`` while a tier that may act works on it.

Why in the database: two nodes (or two cycles of one node) must never run tiers 2 and 3 on the
same service at once, and only the store is shared. A lock is a ``leases`` row (0018_nodes) whose
holder is one run; taking a set of them is one write transaction (writes are serialised on both
backends), so the test and the take cannot interleave with another run's. A holder renews its
locks while it works; a holder that died loses them when they expire, on the database's clock.

``service:*`` is the whole inventory: a run that cannot name its services takes it, and it
conflicts with every service lock (and they with it).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from app.clock import shift
from app.store.db import Database

log = logging.getLogger(__name__)

__all__ = ["EVERY_SERVICE", "PREFIX", "release_locks", "renew_locks", "service_lock_names", "take_locks"]

PREFIX = "service:"
EVERY_SERVICE = "service:*"
_NOW = "SELECT strftime('%Y-%m-%dT%H:%M:%fZ','now')"


def service_lock_names(services: Sequence[str | None]) -> list[str]:
    """The locks a run on ``services`` takes: one per service, or the whole inventory when none is named."""
    names = sorted({f"{PREFIX}{s}" for s in services if s})
    return names or [EVERY_SERVICE]


async def take_locks(db: Database, names: Sequence[str], holder: str, seconds: float) -> str | None:
    """Take every lock of ``names`` for ``holder`` for ``seconds``, or none of them. Returns None
    when taken, else the holder in the way (the caller waits and asks again)."""
    async with db.write() as conn:
        cur = await conn.execute(_NOW)
        now = str((await cur.fetchone())[0])  # type: ignore[index]
        if EVERY_SERVICE in names:
            clause, params = "name LIKE ?", [f"{PREFIX}%"]
        else:
            marks = ", ".join("?" * (len(names) + 1))
            clause, params = f"name IN ({marks})", [*names, EVERY_SERVICE]
        cur = await conn.execute(
            f"SELECT holder FROM leases WHERE {clause} AND holder IS NOT NULL AND holder <> ? AND expires_at > ?"  # noqa: S608
            " ORDER BY name LIMIT 1", (*params, holder, now))
        if (row := await cur.fetchone()) is not None:
            return str(row[0])
        expires = shift(now, seconds)
        for name in names:
            await conn.execute(
                "INSERT INTO leases (name, holder, acquired_at, expires_at) VALUES (?, ?, ?, ?) ON CONFLICT (name)"
                " DO UPDATE SET holder = excluded.holder, acquired_at = excluded.acquired_at,"
                " expires_at = excluded.expires_at", (name, holder, now, expires))
    return None


async def renew_locks(db: Database, holder: str, seconds: float) -> int:
    """Push the end of ``holder``'s locks ``seconds`` past now; how many it holds."""
    async with db.write() as conn:
        cur = await conn.execute(_NOW)
        now = str((await cur.fetchone())[0])  # type: ignore[index]
        cur = await conn.execute("UPDATE leases SET expires_at = ? WHERE holder = ? AND name LIKE ?",
                                 (shift(now, seconds), holder, f"{PREFIX}%"))
        return cur.rowcount or 0


async def release_locks(db: Database, holder: str) -> None:
    """Give every lock of ``holder`` up at once."""
    async with db.write() as conn:
        await conn.execute("DELETE FROM leases WHERE holder = ? AND name LIKE ?", (holder, f"{PREFIX}%"))
