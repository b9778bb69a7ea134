"""MCP in the session runner (app/supervisor/session.py, launch.py), with the fake CLI: which runs
get ``--mcp-config``, what the CLI's environment carries, a config that cannot be used failing the
session with its reason. The real CLI's side: tests/realcli/test_mcp.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.config import Settings
from app.supervisor.launch import build_argv
from app.supervisor.session import mcp_for, tools_for
from tests.fakes.claude_control import make_fake_claude, new_session_id, structured_stream
from tests.helpers import healthy, run_session

SECRET = "wiring-secret-0a9b8c7d"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    secret = tmp_path / "token"
    secret.write_text(SECRET)
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"ops": {"command": "/usr/bin/ops-mcp",
                                                       "env": {"OPS_TOKEN_FILE": str(secret)}}}}))
    return path


def test_build_argv_adds_the_config_and_strict_only_when_given():
    common = {"model": "haiku", "wire_schema": None, "system_prompt_file": "/s", "allowed_tools": ["Read"],
              "disallowed_tools": [], "max_turns": None}
    plain = build_argv("claude", **common)
    assert "--mcp-config" not in plain and "--strict-mcp-config" not in plain
    argv = build_argv("claude", **common, mcp_config='{"mcpServers":{}}')
    i = argv.index("--mcp-config")
    assert argv[i + 1:i + 3] == ['{"mcpServers":{}}', "--strict-mcp-config"]  # the variadic list closed


def test_tools_for_appends_the_mcp_rules(make_settings, config):
    settings = make_settings(None, mcp_config=config, mcp_read_only_tools="mcp__ops__status")
    mcp, problem = mcp_for(settings, 1, False)
    assert problem is None and mcp is not None
    allowed, _ = tools_for(settings.tier(1), False, mcp.allowed_tools)
    assert allowed == ["Read", "Bash(df *)", "mcp__ops__status"]
    allowed, _ = tools_for(settings.tier(2), True, mcp.allowed_tools)  # a dry run: the read-only rules
    assert allowed[-1] == "mcp__ops__status" and "Bash(journalctl *)" in allowed
    broken = make_settings(None, mcp_config=config.parent / "absent.json", tier2_mcp_tools="mcp__*")
    assert mcp_for(broken, 2, False)[1] == (f"MCP servers: {config.parent / 'absent.json'}: cannot be read (No such "
                                            "file or directory); fix the path or its permissions")
    assert mcp_for(broken, 0, False) == (None, None)  # tier 0 never reads it


async def test_a_run_gets_the_config_and_the_secret_in_its_environment(db, make_settings, validator, tmp_path,
                                                                        config):
    fake = make_fake_claude(tmp_path / "bin", [{"lines": structured_stream(new_session_id(), healthy())}])
    settings = make_settings(fake, mcp_config=config, mcp_read_only_tools="mcp__ops__status",
                             tier2_mcp_tools="", guard=False)
    _, row = await run_session(db, settings, validator, tier=1)
    inv = fake.last()
    assert row["status"] == "completed"
    argv = inv["argv"]
    config_text = argv[argv.index("--mcp-config") + 1]
    assert json.loads(config_text)["mcpServers"]["ops"]["env"]["OPS_TOKEN"] == "${OPS_TOKEN}"
    assert SECRET not in " ".join(argv) and SECRET not in row["argv"]
    assert json.loads(row["argv"])[1:] == argv  # stored as it ran: references are no secrets to mask
    assert inv["env"]["OPS_TOKEN"] == SECRET  # the value travels in the CLI's environment
    assert argv[argv.index("--allowedTools") + 1].endswith(",mcp__ops__status")
    # tier 2 is allowed no MCP tool here: no config at all, and no secret in its environment
    _, row = await run_session(db, settings, validator, tier=2)
    inv = fake.last()
    assert "--mcp-config" not in inv["argv"] and "--strict-mcp-config" not in inv["argv"]
    assert "OPS_TOKEN" not in inv["env"]


@pytest.mark.parametrize(("content", "says"), [
    ("{oops", "MCP servers: {path}: not valid JSON"),
    (json.dumps({"mcpServers": {"ops": {"command": "x", "env": {"T_FILE": "/nonexistent/t"}}}}),
     "MCP servers: {path}: server 'ops': env T_FILE: /nonexistent/t cannot be read (No such file or directory)"),
])
async def test_a_config_that_cannot_be_used_fails_the_session_with_its_reason(db, make_settings, validator,
                                                                             tmp_path, content, says):
    path = tmp_path / "mcp.json"
    path.write_text(content)
    fake = make_fake_claude(tmp_path / "bin", [{"lines": structured_stream(new_session_id(), healthy())}])
    settings: Settings = make_settings(fake, mcp_config=path, mcp_read_only_tools="mcp__*__status", guard=False)
    _, row = await run_session(db, settings, validator, tier=1)
    assert row["status"] == "failed" and row["status_reason"].startswith(says.replace("{path}", str(path)))
    assert fake.invocations() == []  # no CLI started
