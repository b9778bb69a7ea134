"""The approval gate: a chain escalating to a tier whose approval is manual stops with
a pending approval; approving runs the rest of the chain from that tier (parent and child linked,
the approved handoff given), rejecting or letting it expire flags the session; a busy supervisor
refuses and leaves it pending. Real SQLite, the fake claude CLI, the real supervisor."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from app.clock import seconds_between
from app.store import approvals as approval_store
from app.store import incidents
from app.store import sessions as session_store
from app.store.approvals import ApprovalStateError
from app.supervisor.chain import PromptError, run_chain
from app.supervisor.cycle_health import AWAITING_APPROVAL, NEEDS_ATTENTION, cycle_status
from app.supervisor.scheduler import CycleBusy, Supervisor
from tests.fakes import claude_control as cc
from tests.helpers import escalating, healthy, kill_leftovers, wait_until
from tests.supervisor.test_probe_cycles import Target, checks_file

pytestmark = pytest.mark.timeout(60)


def stage(output: dict, **extra) -> dict:
    return {"lines": cc.structured_stream(cc.new_session_id(), output, cost=0.01), **extra}


async def pending(db) -> list[dict]:
    return await approval_store.list_approvals(db, status="pending", fresh=True)


async def gated_at_tier3(db, settings, validator, fake) -> tuple[list[dict], dict]:
    """Tier 2 escalates; tier 3 is manual: one session, one pending approval."""
    chain = await Supervisor(db, settings, validator).run_cycle(tier=2)
    [approval] = await pending(db)
    return chain, approval


async def test_a_manual_tier_is_not_started_the_chain_waits_for_an_approval(db, make_settings, validator, tmp_path,
                                                                            caplog):
    fake = cc.make_fake_claude(tmp_path / "bin", [
        stage(escalating("nginx needs a config rollback", context="bad upstream since the deploy",
                         failed=("nginx_upstream",), summary="nginx 502s after deploy.")),
        stage(healthy())])
    settings = make_settings(fake, tier3_approval="manual", approval_timeout=900)
    caplog.set_level("INFO", logger="app.supervisor.chain")
    chain, approval = await gated_at_tier3(db, settings, validator, fake)

    assert len(fake.invocations()) == 1  # tier 3 was never launched
    [s] = chain
    assert (s["tier"], s["status"], s["escalation_needed"], s["escalated_to"], s["attention"]) == (
        2, "completed", True, None, None)
    assert s["escalation_gate"] == f"waiting for approval #{approval['id']} to run tier 3"
    assert cycle_status(chain) == AWAITING_APPROVAL
    assert (approval["tier"], approval["session_pk"], approval["chain_id"], approval["status"]) == (
        3, s["id"], s["id"], "pending")
    assert seconds_between(approval["created_at"], approval["expires_at"]) == 900
    handoff = approval["handoff"]
    assert handoff.startswith(f"## Escalation from tier 2 (session {s['id']})")
    for text in ("Reason: nginx needs a config rollback", "Context: bad upstream since the deploy",
                 "Failed checks:\n- nginx_upstream", "Previous tier's summary: nginx 502s after deploy."):
        assert text in handoff
    assert any(f"waiting for approval #{approval['id']} to run tier 3" in r.getMessage() for r in caplog.records)
    assert not any("escalated to tier 3" in r.getMessage() for r in caplog.records)


async def test_approving_runs_the_tier_with_the_handoff_linked_to_its_parent(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating("rollback needed")), stage(healthy("Rolled back."))])
    settings = make_settings(fake, tier3_approval="manual")
    [parent], approval = await gated_at_tier3(db, settings, validator, fake)

    chain = await Supervisor(db, settings, validator).run_approved(approval["id"], "alice via CLI", "during the window")
    assert [(s["tier"], s["status"]) for s in chain] == [(2, "completed"), (3, "completed")]
    before, child = chain
    assert before["id"] == parent["id"] and before["escalated_to"] == child["id"]
    assert child["parent_session_id"] == parent["id"] and child["model"] == "opus"
    assert before["escalation_gate"] is None and before["attention"] is None  # the gate no longer stands
    row = await session_store.get_session(db, child["id"])
    assert (row["trigger"], row["chain_id"]) == ("escalation", parent["id"])
    system = fake.last()["parsed"]["append_system_prompt"]
    assert system.startswith("You are TierOps tier 3 (remediate)") and approval["handoff"] in system
    done = await approval_store.get_approval(db, approval["id"])
    assert (done["status"], done["decided_by"], done["note"], done["child_session_pk"]) == (
        "approved", "alice via CLI", "during the window", child["id"])
    assert cycle_status(chain) == "completed"
    with pytest.raises(ApprovalStateError, match="already approved"):  # once
        await Supervisor(db, settings, validator).run_approved(approval["id"], "bob via CLI")
    assert len(fake.invocations()) == 2


async def test_the_continuation_is_gated_again_only_at_another_manual_tier(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating("reason 1")), stage(escalating("reason 2")),
                                                  stage(healthy())])
    settings = make_settings(fake, tier2_approval="manual", tier3_approval="manual")
    sup = Supervisor(db, settings, validator)
    [first] = await sup.run_cycle(tier=1)
    [to2] = await pending(db)
    assert to2["tier"] == 2 and to2["session_pk"] == first["id"]
    chain = await sup.run_approved(to2["id"], "alice")  # tier 2 runs at once; its escalation to 3 waits
    assert [s["tier"] for s in chain] == [1, 2] and len(fake.invocations()) == 2
    [to3] = await pending(db)
    assert (to3["tier"], to3["session_pk"], to3["chain_id"]) == (3, chain[1]["id"], first["id"])
    assert cycle_status(chain) == AWAITING_APPROVAL
    assert "## Escalation from tier 2" in to3["handoff"]
    assert (f"Chain so far:\n- tier 1 session {first['id']}: completed, reason 1\n"
            f"- tier 2 session {chain[1]['id']}: completed, reason 2") in to3["handoff"]


async def test_after_an_approval_an_auto_tier_runs_with_the_chain_so_far(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating("reason 1")), stage(escalating("reason 2")),
                                                  stage(healthy())])
    settings = make_settings(fake, tier2_approval="manual", tier3_approval="auto")
    sup = Supervisor(db, settings, validator)
    await sup.run_cycle(tier=1)
    [to2] = await pending(db)
    chain = await sup.run_approved(to2["id"], "alice")
    assert [s["tier"] for s in chain] == [1, 2, 3] and len(fake.invocations()) == 3
    assert [s["parent_session_id"] for s in chain] == [None, chain[0]["id"], chain[1]["id"]]
    system3 = fake.last()["parsed"]["append_system_prompt"]
    assert (f"Chain so far:\n- tier 1 session {chain[0]['id']}: completed, reason 1\n"
            f"- tier 2 session {chain[1]['id']}: completed, reason 2") in system3
    assert await pending(db) == []


async def test_auto_approval_escalates_at_once(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating()), stage(healthy())])
    chain = await run_chain(db, make_settings(fake, tier3_approval="auto"), validator, None, start_tier=2)
    assert [s["tier"] for s in chain] == [2, 3] and chain[0]["escalation_gate"] is None
    assert await approval_store.list_approvals(db) == []


async def test_start_approved_runs_in_the_background_and_links_the_session_at_once(db, make_settings, validator,
                                                                                  tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating()), stage(healthy(), delay=0.3)])
    settings = make_settings(fake, tier3_approval="manual")
    [parent], approval = await gated_at_tier3(db, settings, validator, fake)
    sup = Supervisor(db, settings, validator)
    started = await sup.start_approved(approval["id"], "alice via API token")
    assert started.session_pk is not None
    linked = await approval_store.get_approval(db, approval["id"])
    assert (linked["status"], linked["child_session_pk"]) == ("approved", started.session_pk)  # while it runs
    chain = await asyncio.wait_for(started.task, 20)
    assert [s["id"] for s in chain] == [parent["id"], started.session_pk] and not sup.busy


async def test_reject_flags_the_session_and_nothing_runs(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating()), stage(healthy())])
    settings = make_settings(fake, tier3_approval="manual")
    [parent], approval = await gated_at_tier3(db, settings, validator, fake)
    await approval_store.decide(db, approval["id"], "rejected", "bob via dashboard", "too risky now")
    row = await session_store.get_session(db, parent["id"])
    assert row["attention"] == f"approval #{approval['id']} to run tier 3 rejected by bob via dashboard: too risky now"
    with pytest.raises(ApprovalStateError, match="already rejected by bob via dashboard"):
        await Supervisor(db, settings, validator).run_approved(approval["id"], "alice")
    assert len(fake.invocations()) == 1


async def test_an_approval_past_its_time_expires_at_the_next_cycle(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating()), stage(healthy())])
    settings = make_settings(fake, tier3_approval="manual", approval_timeout=60)
    [parent], approval = await gated_at_tier3(db, settings, validator, fake)
    async with db.write() as conn:  # an hour later
        await conn.execute("UPDATE approvals SET created_at = '2026-01-01T00:00:00.000Z',"
                           " expires_at = '2026-01-01T00:01:00.000Z' WHERE id = ?", (approval["id"],))
    chain = await Supervisor(db, settings, validator).run_cycle(tier=1)  # a healthy cycle
    assert [s["tier"] for s in chain] == [1]
    expired = await approval_store.get_approval(db, approval["id"])
    assert expired["status"] == "expired"
    row = await session_store.get_session(db, parent["id"])
    assert row["attention"] == f"approval #{approval['id']} to run tier 3 expired after 60 s"
    with pytest.raises(ApprovalStateError, match="already expired"):
        await Supervisor(db, settings, validator).run_approved(approval["id"], "alice")
    links = [{**parent, "attention": row["attention"], "escalation_gate": row["escalation_gate"]}]
    assert cycle_status(links) == NEEDS_ATTENTION


async def test_the_watch_expires_approvals_without_a_cycle(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating())])
    settings = make_settings(fake, tier3_approval="manual")
    [parent], approval = await gated_at_tier3(db, settings, validator, fake)
    sup = Supervisor(db, settings, validator)
    watch = asyncio.create_task(sup.watch(every=0.05))
    try:
        await asyncio.sleep(0.2)
        assert (await approval_store.get_approval(db, approval["id"]))["status"] == "pending"  # not due yet
        async with db.write() as conn:
            await conn.execute("UPDATE approvals SET expires_at = '2026-01-01T00:00:00.000Z' WHERE id = ?",
                               (approval["id"],))

        async def expired() -> bool:
            return (await approval_store.get_approval(db, approval["id"]))["status"] == "expired"

        for _ in range(100):
            if await expired():
                break
            await asyncio.sleep(0.05)
        assert await expired()
        assert "expired after" in (await session_store.get_session(db, parent["id"]))["attention"]
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch


async def test_a_busy_supervisor_refuses_and_the_approval_stays_pending(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating())])
    settings = make_settings(fake, tier3_approval="manual")
    _, approval = await gated_at_tier3(db, settings, validator, fake)
    fake.set_stages([stage(healthy(), mode="hang", after=1)])
    sup = Supervisor(db, settings, validator)
    running = asyncio.create_task(sup.run_cycle(tier=1))
    try:
        await wait_until(lambda: fake.invocations() and sup.handles, what="the running cycle's session")
        with pytest.raises(CycleBusy, match=r"a cycle is running; approve again when it has finished "
                                            rf"\(approval #{approval['id']} stays pending\)"):
            await sup.start_approved(approval["id"], "alice")
        with pytest.raises(CycleBusy):  # another process (here: another Supervisor) meets the lock too
            await Supervisor(db, settings, validator).run_approved(approval["id"], "alice")
        assert (await approval_store.get_approval(db, approval["id"]))["status"] == "pending"
        sup.stop_all()
        await asyncio.wait_for(running, 10)
    finally:
        kill_leftovers(fake)
    assert not sup.busy
    fake.set_stages([stage(healthy())])
    chain = await sup.run_approved(approval["id"], "alice")  # approved again once the cycle finished
    assert [s["tier"] for s in chain] == [2, 3]


async def test_unknown_approval_is_a_lookup_error_and_claims_nothing(db, make_settings, validator, tmp_path):
    sup = Supervisor(db, make_settings(None), validator)
    with pytest.raises(LookupError, match="no approval 42"):
        await sup.start_approved(42, "alice")
    assert not sup.busy and sup.cycle == 0


async def test_an_approved_tier_that_cannot_start_flags_the_parent(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating())])
    settings = make_settings(fake, tier3_approval="manual")
    [parent], approval = await gated_at_tier3(db, settings, validator, fake)
    broken = make_settings(fake, tier3_approval="manual", tier3_prompt_file=tmp_path / "missing.md")
    sup = Supervisor(db, broken, validator)
    with pytest.raises(PromptError, match="tier 3 prompt file"):
        await sup.run_approved(approval["id"], "alice")
    assert not sup.busy  # the lock is released
    row = await session_store.get_session(db, parent["id"])
    assert row["attention"].startswith(f"approval #{approval['id']}: tier 3 could not start: PromptError: ")
    assert (await approval_store.get_approval(db, approval["id"]))["status"] == "approved"


async def test_a_probe_escalation_to_a_manual_tier1_keeps_its_incidents_in_the_handoff(db, make_settings, validator,
                                                                                     tmp_path):
    target = Target()
    try:
        target.mode = "fail"
        fake = cc.make_fake_claude(tmp_path / "bin", [stage(healthy())])
        settings = make_settings(fake, checks=checks_file(tmp_path, target.url), tier1_approval="manual")
        sup = Supervisor(db, settings, validator)
        chain = await sup.run_cycle(tier=0)
        assert [s["tier"] for s in chain] == [0] and fake.invocations() == []
        assert cycle_status(chain) == AWAITING_APPROVAL
        [a] = await pending(db)
        assert a["tier"] == 1 and "## Incidents behind this escalation" in a["handoff"]
        assert "key `check:api-health`" in a["handoff"] and "HTTP 500" in a["handoff"]
        [inc] = await incidents.list_incidents(db)
        assert inc["escalations"] == 1  # a human is in the loop now: not escalated again next cycle
        chain = await sup.run_approved(a["id"], "alice")
        assert [s["tier"] for s in chain] == [0, 1] and len(fake.invocations()) == 1
        system = fake.last()["parsed"]["append_system_prompt"]
        assert a["handoff"] in system and "ops@web-1.internal" in system  # the handoff and the inventory
    finally:
        target.close()
