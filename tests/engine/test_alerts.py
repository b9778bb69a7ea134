"""``app/engine/alerts.py``: reading the three shapes from the samples in tests/fixtures/alerts/
into alerts (fingerprints, severity labels, titles, legacy Grafana), long and hostile texts cut,
redacted first, never refused; groups, names, links and annotations."""

from __future__ import annotations

import copy
import json

import pytest

from app.engine.alert_batches import batches
from app.engine.alerts import (
    ANNOTATION_TEXT_MAX,
    ANNOTATIONS_KEPT,
    CUT_KEY,
    DETAILS_MAX,
    GROUP_KEY_PREFIX,
    LABELS_KEPT,
    URL_MAX,
    is_link,
    kept_labels,
    labels_fingerprint,
    parse_payload,
)
from tests.engine.alert_samples import paths, sample

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
    assert other.fingerprint != firing.fingerprint and other.status == "firing" and other.severity == "warning"


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


def test_the_severity_label_then_priority_then_the_default():
    body = sample("alertmanager-firing")
    del body["alerts"][0]["labels"]["severity"]
    body["alerts"][1]["labels"]["severity"] = "P2"
    _, [missing, p2] = parse_payload(body)
    assert (missing.severity, p2.severity) == ("warning", "critical")
    body["alerts"][0]["labels"]["priority"] = "P5"
    _, [by_priority, _] = parse_payload(body, default_severity="critical")
    assert by_priority.severity == "info"
    g = sample("grafana-firing")
    del g["alerts"][0]["labels"]["severity"]  # a Grafana-managed rule: no severity label unless someone adds one
    assert parse_payload(g)[1][0].severity == "warning"
    assert parse_payload(g, default_severity="info")[1][0].severity == "info"
    assert parse_payload({"title": "x"}, default_severity="critical")[1][0].severity == "critical"


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


def test_legacy_grafana_webhooks_are_one_alert_per_rule():
    source, [alert] = parse_payload(sample("grafana-legacy-alerting"))
    assert source == "grafana-legacy" and alert.source == "grafana-legacy"
    assert (alert.status, alert.severity, alert.service, alert.title, alert.name) == (
        "firing", "critical", "postgres", "Disk usage above 95%", "Disk usage above 95%")
    assert alert.labels == {"service": "postgres", "severity": "critical", "alertname": "Disk usage above 95%"}
    assert alert.links == [{"label": "panel", "url": sample("grafana-legacy-alerting")["ruleUrl"]}]
    assert alert.details.splitlines() == [
        "/var/lib/postgresql on db-1 is more than 95% full.",
        '- node_filesystem_used_percent{instance="db-1.internal:9100",mountpoint="/var/lib/postgresql"}: 97.2']
    assert alert.annotations["grafana_state"] == "alerting" and alert.group is None
    _, [ok] = parse_payload(sample("grafana-legacy-ok"))
    assert ok.status == "resolved" and ok.key == alert.key
    for state, status in (("no_data", "firing"), ("pending", "firing"), ("paused", "resolved")):
        _, [other] = parse_payload({**sample("grafana-legacy-alerting"), "state": state})
        assert other.status == status and other.key == alert.key
    # the fields Grafana leaves out when empty, a null match list and value, no tags: still read
    bare = {"ruleName": "CPU high", "state": "no_data", "ruleId": 3, "orgId": 2, "evalMatches": [
        {"value": None, "metric": "cpu", "tags": None}], "title": "[No Data] CPU high"}
    _, [nodata] = parse_payload(bare)
    assert nodata.service == "CPU high" and nodata.severity == "warning" and "- cpu: no value" in nodata.details
    assert "returned no data" in nodata.details
    assert parse_payload({**bare, "ruleId": 4})[1][0].key != nodata.key  # another rule, another incident
    many = {**bare, "evalMatches": [{"value": n, "metric": f"m{n}"} for n in range(30)]}
    assert parse_payload(many)[1][0].details.endswith("- and 10 more series")


