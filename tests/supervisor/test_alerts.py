"""What ``receive_alerts`` (app/supervisor/alerts.py) answers per alert and hands to the notices:
the alerts of one group share their incident's one change (told once) and each still gets its own
answer. Against the real store; the whole path through the API is tests/web/api/test_alerts.py."""

from __future__ import annotations

import json
from pathlib import Path

from app.engine.alert_batches import batches
from app.engine.alerts import parse_payload
from app.store import alert_incidents
from app.supervisor.alerts import AlertOutcome, RunOutcome, delivery, incident_changes

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "alerts"


def sample(name: str) -> dict:
    return json.loads((SAMPLES / f"{name}.json").read_text(encoding="utf-8"))


async def apply(db, body: dict, grouping: str = "group") -> list[AlertOutcome]:
    _, alerts = parse_payload(body)
    outcomes: dict[int, AlertOutcome] = {}
    for batch in batches(alerts, grouping):  # type: ignore[arg-type]
        change = await alert_incidents.observe_alerts(db, delivery(batch), flap_count=3, flap_window_s=3600)
        outcomes.update({id(a): AlertOutcome(a, change, RunOutcome(why_not="test")) for a in batch.alerts})
    return [outcomes[id(a)] for a in alerts]


async def test_a_group_is_one_change_told_once_and_an_answer_per_alert(db):
    body = sample("alertmanager-group-firing")
    body["alerts"][2]["status"] = "resolved"  # listed on the incident its group opens
    outcomes = await apply(db, body)
    [change] = incident_changes(outcomes)
    assert change.kind == "opened" and all(o.change is change for o in outcomes)
    assert [o.change_word for o in outcomes] == ["opened", "opened", "updated"]
    by_fingerprint = await apply(db, sample("alertmanager-group-firing"), "fingerprint")
    assert len(incident_changes(by_fingerprint)) == 3 and [o.change_word for o in by_fingerprint] == ["opened"] * 3
    resolved = await apply(db, sample("alertmanager-group-resolved"))
    assert [c.kind for c in incident_changes(resolved)] == ["resolved"]
    assert [o.change_word for o in resolved] == ["resolved"] * 3
    assert [o.change_word for o in await apply(db, sample("alertmanager-group-resolved"))] == ["ignored"] * 3
    assert incident_changes(await apply(db, sample("alertmanager-group-resolved"))) == []


async def test_without_the_claude_cli_an_opened_incident_needs_attention(db, make_settings, validator, tmp_path):
    """No session row exists to carry the flag: the incident carries it, with a timeline entry, and the
    run's answer and message say a human must look."""
    from app.store import incidents
    from app.supervisor.alerts import receive_alerts
    from app.supervisor.scheduler import Supervisor

    sup = Supervisor(db, make_settings(tmp_path / "no-such-claude"), validator)
    await sup.start()
    try:
        _, alerts = parse_payload(sample("generic-firing"))
        [outcome] = await receive_alerts(sup, alerts)
    finally:
        await sup.shutdown()
    assert outcome.run.needs_human and outcome.run.session_pk is None
    assert outcome.run.action_line().endswith("A human must look.")
    inc = await incidents.get_incident(db, outcome.change.incident["id"])
    assert inc["attention"].startswith("not investigated: ") and "a human must look" in inc["attention"]
    assert (await incidents.timeline(db, inc["id"]))[-1]["kind"] == "attention"


def test_a_joined_run_says_so_in_the_incidents_message():
    line = RunOutcome(queued_id=4, coalesced=True).action_line()
    assert line.startswith("Investigating: joined run #4, queued for another incident of the same service")
