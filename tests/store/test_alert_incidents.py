"""Alert incidents (app/store/alert_incidents.py) against a real SQLite file. One alert on its own
(``observe_alert``) is an incident keyed ``alert:<fingerprint>`` — opened, counted per delivery,
worsened when its severity rises, resolved by its sender — with a timeline entry per delivery.
A group (``observe_alerts``) is one incident listing its alerts: the worst firing alert's
severity, joined by new alerts, resolved once none fires."""

from __future__ import annotations

import json

from app.clock import shift
from app.store import alert_incidents, incidents, sessions
from app.store.alert_incidents import INCIDENT_LINKS_MAX, AlertDelivery, AlertEntry
from app.store.incidents import Finding, Observation

T0 = "2026-11-24T09:00:00.000Z"


def at(minutes: float) -> str:
    return shift(T0, minutes * 60)


async def deliver(db, minutes: float, *, firing: bool = True, severity: str = "warning", fingerprint: str = "fp1",
                  evidence: str = "latency 3.4s", flap_count: int = 3):
    return await alert_incidents.observe_alert(
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


# -- groups ----------------------------------------------------------------------------------

GROUP = "alert:group:0123456789abcdef"
RUNBOOK = "https://runbooks.example.com/api/high-latency"


def entry(fp: str, *, firing: bool = True, severity: str = "warning", runbook: str | None = RUNBOOK) -> AlertEntry:
    links = ([{"label": "runbook", "url": runbook}] if runbook else []) + [
        {"label": "source", "url": f"http://prometheus.example.com:9090/graph?fp={fp}"}]
    return AlertEntry(fingerprint=fp, firing=firing, severity=severity, title=f"latency high on {fp}",
                      labels={"alertname": "HighRequestLatency", "instance": fp},
                      annotations={"summary": f"latency high on {fp}", "runbook_url": runbook or ""},
                      links=links, starts_at="2026-11-24T09:00:00Z")


async def group(db, minutes: float, *alerts: AlertEntry, resolved: bool = False, annotations=None):
    return await alert_incidents.observe_alerts(
        db, AlertDelivery(key=GROUP, source="alertmanager", name="HighRequestLatency", title="API latency above 2s",
                          service="api", evidence=f"{len(alerts)} alert(s)", detail=f"delivery at {minutes}",
                          alerts=list(alerts), annotations=annotations or {}, group_resolved=resolved),
        flap_count=3, flap_window_s=3600, now=at(minutes))


async def listed(db, pk: int) -> dict[str, str]:
    return {a["fingerprint"]: a["status"] for a in await alert_incidents.incident_alerts(db, pk)}


async def test_a_group_of_three_is_one_incident_listing_each_alert(db):
    opened = await group(db, 0, entry("a"), entry("b", severity="critical"), entry("c", severity="info"),
                         annotations={"summary": "API latency above 2s"})
    inc = opened.incident
    assert opened.kind == "opened"
    assert (inc["key"], inc["name"], inc["alert_source"], inc["severity"], inc["title"], inc["origin"]) == (
        GROUP, "HighRequestLatency", "alertmanager", "critical", "API latency above 2s", "alert")
    assert await listed(db, inc["id"]) == {"a": "firing", "b": "firing", "c": "firing"}
    assert inc["links"][0] == {"label": "runbook", "url": RUNBOOK}  # three alerts, one runbook: listed once
    assert [link["label"] for link in inc["links"]].count("runbook") == 1
    assert {link["label"] for link in inc["links"][1:]} == {f"source: latency high on {fp}" for fp in "abc"}
    assert inc["annotations"] == {"summary": "API latency above 2s"}
    [first, *_] = await alert_incidents.incident_alerts(db, inc["id"])
    assert first["fingerprint"] == "b" and first["labels"]["instance"] == "b"  # the worst first
    assert first["links"][0] == {"label": "runbook", "url": RUNBOOK} and first["starts_at"] == "2026-11-24T09:00:00Z"
    assert await alert_incidents.alert_counts(db, inc["id"]) == {"firing": 3, "resolved": 0}
    assert len(await incidents.list_incidents(db)) == 1


async def test_joining_partial_and_full_resolution_over_several_deliveries(db):
    inc = (await group(db, 0, entry("a"), entry("b"), entry("c"))).incident
    joined = await group(db, 5, entry("a"), entry("b"), entry("c"), entry("d", severity="critical"))
    assert joined.kind == "worsened" and joined.incident["id"] == inc["id"] and joined.counted
    assert joined.incident["severity"] == "critical" and joined.incident["occurrences"] == 2
    assert len(await listed(db, inc["id"])) == 4
    entries = await incidents.timeline(db, inc["id"])
    assert "1 alert(s) joined: latency high on d" in entries[-2]["detail"]
    assert [t["kind"] for t in entries][-2:] == ["alert", "worsened"]

    partial = await group(db, 10, entry("a", firing=False), entry("b"), entry("c"), entry("d", firing=False))
    assert partial.kind == "seen" and partial.incident["status"] == "open"
    assert partial.incident["severity"] == "critical"  # only rising while open
    assert await listed(db, inc["id"]) == {"a": "resolved", "b": "firing", "c": "firing", "d": "resolved"}
    only_resolved = await group(db, 12, entry("b", firing=False))
    assert only_resolved.kind == "seen" and not only_resolved.counted  # c still fires
    assert only_resolved.incident["occurrences"] == 3

    back = await group(db, 14, entry("a"))  # a resolved alert firing again while the group is open
    assert back.kind == "seen" and (await listed(db, inc["id"]))["a"] == "firing"
    [a] = [r for r in await alert_incidents.incident_alerts(db, inc["id"]) if r["fingerprint"] == "a"]
    assert a["resolved_at"] is None and a["first_seen_at"] == at(0) and a["last_seen_at"] == at(14)

    done = await group(db, 20, entry("a", firing=False), entry("c", firing=False))
    assert done.kind == "resolved" and done.incident["resolved_by"] == "alert"
    assert done.incident["duration_s"] == 1200.0
    assert set((await listed(db, inc["id"])).values()) == {"resolved"}
    assert (await incidents.timeline(db, inc["id"]))[-1]["detail"] == "all 4 alerts of the group resolved"
    assert await group(db, 21, entry("a", firing=False)) is None  # nothing open: ignored
    again = await group(db, 30, entry("a"))
    assert again.kind == "opened" and again.incident["id"] != inc["id"]
    assert await listed(db, again.incident["id"]) == {"a": "firing"}


async def test_a_resolved_group_resolves_every_alert_it_lists(db):
    inc = (await group(db, 0, entry("a"), entry("b"), entry("c"))).incident
    # Alertmanager's status "resolved": every alert of the group resolved, even those this payload left out
    done = await group(db, 3, entry("a", firing=False), resolved=True)
    assert done.kind == "resolved"
    assert await listed(db, inc["id"]) == {"a": "resolved", "b": "resolved", "c": "resolved"}
    assert all(r["resolved_at"] == at(3) for r in await alert_incidents.incident_alerts(db, inc["id"]))


async def test_an_incident_lists_at_most_its_link_cap_and_says_so(db):
    alerts = [entry(f"fp{n}", runbook=f"https://runbooks.example.com/{n}") for n in range(15)]
    inc = (await group(db, 0, *alerts)).incident
    assert len(inc["links"]) == INCIDENT_LINKS_MAX
    assert all(link["label"].startswith("runbook: ") for link in inc["links"][:15])  # runbooks first, named
    detail = (await incidents.timeline(db, inc["id"]))[-1]["detail"]
    assert f"links: {INCIDENT_LINKS_MAX} of 30 listed on the incident" in detail
    assert all(len(r["links"]) == 2 for r in await alert_incidents.incident_alerts(db, inc["id"]))


async def test_sender_values_in_labels_annotations_and_links_are_redacted(db):
    secret = "ghp_" + "y" * 36
    hostile = AlertEntry(fingerprint="x", firing=True, severity="warning", title="t", labels={"token": secret},
                         annotations={"description": f"leaked {secret}"},
                         links=[{"label": "source", "url": f"https://ci.example.com/?token={secret}"}])
    inc = (await alert_incidents.observe_alerts(
        db, AlertDelivery(key=GROUP, source="grafana", name="n", title="t", service=None, evidence="e", detail="d",
                          alerts=[hostile], annotations={"description": secret}),
        flap_count=3, flap_window_s=3600)).incident
    stored = json.dumps([inc, await alert_incidents.incident_alerts(db, inc["id"])])
    assert secret not in stored
    assert inc["links"][0]["url"].startswith("https://ci.example.com/?token=")  # still a link, the secret masked


async def test_the_service_key_and_fingerprints_are_redacted_before_they_are_stored_or_cut(db):
    """A blackbox ``instance`` URL with a password becomes an alert's service; before, the service was
    stored as sent (the overview, the incidents API and a /metrics label showed it)."""
    secret = "sk-ant-api03-" + "Q" * 40
    url = "https://monitor:" + "p" * 190 + "hunter2-long-secret@shop.example.com/"  # the cut at 200 splits it
    entry = AlertEntry(fingerprint=f"fp-{secret}", firing=True, severity="critical", title="probe failed",
                       labels={"instance": url})
    change = await alert_incidents.observe_alerts(db, AlertDelivery(
        key=f"alert:fp-{secret}", source="alertmanager", name="ProbeFailed", title="probe failed", service=url,
        evidence="down", detail="alertmanager firing", alerts=[entry], left_out=12), flap_count=3, flap_window_s=3600)
    inc = change.incident
    assert secret not in inc["key"] and inc["key"] == "alert:fp-[REDACTED]"
    assert inc["service"] == ("https://monitor:[REDACTED]@shop.example.com/")[:200] and "ppp" not in inc["service"]
    assert inc["alerts_truncated"] == 12
    [row] = await alert_incidents.incident_alerts(db, inc["id"])
    assert row["fingerprint"] == "fp-[REDACTED]" and "hunter2" not in json.dumps(row)
    again = await alert_incidents.observe_alerts(db, AlertDelivery(
        key=f"alert:fp-{secret}", source="alertmanager", name=None, title="probe failed", service=url,
        evidence="down", detail="again", alerts=[entry]), flap_count=3, flap_window_s=3600)
    assert again.kind == "seen" and again.incident["id"] == inc["id"] and again.incident["alerts_truncated"] == 0


async def test_an_incident_flagged_for_attention_is_listed_until_acknowledged(db):
    from app.store import dashboard

    opened = await deliver(db, 0)
    pk = opened.incident["id"]
    assert await dashboard.incident_attention(db) == ([], 0)
    await alert_incidents.needs_attention(db, pk, "not investigated: the run queue is full", now=at(1))
    [flagged], total = await dashboard.incident_attention(db)
    assert total == 1 and (flagged["id"], flagged["attention"], flagged["attention_at"]) == (
        pk, "not investigated: the run queue is full", at(1))
    inc = await incidents.get_incident(db, pk)
    assert inc["attention"] == flagged["attention"]
    assert [t["kind"] for t in await incidents.timeline(db, pk)][-1] == "attention"
    await incidents.acknowledge(db, pk, "alice", "looking")
    assert await dashboard.incident_attention(db) == ([], 0)
    assert (await incidents.get_incident(db, pk))["attention"]  # the incident keeps why
