"""Stop for a session another real process runs (``app/supervisor/remote_stop.py``):
the recorded CLI is verified (pid and start time), the request is recorded, the process group is
signalled (SIGTERM, then SIGKILL after the grace), the owner records "stopped by an operator"
and exits; what cannot be verified is refused and never signalled."""

from __future__ import annotations

import asyncio
import os
import time

import psutil
import pytest

from app.cli.cycles import EXIT_INTERRUPTED
from app.clock import utcnow
from app.supervisor.remote_stop import StopRefused, refusal, stop_anywhere
from app.supervisor.scheduler import Supervisor
from tests.helpers import alive, wait_gone
from tests.second_process import slow_stage, start_run, wait_exit, wait_lines, wait_running

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize("ignore_sigterm", [False, True], ids=["sigterm", "sigkill-after-grace"])
async def test_stop_reaches_the_cli_of_another_process(db, make_settings, validator, tmp_path, ignore_sigterm):
    settings = make_settings(None)  # kill_grace 1 s
    sup = Supervisor(db, settings, validator)
    stage = {**slow_stage(3, 0.05, hang=True), "ignore_sigterm": ignore_sigterm}
    run = start_run(tmp_path, settings.db_path, settings.state_dir, [stage])
    try:
        row = await asyncio.to_thread(wait_running, run)
        pk, cli = row["id"], row["cli_pid"]
        await asyncio.to_thread(wait_lines, run, pk, 4)  # init and 3 texts: the CLI now hangs
        assert await refusal(sup, pk) is None  # the page's Stop button is live
        started = time.monotonic()
        sent = await stop_anywhere(sup, pk, "tester, server pid 1")
        assert (sent.session_pk, sent.local, sent.pid) == (pk, False, cli)
        assert await asyncio.to_thread(wait_gone, [cli], 10) == []
        took = time.monotonic() - started
        # SIGTERM ends it at once; one that ignores SIGTERM gets SIGKILL after TIEROPS_KILL_GRACE (1 s)
        assert (took >= 0.9) if ignore_sigterm else (took < 0.9), took
        # tierops run exits by itself, and says its session did not finish: EXIT_INTERRUPTED (3), not 0
        assert await asyncio.to_thread(wait_exit, run) == EXIT_INTERRUPTED, run.output()
    finally:
        run.cleanup()
    done = run.session(pk)
    assert done["status"] == "interrupted"
    assert done["status_reason"] == "stopped by an operator (tester, server pid 1)"
    assert done["stop_requested_at"] is not None and done["stop_requested_by"] == "tester, server pid 1"
    out, _err = run.output()
    assert "interrupted" in out
    with pytest.raises(StopRefused) as again:
        await stop_anywhere(sup, pk, "tester")
    assert again.value.status == 409 and "not running (status interrupted)" in again.value.message


async def _running_row(db, *, pid: int | None, start: float | None, trigger: str = "manual") -> int:
    async with db.write() as conn:  # seeding: a row 'running' whose process is what the test says
        cur = await conn.execute(
            "INSERT INTO sessions (tier, trigger, status, started_at, cli_pid, cli_pgid, cli_start_time)"
            " VALUES (1, ?, 'running', ?, ?, ?, ?)", (trigger, utcnow(), pid, pid, start))
        return int(cur.lastrowid)


async def test_what_cannot_be_verified_is_refused_and_never_signalled(db, make_settings, validator):
    sup = Supervisor(db, make_settings(None), validator)
    me = psutil.Process(os.getpid())
    recycled = await _running_row(db, pid=me.pid, start=me.create_time() - 3600)  # same pid, another start
    starting = await _running_row(db, pid=None, start=None)
    ingest = await _running_row(db, pid=me.pid, start=me.create_time(), trigger="ingest")
    cases = {
        recycled: (409, "its start time differs"),
        starting: (409, "no CLI process recorded yet"),
        ingest: (409, "ingested from a file"),
        4242: (404, "no session 4242"),
    }
    for pk, (status, words) in cases.items():
        with pytest.raises(StopRefused) as info:
            await stop_anywhere(sup, pk, "tester")
        assert info.value.status == status and words in info.value.message, info.value.message
        assert (await refusal(sup, pk) or "").find(words) >= 0
    assert alive(me.pid)  # still here: nothing was signalled
    row = await db.fetchone("SELECT stop_requested_at FROM sessions WHERE id = ?", (recycled,))
    assert row is not None and row["stop_requested_at"] is None  # and no request was recorded
