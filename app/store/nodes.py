"""The nodes sharing this database, and the leases they hold (``nodes``, ``leases``, 0018_nodes).

Why in the database: several ``tierops serve`` processes on one store must agree on who leads
without anything but the store. A lease is taken, renewed and tested inside one write transaction
(writes are serialised on both backends: ``BEGIN IMMEDIATE``, PostgreSQL's advisory lock), against
the database's own clock, never a node's: two nodes whose clocks disagree still see one holder.
Every time here is the database's, as text in ``utcnow()``'s format.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TypedDict

from app.clock import shift
from app.store.db import Database

log = logging.getLogger(__name__)

__all__ = ["Lease", "NodeRow", "abandoned_sessions", "db_now", "dead_nodes", "heartbeat", "list_nodes", "mark_stopped",
           "register", "release_lease", "set_session_node", "take_lease"]

_NOW = "SELECT strftime('%Y-%m-%dT%H:%M:%fZ','now')"


class NodeRow(TypedDict):
    id: str
    host: str
    pid: int
    version: str
    labels: str
    started_at: str
    last_seen_at: str
    stopped_at: str | None
    running: int
    leader: bool  # holds the leader lease now (database time)
    seen_s: float  # seconds since its last heartbeat (database time)


@dataclass(frozen=True)
class Lease:
    held: bool  # by the asking node, now
    holder: str | None
    expires_at: str
    now: str  # the database's time when it was decided


async def db_now(db: Database) -> str:
    """The database's time (a reader: never behind a write in progress)."""
    return str(await db.fetchval(_NOW))


async def register(db: Database, node_id: str, *, host: str, pid: int, version: str, labels: str) -> None:
    async with db.write() as conn:
        cur = await conn.execute(_NOW)
        now = str((await cur.fetchone())[0])  # type: ignore[index]
        await conn.execute(
            "INSERT INTO nodes (id, host, pid, version, labels, started_at, last_seen_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, version = excluded.version,"
            " labels = excluded.labels, started_at = excluded.started_at, last_seen_at = excluded.last_seen_at,"
            " stopped_at = NULL", (node_id, host, pid, version, labels, now, now))


async def heartbeat(db: Database, node_id: str, running: int) -> str:
    """Record that ``node_id`` is alive (and how many sessions it runs); returns the database's time."""
    async with db.write() as conn:
        cur = await conn.execute(_NOW)
        now = str((await cur.fetchone())[0])  # type: ignore[index]
        await conn.execute("UPDATE nodes SET last_seen_at = ?, running = ?, stopped_at = NULL WHERE id = ?",
                           (now, running, node_id))
    return now


async def take_lease(db: Database, name: str, node_id: str, seconds: float) -> Lease:
    """Take or renew lease ``name`` for ``seconds`` when it is free, expired or already ``node_id``'s."""
    async with db.write() as conn:
        cur = await conn.execute(_NOW)
        now = str((await cur.fetchone())[0])  # type: ignore[index]
        cur = await conn.execute("SELECT holder, expires_at FROM leases WHERE name = ?", (name,))
        row = await cur.fetchone()
        if row is not None and row[0] not in (None, node_id) and str(row[1]) > now:
            return Lease(False, row[0], str(row[1]), now)
        expires = shift(now, seconds)
        if row is None:
            await conn.execute("INSERT INTO leases (name, holder, acquired_at, expires_at) VALUES (?, ?, ?, ?)",
                               (name, node_id, now, expires))
        elif row[0] == node_id:
            await conn.execute("UPDATE leases SET expires_at = ? WHERE name = ?", (expires, name))
        else:
            await conn.execute("UPDATE leases SET holder = ?, acquired_at = ?, expires_at = ? WHERE name = ?",
                               (node_id, now, expires, name))
    return Lease(True, node_id, expires, now)


async def release_lease(db: Database, name: str, node_id: str) -> None:
    """Give lease ``name`` up at once (a clean shutdown), if ``node_id`` holds it."""
    async with db.write() as conn:
        await conn.execute("UPDATE leases SET holder = NULL, expires_at = ? WHERE name = ? AND holder = ?",
                           ("", name, node_id))


async def mark_stopped(db: Database, node_id: str) -> None:
    async with db.write() as conn:
        cur = await conn.execute(_NOW)
        now = str((await cur.fetchone())[0])  # type: ignore[index]
        await conn.execute("UPDATE nodes SET stopped_at = ?, running = 0 WHERE id = ?", (now, node_id))


async def list_nodes(db: Database, lease: str = "leader") -> list[NodeRow]:
    """Every node seen, the newest first, with whether it holds ``lease`` now (read on a reader:
    ``/healthz`` must answer while a write waits on a locked database)."""
    now = await db_now(db)
    holder = await db.fetchval("SELECT holder FROM leases WHERE name = ? AND expires_at > ?", (lease, now))
    rows = await db.fetchall("SELECT * FROM nodes ORDER BY started_at DESC, id LIMIT 100")
    from app.clock import seconds_between

    return [NodeRow(id=r["id"], host=r["host"], pid=r["pid"], version=r["version"], labels=r["labels"],
                    started_at=r["started_at"], last_seen_at=r["last_seen_at"], stopped_at=r["stopped_at"],
                    running=r["running"], leader=r["id"] == holder,
                    seen_s=max(0.0, seconds_between(r["last_seen_at"], now))) for r in rows]


async def set_session_node(db: Database, session_pk: int, node_id: str) -> None:
    async with db.write() as conn:
        await conn.execute("UPDATE sessions SET node_id = ? WHERE id = ?", (node_id, session_pk))


async def dead_nodes(db: Database, seen_before: str) -> list[str]:
    """Nodes last seen before ``seen_before`` (or stopped): what they left may be taken over."""
    rows = await db.fetchall("SELECT id FROM nodes WHERE last_seen_at < ? OR stopped_at IS NOT NULL ORDER BY id",
                             (seen_before,), fresh=True)
    return [str(r[0]) for r in rows]


async def abandoned_sessions(db: Database, seen_before: str) -> list[tuple[int, str]]:
    """Running sessions whose node was last seen before ``seen_before`` or stopped: (id, node id)."""
    rows = await db.fetchall(
        "SELECT s.id, s.node_id FROM sessions s JOIN nodes n ON n.id = s.node_id WHERE s.status = 'running'"
        " AND (n.last_seen_at < ? OR n.stopped_at IS NOT NULL) ORDER BY s.id", (seen_before,), fresh=True)
    return [(int(r[0]), str(r[1])) for r in rows]
