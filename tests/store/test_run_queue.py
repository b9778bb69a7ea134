"""``app/store/run_queue.py`` against a real SQLite file (issue #13): a bounded FIFO of runs
waiting for a free cycle, claimed oldest first, put back when the claim loses the cycle, and the
claims a killed server left behind marked failed."""

from __future__ import annotations

from app.store import alert_incidents, run_queue, sessions


async def enqueue(db, prompt: str = "## Alert\nsomething", incident_id: int | None = None, limit: int = 5):
    return await run_queue.enqueue(db, source="alert", tier=1, prompt=prompt, incident_id=incident_id, limit=limit)


async def test_enqueue_is_bounded_and_counts_only_what_waits(db):
    rows = [await enqueue(db, f"run {n}", limit=3) for n in range(3)]
    assert [r["status"] for r in rows] == ["queued"] * 3 and [r["prompt"] for r in rows] == ["run 0", "run 1", "run 2"]
    assert rows[0]["created_at"] and rows[0]["tier"] == 1 and rows[0]["source"] == "alert"
    assert await enqueue(db, "run 3", limit=3) is None
    assert await run_queue.queued_count(db) == 3
    assert len(await run_queue.list_runs(db)) == 3  # nothing was written for the refused one
    claimed = await run_queue.claim_next(db)
    assert claimed is not None and claimed["prompt"] == "run 0"
    assert (await enqueue(db, "run 3", limit=3))["prompt"] == "run 3"  # a started run frees its place


async def test_claims_are_oldest_first_and_a_requeued_run_keeps_its_place(db):
    for n in range(3):
        await enqueue(db, f"run {n}")
    first = await run_queue.claim_next(db, now="2026-11-24T10:00:00.000Z")
    assert first["prompt"] == "run 0" and first["status"] == "started"
    assert first["started_at"] == "2026-11-24T10:00:00.000Z" and first["session_pk"] is None
    await run_queue.requeue(db, first["id"])
    again = await run_queue.claim_next(db)
    assert again["id"] == first["id"]  # still the oldest
    await run_queue.mark_failed(db, again["id"], "the cycle could not start: boom")
    nxt = await run_queue.claim_next(db)
    assert nxt["prompt"] == "run 1"
    pk = await sessions.create_session(db, tier=1, model="haiku", trigger="alert")
    await run_queue.mark_started(db, nxt["id"], pk)
    third = await run_queue.claim_next(db)
    assert third["prompt"] == "run 2"
    assert await run_queue.claim_next(db) is None

    failed = await run_queue.get_run(db, first["id"])
    assert failed["status"] == "failed" and failed["error"] == "the cycle could not start: boom"
    assert (await run_queue.get_run(db, nxt["id"]))["session_pk"] == pk
    assert [r["id"] for r in await run_queue.list_runs(db)] == [third["id"], nxt["id"]]  # queued + started, newest first
    assert [r["id"] for r in await run_queue.list_runs(db, status="failed")] == [first["id"]]


async def test_claims_a_killed_server_left_are_failed_at_start(db):
    unfinished = await enqueue(db, "claimed, then the server died")
    started = await enqueue(db, "claimed and started")
    late = await enqueue(db, "claimed, its session came late")
    waiting = await enqueue(db, "still waiting")
    for _ in range(3):
        await run_queue.claim_next(db)
    pk = await sessions.create_session(db, tier=1, model="haiku", trigger="alert")
    await run_queue.mark_started(db, started["id"], pk)
    await run_queue.mark_started(db, late["id"], None, "the cycle did not create its session in time")
    assert await run_queue.fail_unfinished_claims(db, "the server stopped") == 1
    assert (await run_queue.get_run(db, unfinished["id"]))["status"] == "failed"
    assert (await run_queue.get_run(db, unfinished["id"]))["error"] == "the server stopped"
    assert (await run_queue.get_run(db, started["id"]))["status"] == "started"
    assert (await run_queue.get_run(db, late["id"]))["status"] == "started"
    assert (await run_queue.get_run(db, waiting["id"]))["status"] == "queued"  # a waiting run still runs
    assert await run_queue.fail_unfinished_claims(db, "again") == 0


async def test_rows_name_their_incident_and_the_overview_lists_the_oldest_first(db):
    change = await alert_incidents.observe_alert(db, fingerprint="abc", firing=True, severity="critical",
                                                 title="API down", evidence="HTTP 503", service="api",
                                                 detail="generic firing", flap_count=3, flap_window_s=3600)
    inc = change.incident
    a = await enqueue(db, "first", incident_id=inc["id"])
    b = await enqueue(db, "second")
    assert (a["incident_key"], a["incident_title"]) == ("alert:abc", "API down")
    assert b["incident_key"] is None
    assert [r["id"] for r in await run_queue.waiting(db)] == [a["id"], b["id"]]
    assert [r["id"] for r in await run_queue.list_runs(db, status="queued", limit=1)] == [b["id"]]
    assert [r["id"] for r in await run_queue.list_runs(db, status="queued", limit=1, offset=1)] == [a["id"]]


async def test_prompts_and_errors_are_redacted(db):
    secret = "sk-ant-api03-" + "A" * 40
    row = await enqueue(db, f"key {secret} leaked")
    assert secret not in row["prompt"]
    await run_queue.claim_next(db)
    await run_queue.mark_failed(db, row["id"], f"failed with {secret}")
    assert secret not in (await run_queue.get_run(db, row["id"]))["error"]
