"""What reaches a person, end to end: the real supervisor runs the real probe against local targets
(and the fake claude CLI for the model tiers), and real Apprise sends to local HTTP receivers.

* a warning check failing then recovering, default settings, no model tier: exactly two
  messages, opened and resolved, titled with the service and the check;
* a critical message right after five warnings leaves at once, whatever the per-minute allowance;
* an escalation whose tier proposes a restart: the outcome message names it;
* three cycles escalating one incident to a manual tier: one pending approval (the later ones
  attach), and it expires with the reason when the incident resolves;
* a maintenance window: incidents recorded and marked, no escalation and no message; when it ends
  with the incident still failing, one message and one escalation;
* routes: critical to one receiver, warning to another; the resolution follows its opening.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from app.clock import parse_stamp, utcnow
from app.store import approvals as approval_store
from app.store import incidents
from app.store import maintenance as maintenance_store
from app.store import notifications as notification_store
from app.supervisor.scheduler import Supervisor
from tests.fakes import claude_control as cc
from tests.helpers import healthy, wait_until
from tests.receiver import Receiver
from tests.supervisor.test_probe_cycles import Target

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def targets() -> Iterator[dict[str, Target]]:
    made = {name: Target() for name in ("api", "db")}
    yield made
    for t in made.values():
        t.close()


def checks(tmp_path: Path, targets: dict[str, Target], *, api: str = "warning", db: str = "critical") -> Path:
    path = tmp_path / "checks.yaml"
    path.write_text(f"""\
interval: 5m
checks:
  - name: api-health
    service: api
    http: {targets['api'].url}
    status: 200
    severity: {api}
    timeout: 5s
  - name: db-health
    service: db
    http: {targets['db'].url}
    status: 200
    severity: {db}
    timeout: 5s
