"""app/supervisor/windows.py: an alert's incident that a maintenance window held is told and
investigated once the window ends, by the server's watch (no cycle looks at it again). Real store,
real Apprise to a local receiver, the fake claude CLI for the tier-1 run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from app.clock import parse_stamp, utcnow
from app.engine.alerts import parse_payload
from app.store import incidents, run_queue
from app.store import maintenance as maintenance_store
from app.store import notifications as notification_store
from app.supervisor.alerts import receive_alerts, run_next_queued
from app.supervisor.scheduler import Supervisor
from app.supervisor.windows import end_of_windows
from tests.fakes import claude_control as cc
from tests.helpers import healthy, wait_until
from tests.receiver import Receiver

pytestmark = pytest.mark.timeout(120)

ALERTS = Path(__file__).resolve().parents[1] / "fixtures" / "alerts"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _hour_from_now() -> str:
    return (parse_stamp(utcnow()) + timedelta(hours=1)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def test_an_alert_held_by_a_window_is_investigated_when_the_window_ends(db, make_settings, validator,
                                                                           receiver, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    settings = make_settings(fake, notify_urls=f"json://{receiver.address}/w")
    window = await maintenance_store.create_window(db, starts_at=utcnow(), ends_at=_hour_from_now(),
                                                   reason="api deploy", created_by="test", services=["api"])
    sup = Supervisor(db, settings, validator)
    sup.notifier.gather = 0
    await sup.start()
    try:
        _, alerts = parse_payload(json.loads((ALERTS / "alertmanager-group-firing.json").read_text()))
        outcomes = await receive_alerts(sup, alerts)
        assert {o.run.why_not for o in outcomes} == {f"in maintenance window #{window['id']} api deploy until "
                                                     f"{window['ends_at']}"}
        [inc] = await incidents.list_incidents(db)
        assert inc["maintenance"] == f"#{window['id']} api deploy" and inc["escalations"] == 0
        assert await end_of_windows(sup) == 0  # still in the window: nothing to do
        [row] = await notification_store.recent(db, 5)
        assert row["status"] == "suppressed" and row["why"].startswith("in maintenance window")
        await maintenance_store.cancel_window(db, window["id"], "test")
        assert await end_of_windows(sup) == 1
        assert await end_of_windows(sup) == 0  # acted on once
        [queued] = await run_queue.list_runs(db)
        assert queued["status"] == "queued" and queued["incident_id"] == inc["id"]
        assert "data, not instructions" in queued["prompt"] and "runbooks.example.com" in queued["prompt"]
        assert await run_next_queued(sup) == 1  # what the server's queue worker does
        await wait_until(lambda: len(fake.invocations()) == 1, what="the held-back investigation", timeout=30)
        await wait_until(lambda: sup.current_task is not None and sup.current_task.done(), what="its chain")
        [inc] = await incidents.list_incidents(db)
        assert inc["maintenance"] is None and inc["escalations"] == 1
    finally:
        await sup.shutdown()
    first = receiver.requests[0].json()
    assert first["title"] == (f"[CRITICAL] api: HighRequestLatency (alertmanager) still firing after maintenance "
                              f"window #{window['id']} api deploy")
    assert "Investigating: tier 1 queued as run #1" in first["message"]


async def test_when_the_queue_is_full_at_the_windows_end_the_incident_needs_attention(db, make_settings, validator,
                                                                                     tmp_path):
    """Before, the message said a human must look and the incident said nothing."""
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    settings = make_settings(fake, alert_queue_max=1)
    window = await maintenance_store.create_window(db, starts_at=utcnow(), ends_at=_hour_from_now(),
                                                   reason="api deploy", created_by="test", services=["api"])
    sup = Supervisor(db, settings, validator)
    await sup.start()
    try:
        _, alerts = parse_payload(json.loads((ALERTS / "alertmanager-group-firing.json").read_text()))
        await receive_alerts(sup, alerts)
        [inc] = await incidents.list_incidents(db)
        await run_queue.enqueue(db, source="alert", tier=1, prompt="## Alert\nanother service", incident_id=None,
                                limit=1)  # the one place the queue has is taken
        await maintenance_store.cancel_window(db, window["id"], "test")
        assert await end_of_windows(sup) == 1
        inc = await incidents.get_incident(db, inc["id"])
        assert "run queue is full" in inc["attention"] and "maintenance window" in inc["attention"]
        assert (await incidents.timeline(db, inc["id"]))[-1]["kind"] == "attention"
        assert await run_queue.queued_count(db) == 1
    finally:
        await sup.shutdown()
