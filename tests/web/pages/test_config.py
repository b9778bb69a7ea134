"""``app.config.setting_sources`` and the ``/config`` page: every setting with its
value and source (default, env, file, command line), secrets only as set / not set, the tiers,
the checks file and the output schema. Real settings from a real environment and ``.env`` file
(the test's working directory), the app in process."""

from __future__ import annotations

import html as htmllib
import json
import re
from pathlib import Path

import pytest

from app.config import Settings, get_settings
from app.config_sources import setting_sources
from app.output.spec import AGENT_RESPONSE_SHA256
from app.web.pages.config import schedule_summary, secret_fields

CHECKS = """\
interval: 5m
hosts:
  - name: web1
checks:
  - name: api
    service: api
    http: http://127.0.0.1:9/health
  - name: api-port
    service: api
    tcp: "127.0.0.1:9"
  - name: disk
    service: host
    command: "true"
  - name: disk2
    service: host
    command: "true"
"""
FILE_TOKEN = "file-token-0123456789abcdef"
SECRETS = {"TIEROPS_NOTIFY_URLS": "json://bob:hunter2-notify@127.0.0.1:9/hook",
           "TIEROPS_WEBHOOK_TOKEN": "webhook-secret-5551234"}


def rows(page: str) -> dict[str, dict[str, str]]:
    """The settings list: TIEROPS_X → {source, value, text}."""
    out = {}
    for var, source, body in re.findall(
            r'<dt id="(TIEROPS_[A-Z0-9_]+)" data-source="([^"]+)">.*?</dt>\s*<dd>(.*?)</dd>', page, re.DOTALL):
        value = re.search(r'<span class="setting-value">(.*?)</span>\s*<span class="badge setting-source">', body,
                          re.DOTALL)
        assert value is not None, body
        out[var] = {"source": source, "value": htmllib.unescape(re.sub(r"<[^>]+>", "", value.group(1))).strip(),
                    "text": htmllib.unescape(re.sub(r"<[^>]+>", "", body))}
    return out


@pytest.fixture
def configured(app_server, tmp_path, monkeypatch):
    """A server with settings from everywhere: env, .env, a token file, and flags (init kwargs)."""
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    (tmp_path / "token.txt").write_text(FILE_TOKEN + "\n")
    (workdir / ".env").write_text(f"TIEROPS_TIER1_MODEL=haiku-from-dotenv\nexport TIEROPS_TOKEN_FILE={tmp_path / 'token.txt'}\n"
                                  "TIEROPS_INTERVAL=999\n")
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("TIEROPS_INTERVAL", "120")  # the environment wins over .env
    monkeypatch.setenv("TIEROPS_MAX_TIER", "2")
    monkeypatch.setenv("TIEROPS_TIER2_MAX_BUDGET_USD", "0.5")
    monkeypatch.setenv("TIEROPS_PUBLIC_URL", "https://ops:pw-in-url-777@tierops.example.com")
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    checks = tmp_path / "checks.yaml"
    checks.write_text(CHECKS)
    srv = app_server(token=FILE_TOKEN, checks=checks)
    return srv, workdir, checks


def test_setting_sources_from_each_place(tmp_path, monkeypatch):
    env_file = tmp_path / ".env"
    env_file.write_text("TIEROPS_TIER1_MODEL=x\nTIEROPS_NOTIFY_URLS_FILE=/run/urls\n# TIEROPS_CRON=ignored\n")
    environ = {"TIEROPS_INTERVAL": "60", "tierops_kill_grace": "3", "TIEROPS_STATE_DIR": "/old/name", "PATH": "/bin"}
    settings = Settings(interval=60, kill_grace=3, tier1_model="x", notify_urls_file=Path("/run/urls"),
                        home=Path("/old/name"), checks=tmp_path / "c.yaml")
    baseline = Settings(interval=60, kill_grace=3, tier1_model="x", notify_urls_file=Path("/run/urls"),
                        home=Path("/old/name"))
    sources = setting_sources(settings, environ, env_file, baseline=baseline)
    assert set(sources) == set(Settings.model_fields)
    assert sources["interval"] == "env" and sources["kill_grace"] == "env"  # names compared case-insensitively
    assert sources["home"] == "env"  # the renamed TIEROPS_STATE_DIR counts as TIEROPS_HOME
    assert sources["tier1_model"] == "file" and sources["notify_urls_file"] == "file"
    assert sources["notify_urls"] == "file"  # read from its *_FILE companion
    assert sources["cron"] == "default"  # commented out in .env
    assert sources["checks"] == "command line"  # differs from what env and .env give
    assert sources["token"] == "default" and sources["tier3_model"] == "default"
    # a flag that overrides an environment value is the command line's too
    flagged = Settings(**{**baseline.model_dump(), "interval": 30})
    assert setting_sources(flagged, environ, env_file, baseline=baseline)["interval"] == "command line"
    # without a baseline nothing is told apart as command line
    assert "command line" not in setting_sources(settings, environ, None).values()


