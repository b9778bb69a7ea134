"""app/notify/messages.py: which state changes become messages, and how each one reads."""

from __future__ import annotations

from typing import Any

from app.notify import messages
from app.notify.messages import IncidentNews, Outcome
from app.store.incidents import Change


def incident(**over: Any) -> dict[str, Any]:
    row = {"id": 7, "key": "check:api-health", "service": "api", "check_name": "api-health", "name": "api-health",
           "origin": "probe", "status": "open", "severity": "critical", "title": "api-health failing",
           "evidence": "api-health failing: HTTP 500 in 12 ms, expected 200", "opened_at": "2026-11-26T10:00:00.000Z",
           "flapping": False, "duration_s": None, "resolved_by": None, "occurrences": 3, "alert_source": None,
           "reopened_from": None, "maintenance_until": None}
    return {**row, **over}


def change(kind: str = "opened", **over: Any) -> Change:
    return Change(incident(**over), kind, True)  # type: ignore[arg-type]


def test_each_state_change_is_one_message_named_by_service_and_check():
    out = messages.incident_notices([change(), change("seen", id=8), change("worsened", id=9, severity="critical"),
                                     change("resolved", id=10, duration_s=840.0, resolved_by="auto", status="resolved")])
    assert [(n.kind, n.dedup_key) for n in out] == [
        ("incident_opened", "incident:7:opened"), ("incident_worsened", "incident:9:worsened:critical"),
        ("incident_resolved", "incident:10:resolved")]
    opened, worsened, resolved = out
    assert opened.title == "api: api-health failing" and opened.severity == "critical"
    assert "HTTP 500" in opened.body and opened.link_path == "/incidents/7"
    assert (opened.source, opened.service, opened.check, opened.incident_id) == ("check", "api", "api-health", 7)
    assert worsened.title == "api: api-health failing, now critical"
    assert resolved.title == "[RESOLVED] api: api-health recovered after 14 min"
    assert resolved.severity == "critical"  # the incident's own severity: it follows its opening
    assert resolved.follows == (10,) and "its check passed again" in resolved.body


def test_alerts_are_named_by_alert_and_sender_and_models_by_their_finding():
    [alert] = messages.incident_notices([change(origin="alert", service="payments", name="HighLatency",
                                                alert_source="alertmanager", severity="warning", key="alert:x")])
    assert alert.title == "payments: HighLatency (alertmanager)" and alert.source == "alert"
    [model] = messages.incident_notices([change(origin="agent", check_name=None, name=None, service=None,
                                                title="disk " + "x" * 200)])
    assert model.title.startswith("tierops: disk xxx") and len(model.title) < 100  # no placeholder "host"
    assert model.source == "model"


def test_reopened_and_flapping_say_so():
    [n] = messages.incident_notices([change(reopened_from=5, flapping=True)])
    assert n.title == "api: api-health failing again (flapping)" and "reopens #5" in n.body


def test_what_tierops_did_is_a_line_of_the_incident_message():
    item = IncidentNews(change())
    item.action = "Not escalated to tier 1: the claude CLI is missing. A human must look."
    n = messages.incident_notice(item)
    assert n.body.endswith("A human must look.") and n.kind == "incident_opened"


def test_the_end_of_a_maintenance_window_is_told_as_an_opening():
    n = messages.incident_notice(IncidentNews(change("seen", maintenance_until="2026-11-26T23:00:00.000Z"),
                                              after_maintenance="db-upgrade"))
    assert n.kind == "incident_opened" and n.title == "api: api-health still failing after maintenance window db-upgrade"
    assert n.dedup_key == "incident:7:opened:after-maintenance:2026-11-26T23:00:00.000Z"


def test_a_held_change_is_recorded_with_why():
    n = messages.incident_notice(IncidentNews(change(), suppress="in maintenance window db-upgrade"))
    assert n.suppress == "in maintenance window db-upgrade"


def test_the_outcome_names_what_was_found_done_proposed_and_still_open():
    o = Outcome(root=3, last={"id": 5, "tier": 2, "status": "completed", "summary": "api returns 500 after a deploy"},
                incidents=[incident()],
                found=[("critical", "api", "HTTP 500 on /healthz since 09:58")],
                done=[("restart", "api", "failed", "unit did not come back")],
                proposed=[("rollback", "api", "deploy 4411 back to 4410")],
                waiting=(4, 3))
    n = messages.outcome_notice(o)
    assert n.title == "api: api-health — waiting for approval #4 to run tier 3" and n.severity == "critical"
    assert n.follows == (7,) and n.dedup_key == "outcome:3:5" and n.link_path == "/approvals/4"
    for text in ("api returns 500 after a deploy", "[critical] api: HTTP 500", "restart api: failed",
                 "rollback api: deploy 4411 back to 4410", "Waiting for approval #4", "Still open: #7 api-health"):
        assert text in n.body, text


def test_the_outcome_of_a_finished_investigation_says_so():
    done = messages.outcome_notice(Outcome(root=3, last={"id": 4, "tier": 1, "status": "completed", "summary": "ok"},
                                           incidents=[incident(status="resolved")]))
    assert done.title == "api: api-health — investigated by tier 1, resolved"
    assert "Every incident it was about is resolved." in done.body
    human = messages.outcome_notice(Outcome(root=3, last={"id": 4, "tier": 1, "status": "failed",
                                                          "status_reason": "timed out"},
                                            attention="tier 1 failed: timed out"))
    assert human.title == "tierops: session 4 — tier 1 needs a human" and human.severity == "warning"


def test_long_evidence_is_clipped():
    [n] = messages.incident_notices([change(evidence="x" * 5000)])
    assert n.body.startswith("x" * 100) and "…" in n.body and len(n.body) < messages.BODY_MAX + 500


async def test_send_never_raises_and_skips_none():
    got: list[str | None] = []

    class Sink:
        async def post(self, notice):
            if notice.kind == "attention":
                raise RuntimeError("broken sender")
            got.append(notice.dedup_key)

    await messages.send(Sink(), [messages.attention_notice({"id": 1, "tier": 1}, "x"), None,
                                 *messages.incident_notices([change()])])
    assert got == ["incident:7:opened"]
    await messages.send(None, [messages.attention_notice({"id": 1, "tier": 1}, "x")])  # no sender: nothing
