"""A whole TierOps database copied to another, SQLite and PostgreSQL either way, and checked.

Why in the store: it reads and writes every table, and only the store holds SQL. Both ends are
opened as TierOps opens them (migrations run), so both have the same tables and columns. Tables go
in the order their foreign keys need (a table after those it refers to); a column that refers to
its own table (a session's parent, the session it escalated to, a memory's replacement) is filled
in a second pass, so the order of rows never matters. The destination is written in one
transaction: a copy that fails leaves it as it was. PostgreSQL's identity counters are moved past
the copied ids. Then every table is compared: its row count and a SHA-256 over its rows in key
order, read back from both ends.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.store.db import Database

log = logging.getLogger(__name__)

__all__ = ["CopyRefused", "CopyReport", "TableReport", "copy_database", "table_digest", "user_tables"]

BATCH = 500
SKIP = {"migrations", "sqlite_sequence"}


class CopyRefused(Exception):
    """The copy cannot start (a non-empty destination without --force): nothing was written."""


@dataclass
class TableReport:
    name: str
    rows: int
    source_sha256: str
    destination_sha256: str

    @property
    def verified(self) -> bool:
        return self.source_sha256 == self.destination_sha256


@dataclass
class CopyReport:
    tables: list[TableReport] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)

    @property
    def verified(self) -> bool:
        return all(t.verified for t in self.tables)


async def user_tables(db: Database) -> list[str]:
    if db.dialect == "postgresql":
        rows = await db.fetchall("SELECT table_name FROM information_schema.tables WHERE table_schema ="
                                 " current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name")
    else:
        rows = await db.fetchall("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    return [str(r[0]) for r in rows if str(r[0]) not in SKIP and not str(r[0]).startswith("sqlite_")]


async def _columns(db: Database, table: str) -> list[str]:
    if db.dialect == "postgresql":
        rows = await db.fetchall("SELECT column_name FROM information_schema.columns WHERE table_schema ="
                                 " current_schema() AND table_name = ? ORDER BY ordinal_position", (table,))
    else:
        rows = await db.fetchall(f"SELECT name FROM pragma_table_info('{table}')")  # noqa: S608 (a table name)
    return [str(r[0]) for r in rows]


async def _references(db: Database, table: str) -> list[tuple[str, str]]:
    """(column, referenced table) of ``table``'s foreign keys."""
    if db.dialect == "postgresql":
        rows = await db.fetchall(
            "SELECT kcu.column_name, ccu.table_name FROM information_schema.table_constraints tc"
            " JOIN information_schema.key_column_usage kcu ON kcu.constraint_name = tc.constraint_name"
            " AND kcu.table_schema = tc.table_schema"
            " JOIN information_schema.constraint_column_usage ccu ON ccu.constraint_name = tc.constraint_name"
            " AND ccu.table_schema = tc.table_schema"
            " WHERE tc.constraint_type = 'FOREIGN KEY' AND tc.table_schema = current_schema() AND tc.table_name = ?",
            (table,))
        return [(str(r[0]), str(r[1])) for r in rows]
    rows = await db.fetchall(f"SELECT \"from\", \"table\" FROM pragma_foreign_key_list('{table}')")  # noqa: S608
    return [(str(r[0]), str(r[1])) for r in rows]


def _order(tables: Sequence[str], refs: dict[str, list[tuple[str, str]]]) -> list[str]:
    """Every table after the tables it refers to (its own table aside)."""
    done: list[str] = []
    pending = sorted(tables)
    while pending:
        ready = [t for t in pending if all(ref == t or ref in done or ref not in tables for _, ref in refs[t])]
        if not ready:  # a cycle between tables: not in TierOps' schema; keep going in name order
            ready = pending[:1]
        done.extend(ready)
        pending = [t for t in pending if t not in ready]
    return done


def _key(columns: Sequence[str]) -> str:
    return "id" if "id" in columns else ", ".join(columns)