""", encoding="utf-8")
    return path


async def cycle(sup: Supervisor) -> list[dict]:
    return [dict(link) for link in await sup.run_cycle(tier=0)]


def titles(receiver: Receiver, prefix: str = "/") -> list[str]:
    return [r.json()["title"] for r in receiver.requests if r.path.startswith(prefix)]


async def settle(sup: Supervisor) -> None:
    """Let the background sender finish what is pending (it runs on this loop)."""
    async def idle() -> bool:
        return not await notification_store.pending(sup.db)

    deadline = time.monotonic() + 15
    while not await idle():
        assert time.monotonic() < deadline, await notification_store.pending(sup.db)
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)


def escalate_with(actions: list[dict], summary: str = "api returns 500 since the 09:58 deploy",
                  level: str = "warning") -> dict:
    return {"summary": summary,
            "events": [{"level": level, "service": "api", "message": "HTTP 500 on /healthz since 09:58",
                        "key": "check:api-health"}],
            "memories": [], "actions": actions,
            "escalation": {"needed": True, "reason": "a restart is needed", "context": "deploy 4411",
                           "failed_checks": ["api-health"]},
            "services_checked": [{"name": "api", "status": "down", "detail": "HTTP 500"}]}


async def test_a_warning_check_fails_then_recovers_two_messages(db, make_settings, validator, targets, receiver,
                                                                 tmp_path):
    settings = make_settings(tmp_path / "no-claude-here", checks=checks(tmp_path, targets),
                             notify_urls=f"json://{receiver.address}/all")
    sup = Supervisor(db, settings, validator)
    sup.notifier.gather = 0
    await sup.start()
    try:
        targets["api"].mode = "fail"
        await cycle(sup)
        await cycle(sup)  # still failing: nothing new
        targets["api"].mode = "ok"
        await cycle(sup)
        await settle(sup)
    finally:
        await sup.shutdown()
    got = titles(receiver)
    assert len(got) == 2, got
    assert got[0] == "[WARNING] api: api-health failing"
    assert got[1].startswith("[RESOLVED] api: api-health recovered after ")
    opened = receiver.requests[0].json()["message"]
    assert "HTTP 500" in opened and "Not escalated to tier 1" in opened and "A human must look" in opened
    # the session that needed a human because of the incident is settled with it
    [tier0] = [s for s in await db.fetchall("SELECT id, attention, attention_acked_by FROM sessions WHERE tier = 0"
                                            " AND attention IS NOT NULL")]
    assert tier0["attention_acked_by"].startswith("incident #1 resolved")


async def test_a_critical_message_leaves_at_once_after_five_warnings(db, tmp_path, receiver):
    from app.config import Settings
    from app.notify.messages import Notice
    from app.notify.sender import Notifier

    settings = Settings(db=tmp_path / "tierops.db", home=tmp_path / "state",
                        notify_urls=f"json://{receiver.address}/n")
    notifier = Notifier(db, settings)  # the real gather (1 s) and the real per-minute allowance (5)
    await notifier.start()
    try:
        for i in range(5):
            await notifier.post(Notice("incident_opened", "warning", f"svc{i}: check{i} failing", "x", None,
                                       f"incident:{i}:opened"))
        await wait_until(lambda: len(receiver.requests) == 5, what="five warnings", timeout=15)
        started = time.monotonic()
        await notifier.post(Notice("incident_opened", "critical", "db: db-health failing", "refused", None,
                                   "incident:99:opened"))
        await wait_until(lambda: len(receiver.requests) == 6, what="the critical message", timeout=15)
        took = time.monotonic() - started
    finally:
        await notifier.close()
    assert titles(receiver)[-1] == "[CRITICAL] db: db-health failing"
    assert took < 5, f"the critical message took {took:.1f} s"


async def test_the_outcome_message_names_the_proposed_restart(db, make_settings, validator, targets, receiver,
                                                              tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), {
        **escalate_with([{"kind": "restart", "service": "api", "result": "proposed",
                          "detail": "systemctl restart api: the workers hang after deploy 4411"}]),
        "escalation": {"needed": False, "reason": None, "context": None, "failed_checks": []}})}])
    settings = make_settings(fake, checks=checks(tmp_path, targets), notify_urls=f"json://{receiver.address}/o")
    sup = Supervisor(db, settings, validator)
    sup.notifier.gather = 0
    await sup.start()
    try:
        targets["api"].mode = "fail"
        chain = await cycle(sup)
        await settle(sup)
    finally:
        await sup.shutdown()
    assert [s["tier"] for s in chain] == [0, 1]
    got = titles(receiver)
    # tier 1's findings cite no tool output: uncited, so the outcome says so (TIEROPS_EVIDENCE_POLICY=flag)
    assert got == ["[WARNING] api: api-health failing",
                   "[WARNING] api: api-health — investigated by tier 1 (unverified)"], got
    outcome = receiver.requests[1].json()["message"]
    assert "api returns 500 since the 09:58 deploy" in outcome
    assert "restart api: systemctl restart api: the workers hang after deploy 4411" in outcome
    assert "Still open: #1 api-health (warning)" in outcome


async def test_three_cycles_escalating_one_incident_to_a_manual_tier_give_one_approval(db, make_settings, validator,
                                                                                       targets, receiver, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    settings = make_settings(fake, checks=checks(tmp_path, targets), tier1_approval="manual", escalate_after=1,
                             notify_urls=f"json://{receiver.address}/a")
    sup = Supervisor(db, settings, validator)
    sup.notifier.gather = 0
    await sup.start()
    try:
        targets["api"].mode = "fail"
        for _ in range(3):
            await cycle(sup)
        pending = await approval_store.list_approvals(db, status="pending")
        assert len(pending) == 1, pending
        [approval] = pending
        assert approval["attached"] == 2 and approval["handoff"].count("## Also escalated by session") == 2
        assert await approval_store.incident_ids(db, approval["id"]) == [1]
        gates = [r["escalation_gate"] for r in await db.fetchall("SELECT escalation_gate FROM sessions ORDER BY id")]
        assert all(g.startswith(f"waiting for approval #{approval['id']} to run tier 1") for g in gates), gates
        assert fake.invocations() == []  # nothing ran tier 1
        # the incident recovers: the approval has nothing left to run and expires saying why
        targets["api"].mode = "ok"
        await cycle(sup)
        [expired] = await approval_store.list_approvals(db, status="expired")
        assert expired["id"] == approval["id"] and "incidents resolved" in (expired["note"] or "")
        await settle(sup)
    finally:
        await sup.shutdown()
    got = titles(receiver)
    assert got[0] == "[WARNING] api: api-health failing" and got[-1].startswith("[RESOLVED] api: api-health")
    assert len(got) == 2, got  # no message per attached escalation, none for the moot approval
    assert f"Waiting for approval #{approval['id']} to run tier 1" in receiver.requests[0].json()["message"]


async def test_a_maintenance_window_holds_escalation_and_messages_and_its_end_escalates_once(
        db, make_settings, validator, targets, receiver, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    settings = make_settings(fake, checks=checks(tmp_path, targets), notify_urls=f"json://{receiver.address}/m")
    now = utcnow()
    window = await maintenance_store.create_window(
        db, starts_at=now, ends_at=(parse_stamp(now) + timedelta(hours=1)).isoformat(timespec="milliseconds")
        .replace("+00:00", "Z"), reason="db upgrade", created_by="test", services=["api"])
    sup = Supervisor(db, settings, validator)
    sup.notifier.gather = 0
    await sup.start()
    try:
        targets["api"].mode = "fail"
        first = await cycle(sup)
        second = await cycle(sup)
        assert [s["tier"] for s in first] == [0] and [s["tier"] for s in second] == [0]
        [inc] = await incidents.list_incidents(db)
        assert inc["maintenance"] and "db upgrade" in inc["maintenance"] and inc["escalations"] == 0
        assert "in maintenance window" in (first[0]["escalation_gate"] or "")
        await settle(sup)
        assert titles(receiver) == []
        rows = await notification_store.recent(db, 10)
        assert [(r["kind"], r["status"]) for r in rows] == [("incident_opened", "suppressed")]
        assert rows[0]["why"].startswith("in maintenance window")
        assert fake.invocations() == []
        await maintenance_store.cancel_window(db, window["id"], "test")  # the window ends early
        third = await cycle(sup)
        fourth = await cycle(sup)
        await settle(sup)
    finally:
        await sup.shutdown()
    assert [s["tier"] for s in third] == [0, 1] and [s["tier"] for s in fourth] == [0]
    assert len(fake.invocations()) == 1
    got = titles(receiver)
    assert got[0] == f"[WARNING] api: api-health still failing after maintenance window {inc['maintenance']}", got
    assert "Escalated to tier 1" in receiver.requests[0].json()["message"]
    [inc] = await incidents.list_incidents(db)
    assert inc["maintenance"] is None and inc["escalations"] == 1


async def test_routes_send_critical_to_one_receiver_and_warning_to_another(db, make_settings, validator, targets,
                                                                          tmp_path):
    pager, chat = Receiver(), Receiver()
    try:
        settings = make_settings(
            tmp_path / "no-claude-here", checks=checks(tmp_path, targets, api="warning", db="critical"),
            notify_urls=f"pager=json://{pager.address}/pager chat=json://{chat.address}/chat",
            notify_routes="[{name: page, match: {severity: critical}, to: [pager]},"
                          " {name: team, match: {severity: warning}, to: [chat]}]")
        sup = Supervisor(db, settings, validator)
        sup.notifier.gather = 0
        await sup.start()
        try:
            targets["api"].mode = targets["db"].mode = "fail"
            await cycle(sup)
            targets["api"].mode = targets["db"].mode = "ok"
            await cycle(sup)
            await settle(sup)
        finally:
            await sup.shutdown()
        assert titles(pager) == ["[CRITICAL] db: db-health failing"] + [
            t for t in titles(pager) if t.startswith("[RESOLVED] db:")]
        assert len(titles(pager)) == 2 and titles(pager)[1].startswith("[RESOLVED] db: db-health recovered")
        assert len(titles(chat)) == 2 and titles(chat)[0] == "[WARNING] api: api-health failing"
        assert titles(chat)[1].startswith("[RESOLVED] api: api-health recovered")
        rows = {r["title"]: r["routes"] for r in await notification_store.recent(db, 10)}
        assert rows["[CRITICAL] db: db-health failing"] == ["page"]
        assert next(v for k, v in rows.items() if k.startswith("[RESOLVED] db:")) == ["page"]
    finally:
        pager.close()
        chat.close()


async def test_an_alert_group_is_one_message_named_by_its_alert_then_the_investigations_outcome(
        db, make_settings, validator, receiver, tmp_path):
    import json

    from app.engine.alerts import parse_payload
    from app.supervisor.alerts import receive_alerts

    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), {
        **healthy("p99 latency back under 2s after the cache warmed up"),
        "events": [{"level": "info", "service": "api", "message": "p99 2.3s, falling"}]})}])
    settings = make_settings(fake, notify_urls=f"json://{receiver.address}/alerts", public_url="https://t.example")
    sup = Supervisor(db, settings, validator)
    sup.notifier.gather = 0
    await sup.start()
    try:
        payload = json.loads((Path(__file__).parents[1] / "fixtures/alerts/alertmanager-group-firing.json").read_text())
        _, alerts = parse_payload(payload)
        outcomes = await receive_alerts(sup, alerts)
        assert len({o.change.incident["id"] for o in outcomes if o.change}) == 1
        await wait_until(lambda: sup.current_task is not None and sup.current_task.done(), what="the investigation")
        await settle(sup)
    finally:
        await sup.shutdown()
    got = titles(receiver)
    assert got[0] == "[CRITICAL] api: HighRequestLatency (alertmanager)", got
    assert got[1] == "[CRITICAL] api: HighRequestLatency (alertmanager) — investigated by tier 1", got
    assert len(got) == 2
    opened = receiver.requests[0].json()["message"]
    assert "Investigating: tier 1 started (session #1)" in opened and "https://t.example/incidents/1" in opened
    assert "p99 latency back under 2s" in receiver.requests[1].json()["message"]


async def test_a_chain_waiting_for_approval_says_so_and_the_approved_continuation_sends_its_own_outcome(
        db, make_settings, validator, targets, receiver, tmp_path):
    needs_tier2 = escalate_with([{"kind": "restart", "service": "api", "result": "proposed", "detail": "restart api"}])
    done = {**healthy("api restarted; healthy again"), "actions": [
        {"kind": "restart", "service": "api", "result": "done", "detail": "systemctl restart api"}]}
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), needs_tier2)},
        {"lines": cc.structured_stream(cc.new_session_id(), done)}])
    settings = make_settings(fake, checks=checks(tmp_path, targets), tier2_approval="manual",
                             notify_urls=f"json://{receiver.address}/w")
    sup = Supervisor(db, settings, validator)
    sup.notifier.gather = 0
    await sup.start()
    try:
        targets["api"].mode = "fail"
        chain = await cycle(sup)
        assert [s["tier"] for s in chain] == [0, 1]
        [approval] = await approval_store.list_approvals(db, status="pending")
        await settle(sup)
        got = titles(receiver)
        assert got == ["[WARNING] api: api-health failing",
                       f"[WARNING] api: api-health — waiting for approval #{approval['id']} to run tier 2 (unverified)"], got
        assert "Proposes" in receiver.requests[1].json()["message"]
        continued = await sup.run_approved(approval["id"], "alice")
        assert [s["tier"] for s in continued][-1] == 2
        await settle(sup)
    finally:
        await sup.shutdown()
    got = titles(receiver)
    assert got[2] == "[WARNING] api: api-health — investigated by tier 2", got
    assert "restart api: done" in receiver.requests[2].json()["message"]
    assert len(got) == 3
