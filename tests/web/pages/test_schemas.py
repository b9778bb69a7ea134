"""The ``/schemas`` page: list, view, check, store and delete, through the app in
process (``app_server``); refusals keep what was typed and never store anything."""

from __future__ import annotations

import json

VERDICT = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}


def test_check_store_view_delete(app_server):
    srv = app_server()
    with srv.client(follow_redirects=False) as cl:
        assert "No schemas stored yet." in cl.get("/schemas").text
        uri = {"type": "object", "properties": {"u": {"type": "string", "format": "uri"}}}
        r = cl.post("/schemas", data={"name": "u", "schema": json.dumps(uri), "action": "store"})
        assert r.status_code == 422 and "$.properties.u.format" in r.text and "format-dropped-by-cli" in r.text
        assert "&#34;uri&#34;" in r.text or "uri" in r.text  # the textarea keeps what was typed
        r = cl.post("/schemas", data={"name": "v", "schema": "{not json", "action": "check"})
        assert r.status_code == 422 and "not valid JSON" in r.text
        r = cl.post("/schemas", data={"name": "verdict", "schema": json.dumps(VERDICT), "action": "check"})
        assert r.status_code == 200 and "passes every check" in r.text
        assert cl.get("/api/v1/schemas").json() == []  # check stores nothing
        r = cl.post("/schemas", data={"name": "bad name", "schema": json.dumps(VERDICT), "action": "store"})
        assert r.status_code == 422 and "The name must be" in r.text
        r = cl.post("/schemas", data={"name": "verdict", "description": "<b>yes</b>", "schema": json.dumps(VERDICT),
                                      "action": "store"})
        assert r.status_code == 303 and r.headers["location"].startswith("/schemas?notice=schema_created")
        page = cl.get("/schemas?name=verdict").text
        assert "&lt;b&gt;yes&lt;/b&gt;" in page and "<b>yes</b>" not in page  # escaped
        assert '"required"' in page or "&#34;required&#34;" in page
        r = cl.post("/schemas", data={"name": "verdict", "schema": json.dumps(VERDICT), "action": "store"})
        assert r.status_code == 409 and "already exists" in r.text
        r = cl.post("/schemas/verdict/delete")
        assert r.status_code == 303
        assert cl.get("/api/v1/schemas").json() == []
        assert cl.post("/schemas/verdict/delete").status_code == 404
