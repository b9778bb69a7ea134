"""Storage broken past its retry limit never wedges a cycle (the supervisor's side of durability).

While a session streams, another connection (as another process) holds the database's write lock
for good. The session gives up after TIEROPS_STORAGE_RETRY_LIMIT, its CLI is killed, the cycle
lock is released; once storage is back the next cycle runs and the sweep marks the orphaned row.
"""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from app.errors import StorageUnavailable
from app.store.db import Database
from app.supervisor.scheduler import Supervisor
from tests.fakes import claude_control as cc
from tests.helpers import alive, healthy, kill_leftovers, wait_until


async def test_storage_broken_past_the_limit_kills_the_cli_and_frees_the_next_cycle(make_settings, validator,
                                                                                     tmp_path):
    stream = cc.structured_stream(cc.new_session_id(), healthy())
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": stream * 40, "delay": 0.05}])
    settings = make_settings(fake, storage_retry_limit=1.0)
    db = await Database.open(settings.db, busy_timeout_ms=30)
    # The lock is taken off the event loop: the session's writer may be mid-transaction and needs
    # the loop to commit, so a blocking BEGIN here would wait out its own timeout.
    locker = sqlite3.connect(settings.db, isolation_level=None, timeout=30, check_same_thread=False)
    try:
        sup = Supervisor(db, settings, validator)
        cycle = asyncio.create_task(sup.run_cycle())
        await wait_until(lambda: fake.invocations(), what="the CLI to start")
        await asyncio.to_thread(locker.execute, "BEGIN IMMEDIATE")  # storage "breaks" while the session streams
        with pytest.raises(StorageUnavailable, match=r"^storage error: database is locked"):
            await asyncio.wait_for(cycle, 30)
        pid = fake.last()["pid"]
        await wait_until(lambda: not alive(pid), what="the CLI to be killed")
        assert not sup.busy  # the cycle lock is free again
        locker.execute("COMMIT")  # storage is back

        fake.set_stages([{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
        chain = await asyncio.wait_for(sup.run_cycle(), 30)
        assert [s["status"] for s in chain] == ["completed"]
        rows = await db.fetchall("SELECT id, status FROM sessions ORDER BY id")
        assert [r["status"] for r in rows] == ["interrupted", "completed"]  # swept: no row stays running
    finally:
        locker.close()
        kill_leftovers(fake)
        await db.close()
