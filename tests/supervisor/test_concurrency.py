"""Several cycles at once on one node (TIEROPS_MAX_CONCURRENT), the service locks of the tiers that
act, and work pinned to labelled nodes (TIEROPS_RUNS_ON): ``runs.py``, ``tier_gate.py`` and the run
queue's claim, against the real store and a fake CLI executable whose tiers are told apart by model."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from app.engine.alerts import parse_payload
from app.errors import CycleBusy
from app.store import run_queue
from app.supervisor.alerts import receive_alerts, run_next_queued
from app.supervisor.scheduler import Supervisor
from tests.fakes import claude_control as cc
from tests.helpers import escalating, healthy

pytestmark = pytest.mark.timeout(90)


def _escalating() -> dict:
    out = escalating("the service needs a fix")
    out["events"] = []  # the chain works on the alert's incident alone (its service)
    return out


def fake_tiers(tmp_path, *, tier1_delay: float = 0.0, tier2_delay: float = 0.0) -> cc.FakeClaude:
    """Tier 1 (haiku) escalates, tier 2 (sonnet) finds all well."""
    tier1 = {"lines": cc.structured_stream(cc.new_session_id(), _escalating()), "start_delay": tier1_delay}
    tier2 = {"lines": cc.structured_stream(cc.new_session_id(), healthy("fixed")), "start_delay": tier2_delay}
    return cc.make_fake_claude(tmp_path / "bin", [tier1], by_model={"haiku": tier1, "sonnet": tier2})


async def alert(sup: Supervisor, service: str, title: str):
    _, alerts = parse_payload({"title": title, "service": service, "severity": "error", "details": title,
                               "status": "firing"})
    [outcome] = await receive_alerts(sup, alerts)
    return outcome


async def finished(sup: Supervisor, timeout: float = 60.0) -> None:
    async def idle() -> None:
        while sup.runs:
            await asyncio.sleep(0.05)
    await asyncio.wait_for(idle(), timeout)


async def test_cycles_run_at_once_up_to_the_limit_and_a_stop_halts_only_its_own(db, make_settings, validator,
                                                                                  tmp_path):
    fake = fake_tiers(tmp_path, tier1_delay=2.0)
    sup = Supervisor(db, make_settings(fake, max_concurrent=2), validator)
    first = await sup.start_cycle()
    second = await sup.start_cycle()
    assert None not in (first.session_pk, second.session_pk) and first.session_pk != second.session_pk
    assert sup.busy and not sup.has_capacity and sorted(sup.handles) == sorted([first.session_pk, second.session_pk])
    with pytest.raises(CycleBusy, match=r"2 cycles run on this node \(TIEROPS_MAX_CONCURRENT=2\)"):
        await sup.start_cycle()
    assert sup.stop_session(first.session_pk)
    stopped, other = await first.task, await second.task
    assert [(s["tier"], s["status"]) for s in stopped] == [(1, "interrupted")]
    assert [(s["tier"], s["status"]) for s in other] == [(1, "completed"), (2, "completed")]  # not halted
    assert not sup.busy and sup.has_capacity and not sup.runs
    assert sup.cycle_holder is None  # the last cycle gave the cycle lock up


async def test_a_second_scheduled_cycle_never_overlaps_the_first(db, make_settings, validator, tmp_path):
    fake = fake_tiers(tmp_path, tier1_delay=1.0)
    sup = Supervisor(db, make_settings(fake, max_concurrent=3), validator)
    running = asyncio.create_task(sup.run_cycle(trigger="schedule"))
    while not sup.handles:
        await asyncio.sleep(0.02)
    with pytest.raises(CycleBusy, match="the last scheduled cycle is still running"):
        await sup.run_cycle(trigger="schedule")
    sup.stop_all()
    await running


async def test_acting_tiers_never_overlap_on_one_service_and_do_on_different_ones(db, make_settings, validator,
                                                                                  tmp_path):
    fake = fake_tiers(tmp_path, tier2_delay=1.2)
    sup = Supervisor(db, make_settings(fake, max_concurrent=3), validator)
    outcomes = [await alert(sup, "postgres", "replication lag"), await alert(sup, "postgres", "disk full"),
                await alert(sup, "nginx", "5xx rate")]
    assert all(o.run.session_pk is not None for o in outcomes)  # three cycles at once, none queued
    await finished(sup)
    rows = await db.fetchall(
        "SELECT c.started_at, c.ended_at, p.prompt FROM sessions c JOIN sessions p ON p.id = c.parent_session_id"
        " WHERE c.tier = 2 AND c.status = 'completed' ORDER BY c.id")
    spans = [(("nginx" if "5xx rate" in r["prompt"] else "postgres"), r["started_at"], r["ended_at"]) for r in rows]
    assert sorted(s for s, _, _ in spans) == ["nginx", "postgres", "postgres"]

    def overlap(a, b) -> bool:
        return a[1] < b[2] and b[1] < a[2]

    pairs = list(itertools.combinations(spans, 2))
    assert not any(overlap(a, b) for a, b in pairs if a[0] == b[0] == "postgres")  # one at a time per service
    assert any(overlap(a, b) for a, b in pairs if a[0] != b[0])  # other services meanwhile
    assert await db.fetchval("SELECT COUNT(*) FROM leases WHERE name LIKE 'service:%'") == 0  # all given up


async def test_a_tier_pinned_to_a_label_waits_in_the_queue_for_a_node_that_has_it(db, make_settings, validator,
                                                                                   tmp_path):
    fake = fake_tiers(tmp_path)
    plain = Supervisor(db, make_settings(fake, runs_on="tier2=ssh-to-prod", max_concurrent=2), validator)
    outcome = await alert(plain, "postgres", "replication lag")
    await finished(plain)
    [tier1] = await db.fetchall("SELECT * FROM sessions ORDER BY id")
    assert (tier1["tier"], tier1["status"], tier1["escalation_needed"]) == (1, "completed", 1)
    [queued] = await run_queue.waiting(db)
    assert (queued["tier"], queued["source"], queued["needs"], queued["parent_session_pk"]) == \
        (2, "escalation", "ssh-to-prod", outcome.run.session_pk)
    assert await run_next_queued(plain) == 0  # this node lacks the label: left for another
    prod = Supervisor(db, make_settings(fake, runs_on="tier2=ssh-to-prod", node_labels="dc-1,ssh-to-prod",
                                        home=tmp_path / "prod-state"), validator)
    assert await run_next_queued(prod) == 1
    await finished(prod)
    parent, child = [dict(r) for r in await db.fetchall("SELECT * FROM sessions ORDER BY id")]
    assert (child["tier"], child["status"], child["parent_session_id"], child["chain_id"]) == \
        (2, "completed", parent["id"], parent["id"])
    assert parent["escalated_to"] == child["id"]
    assert (await run_queue.get_run(db, queued["id"]))["session_pk"] == child["id"]


async def test_an_alert_for_a_pinned_tier_is_queued_with_the_labels_it_needs(db, make_settings, validator, tmp_path):
    fake = fake_tiers(tmp_path)
    sup = Supervisor(db, make_settings(fake, runs_on="service:postgres=dc-2"), validator)
    outcome = await alert(sup, "postgres", "replication lag")
    assert outcome.run.session_pk is None and outcome.run.queued_id is not None
    row = await run_queue.get_run(db, outcome.run.queued_id)
    assert row["needs"] == "dc-2"
    assert (await alert(sup, "nginx", "5xx rate")).run.session_pk is not None  # unpinned: here, at once
    await finished(sup)


async def test_the_schedule_runs_beside_full_slots(db, make_settings, validator, tmp_path):
    """An alert storm must not stop the probe: with TIEROPS_MAX_CONCURRENT above 1 the scheduled cycle
    does not take a slot (with 1, one cycle of any kind at a time, as a lone server always ran)."""
    fake = fake_tiers(tmp_path, tier1_delay=1.5)
    sup = Supervisor(db, make_settings(fake, max_concurrent=2), validator)
    busy = [await sup.start_cycle(), await sup.start_cycle()]
    assert not sup.has_capacity
    chain = await sup.run_cycle(trigger="schedule")
    trigger = await db.fetchval("SELECT trigger FROM sessions WHERE id = ?", (chain[0]["id"],))
    assert (chain[0]["tier"], chain[0]["status"], trigger) == (1, "completed", "schedule")
    for started in busy:
        await started.task
    alone = Supervisor(db, make_settings(fake, max_concurrent=1, home=tmp_path / "alone"), validator)
    first = await alone.start_cycle()
    with pytest.raises(CycleBusy, match="a cycle is already running in this process"):
        await alone.run_cycle(trigger="schedule")
    await first.task
