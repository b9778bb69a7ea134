"""app/notify/messages.py (issue #13): which state changes become messages, and how they read."""

from __future__ import annotations

from typing import Any

from app.notify import messages as notices
from app.store.incidents import Change


def incident(**over: Any) -> dict[str, Any]:
    row = {"id": 7, "key": "check:api-health", "service": "api", "check_name": "api-health", "severity": "critical",
           "evidence": "api-health failing: HTTP 500 in 12 ms, expected 200", "flapping": False, "duration_s": None,
           "resolved_by": None, "occurrences": 3}
    return {**row, **over}


def test_incident_changes_become_one_message_each_except_seen():
    changes = [Change(incident(), "opened", True), Change(incident(id=8), "seen", True),  # type: ignore[arg-type]
               Change(incident(id=9, severity="critical"), "worsened", True),  # type: ignore[arg-type]
               Change(incident(id=10, duration_s=840.0, resolved_by="auto"), "resolved", False)]  # type: ignore[arg-type]
    out = notices.incident_notices(changes)
    assert [(n.kind, n.dedup_key) for n in out] == [
        ("incident_opened", "incident:7:opened"), ("incident_worsened", "incident:9:worsened:critical"),
        ("incident_resolved", "incident:10:resolved")]
    opened = out[0]
    assert opened.title == "[CRITICAL] api: incident opened — api-health"
    assert "HTTP 500" in opened.body and opened.link_path == "/incidents/7" and opened.severity == "critical"
    assert out[2].title == "[RESOLVED] api: api-health recovered after 14 min" and out[2].severity == "info"


def test_escalation_outcome_attention_and_approval_messages():
    parent = {"id": 3, "tier": 0, "summary": "1 check failing", "escalation_reason": "api down"}
    esc = notices.escalation_notice(parent, 1, ["incident #7 (check:api-health): opened"])
    assert esc.title == "[WARNING] host: tier 0 escalated to tier 1" and "incident #7" in esc.body
    assert esc.dedup_key == "escalation:3:1" and esc.link_path == "/sessions/3"
    assert notices.outcome_notice([{"id": 3}]) is None  # nothing escalated: no outcome message
    done = notices.outcome_notice([{"id": 3, "tier": 0}, {"id": 4, "tier": 1, "status": "completed",
                                                          "attention": None, "summary": "api restarted, healthy"}])
    assert done is not None and done.severity == "info" and "finished at tier 1" in done.title
    assert done.dedup_key == "outcome:3"
    att = notices.attention_notice({"id": 4, "tier": 1}, "tier 1 failed: timed out")
    assert att.severity == "critical" and att.dedup_key == "attention:4" and "timed out" in att.body
    appr = notices.approval_notice({"id": 2, "tier": 3, "session_pk": 5, "handoff": "restart nginx"})
    assert appr.title == "[WARNING] host: approval #2 requested to run tier 3" and appr.link_path == "/sessions/5"


def test_long_evidence_is_clipped():
    [n] = notices.incident_notices([Change(incident(evidence="x" * 5000), "opened", True)])  # type: ignore[arg-type]
    assert len(n.body) == notices.BODY_MAX and n.body.endswith("…")


async def test_send_never_raises_and_skips_none():
    got: list[tuple[str, str | None]] = []

    class Sink:
        async def notify(self, kind, severity, title, body, *, link_path=None, dedup_key=None):
            if kind == "attention":
                raise RuntimeError("broken sender")
            got.append((kind, dedup_key))

    await notices.send(Sink(), [notices.attention_notice({"id": 1, "tier": 1}, "x"), None,
                                notices.escalation_notice({"id": 2, "tier": 0}, 1)])
    assert got == [("escalation", "escalation:2:1")]
    await notices.send(None, [notices.attention_notice({"id": 1, "tier": 1}, "x")])  # no sender: nothing