def _canonical(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return value  # 1.0 stays a float on both ends: REAL and DOUBLE PRECISION alike
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    return value


async def table_digest(db: Database, table: str, columns: Sequence[str]) -> tuple[int, str]:
    """Row count and SHA-256 of ``table``'s rows in key order (each row as canonical JSON)."""
    digest = hashlib.sha256()
    count, offset = 0, 0
    listed = ", ".join(columns)
    while True:
        rows = await db.fetchall(f"SELECT {listed} FROM {table} ORDER BY {_key(columns)}"  # noqa: S608 (names)
                                 " LIMIT ? OFFSET ?", (BATCH * 4, offset))
        for r in rows:
            digest.update(json.dumps([_canonical(v) for v in r], separators=(",", ":"), default=str).encode())
            digest.update(b"\n")
        count += len(rows)
        offset += len(rows)
        if len(rows) < BATCH * 4:
            return count, digest.hexdigest()


async def _non_empty(db: Database, tables: Sequence[str]) -> list[str]:
    return [table for table in tables
            if await db.fetchval(f"SELECT 1 FROM {table} LIMIT 1") is not None]  # noqa: S608 (a table name)


async def copy_database(src: Database, dst: Database, *, force: bool = False,
                        progress: Callable[[str, int], None] | None = None) -> CopyReport:
    """Copy every row of ``src`` into ``dst`` (emptied first with ``force``), then verify."""
    tables = await user_tables(src)
    missing = sorted(set(tables) - set(await user_tables(dst)))
    if missing:
        raise CopyRefused(f"the destination lacks tables {', '.join(missing)}: it is not a TierOps database of this "
                          "version")
    refs = {t: await _references(src, t) for t in tables}
    order = _order(tables, refs)
    if (filled := await _non_empty(dst, order)) and not force:
        raise CopyRefused(f"the destination is not empty ({', '.join(filled[:5])}{' …' if len(filled) > 5 else ''} "
                          "hold rows): copy into an empty database, or pass --force to replace everything in it")
    columns = {t: await _columns(src, t) for t in order}
    async with dst.write() as conn:
        for table in reversed(order):  # children first
            await conn.execute(f"DELETE FROM {table}")  # noqa: S608 (a table name)
        for table in order:
            cols = columns[table]
            own = [c for c, ref in refs[table] if ref == table]  # filled in a second pass
            placeholders = ", ".join("?" * len(cols))
            insert = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({placeholders})"  # noqa: S608 (names)
            copied, offset = 0, 0
            while True:
                rows = await src.fetchall(f"SELECT {', '.join(cols)} FROM {table} ORDER BY {_key(cols)}"  # noqa: S608
                                          " LIMIT ? OFFSET ?", (BATCH, offset))
                if not rows:
                    break
                await conn.executemany(insert, [[None if c in own else v for c, v in zip(cols, r, strict=True)]
                                                for r in rows])
                for c in own:
                    pairs = [(r[cols.index(c)], r[cols.index("id")]) for r in rows if r[cols.index(c)] is not None]
                    if pairs:
                        await conn.executemany(f"UPDATE {table} SET {c} = ? WHERE id = ?", pairs)  # noqa: S608
                copied += len(rows)
                offset += len(rows)
            if dst.dialect == "postgresql" and table in getattr(dst, "id_tables", ()):
                await conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"  # noqa: S608 (a name)
                                   f" (SELECT coalesce(max(id), 0) + 1 FROM {table}), false)")
            if progress is not None:
                progress(table, copied)
    report = CopyReport()
    for table in order:
        count, source_sha = await table_digest(src, table, columns[table])
        _, dest_sha = await table_digest(dst, table, columns[table])
        report.tables.append(TableReport(table, count, source_sha, dest_sha))
    log.info("copied %d rows in %d tables from %s to %s (%s)", report.rows, len(report.tables), src.path, dst.path,
             "verified" if report.verified else "MISMATCH")
    return report
