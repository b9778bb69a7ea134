"""Reading alert payloads (issue #13, app/engine/alerts.py): the three shapes from the samples in
tests/fixtures/alerts/, and bodies that must be refused with every problem and its JSON path."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from app.engine.alerts import (
    ALERTS_MAX,
    DETAILS_MAX,
    AlertPayloadError,
    alert_section,
    delivery_text,
    evidence_text,
    labels_fingerprint,
    parse_payload,
    severity_of,
)

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "alerts"


def sample(name: str) -> dict:
    return json.loads((SAMPLES / f"{name}.json").read_text(encoding="utf-8"))


def problems(body: object) -> list[dict[str, str]]:
    with pytest.raises(AlertPayloadError) as info:
        parse_payload(body)
    return info.value.problems


def paths(body: object) -> list[str]:
    return [p["path"] for p in problems(body)]


# -- the three shapes ----------------------------------------------------------------------

def test_an_alertmanager_group_is_read_alert_by_alert():
    source, alerts = parse_payload(sample("alertmanager-firing"))
    assert source == "alertmanager"
    latency, down = alerts
    assert latency.fingerprint == "5c1f2f0e8e6b1a47" and latency.key == "alert:5c1f2f0e8e6b1a47"
    assert latency.status == "firing" and latency.firing
    assert latency.severity == "critical"
    assert latency.service == "api"  # labels.service first
    assert latency.title == "API p99 latency above 2s"  # annotations.summary
    assert latency.details.startswith("p99 latency of api on api-1.internal:8080")
    assert latency.labels["alertname"] == "HighRequestLatency" and latency.source == "alertmanager"
    assert latency.generator_url.startswith("http://prometheus.example.com:9090/graph?")
    assert latency.starts_at == "2026-11-24T09:12:03.123Z"
    assert down.severity == "warning" and down.service == "node"  # no service label: job


def test_an_alertmanager_resolution_names_the_same_alert():
    _, [firing, _] = parse_payload(sample("alertmanager-firing"))
    source, [resolved] = parse_payload(sample("alertmanager-resolved"))
    assert source == "alertmanager"
    assert resolved.status == "resolved" and not resolved.firing
    assert resolved.key == firing.key


def test_a_grafana_webhook_is_read_with_its_value():
    source, [alert] = parse_payload(sample("grafana-firing"))
    assert source == "grafana"
    assert alert.fingerprint == "c6eadffa33fcdf37"
    assert alert.severity == "warning"
    assert alert.service == "cache-2.internal:9100"  # no service, no job: instance
    assert alert.title == "Memory usage above 90% on cache-2"
    assert alert.details.splitlines() == [
        "cache-2 has used more than 90% of its memory for 5 minutes.",
        "Value: [ var='B' labels={instance=cache-2.internal:9100} value=93.51 ], "
        "[ var='C' labels={instance=cache-2.internal:9100} value=1 ]"]
    assert alert.generator_url.startswith("https://grafana.example.com/alerting/grafana/")


def test_the_generic_shape_and_its_resolution_share_a_fingerprint():
    source, [firing] = parse_payload(sample("generic-firing"))
    assert source == "generic"
    assert (firing.title, firing.service, firing.severity, firing.status) == (
        "Backup job failed on db-1", "postgres", "critical", "firing")  # "error" is critical
    assert firing.details.startswith("pg_basebackup exited 1")
    assert firing.labels == {} and firing.generator_url is None
    assert len(firing.fingerprint) == 16 and int(firing.fingerprint, 16) >= 0
    _, [resolved] = parse_payload(sample("generic-resolved"))
    assert resolved.status == "resolved" and resolved.fingerprint == firing.fingerprint
    _, [other] = parse_payload({"title": "Backup job failed on db-2", "service": "postgres"})
    assert other.fingerprint != firing.fingerprint and other.status == "firing" and other.severity == "info"


def test_a_given_fingerprint_wins_and_a_missing_one_comes_from_the_sorted_labels():
    body = sample("alertmanager-firing")
    del body["alerts"][0]["fingerprint"]
    _, [derived, _] = parse_payload(body)
    labels = body["alerts"][0]["labels"]
    assert derived.fingerprint == labels_fingerprint(labels)
    shuffled = dict(reversed(list(labels.items())))
    assert labels_fingerprint(shuffled) == derived.fingerprint
    assert labels_fingerprint({**labels, "instance": "api-2.internal:8080"}) != derived.fingerprint
    _, [given] = parse_payload({"title": "x", "fingerprint": "my-own-id"})
    assert given.key == "alert:my-own-id"


@pytest.mark.parametrize("word, severity", [
    ("critical", "critical"), ("CRITICAL", "critical"), ("error", "critical"), ("page", "critical"),
    ("high", "critical"), ("warning", "warning"), ("Warn", "warning"), ("medium", "warning"),
    ("info", "info"), ("low", "info"), ("none", "info"), ("", "info"), (None, "info"),
])
def test_severity_words(word, severity):
    assert severity_of(word) == severity


def test_title_falls_back_to_alertname_then_grafana_title():
    body = sample("alertmanager-firing")
    del body["alerts"][0]["annotations"]["summary"]
    _, [alert, _] = parse_payload(body)
    assert alert.title == "HighRequestLatency"
    g = sample("grafana-firing")
    g["alerts"][0]["annotations"] = {}
    del g["alerts"][0]["labels"]["alertname"]
    _, [alert] = parse_payload(g)
    assert alert.title == g["title"]
    assert alert.details.startswith("Value: [ var='B'")  # no description or message: the value alone


def test_unknown_fields_of_the_senders_are_accepted_but_not_of_the_generic_shape():
    body = sample("alertmanager-firing")
    body["newTopLevelField"] = {"x": 1}
    body["alerts"][0]["imageURL"] = "https://example.com/x.png"
    _, alerts = parse_payload(body)
    assert len(alerts) == 2
    assert paths({"title": "x", "url": "https://example.com"}) == ["$.url"]


def test_details_are_capped_and_nul_bytes_replaced():
    _, [alert] = parse_payload({"title": "a\x00b", "details": "x" * 15_000})
    assert alert.title == "a\ufffdb"
    assert len(alert.details) == DETAILS_MAX and alert.details.endswith("…")
    body = sample("alertmanager-firing")
    body["alerts"][0]["labels"]["note"] = "lone \ud800 surrogate"
    _, [alert, _] = parse_payload(body)
    alert.labels["note"].encode("utf-8")  # storable and printable


# -- what an alert leaves behind -------------------------------------------------------------

def test_the_alert_section_carries_everything_tier_1_needs():
    _, [alert, _] = parse_payload(sample("alertmanager-firing"))
    text = alert_section(alert, 7)
    assert text.startswith("## Alert\n")
    for part in ("- source: alertmanager", "- title: API p99 latency above 2s", "- severity: critical",
                 "- service: api", "incident: #7, key alert:5c1f2f0e8e6b1a47", "alertname=HighRequestLatency",
                 "- generator URL: http://prometheus.example.com:9090/graph?", "### Details",
                 "p99 latency of api on api-1.internal:8080"):
        assert part in text, part
    assert "labels: alertname=HighRequestLatency" in evidence_text(alert)
    assert delivery_text(alert).startswith("alertmanager firing, critical: API p99 latency above 2s [")


# -- refused -------------------------------------------------------------------------------

def test_not_an_object():
    for body in ([], "alert", 3, None):
        assert paths(body) == ["$"]


def test_an_unknown_version_or_alerts_without_one():
    assert paths({**sample("alertmanager-firing"), "version": "3"}) == ["$.version"]
    assert paths({**sample("alertmanager-firing"), "version": 4}) == ["$.version"]
    body = sample("grafana-firing")
    del body["version"]
    [problem] = problems(body)
    assert problem["path"] == "$.version" and "Alertmanager" in problem["message"]


def test_every_problem_of_an_alertmanager_payload_is_listed_with_its_path():
    body = sample("alertmanager-firing")
    body["status"] = "ok"
    body["alerts"][0]["status"] = "pending"
    body["alerts"][0]["labels"]["replicas"] = 3
    del body["alerts"][1]["labels"]
    body["alerts"][1]["fingerprint"] = "two\nlines"
    body["truncatedAlerts"] = -1
    assert sorted(paths(body)) == sorted([
        "$.status", "$.alerts[0].status", "$.alerts[0].labels.replicas", "$.alerts[1].labels",
        "$.alerts[1].fingerprint", "$.truncatedAlerts"])


def test_grafana_types_are_checked():
    body = sample("grafana-firing")
    body["orgId"] = "1"
    body["alerts"][0]["values"] = [1, 2]
    body["alerts"][0]["annotations"] = {"summary": None}
    assert sorted(paths(body)) == ["$.alerts[0].annotations.summary", "$.alerts[0].values", "$.orgId"]
    ok = sample("grafana-firing")
    ok["orgId"] = 1.0  # an integer as JSON Schema counts them
    parse_payload(ok)


def test_empty_and_oversized_alert_lists():
    body = sample("alertmanager-firing")
    assert paths({**body, "alerts": []}) == ["$.alerts"]
    many = {**body, "alerts": [copy.deepcopy(body["alerts"][0]) for _ in range(ALERTS_MAX + 1)]}
    assert paths(many) == ["$.alerts"]


def test_generic_problems():
    [title, hint] = problems({"service": "api"})
    assert title["path"] == "$.title" and hint["path"] == "$" and "generic" in hint["message"]
    assert paths({"title": "   "}) == ["$.title"]
    assert sorted(paths({"title": "x", "severity": "urgent", "status": "open", "details": 5})) == [
        "$.details", "$.severity", "$.status"]
    assert paths({"title": "x" * 501}) == ["$.title"]
