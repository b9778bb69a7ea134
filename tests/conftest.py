"""Shared test fixtures: the real CLI captures, a real SQLite file, the bundled schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import Settings
from app.output.validate import OutputValidator
from app.store.db import Database
from tests.fakes.claude_control import FIXTURES


def pytest_configure(config: pytest.Config) -> None:
    if not FIXTURES.is_dir():  # one clear message instead of dozens of failing tests
        raise pytest.UsageError(
            f"the real CLI captures are missing: {FIXTURES} does not exist. They are part of the "
            "repository (tests/fixtures/); restore them with git, or refresh them with scripts/sync-fixtures.sh.")


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test touches the operator's state directory (~/.local/state/tierops) or a stray .env:
    TIEROPS_HOME points at a fresh folder (tests that need their own pass --home or set it)."""
    monkeypatch.setenv("TIEROPS_HOME", str(tmp_path_factory.mktemp("tierops-home")))
    for name in ("TIEROPS_DB", "TIEROPS_STATE_DIR", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def validator() -> OutputValidator:
    return OutputValidator.from_file()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(db=tmp_path / "tierops.db")


@pytest.fixture(scope="session")
def pg_cluster():
    """One throwaway PostgreSQL cluster per test process (tests/pg_cluster.py), with a migrated
    database the store's tests share: emptied before each test (:func:`_pg_reset`), which is ten
    times faster than a database per test."""
    import asyncio
    import threading

    from app.store.pg import PgDatabase
    from tests.pg_cluster import Cluster

    cluster = Cluster.start()
    try:
        url = cluster.create_database("tierops_store")

        async def migrate() -> None:
            await (await PgDatabase.open(url, readers=1)).close()

        failed: list[BaseException] = []  # requested from inside a running event loop: a loop of its own
        worker = threading.Thread(target=lambda: _capture(failed, lambda: asyncio.run(migrate())))
        worker.start()
        worker.join()
        if failed:
            raise failed[0]
        cluster.store_reset = _reset_script(url)  # type: ignore[attr-defined]
        yield cluster
    finally:
        cluster.stop()


def _capture(failed: list[BaseException], fn) -> None:
    try:
        fn()
    except BaseException as exc:
        failed.append(exc)


def _reset_script(url: str) -> str:
    """DELETE every table's rows, children first, and restart the identity counters."""
    import psycopg

    from app.store.copy import _order

    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            " AND table_type = 'BASE TABLE' AND table_name <> 'migrations'")]
        refs: dict[str, list[tuple[str, str]]] = {t: [] for t in tables}
        for table, column, ref in conn.execute(
                "SELECT tc.table_name, kcu.column_name, ccu.table_name FROM information_schema.table_constraints tc"
                " JOIN information_schema.key_column_usage kcu ON kcu.constraint_name = tc.constraint_name"
                " JOIN information_schema.constraint_column_usage ccu ON ccu.constraint_name = tc.constraint_name"
                " WHERE tc.constraint_type = 'FOREIGN KEY' AND tc.table_schema = current_schema()"):
            refs[table].append((column, ref))
        ids = {r[0] for r in conn.execute("SELECT table_name FROM information_schema.columns WHERE column_name = 'id'"
                                          " AND table_schema = current_schema()")}
    order = _order(tables, refs)
    known = ", ".join(f"'{t}'" for t in [*tables, "migrations"])
    drop_others = ("DO $$DECLARE r record; BEGIN FOR r IN SELECT tablename FROM pg_tables WHERE schemaname ="
                   f" current_schema() AND tablename NOT IN ({known}) LOOP EXECUTE 'DROP TABLE ' ||"
                   " quote_ident(r.tablename) || ' CASCADE'; END LOOP; END$$")  # a test's own tables
    return ";".join([drop_others, *(f"DELETE FROM {t}" for t in reversed(order)),
                     *(f"SELECT setval(pg_get_serial_sequence('{t}', 'id'), 1, false)" for t in order if t in ids)])


@pytest.fixture
async def db(settings: Settings, request: pytest.FixtureRequest):
    """The store: SQLite at ``settings.db``, or with TIEROPS_TEST_STORE=postgresql a fresh database
    of the session's PostgreSQL cluster (the store's tests run on both backends in CI)."""
    import os

    if os.environ.get("TIEROPS_TEST_STORE") == "postgresql":
        import psycopg

        from app.store.pg import PgDatabase

        cluster = request.getfixturevalue("pg_cluster")
        url = cluster.url("tierops_store")
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(cluster.store_reset)
        store = await PgDatabase.open(url)
    else:
        store = await Database.open(settings.db)
    try:
        yield store
    finally:
        await store.close()


def sqlite_only(db: Database, why: str) -> None:
    """Skip the rest of a store test on PostgreSQL: it checks SQLite's own file or pragmas."""
    if db.dialect != "sqlite":
        pytest.skip(f"SQLite only: {why}")
