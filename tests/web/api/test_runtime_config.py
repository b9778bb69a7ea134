"""GET/PUT /api/v1/config and GET /api/v1/models, POST /api/v1/models/refresh, against the app in
process (its real supervisor and store) and the fake Anthropic API on loopback for the models."""

from __future__ import annotations

import pytest

from tests.fakes.fake_anthropic import FakeAnthropic
from tests.web.api.test_routes import assert_error

TOKEN = "runtime-config-token-0123456789"
KEY = "sk-ant-api03-web-models-key-abcdef0123456789"


def by_name(body: dict) -> dict[str, dict]:
    return {s["name"]: s for s in body["settings"]}


def test_get_put_revert_and_the_change_log(app_server, monkeypatch):
    monkeypatch.setenv("TIEROPS_MAX_TIER", "2")
    srv = app_server(token=TOKEN)
    with srv.client() as c:
        body = c.get("/api/v1/config").json()
        rows = by_name(body)
        assert list(rows) == ["interval", "cron", "tier1_model", "tier2_model", "tier3_model", "max_tier", "dry_run",
                              "notify_min_severity"]
        assert rows["max_tier"] | {"description": ""} == {
            "name": "max_tier", "var": "TIEROPS_MAX_TIER", "value": 2, "source": "env", "source_text": "env",
            "changed_by": None, "changed_at": None, "reverts_to": 2, "reverts_to_source": "env", "description": ""}
        assert rows["tier1_model"]["source"] == "default" and body["changes"] == []
        assert "needs a restart" in body["restart"] and "no user accounts" in body["who"]

        r = c.put("/api/v1/config", json={"settings": {"max_tier": 1, "tier1_model": "claude-haiku-4-5",
                                                       "dry_run": True, "interval": 3600}})
        assert r.status_code == 200, r.text
        body = r.json()
        assert [(a["name"], a["old_value"], a["new_value"]) for a in body["applied"]] == [
            ("max_tier", 2, 1), ("tier1_model", "haiku", "claude-haiku-4-5"), ("dry_run", False, True)]
        rows = by_name(body)
        assert rows["max_tier"]["value"] == 1 and rows["max_tier"]["source"] == "run time"
        assert rows["max_tier"]["changed_by"] == "API token from 127.0.0.1"
        assert rows["max_tier"]["source_text"] == (f"changed at run time by API token from 127.0.0.1 at "
                                                   f"{rows['max_tier']['changed_at']}")
        assert rows["max_tier"]["reverts_to"] == 2 and rows["max_tier"]["reverts_to_source"] == "env"
        assert rows["interval"]["source"] == "default"  # already in force: nothing changed
        st = srv.state
        assert (st.settings.max_tier, st.settings.tier1_model, st.settings.dry_run) == (1, "claude-haiku-4-5", True)
        assert st.supervisor.settings is st.settings and st.base_settings.max_tier == 2  # the base stays

        # all or nothing: one bad value, nothing written
        r = c.put("/api/v1/config", json={"settings": {"tier2_model": "claude-sonnet-4-5", "cron": "every hour",
                                                       "interval": 5, "notify_min_severity": "loud"}})
        detail = assert_error(r, 400, "invalid_setting")["detail"]
        assert [d["setting"] for d in detail] == ["cron", "interval", "notify_min_severity"]
        assert detail[0]["message"].startswith("TIEROPS_CRON: not a valid cron expression: 'every hour'")
        assert detail[1]["message"].startswith("TIEROPS_INTERVAL: Input should be greater than or equal to 10")
        assert srv.state.settings.tier2_model == "sonnet"
        # a JSON string is not a number here (strict, as the document types it)
        assert assert_error(c.put("/api/v1/config", json={"settings": {"interval": "60"}}), 400)["detail"][0][
            "message"].startswith("TIEROPS_INTERVAL: Input should be a valid integer")
        # restart-only
        detail = assert_error(c.put("/api/v1/config", json={"settings": {"token": "x", "claude_bin": "/bin/x"}}),
                              409, "needs_restart")["detail"]
        assert detail == [{"setting": "token", "message": "token needs a restart: set TIEROPS_TOKEN in the "
                                                          "environment or .env"},
                          {"setting": "claude_bin", "message": "claude_bin needs a restart: set TIEROPS_CLAUDE_BIN "
                                                               "in the environment or .env"}]
        assert len(c.get("/api/v1/config").json()["changes"]) == 3  # the refused ones wrote nothing
        # the body's shape
        assert_error(c.put("/api/v1/config", json={"settings": [], "x": 1}), 422, "invalid_body")
        assert_error(c.put("/api/v1/config", content=b"{"), 422, "invalid_json")

        r = c.put("/api/v1/config", json={"revert": ["max_tier", "max_tier", "cron"]})
        assert r.status_code == 200, r.text
        assert [(a["name"], a["action"], a["new_value"]) for a in r.json()["applied"]] == [("max_tier", "revert", 2)]
        rows = by_name(r.json())
        assert rows["max_tier"] | {"description": ""} == {
            "name": "max_tier", "var": "TIEROPS_MAX_TIER", "value": 2, "source": "env", "source_text": "env",
            "changed_by": None, "changed_at": None, "reverts_to": 2, "reverts_to_source": "env", "description": ""}
        assert [(ch["name"], ch["action"]) for ch in r.json()["changes"]] == [
            ("max_tier", "revert"), ("dry_run", "set"), ("tier1_model", "set"), ("max_tier", "set")]  # newest first
        assert srv.state.settings.max_tier == 2
        # the route is documented (GET and PUT)
        doc = c.get("/api/v1/openapi.json").json()
        assert set(doc["paths"]["/config"]) == {"get", "put"} and "ConfigChange" in doc["components"]["schemas"]


def test_models_from_the_upstream_then_stale_when_it_is_gone(app_server, monkeypatch):
    srv = app_server(models_cache_ttl=600, models_timeout=2)
    api = FakeAnthropic(keys={KEY}).start()
    try:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        with srv.client() as c:
            r = c.get("/api/v1/models")
            assert r.status_code == 200, r.text
            body = r.json()
            assert [m["id"] for m in body["models"]] == ["claude-opus-4-8", "claude-sonnet-4-5", "claude-haiku-4-5"]
            assert body["source_url"] == f"{api.url}/v1/models" and body["stale"] is False
            assert c.get("/api/v1/models").json()["models"] == body["models"] and api.models_requests == 1
            assert c.post("/api/v1/models/refresh").status_code == 200 and api.models_requests == 2
            assert_error(c.get("/api/v1/models?limit=1"), 422, "invalid_parameter")
            url = api.url
            api.stop()
            r = c.post("/api/v1/models/refresh")
            assert r.status_code == 502
            body = r.json()
            assert body["error"] == "upstream_unreachable" and body["stale"] is True
            assert body["detail"].startswith(f"cannot reach {url}/v1/models: Connection refused; the list below is "
                                             "the one fetched at ")
            assert body["models"][0]["id"] == "claude-opus-4-8"
            assert KEY not in r.text
    finally:
        api.stop()


@pytest.mark.parametrize("path", ["/api/v1/models", "/api/v1/config"])
def test_the_token_is_needed(app_server, path):
    srv = app_server(token=TOKEN)
    with srv.client(auth=False) as c:
        assert_error(c.get(path), 401)
