"""The ``/api/docs`` page: the OpenAPI document the server serves, rendered on the
server — every operation under its tag with an anchor, its parameters, request body and
responses linked to the schemas, and every schema — with no script or stylesheet from elsewhere."""

from __future__ import annotations

import html as htmllib
import re

from app.web.api.openapi import document
from app.web.pages.docs import anchor, docs_context, type_text


def test_every_operation_is_on_the_page_with_its_anchor(app_server):
    srv = app_server()
    with srv.client() as cl:
        r = cl.get("/api/docs")
        doc = cl.get("/api/v1/openapi.json").json()
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    page = htmllib.unescape(r.text)
    ids = set(re.findall(r'\sid="([^"]+)"', r.text))
    ops = [(path, method) for path, item in doc["paths"].items() for method in item]
    assert len(ops) >= 25
    for path, method in ops:
        op_id = anchor("op", method, path)
        assert op_id in ids, (method, path)
        assert f'href="#{op_id}"' in r.text  # listed in the contents
        assert f"{method.upper()} /api/v1{path}" in page
        assert doc["paths"][path][method]["summary"] in page
    for name in doc["components"]["schemas"]:
        assert anchor("schema", name) in ids, name
    # every in-page link resolves to an id on the page
    for target in re.findall(r'href="#([^"]+)"', r.text):
        assert target in ids, target


def test_operations_are_grouped_by_tag_in_the_documents_order(app_server):
    srv = app_server()
    with srv.client() as cl:
        page = cl.get("/api/docs").text
    doc = document(token_required=False)
    shown = [t for t in (tag["name"] for tag in doc["tags"]) if f'id="{anchor("tag", t)}"' in page]
    assert shown == [tag["name"] for tag in doc["tags"]]  # every tag has operations
    positions = [page.index(f'id="{anchor("tag", t)}"') for t in shown]
    assert positions == sorted(positions)
    stats = page[page.index(f'id="{anchor("tag", "stats")}"'):page.index(f'id="{anchor("tag", "openapi.json")}"')]
    assert "GET /api/v1/stats" in stats and "GET /api/v1/sessions" not in stats
    sessions = page[page.index(f'id="{anchor("tag", "sessions")}"'):page.index(f'id="{anchor("tag", "runs")}"')]
    assert "GET /api/v1/sessions/rollup" in sessions


def test_parameters_bodies_and_responses(app_server):
    srv = app_server()
    with srv.client() as cl:
        page = htmllib.unescape(cl.get("/api/docs").text)
    stats = page[page.index('id="op-get-stats"'):]
    stats = stats[:stats.index("</article>")]
    assert "<code>days</code></td><td>query</td>" in stats
    assert "integer 1..365, or empty (default 14)" in stats
    assert 'href="#schema-stats"' in stats and "<code>200</code>" in stats and "<code>422</code>" in stats
    runs = page[page.index('id="op-post-runs"'):]
    runs = runs[:runs.index("</article>")]
    assert "JSON, optional:" in runs and 'href="#schema-runrequest"' in runs
    assert "<code>409</code>" in runs and 'href="#schema-error"' in runs
    run_request = page[page.index('id="schema-runrequest"'):]
    run_request = run_request[:run_request.index("</details>")]
    assert "closed" in run_request and "<code>dry_run</code>" in run_request
    assert "integer 0..3 (default 0)" in run_request


def test_the_page_loads_nothing_from_elsewhere_and_is_open_like_the_document(app_server):
    srv = app_server(token="docs-token-0123456789")
    with srv.client() as cl:
        r = cl.get("/api/docs")
        anonymous = cl.get("/api/docs", headers={"Authorization": ""})
        data = cl.get("/api/v1/sessions", headers={"Authorization": ""})
    assert r.status_code == 200
    assert not re.search(r'(src|href)="(https?:)?//', r.text)  # no CDN, no other site
    assert "swagger" not in r.text.lower()
    assert r.text.count('<span class="badge">token</span>') == sum(
        len(item) for path, item in document(token_required=True)["paths"].items() if path != "/openapi.json")
    assert "docs-token-0123456789" not in r.text
    # open like /api/v1/openapi.json (it holds no data; a browser gets the page, not a 401), while
    # the operations it documents still need the token
    assert anonymous.status_code == 200 and "docs-token-0123456789" not in anonymous.text
    assert data.status_code == 401


def test_type_text_says_a_schema_in_words():
    assert type_text({"$ref": "#/components/schemas/Session"}) == "Session"
    assert type_text({"type": "array", "items": {"$ref": "#/components/schemas/Event"}}) == "array of Event"
    assert type_text({"type": ["string", "null"], "maxLength": 64}) == "string or null length 0..64"
    assert type_text({"type": "string", "enum": ["a", "b", ""]}) == "one of a, b, (empty)"
    assert type_text({"type": ["string", "null"], "enum": ["x", None]}) == "one of x, null"
    assert type_text({"type": "boolean", "default": False}) == "boolean (default false)"
    assert type_text({}) == "any" and type_text(None) == "any"


def test_docs_context_groups_untagged_operations_as_other():
    doc = {"openapi": "3.1.0", "info": {"title": "t", "version": "1", "description": ""}, "servers": [],
           "components": {"schemas": {}}, "paths": {"/x": {"get": {"summary": "x", "responses": {}}}}}
    ctx = docs_context(doc)
    assert [t["name"] for t in ctx["tags"]] == ["other"] and ctx["tags"][0]["ops"][0]["path"] == "/x"
    assert ctx["base"] == "" and ctx["secured"] is False