def test_every_sender_text_is_redacted_before_it_is_cut_or_keyed():
    password = "Tr0ub4dor-and-3"

    def red(text: str) -> str:
        return text.replace(password, "[REDACTED]")

    body = sample("alertmanager-group-firing")
    url = "https://monitor:" + "p" * 190 + password + "@shop.example.com/"
    body["alerts"][0]["labels"] = {"alertname": "ProbeFailed", "instance": url, "note": f"x{password}"}
    body["alerts"][0]["fingerprint"] = f"fp-{password}"
    body["alerts"][0]["annotations"]["description"] = "d" * (DETAILS_MAX - 5) + password
    body["groupKey"] = f"{{}}:{{instance={password}}}"
    _, alerts = parse_payload(body, redact=red)
    first = alerts[0]
    texts = [first.fingerprint, first.key, first.service or "", first.details or "", first.incident_key("group"),
             json.dumps(first.labels), json.dumps(first.annotations)]
    assert not any(password in t or password[:8] in t for t in texts), texts
    assert first.fingerprint == "fp-[REDACTED]" and first.service.startswith("https://monitor:ppp")
    unredacted = parse_payload(body)[1][0]
    assert unredacted.group.key != first.group.key  # the group key is made from the redacted groupKey


def test_details_are_capped_and_nul_bytes_replaced():
    _, [alert] = parse_payload({"title": "a\x00b", "details": "x" * 15_000})
    assert alert.title == "a\ufffdb"
    assert len(alert.details) == DETAILS_MAX and alert.details.endswith("…")
    body = sample("alertmanager-firing")
    body["alerts"][0]["labels"]["note"] = "lone \ud800 surrogate"
    _, [alert, _] = parse_payload(body)
    alert.labels["note"].encode("utf-8")  # storable and printable


# -- long alert lists and texts ------------------------------------------------------------------

def test_empty_and_large_alert_lists():
    body = sample("alertmanager-firing")
    assert paths({**body, "alerts": []}) == ["$.alerts"]
    many = {**body, "alerts": [copy.deepcopy(body["alerts"][0]) for _ in range(1200)]}
    _, alerts = parse_payload(many)
    assert len(alerts) == 1200 and all(a.unread == 0 for a in alerts)
    # beyond max_alerts the rest is counted, not read (nor validated: a broken alert there is no 422)
    many["alerts"][1100]["status"] = "pending"
    _, alerts = parse_payload(many, max_alerts=1000)
    assert len(alerts) == 1000 and {a.unread for a in alerts} == {200} and {a.read_limit for a in alerts} == {1000}
    [batch] = batches(alerts, "group")
    assert batch.left_out == 200 and "(200 more not read (TIEROPS_ALERT_MAX_ALERTS=1000))" in batch.detail
    many["truncatedAlerts"] = 7
    [batch] = batches(parse_payload(many, max_alerts=1000)[1], "group")
    assert batch.left_out == 207 and "7 more left out by the sender's max_alerts" in batch.detail


def test_long_generic_texts_are_cut_and_a_long_fingerprint_hashed():
    _, [a] = parse_payload({"title": "t" * 5000, "service": "s" * 900, "details": "d" * 90_000,
                            "fingerprint": "f" * 129, "severity": "whatever"})
    assert len(a.title) == 500 and a.title.endswith("…") and len(a.service) == 200 and len(a.details) == DETAILS_MAX
    assert len(a.fingerprint) == 16 and a.severity == "warning"
    _, [same] = parse_payload({"title": "t" * 5000, "service": "s" * 900, "fingerprint": "f" * 129})
    assert same.key == a.key
    _, [kept] = parse_payload({"title": "x", "fingerprint": "f" * 128})
    assert kept.fingerprint == "f" * 128


# -- groups, names, links --------------------------------------------------------------------

def test_an_alertmanager_group_shares_one_key_and_names_its_alertname():
    source, alerts = parse_payload(sample("alertmanager-group-firing"))
    assert source == "alertmanager" and len(alerts) == 3
    keys = {a.incident_key("group") for a in alerts}
    assert len(keys) == 1 and next(iter(keys)).startswith(GROUP_KEY_PREFIX) and len(next(iter(keys))) == 12 + 16
    assert {a.incident_key("fingerprint") for a in alerts} == {a.key for a in alerts}  # one per alert
    first = alerts[0]
    assert first.name == "HighRequestLatency" and first.group.name == "HighRequestLatency"
    assert first.links == [
        {"label": "runbook", "url": "https://runbooks.example.com/api/high-latency"},
        {"label": "source", "url": first.generator_url}]
    assert list(first.annotations) == ["summary", "description", "runbook_url"]
    # the same groupKey for another receiver is another group
    other = sample("alertmanager-group-firing")
    other["receiver"] = "pager"
    _, [moved, *_] = parse_payload(other)
    assert moved.incident_key("group") != first.incident_key("group")
    _, [resolved, *_] = parse_payload(sample("alertmanager-group-resolved"))
    assert resolved.incident_key("group") == first.incident_key("group") and resolved.group.status == "resolved"


