"""app/notify/routes.py: which message goes to which URLs; every broken route named with its path."""

from __future__ import annotations

import pytest

from app.notify.routes import (
    DEFAULT_ROUTE,
    RouteError,
    RouteTable,
    Subject,
    load_text,
    parse_routes,
    route_table,
)
from app.notify.urls import split_urls
from tests.probe.test_yamltext import laughs

PAGER = "pagerduty://integrationkey1234567@"
URLS = [f"pager={PAGER}", "chat,ops=json://127.0.0.1:9/chat", "json://127.0.0.1:9/general"]

ROUTES = """
- name: page
  match: {severity: critical}
  to: [pager]
  continue: true
- name: database-team
  match: {service: "db-*", source: [check, alert]}
  to: [ops]
- name: everything-to-chat
  match: {severity: [warning, critical]}
  to: [chat]
"""


def table() -> RouteTable:
    return route_table(URLS, ROUTES)


def test_first_match_wins_and_continue_goes_on():
    t = table()
    assert t.select(Subject("critical", "check", "api", "api-health")) == ["page", "everything-to-chat"]
    assert t.select(Subject("critical", "check", "db-main", "db-port")) == ["page", "database-team"]
    assert t.select(Subject("warning", "model", "db-main")) == ["everything-to-chat"]  # source not check/alert
    assert t.select(Subject("info", "monitor")) == [DEFAULT_ROUTE]


def test_routes_resolve_to_urls_by_tag_and_unmatched_go_to_untagged_urls():
    t = table()
    urls = t.urls
    assert [urls[i] for i in t.indexes(["page"])] == [PAGER]
    assert [urls[i] for i in t.indexes(["database-team"])] == ["json://127.0.0.1:9/chat"]
    assert [urls[i] for i in t.indexes([DEFAULT_ROUTE])] == ["json://127.0.0.1:9/general"]  # no tag only
    assert [urls[i] for i in t.indexes(["gone-route"])] == ["json://127.0.0.1:9/general"]  # renamed since: default


def test_without_routes_the_default_is_every_url_and_all_means_every_url():
    plain = route_table(URLS, None)
    assert plain.select(Subject("info")) == [DEFAULT_ROUTE] and len(plain.indexes([DEFAULT_ROUTE])) == 3
    everyone = route_table(URLS, "[{name: all-of-them, to: [all]}]")
    assert len(everyone.indexes(["all-of-them"])) == 3


def test_a_url_in_a_route_is_a_target_of_its_own_and_an_empty_to_drops():
    t = route_table(["json://127.0.0.1:9/general"],
                    "[{name: direct, match: {check: 'tls-*'}, to: ['form://127.0.0.1:9/tls']},"
                    " {name: quiet, match: {service: noisy}, to: []}]")
    assert t.urls == ["json://127.0.0.1:9/general", "form://127.0.0.1:9/tls"]
    assert [t.urls[i] for i in t.indexes(["direct"])] == ["form://127.0.0.1:9/tls"]
    assert t.indexes(["quiet"]) == []
    assert t.indexes([DEFAULT_ROUTE]) == [0]  # a route's own URL is not in the default route


def test_patterns_are_case_insensitive_globs_and_a_missing_field_does_not_match():
    [route] = parse_routes([{"name": "x", "match": {"service": ["API-*"], "check": "health?"}, "to": ["a"]}], "t")
    assert route.matches(Subject("warning", service="api-eu", check="health1"))
    assert not route.matches(Subject("warning", service="api-eu", check=None))
    assert not route.matches(Subject("warning", service=None, check="health1"))


def test_unknown_tags_are_reported():
    t = route_table(URLS, "[{name: a, to: [pager, nobody-has-this]}]")
    assert t.unknown_tags() == ["nobody-has-this"]


@pytest.mark.parametrize(("text", "path", "words"), [
    ("{name: a}", "$", "must be a list"),
    ("[{name: a, to: [x], matc: {}}]", "$[0].matc", "unknown key"),
    ("[{name: a, to: [x]}, {name: a, to: [y]}]", "$[1].name", "duplicate"),
    ("[{name: default, to: [x]}]", "$[0].name", "unmatched"),
    ("[{name: 'bad name', to: [x]}]", "$[0].name", "letters"),
    ("[{name: a}]", "$[0].to", "required"),
    ("[{name: a, to: ['not a tag']}]", "$[0].to[0]", "neither"),
    ("[{name: a, to: [x], match: {severity: urgent}}]", "$[0].match.severity", "unknown severity 'urgent'"),
    ("[{name: a, to: [x], match: {source: [check, human]}}]", "$[0].match.source", "unknown source 'human'"),
    ("[{name: a, to: [x], match: {service: []}}]", "$[0].match.service", "matches nothing"),
    ("[{name: a, to: [x], match: {service: [1]}}]", "$[0].match.service[0]", "non-empty string"),
    ("[{name: a, to: [x], match: {team: a}}]", "$[0].match.team", "unknown matcher"),
    ("[{name: a, to: [x], continue: 'yes'}]", "$[0].continue", "true or false"),
    ("[{name: a, to: [x]", "$", "not YAML or JSON"),
])
def test_broken_routes_name_the_path_and_what_to_do(text, path, words):
    with pytest.raises(RouteError) as err:
        load_text(text, "TIEROPS_NOTIFY_ROUTES")
    assert any(p == path and words in m for p, m in err.value.problems), err.value.problems
    assert str(err.value).startswith("TIEROPS_NOTIFY_ROUTES: ")


def test_nested_aliases_in_the_setting_are_refused_before_they_expand():
    text = laughs() + "- {name: pager, to: [pager], match: {service: *l7}}\n"
    with pytest.raises(RouteError) as caught:
        load_text(text, "TIEROPS_NOTIFY_ROUTES")
    assert caught.value.problems == [("$", "line 2, column 8: found the alias *l0: YAML anchors and aliases are not "
                                           "accepted here (each would be expanded everywhere it is used); write the "
                                           "value out")]


def test_the_setting_wins_over_the_checks_file():
    t = route_table(URLS, "[{name: from-env, to: [all]}]", [{"name": "from-file", "to": ["all"]}], "/etc/checks.yaml")
    assert [r.name for r in t.routes] == ["from-env"] and t.origin == "TIEROPS_NOTIFY_ROUTES"
    t = route_table(URLS, None, [{"name": "from-file", "to": ["all"]}], "/etc/checks.yaml")
    assert [r.name for r in t.routes] == ["from-file"] and t.origin == "/etc/checks.yaml (notify.routes)"


def test_tagged_urls_split_like_apprise_text_config():
    text = "pager=pagerduty://k@ chat,ops=json://a.example/x?to=a@x,b@y,mailto://u:p@m.example json://c.example"
    assert split_urls(text) == ["pager=pagerduty://k@", "chat,ops=json://a.example/x?to=a@x,b@y",
                                "mailto://u:p@m.example", "json://c.example"]
    assert split_urls("json://a.example,tag=json://b.example") == ["json://a.example", "tag=json://b.example"]
