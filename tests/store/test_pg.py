"""The store on PostgreSQL beyond the store's own tests: the translation of the SQL, the server on
a real PostgreSQL (a cycle of the fake CLI, the pages, the guard hook), the URL never shown.

The cluster is the session's throwaway one (tests/conftest.py ``pg_cluster``, tests/pg_cluster.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from app.config import Settings
from app.paths import PACKAGE_ROOT
from app.store.dialect import translate
from app.store.pg import safe_url
from app.supervisor.guarding import DATABASE_URL_FILE, database_arguments
from tests.web.conftest import serve
from tests.web.pages.test_browser import chatty_stage, start_run, wait_finished

_names = iter(range(1, 1 << 20))


@pytest.mark.parametrize(("sqlite", "postgresql"), [
    ("SELECT ifnull(a, 'x?') FROM t WHERE b = ? AND c = :c", "SELECT coalesce(a, 'x?') FROM t WHERE b = %s AND c = %(c)s"),
    ("SELECT max(a, b), max(c), min(d, 1) FROM t", "SELECT greatest(a, b), max(c), least(d, 1) FROM t"),
    ("SELECT sum(status = 'x') FROM t", "SELECT sum(CASE WHEN status = 'x' THEN 1 ELSE 0 END) FROM t"),
    ("SELECT a FROM t WHERE a LIKE '%x%' AND b::text = 'y'", "SELECT a FROM t WHERE a ILIKE '%%x%%' AND b::text = 'y'"),
    ("INSERT OR IGNORE INTO t (a) VALUES (?)", "INSERT INTO t (a) VALUES (%s) ON CONFLICT DO NOTHING"),
    ("UPDATE t SET a = ? WHERE b IS NOT ? AND c IS ?",
     "UPDATE t SET a = %s WHERE b IS DISTINCT FROM %s AND c IS NOT DISTINCT FROM %s"),
    ("SELECT CASE WHEN ? THEN 1 END", "SELECT CASE WHEN %s <> 0 THEN 1 END"),
    ("WITH ids(id) AS (SELECT 1) SELECT 1 FROM t WHERE id IN ids", "WITH ids(id) AS (SELECT 1) SELECT 1 FROM t WHERE id IN (SELECT * FROM ids)"),
    ("SELECT json_group_array(x) FROM t", "SELECT coalesce(json_agg(x)::text, '[]') FROM t"),
    ("SELECT 'a -- not a comment ?' -- a comment ?\n, ?", "SELECT 'a -- not a comment ?' -- a comment ?\n, %s"),
])
def test_the_sqlite_statements_as_postgresql_reads_them(sqlite, postgresql) -> None:
    assert translate(sqlite) == postgresql


def test_a_url_is_shown_without_its_password() -> None:
    assert safe_url("postgresql://ops:s3cret@db.internal:5432/tierops") == "postgresql://ops@db.internal:5432/tierops"
    assert "s3cret" not in repr(Settings(database_url="postgresql://ops:s3cret@db/tierops"))
    with pytest.raises(ValueError, match="is not a database URL"):
        Settings(database_url="mysql://ops@db/tierops")


def test_the_server_runs_cycles_and_pages_on_postgresql(pg_cluster, tmp_path) -> None:
    url = pg_cluster.create_database(f"serve{next(_names)}")
    from app.web.app import create_app
    from tests.fakes.claude_control import make_fake_claude

    fake = make_fake_claude(tmp_path / "bin", [chatty_stage(3, 0.0)])
    settings = Settings(home=tmp_path / "state", claude_bin=str(fake.path), schedule=False, kill_grace=1,
                        database_url=url)
    srv = serve(create_app(settings), settings, fake, None)
    try:
        pk = start_run(srv)
        row = wait_finished(srv, pk)
        assert row["status"] == "completed" and row["line_count"] == 7
        with srv.client() as c:
            for page in ("/", f"/sessions/{pk}", "/sessions", "/incidents", "/events", "/memories", "/stats",
                         "/chat", "/config", "/cooldowns", "/notifications", "/maintenance"):
                assert c.get(page).status_code == 200, page
            assert c.get("/healthz").json()["status"] in ("ok", "degraded")
            assert len(c.get(f"/api/v1/sessions/{pk}/activity").json()) == 7
    finally:
        srv.stop()
    assert not (tmp_path / "state" / "tierops.db").exists()  # nothing went to SQLite


def test_the_guard_hook_reads_the_url_from_a_private_file(pg_cluster, tmp_path) -> None:
    import asyncio

    from app.store import guard as guard_store
    from app.store import sessions
    from app.store.backends import open_database
    from app.supervisor.guarding import policy_for

    url = pg_cluster.create_database(f"guard{next(_names)}")
    settings = Settings(home=tmp_path / "state", database_url=url)

    async def seed() -> int:
        db = await open_database(url)
        try:
            pk = await sessions.create_session(db, tier=3, model="opus", trigger="manual")
            policy = policy_for(settings, 3, dry_run=True, allowed_tools=["Bash"], disallowed_tools=[],
                                trigger="manual")
            await guard_store.set_policy(db, pk, policy.as_json())
            return pk
        finally:
            await db.close()

    pk = asyncio.run(seed())
    settings.state_dir.mkdir(parents=True)
    args = database_arguments(settings.database_target, settings.state_dir)
    url_file = settings.state_dir / DATABASE_URL_FILE
    assert args == ["--db-url-file", str(url_file)] and url_file.stat().st_mode & 0o777 == 0o600
    hook = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "systemctl restart api"},
            "tool_use_id": "toolu_1", "session_id": "s"}
    proc = subprocess.run([sys.executable, "-m", "app", "guard", *args, "--session", str(pk)],
                          input=json.dumps(hook), capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(PACKAGE_ROOT), "PATH": "/usr/bin:/bin"}, check=False)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)["hookSpecificOutput"]
    assert answer["permissionDecision"] == "deny" and "dry-run" in answer["permissionDecisionReason"]