def test_get_settings_baseline_sees_the_same_values(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TIEROPS_INTERVAL", "77")
    settings = get_settings()
    sources = setting_sources(settings, baseline=get_settings())
    assert sources["interval"] == "env" and sources["home"] == "env"  # TIEROPS_HOME is set for every test
    assert sources["db"] == "default"


def test_every_secret_setting_is_known():
    assert {"token", "notify_urls", "webhook_token", "heartbeat_url"} <= set(secret_fields())
    assert "token_file" not in secret_fields() and "public_url" not in secret_fields()


def test_config_page_shows_values_sources_and_how_to_change(configured):
    srv, workdir, checks = configured
    with srv.client() as cl:
        r = cl.get("/config")
    assert r.status_code == 200, r.text
    page = r.text
    table = rows(page)
    assert len(table) == len(Settings.model_fields)
    assert table["TIEROPS_INTERVAL"]["source"] == "env" and table["TIEROPS_INTERVAL"]["value"] == "120"
    assert table["TIEROPS_TIER1_MODEL"] == {**table["TIEROPS_TIER1_MODEL"], "source": "file",
                                            "value": "haiku-from-dotenv"}
    assert table["TIEROPS_TOKEN_FILE"]["source"] == "file"
    assert table["TIEROPS_CHECKS"]["source"] == "command line" and table["TIEROPS_CHECKS"]["value"] == str(checks)
    assert "--checks" in table["TIEROPS_CHECKS"]["text"]
    assert table["TIEROPS_TIER3_MODEL"]["source"] == "default" and table["TIEROPS_TIER3_MODEL"]["value"] == "opus"
    assert table["TIEROPS_CRON"]["value"] == "(empty)"
    # each row: the field's description and how to change it
    assert Settings.model_fields["interval"].description in table["TIEROPS_INTERVAL"]["text"]
    assert f"in {workdir / '.env'}, then restart `tierops serve`" in table["TIEROPS_INTERVAL"]["text"]
    assert "or name a file holding it with TIEROPS_TOKEN_FILE" in table["TIEROPS_TOKEN"]["text"]


def test_config_page_never_shows_a_secret(configured):
    srv, _, _ = configured
    with srv.client() as cl:
        page = cl.get("/config").text
    table = rows(page)
    assert table["TIEROPS_TOKEN"] == {**table["TIEROPS_TOKEN"], "value": "set", "source": "file"}
    assert table["TIEROPS_NOTIFY_URLS"]["value"] == "set" and table["TIEROPS_NOTIFY_URLS"]["source"] == "env"
    assert table["TIEROPS_WEBHOOK_TOKEN"]["value"] == "set"
    assert table["TIEROPS_HEARTBEAT_URL"]["value"] == "not set"
    for secret in (FILE_TOKEN, *SECRETS.values(), "hunter2", "pw-in-url-777"):
        assert secret not in page
    assert "tierops.example.com" in table["TIEROPS_PUBLIC_URL"]["value"]  # the URL, its password masked


def test_config_page_tiers_checks_and_schema(configured):
    srv, _, checks = configured
    with srv.client() as cl:
        page = cl.get("/config").text
    tiers = {int(n): htmllib.unescape(re.sub(r"<[^>]+>", " ", body))
             for n, body in re.findall(r'<tr id="tier-(\d)">(.*?)</tr>', page, re.DOTALL)}
    assert sorted(tiers) == [0, 1, 2, 3]
    assert "tierops-probe" in tiers[0] and "runs every cycle first" in tiers[0] and "$0 (no language model)" in tiers[0]
    assert "haiku-from-dotenv" in tiers[1] and "10 minutes" in tiers[1] and "auto" in tiers[1]
    assert "$0.5 per run (TIEROPS_TIER2_MAX_BUDGET_USD)" in tiers[2] and "15 minutes" in tiers[2]
    assert "not reached: TIEROPS_MAX_TIER=2" in tiers[3] and "manual" in tiers[3] and " 80 " in tiers[3]
    checks_card = page[page.index('id="checks"'):page.index('id="schema"')]
    assert str(checks) in checks_card and "every 5 minutes" in checks_card
    assert "4: 1 http, 1 tcp, 2 command" in checks_card and "api, host" in checks_card
    assert "Cycles off (TIEROPS_SCHEDULE=false)" in page  # the test server runs no schedule
    schema_card = page[page.index('id="schema"'):page.index('id="settings"')]
    assert AGENT_RESPONSE_SHA256 in schema_card and "the bundled agent response" in schema_card
    assert 'href="/schemas"' in schema_card


def test_config_page_lists_a_broken_checks_file_and_a_named_custom_schema(app_server, tmp_path):
    checks = tmp_path / "broken.yaml"
    checks.write_text("checks:\n  - name: a\n    service: s\n    http: http://x\n    tmeout: 5s\n")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    schema_file = tmp_path / "mine.json"
    schema_file.write_text(json.dumps(schema))
    srv = app_server(checks=checks, schema_file=schema_file)
    with srv.client() as cl:
        assert cl.post("/api/v1/schemas", json={"name": "mine", "schema": schema}).status_code == 201
        page = cl.get("/config").text
    checks_card = page[page.index('id="checks"'):page.index('id="schema"')]
    assert "does not load: 1 problem(s)" in checks_card
    assert re.search(r"<li>line 5: .*tmeout", checks_card)
    schema_card = page[page.index('id="schema"'):page.index('id="settings"')]
    assert "a custom schema" in schema_card and str(schema_file) in schema_card
    assert 'href="/schemas?name=mine"' in schema_card


def test_config_page_survives_an_env_file_broken_after_start(app_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    srv = app_server()
    (tmp_path / ".env").write_text("TIEROPS_INTERVAL=not-a-number\n")
    with srv.client() as cl:
        r = cl.get("/config")
    assert r.status_code == 200
    assert "no longer loads as valid settings" in r.text
    assert rows(r.text)["TIEROPS_INTERVAL"]["source"] == "file"  # named there, though the server kept its value


def test_schedule_summary_says_which_setting_sets_the_pace():
    checks = {"interval": "every 5 minutes"}
    assert schedule_summary(Settings(), checks) == "every 5 minutes (the checks file's interval, read again before " \
                                                    "every wait)"
    assert schedule_summary(Settings(interval=3600), None) == "every hour (TIEROPS_INTERVAL)"
    assert schedule_summary(Settings(interval=3600), {"interval": None}) == "every hour (TIEROPS_INTERVAL)"
    assert schedule_summary(Settings(cron="*/30 * * * *"), checks) == "on the cron expression */30 * * * * " \
                                                                      "(TIEROPS_CRON)"
    assert schedule_summary(Settings(schedule=False), checks).startswith("off (TIEROPS_SCHEDULE=false)")


def test_without_checks_file_tier_0_is_off(app_server):
    srv = app_server()
    with srv.client() as cl:
        page = cl.get("/config").text
    assert "off: no checks file (TIEROPS_CHECKS)" in page
    assert "None: cycles start at tier 1" in page


def test_config_page_never_quotes_a_secret_of_a_broken_checks_file(app_server, tmp_path):
    from tests.probe.test_inventory import FILE_SECRETS, SECRETS_FILE

    checks = tmp_path / "broken.yaml"
    checks.write_text(SECRETS_FILE)
    srv = app_server(checks=checks)
    with srv.client() as cl:
        page = cl.get("/config").text
    checks_card = page[page.index('id="checks"'):page.index('id="schema"')]
    assert "does not load: 9 problem(s)" in checks_card and "header values may be secrets" in checks_card
    for secret in FILE_SECRETS:
        assert secret not in page, secret
