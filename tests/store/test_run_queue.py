"""``app/store/run_queue.py`` against a real SQLite file: a bounded FIFO of runs
waiting for a free cycle, claimed oldest first, put back when the claim loses the cycle, and the
claims a killed server left behind marked failed; an alert's investigation queued, coalesced with
a waiting run of its service, or flagged for a human when the queue is full, in one transaction."""

from __future__ import annotations

import asyncio

from app.store import alert_incidents, incidents, run_queue, sessions


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


async def _incident(db, n: int, service: str | None):
    change = await alert_incidents.observe_alert(db, fingerprint=f"fp{n}", firing=True, severity="critical",
                                                 title=f"node-{n} down", evidence="down", service=service,
                                                 detail="generic firing", flap_count=3, flap_window_s=3600)
    return change.incident


async def investigate(db, inc, *, limit: int = 2, prompt: str | None = None):
    return await run_queue.enqueue_investigation(
        db, source="alert", tier=1, incident_id=inc["id"], service=inc["service"],
        prompt=prompt or f"## Alert\nincident #{inc['id']}", addition=f"\n\n## Also incident #{inc['id']}",
        short=f"\n- also #{inc['id']}", limit=limit, full_reason="not investigated: the run queue is full")


async def test_an_investigation_is_queued_coalesced_by_service_or_flagged_when_full(db):
    a1, a2, b1, c1, none1 = [await _incident(db, n, s) for n, s in enumerate(["a", "a", "b", "c", None])]
    first = await investigate(db, a1)
    assert first.kind == "queued" and first.row["incident_ids"] == [a1["id"]]
    assert (await investigate(db, a1)).kind == "already"  # nothing twice
    joined = await investigate(db, a2)
    assert joined.kind == "coalesced" and joined.row["id"] == first.row["id"]
    assert joined.row["incident_ids"] == [a1["id"], a2["id"]]
    assert joined.row["prompt"] == f"## Alert\nincident #{a1['id']}\n\n## Also incident #{a2['id']}"
    assert (await investigate(db, b1)).kind == "queued"
    full = await investigate(db, c1)
    assert full.kind == "full" and full.row is None
    flagged = await incidents.get_incident(db, c1["id"])
    assert flagged["attention"] == "not investigated: the run queue is full" and flagged["attention_at"]
    assert (await incidents.timeline(db, c1["id"]))[-1]["kind"] == "attention"
    assert (await investigate(db, none1)).kind == "full"  # no service: nothing to coalesce with
    assert await run_queue.queued_count(db) == 2
    # a started run absorbs nothing more: the next incident of its service waits in a run of its own
    claimed = await run_queue.claim_next(db)
    assert claimed["incident_ids"] == [a1["id"], a2["id"]]
    a3 = await _incident(db, 9, "a")
    assert (await investigate(db, a3)).kind == "queued"


async def test_the_bound_holds_under_concurrent_deliveries(db):
    """Forty incidents of forty services queued at once against a bound of three: exactly three runs,
    every other incident flagged; none lost, none over the bound."""
    made = [await _incident(db, n, f"svc-{n}") for n in range(40)]
    results = await asyncio.gather(*(investigate(db, inc, limit=3) for inc in made))
    assert sorted(r.kind for r in results).count("queued") == 3
    assert [r.kind for r in results].count("full") == 37
    assert await run_queue.queued_count(db) == 3
    flagged = sum(1 for inc in await incidents.get_incidents(db, [i["id"] for i in made]) if inc["attention"])
    assert flagged == 37


async def test_a_coalesced_prompt_is_capped_then_names_each_incident_by_a_line(db):
    made = [await _incident(db, n, "api") for n in range(4)]
    await investigate(db, made[0], prompt="x" * (run_queue.PROMPT_MAX - 50))
    big = "y" * 200
    await run_queue.enqueue_investigation(db, source="alert", tier=1, incident_id=made[1]["id"], service="api",
                                          prompt="-", addition=big, short="\n- also #1", limit=2, full_reason="-")
    row = (await run_queue.list_runs(db))[0]
    assert row["prompt"].endswith("\n- also #1") and big not in row["prompt"]
    huge = "z" * run_queue.PROMPT_NAMES_MAX
    await run_queue.enqueue_investigation(db, source="alert", tier=1, incident_id=made[2]["id"], service="api",
                                          prompt="-", addition=huge, short=huge, limit=2, full_reason="-")
    row = (await run_queue.list_runs(db))[0]
    assert len(row["prompt"]) < run_queue.PROMPT_NAMES_MAX and row["incident_ids"] == [i["id"] for i in made[:3]]


async def test_a_claim_takes_the_oldest_run_this_nodes_labels_allow(db):
    pinned = await run_queue.enqueue(db, source="alert", tier=1, prompt="needs prod", incident_id=None, limit=5,
                                     needs="dc-1,prod")
    plain = await enqueue(db, "any node")
    assert await run_queue.queued_count(db) == 2
    assert await run_queue.queued_count(db, frozenset()) == 1
    assert await run_queue.queued_count(db, frozenset({"prod", "dc-1", "gpu"})) == 2
    assert (await run_queue.claim_next(db, node_id="a", labels=frozenset({"prod"})))["id"] == plain["id"]
    assert await run_queue.claim_next(db, node_id="a", labels=frozenset({"prod"})) is None  # lacks dc-1
    claimed = await run_queue.claim_next(db, node_id="b", labels=frozenset({"prod", "dc-1"}))
    assert (claimed["id"], claimed["claimed_by"], claimed["status"]) == (pinned["id"], "b", "started")


async def test_the_rest_of_a_chain_is_queued_whatever_the_bound(db):
    parent = await sessions.create_session(db, tier=1, trigger="alert")
    for n in range(2):
        await enqueue(db, f"run {n}", limit=2)
    row = await run_queue.enqueue_continuation(db, tier=2, parent_pk=parent, handoff="## Incidents\n- #1",
                                               kind="escalation", incident_ids=[], needs="prod")
    assert (row["source"], row["tier"], row["parent_session_pk"], row["handoff"], row["needs"], row["status"]) == \
        ("escalation", 2, parent, "## Incidents\n- #1", "prod", "queued")
