"""``app/supervisor/tier_gate.py``: an acting tier holds its services' locks for its session,
waits while another run holds one, ends the wait on a Stop; tier 1 and dry runs take none; a node
without the labels a tier needs says which."""

from __future__ import annotations

import asyncio

import pytest

from app.engine.alert_batches import batches
from app.engine.alerts import parse_payload
from app.store import alert_incidents, locks
from app.supervisor.alerts import delivery
from app.supervisor.halt import Halt, StopRequested
from app.supervisor.tier_gate import TierGate

pytestmark = pytest.mark.timeout(30)


async def incident(db, service: str) -> int:
    _, alerts = parse_payload({"title": f"{service} down", "service": service, "severity": "error",
                               "status": "firing"})
    [batch] = batches(alerts, "group")
    change = await alert_incidents.observe_alerts(db, delivery(batch), flap_count=3, flap_window_s=3600)
    return change.incident["id"]


async def held(db) -> list[tuple[str, str]]:
    return [tuple(r) for r in await db.fetchall("SELECT name, holder FROM leases ORDER BY name")]


async def test_an_acting_tier_waits_for_its_service_and_gives_it_up(db, make_settings):
    settings = make_settings(None)
    db_incident, web_incident = await incident(db, "db"), await incident(db, "web")
    first = TierGate(db, settings, "a/cycle-1", Halt())
    second = TierGate(db, settings, "a/cycle-2", Halt())
    order: list[str] = []

    async def later() -> None:
        async with second.hold(2, [db_incident]):
            order.append("second has db")

    async with first.hold(3, [db_incident, web_incident]):
        assert await held(db) == [("service:db", "a/cycle-1"), ("service:web", "a/cycle-1")]
        waiting = asyncio.create_task(later())
        await asyncio.sleep(0.8)
        assert not waiting.done()  # waits while the first holds db
        async with second.hold(1, [db_incident]), second.hold(2, [db_incident], dry_run=True):
            order.append("tier 1 and a dry run do not wait")
        order.append("first done")
    await asyncio.wait_for(waiting, 5)
    assert order == ["tier 1 and a dry run do not wait", "first done", "second has db"]
    assert await held(db) == []


async def test_a_stop_ends_the_wait(db, make_settings):
    settings = make_settings(None)
    await locks.take_locks(db, ["service:*"], "b/cycle-9", 30)  # another node works on every service
    halt = Halt()
    gate = TierGate(db, settings, "a/cycle-1", halt)
    waiting = asyncio.create_task(gate.hold(2, []).__aenter__())
    await asyncio.sleep(0.3)
    halt.request("session 4 was stopped by an operator")
    with pytest.raises(StopRequested, match="stopped by an operator"):
        await asyncio.wait_for(waiting, 5)


async def test_a_node_without_the_labels_says_what_the_tier_needs(db, make_settings):
    settings = make_settings(None, runs_on="tier3=ssh-to-prod,service:db=dc-2", node_labels="dc-2")
    db_incident = await incident(db, "db")
    gate = TierGate(db, settings, "a/cycle-1", Halt())
    assert await gate.needs_elsewhere(2, [db_incident]) is None
    assert await gate.needs_elsewhere(3, [db_incident]) == {"ssh-to-prod", "dc-2"}
    assert await TierGate(db, make_settings(None), "x", Halt()).needs_elsewhere(3, [db_incident]) is None
