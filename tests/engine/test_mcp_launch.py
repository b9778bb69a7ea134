"""``app/engine/mcp_launch.py``: what one CLI run gets for MCP. The config on the command line holds
``${VAR}`` references only; the values go into the CLI's environment; stdio servers do not inherit
the CLI's credentials or the other servers' secrets (the real CLI's inheritance and expansion are
exercised in tests/realcli/test_mcp.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.config import Settings
from app.engine import mcp_launch as ml
from app.engine.mcp_config import McpConfigError

SECRET_FROM_FILE = "file-secret-7f3a9c1e"
SECRET_FROM_ENV = "env-secret-2b8d4e6f"
ENVIRON = {"GRAFANA_TOKEN": SECRET_FROM_ENV, "OPS_URL": "https://ops.internal", "PATH": "/usr/bin"}


@pytest.fixture
def config(tmp_path: Path) -> Path:
    secret = tmp_path / "ops-token"
    secret.write_text(SECRET_FROM_FILE + "\n")
    doc = {"mcpServers": {
        "grafana": {"type": "http", "url": "https://grafana.internal/mcp",
                    "headers": {"Authorization": "Bearer ${GRAFANA_TOKEN}"}},
        "ops": {"command": "/usr/bin/ops-mcp", "args": ["--base", "${OPS_URL}"],
                "env": {"OPS_TOKEN_FILE": str(secret), "LEVEL": "${OPS_LEVEL:-info}"}},
        "db": {"command": "/usr/bin/db-mcp"},
    }}
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(doc))
    return path


def settings_for(config: Path, **values: str) -> Settings:
    return Settings(mcp_config=config, **{"mcp_read_only_tools": "mcp__grafana__query_*,mcp__ops__status",
                                          "tier2_mcp_tools": "mcp__ops", "tier3_mcp_tools": "mcp__*", **values})


@pytest.mark.parametrize(("tier", "dry_run", "servers", "rules"), [
    (1, False, ["grafana", "ops"], ["mcp__grafana__query_*", "mcp__ops__status"]),
    (2, True, ["grafana", "ops"], ["mcp__grafana__query_*", "mcp__ops__status"]),
    (2, False, ["ops"], ["mcp__ops"]),
    (3, False, ["grafana", "ops", "db"], ["mcp__grafana", "mcp__ops", "mcp__db"]),
    (3, True, ["grafana", "ops"], ["mcp__grafana__query_*", "mcp__ops__status"]),
])
def test_each_run_gets_the_servers_its_patterns_reach(config, tier, dry_run, servers, rules):
    plan = ml.plan_launch(settings_for(config), tier, dry_run, ENVIRON)
    assert plan is not None
    assert list(plan.servers) == servers and plan.allowed_tools == rules


@pytest.mark.parametrize(("tier", "values"), [
    (0, {}),  # the probe: never
    (1, {"mcp_read_only_tools": ""}),  # the default: tier 1 gets no MCP tool
    (2, {"tier2_mcp_tools": " , "}),
    (2, {"tier2_mcp_tools": "mcp__absent__x"}),  # no configured server reached
])
def test_a_run_allowed_no_mcp_tool_gets_no_config(config, tier, values):
    assert ml.plan_launch(settings_for(config, **values), tier, False, ENVIRON) is None
    assert ml.plan_launch(Settings(tier2_mcp_tools="mcp__*"), 2, False, ENVIRON) is None  # no servers at all


def test_values_travel_in_the_environment_never_in_the_config(config):
    plan = ml.plan_launch(settings_for(config), 3, False, ENVIRON)
    assert plan is not None
    assert plan.env == {"GRAFANA_TOKEN": SECRET_FROM_ENV, "OPS_URL": "https://ops.internal",
                        "OPS_TOKEN": SECRET_FROM_FILE}  # OPS_LEVEL is not set: its default applies
    assert set(plan.secrets) == {SECRET_FROM_ENV, SECRET_FROM_FILE}  # the URL is no secret: not masked
    cli_env = {"PATH": "/usr/bin", "HOME": "/state/home", "ANTHROPIC_API_KEY": "sk-ant-x", "ANTHROPIC_BASE_URL": "u",
               "CLAUDE_CODE_OAUTH_TOKEN": "t", **plan.env}
    text = plan.config_json(cli_env)
    assert SECRET_FROM_FILE not in text and SECRET_FROM_ENV not in text and "sk-ant-x" not in text
    doc = json.loads(text)["mcpServers"]
    assert doc["grafana"] == {"type": "http", "url": "https://grafana.internal/mcp",
                              "headers": {"Authorization": "Bearer ${GRAFANA_TOKEN}"}}
    # the secret file's entry became a reference; the CLI's credentials and the other servers'
    # secrets are blanked for each stdio server (it would inherit the CLI's whole environment)
    assert doc["ops"]["env"] == {"LEVEL": "${OPS_LEVEL:-info}", "OPS_TOKEN": "${OPS_TOKEN}", "ANTHROPIC_API_KEY": "",
                                 "CLAUDE_CODE_OAUTH_TOKEN": "", "GRAFANA_TOKEN": ""}
    assert doc["ops"]["args"] == ["--base", "${OPS_URL}"]
    assert doc["db"] == {"command": "/usr/bin/db-mcp", "env": {"ANTHROPIC_API_KEY": "", "CLAUDE_CODE_OAUTH_TOKEN": "",
                                                               "GRAFANA_TOKEN": "", "OPS_TOKEN": "", "OPS_URL": ""}}


def token_file(doc: dict, path: Path, text: str, server: str = "ops") -> None:
    path.write_text(text)
    doc["mcpServers"][server].setdefault("env", {})["OPS_TOKEN_FILE"] = str(path)


@pytest.mark.parametrize(("change", "says"), [
    (lambda d, p: d["mcpServers"]["ops"]["env"].update(OPS_TOKEN_FILE=str(p / "missing")),
     "env OPS_TOKEN_FILE: {p}/missing cannot be read (No such file or directory); make it readable"),
    (lambda d, p: token_file(d, p / "empty", "\n"), "env OPS_TOKEN_FILE: {p}/empty is empty"),
    (lambda d, p: token_file(d, p / "big", "x" * (ml.SECRET_FILE_MAX + 1)), "is larger than 64 KiB"),
    (lambda d, p: token_file(d, p / "nul", "a\0b"), "holds a NUL character"),
    (lambda d, p: d["mcpServers"]["grafana"]["headers"].update(Authorization="Bearer ${NOT_SET_ANYWHERE}"),
     "server 'grafana': ${NOT_SET_ANYWHERE} is not set in TierOps' environment; set it, or use an env entry "
     "NOT_SET_ANYWHERE_FILE: /path"),
    (lambda d, p: token_file(d, p / "other", "another value", server="db"),
     "server 'db': OPS_TOKEN_FILE gives OPS_TOKEN another value than OPS_TOKEN_FILE of server 'ops'"),
])
def test_a_launch_that_cannot_be_given_its_secrets_fails_clearly(config, tmp_path, change, says):
    doc = json.loads(config.read_text())
    change(doc, tmp_path)
    config.write_text(json.dumps(doc))
    with pytest.raises(McpConfigError) as err:
        ml.plan_launch(settings_for(config), 3, False, ENVIRON)
    assert says.replace("{p}", str(tmp_path)) in str(err.value)
    assert SECRET_FROM_FILE not in str(err.value) and SECRET_FROM_ENV not in str(err.value)


def test_a_secret_file_may_be_read_by_two_servers(config, tmp_path):
    doc = json.loads(config.read_text())
    doc["mcpServers"]["db"]["env"] = {"OPS_TOKEN_FILE": str(tmp_path / "ops-token")}
    config.write_text(json.dumps(doc))
    plan = ml.plan_launch(settings_for(config), 3, False, ENVIRON)
    assert plan is not None and plan.env["OPS_TOKEN"] == SECRET_FROM_FILE
    assert json.loads(plan.config_json(plan.env))["mcpServers"]["db"]["env"] == {
        "OPS_TOKEN": "${OPS_TOKEN}", "GRAFANA_TOKEN": "", "OPS_URL": ""}


def test_settings_checked_at_start_and_listed(config):
    settings = settings_for(config)
    assert list(ml.check_settings(settings).servers) == ["grafana", "ops", "db"]
    assert ml.access(settings, "grafana") == [("tier 1 and dry runs", "query_*"), ("tier 2", "none"),
                                              ("tier 3", "every tool")]
    assert ml.access(settings, "ops") == [("tier 1 and dry runs", "status"), ("tier 2", "every tool"),
                                          ("tier 3", "every tool")]
    with pytest.raises(Exception, match="TIEROPS_TIER3_MCP_TOOLS: 'grafana' is not an MCP tool pattern"):
        ml.check_settings(settings_for(config, tier3_mcp_tools="grafana"))


def test_launch_problems_name_what_would_fail(config, monkeypatch):
    monkeypatch.delenv("GRAFANA_TOKEN", raising=False)
    monkeypatch.setenv("OPS_URL", "https://ops.internal")
    problems = ml.launch_problems(settings_for(config))
    assert problems == [f"{config}: server 'grafana': ${{GRAFANA_TOKEN}} is not set in TierOps' environment; set it, "
                        "or use an env entry GRAFANA_TOKEN_FILE: /path"]
    monkeypatch.setenv("GRAFANA_TOKEN", SECRET_FROM_ENV)
    assert ml.launch_problems(settings_for(config)) == []
