"""``app/engine/alert_payloads.py``: bodies that must be refused, with every problem and its JSON
path; the senders' unknown fields accepted, the generic shape's refused."""

from __future__ import annotations

from app.engine.alerts import parse_payload
from tests.engine.alert_samples import paths, problems, sample


def test_unknown_fields_of_the_senders_are_accepted_but_not_of_the_generic_shape():
    body = sample("alertmanager-firing")
    body["newTopLevelField"] = {"x": 1}
    body["alerts"][0]["imageURL"] = "https://example.com/x.png"
    _, alerts = parse_payload(body)
    assert len(alerts) == 2
    assert paths({"title": "x", "url": "https://example.com"}) == ["$.url"]


def test_legacy_grafana_problems_are_listed():
    assert sorted(paths({"ruleName": "x", "state": "firing", "ruleId": "12"})) == ["$.ruleId", "$.state"]
    assert paths({"ruleId": 1, "state": "ok"}) == ["$.ruleName"]
    assert paths({"ruleName": "x", "state": "ok", "evalMatches": [{"value": "high"}]}) == ["$.evalMatches[0].value"]
    assert parse_payload({"ruleName": "x", "state": "ok", "ruleId": 12.0, "evalMatches": [{"value": 10**400}]})


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


def test_generic_problems():
    [title, hint] = problems({"service": "api"})
    assert title["path"] == "$.title" and hint["path"] == "$" and "generic" in hint["message"]
    assert paths({"title": "   "}) == ["$.title"]
    assert sorted(paths({"title": "x", "severity": 3, "status": "open", "details": 5})) == [
        "$.details", "$.severity", "$.status"]
