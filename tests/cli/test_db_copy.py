"""``tierops db copy``: a populated SQLite database to PostgreSQL and back, verified; refusals."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from app.store import chats, memories, sessions
from app.store.backends import open_database
from app.store.copy import table_digest, user_tables
from app.store.db import Database
from tests.cli.helpers import one_error_line, run
from tests.web.api.test_incidents import seed_incidents

_names = iter(range(1, 1 << 20))


async def _seed(path: Path) -> None:
    db = await Database.open(path)
    try:
        await seed_incidents(db)
        parent = await sessions.create_session(db, tier=1, model="haiku", prompt="p", trigger="schedule")
        child = await sessions.create_session(db, tier=2, model="sonnet", prompt="q", trigger="escalation",
                                              parent_session_id=parent)
        await sessions.set_escalated_to(db, parent, child)  # a reference to a later row of the same table
        await memories.create_memory(db, category="quirk", value="restarts slowly ✓ 'quoted' %s", service="api")
        conv = await chats.create_conversation(db, public_id="c1", title="why?", model="tierops", tier=1,
                                               client="page", cwd="/x")
        await chats.start_turn(db, conv["id"], "why did api fail?", "ops")
    finally:
        await db.close()


async def _digests(target: str | Path) -> dict[str, tuple[int, str]]:
    db = await open_database(target, readers=1)
    try:
        out = {}
        for table in await user_tables(db):
            cols = [str(r[0]) for r in await db.fetchall(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND "
                "table_name = ? ORDER BY ordinal_position" if db.dialect == "postgresql" else
                f"SELECT name FROM pragma_table_info('{table}')", (table,) if db.dialect == "postgresql" else ())]
            out[table] = await table_digest(db, table, cols)
        return out
    finally:
        await db.close()


def test_sqlite_to_postgresql_and_back(pg_cluster, tmp_path) -> None:
    source = tmp_path / "one.db"
    asyncio.run(_seed(source))
    url = pg_cluster.create_database(f"copy{next(_names)}")
    out = run("db", "copy", str(source), url, "--json")
    assert out.returncode == 0, out.stderr.decode()
    report = json.loads(out.stdout)
    assert report["verified"] and report["rows"] > 20 and report["destination"] == url  # no password in this URL
    rows = {t["name"]: t["rows"] for t in report["tables"]}
    assert rows["sessions"] >= 4 and rows["incidents"] == 3 and rows["memories"] == 1 and rows["chat_turns"] == 1

    again = run("db", "copy", str(source), url)  # the destination holds rows now
    one_error_line(again, "the destination is not empty", "--force")
    forced = run("db", "copy", f"sqlite:///{source}", url, "--force")
    assert forced.returncode == 0 and "verified" in forced.stdout.decode(), forced.stderr.decode()

    back = tmp_path / "two.db"
    out = run("db", "copy", url, str(back))
    assert out.returncode == 0, out.stderr.decode()
    assert asyncio.run(_digests(source)) == asyncio.run(_digests(back)) == asyncio.run(_digests(url))

    async def new_session_after_copy() -> int:  # PostgreSQL's identity counter moved past the copied ids
        db = await open_database(url, readers=1)
        try:
            return await sessions.create_session(db, tier=1, model="m", prompt="x", trigger="manual")
        finally:
            await db.close()

    assert asyncio.run(new_session_after_copy()) == rows["sessions"] + 1


def test_what_is_refused(tmp_path) -> None:
    one_error_line(run("db", "copy", str(tmp_path / "missing.db"), str(tmp_path / "x.db")), "no database at")
    one_error_line(run("db", "copy", "mysql://h/db", str(tmp_path / "x.db")), "is not a database TierOps opens")
    asyncio.run(_seed(tmp_path / "a.db"))
    one_error_line(run("db", "copy", str(tmp_path / "a.db"), f"sqlite:///{tmp_path / 'a.db'}"), "the same database")


def test_doctor_and_backup_on_postgresql(pg_cluster, tmp_path) -> None:
    url = pg_cluster.create_database(f"doctor{next(_names)}")
    secret_url = url.replace("tierops@", "tierops:hunter2-pw@")  # trust auth ignores it; nothing may show it
    env = {"TIEROPS_DATABASE_URL": secret_url, "TIEROPS_HOME": str(tmp_path / "state")}
    empty = run("doctor", env=env)
    assert "reachable, empty" in empty.stdout.decode() and "hunter2" not in empty.stdout.decode() + empty.stderr.decode()
    asyncio.run(_digests(secret_url))  # opening it migrates it
    out = run("doctor", env=env).stdout.decode()
    assert f"PostgreSQL {url}" in out and "migrations current" in out and "0 sessions" in out and "hunter2" not in out
    refused = run("backup", str(tmp_path / "b.dump"), env=env)
    line = one_error_line(refused, "pg_dump --format=custom", "pg_restore")
    assert "hunter2" not in line and url in line