def test_grafana_links_come_in_order_and_the_name_is_the_rule_not_the_notification_title():
    source, alerts = parse_payload(sample("grafana-group-firing"))
    assert source == "grafana"
    db1 = alerts[0]
    assert [link["label"] for link in db1.links] == ["runbook", "dashboard", "panel", "source", "silence"]
    assert db1.links[2]["url"].endswith("&viewPanel=152")
    assert db1.name == "Disk almost full" and db1.group.name == "Disk almost full"
    [batch] = batches(alerts, "group")
    assert batch.name == "Disk almost full" and batch.title == "Disk almost full on db-1"
    body = sample("grafana-group-firing")
    for part in (body["groupLabels"], body["commonLabels"], *(a["labels"] for a in body["alerts"])):
        part.pop("alertname")
    _, [unnamed, _] = parse_payload(body)
    assert unnamed.group.name == "Disk almost full Storage (/var/lib/postgresql data)"  # "[FIRING:2] " dropped
    empty = sample("grafana-firing")
    empty["alerts"][0].update(dashboardURL="", panelURL="")  # Grafana sends "" for a rule without a panel
    _, [bare] = parse_payload(empty)
    assert [link["label"] for link in bare.links] == ["runbook", "source", "silence"]


@pytest.mark.parametrize("url, ok", [
    ("https://runbooks.example.com/x", True), ("HTTP://EXAMPLE.COM/", True), ("javascript:alert(1)", False),
    ("JavaScript:alert(1)", False), ("data:text/html,<script>alert(1)</script>", False), ("/graph?g0.expr=up", False),
    ("https:///no-host", False), ("https://a.example.com/\nSet-Cookie: x", False), ("ftp://files.example.com/", False),
    ("https://example.com/" + "a" * URL_MAX, False), ("//evil.example.com/x", False),
])
def test_only_http_urls_are_links(url, ok):
    assert is_link(url) is ok


def test_hostile_link_fields_stay_text_and_huge_or_many_annotations_are_cut_saying_so():
    body = sample("grafana-firing")
    alert = body["alerts"][0]
    alert["annotations"] = {"runbook_url": "javascript:alert(document.cookie)", "summary": "s",
                            "description": "x" * 100_000, **{f"note{n:02}": "n" for n in range(40)}}
    alert.update(generatorURL="/graph?g0.expr=up", dashboardURL="data:text/html,<b>x</b>",
                 panelURL="https://grafana.example.com/" + "p" * URL_MAX, silenceURL=" javascript:void(0) ")
    _, [a] = parse_payload(body)
    assert a.links == []  # not one of them is an http(s) link
    assert a.annotations["runbook_url"] == "javascript:alert(document.cookie)"  # kept, as text
    assert a.annotations["generatorURL"] == "/graph?g0.expr=up" and a.annotations["silenceURL"] == "javascript:void(0)"
    assert a.annotations["dashboardURL"].startswith("data:text/html") and "panelURL" in a.annotations
    assert a.annotations["description"].endswith("… [cut: 100,000 characters in all]")
    assert len(a.annotations["description"]) < ANNOTATION_TEXT_MAX + 50
    assert a.annotations[CUT_KEY] == f"13 more annotation(s) not kept (at most {ANNOTATIONS_KEPT} per alert)"
    assert len([k for k in a.annotations if k.startswith("note")]) == ANNOTATIONS_KEPT - 3
    labels = kept_labels({f"l{n:03}": "v" * 5000 for n in range(LABELS_KEPT + 5)})
    assert labels[CUT_KEY] == f"5 more label(s) not kept (at most {LABELS_KEPT} per alert)"
    assert all(len(v) < 1100 for v in labels.values())
