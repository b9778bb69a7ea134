"""``observe_alert`` (issue #13, app/store/incidents.py) against a real SQLite file: an alert is an
incident keyed ``alert:<fingerprint>`` — opened, counted per delivery, worsened when its severity
rises, resolved by its sender — with a timeline entry per delivery."""

from __future__ import annotations

from app.clock import shift
from app.store import incidents, sessions
from app.store.incidents import Finding, Observation

T0 = "2026-11-24T09:00:00.000Z"


def at(minutes: float) -> str:
    return shift(T0, minutes * 60)


async def deliver(db, minutes: float, *, firing: bool = True, severity: str = "warning", fingerprint: str = "fp1",
                  evidence: str = "latency 3.4s", flap_count: int = 3):
    return await incidents.observe_alert(
        db, fingerprint=fingerprint, firing=firing, severity=severity, title="API latency above 2s",
        evidence=evidence, service="api", detail=f"alertmanager {'firing' if firing else 'resolved'}, {severity}",
        flap_count=flap_count, flap_window_s=3600, now=at(minutes))


async def test_firing_opens_counts_each_delivery_and_resolving_closes(db):
    opened = await deliver(db, 0)
    inc = opened.incident
    assert opened.kind == "opened" and opened.counted
    assert (inc["key"], inc["origin"], inc["status"], inc["severity"], inc["title"], inc["evidence"], inc["service"]) == (
        "alert:fp1", "alert", "open", "warning", "API latency above 2s", "latency 3.4s", "api")
    assert inc["first_session_pk"] is None and inc["occurrences"] == 1
    seen = await deliver(db, 5, evidence="latency 3.9s")
    assert seen.kind == "seen" and seen.counted
    assert seen.incident["occurrences"] == 2 and seen.incident["evidence"] == "latency 3.9s"
    worse = await deliver(db, 10, severity="critical")
    assert worse.kind == "worsened" and worse.incident["severity"] == "critical"
    lower = await deliver(db, 12, severity="warning")
    assert lower.kind == "seen" and lower.incident["severity"] == "critical"  # the highest while open
    resolved = await deliver(db, 30, firing=False)
    assert resolved.kind == "resolved"
    row = resolved.incident
    assert (row["status"], row["resolved_by"], row["resolved_at"], row["duration_s"]) == (
        "resolved", "alert", at(30), 1800.0)
    assert await deliver(db, 31, firing=False) is None  # nothing open: ignored
    kinds = [t["kind"] for t in await incidents.timeline(db, inc["id"])]
    assert kinds == ["opened", "alert", "alert", "alert", "worsened", "alert", "alert", "resolved"]
    again = await deliver(db, 40)
    assert again.kind == "opened" and again.incident["id"] != inc["id"]


async def test_a_silence_carries_over_to_the_next_firing(db):
    first = await deliver(db, 0)
    await incidents.silence(db, first.incident["id"], at(120), "alice via API token", now=at(1))
    await deliver(db, 2, firing=False)
    reopened = await deliver(db, 3)
    assert reopened.kind == "opened" and reopened.incident["silenced_until"] == at(120)


async def test_alert_keys_never_touch_probe_or_model_incidents(db):
    pk = await sessions.create_session(db, tier=0, model="tierops-probe", trigger="schedule")
    await incidents.observe(db, pk, 1, Observation(findings=[Finding(key="check:api", severity="critical",
                                                                     message="HTTP 500", check_name="api")]),
                            flap_count=3, flap_window_s=3600)
    change = await deliver(db, 0, fingerprint="api")
    assert change.kind == "opened" and change.incident["key"] == "alert:api"
    assert await incidents.unresolved_keys(db, ["alert:api", "check:api", "alert:none"]) == {"alert:api", "check:api"}
    assert len(await incidents.list_incidents(db, status="open")) == 2


async def test_sender_texts_are_redacted(db):
    secret = "ghp_" + "x" * 36
    change = await deliver(db, 0, evidence=f"token {secret} in the logs")
    assert secret not in change.incident["evidence"]
