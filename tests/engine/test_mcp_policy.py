"""``app/engine/mcp_policy.py``: which MCP tools a run may call, the CLI's allow rules, the guard's decision.

The CLI's side of the translation was checked with the real CLI 2.1.197 (tests/realcli/test_mcp.py runs
``mcp__SERVER`` and a tool-position glob): it ignores an allow rule with a wildcard in the server
position, so ``mcp__*`` must become one ``mcp__S`` rule per configured server.
"""

from __future__ import annotations

import pytest

from app.config import Settings
from app.engine import mcp_policy as mp

SETTINGS = Settings(mcp_read_only_tools="mcp__grafana__query_*, mcp__grafana__list_dashboards, mcp__ops__status",
                    tier2_mcp_tools="mcp__grafana, mcp__ops__*", tier3_mcp_tools="mcp__*")


@pytest.mark.parametrize(("text", "server", "tool"), [
    ("mcp__*", "*", "*"),
    ("mcp__grafana", "grafana", "*"),
    ("mcp__grafana__*", "grafana", "*"),
    ("mcp__grafana__query_*", "grafana", "query_*"),
    ("mcp__gra*__list", "gra*", "list"),
    ("mcp__*__status", "*", "status"),
    ("mcp__my-srv_1__do-it", "my-srv_1", "do-it"),
])
def test_patterns_read(text, server, tool):
    p = mp.parse_pattern(text, "TIEROPS_X")
    assert (p.server, p.tool, p.text) == (server, tool, text)


@pytest.mark.parametrize(("text", "says"), [
    ("grafana", "is not an MCP tool pattern"),
    ("Bash", "is not an MCP tool pattern"),
    ("mcp__", "empty or unreadable server part"),
    ("mcp____x", "empty or unreadable server part"),
    ("mcp__ops__", "empty or unreadable tool part"),
    ("mcp__ops__q?", "empty or unreadable tool part"),
    ("mcp__o[p]s", "empty or unreadable server part"),
    ("mcp__ops__a b", "empty or unreadable tool part"),
])
def test_unreadable_patterns_say_what_and_where(text, says):
    with pytest.raises(mp.McpPatternError) as err:
        mp.parse_pattern(text, "TIEROPS_TIER2_MCP_TOOLS")
    assert says in str(err.value) and "TIEROPS_TIER2_MCP_TOOLS" in str(err.value)


@pytest.mark.parametrize(("tier", "dry_run", "setting"), [
    (0, False, None), (0, True, None),
    (1, False, "mcp_read_only_tools"), (1, True, "mcp_read_only_tools"),
    (2, False, "tier2_mcp_tools"), (2, True, "mcp_read_only_tools"),
    (3, False, "tier3_mcp_tools"), (3, True, "mcp_read_only_tools"),
])
def test_which_setting_a_run_reads(tier, dry_run, setting):
    assert mp.setting_for(tier, dry_run) == setting


@pytest.mark.parametrize(("tool", "tier", "dry_run", "allowed", "says"), [
    ("mcp__grafana__query_range", 1, False, True, "by TIEROPS_MCP_READ_ONLY_TOOLS (mcp__grafana__query_*)"),
    ("mcp__grafana__list_dashboards", 1, False, True, "(mcp__grafana__list_dashboards)"),
    ("mcp__grafana__create_alert", 1, False, False, "TIEROPS_MCP_READ_ONLY_TOOLS allows only mcp__grafana__query_*, "),
    ("mcp__ops__status", 1, False, True, "tier 1"),
    ("mcp__ops__restart", 1, False, False, "not allowed at tier 1"),
    ("mcp__grafana__create_alert", 2, False, True, "TIEROPS_TIER2_MCP_TOOLS (mcp__grafana)"),
    ("mcp__grafana__create_alert", 2, True, False, "not allowed at tier 2 (dry run)"),
    ("mcp__ops__restart", 2, False, True, "(mcp__ops__*)"),
    ("mcp__db__drop", 2, False, False, "TIEROPS_TIER2_MCP_TOOLS allows only"),
    ("mcp__db__drop", 3, False, True, "TIEROPS_TIER3_MCP_TOOLS (mcp__*)"),
    ("mcp__db__drop", 3, True, False, "dry run"),
    ("mcp__db__drop", 0, False, False, "tier 0 may call no MCP tool"),
    # names that are no MCP tool's: never allowed, whatever the patterns
    ("Bash", 3, False, False, "not an MCP tool name"),
    ("mcp__db", 3, False, False, "not an MCP tool name"),
    ("mcp____x", 3, False, False, "not an MCP tool name"),
    # a pattern's server part matches the server only: `mcp__grafana` is not `mcp__grafana2`
    ("mcp__grafana2__query", 2, False, False, "allows only"),
    ("mcp__Grafana__query_x", 1, False, False, "allows only"),  # case matters
])
def test_the_guards_decision(tool, tier, dry_run, allowed, says):
    ok, why = mp.mcp_tool_allowed(tool, tier, dry_run, SETTINGS)
    assert ok is allowed and says in why, why


def test_the_guard_fails_closed():
    broken = Settings(tier2_mcp_tools="mcp__ops__*, grafana")
    ok, why = mp.mcp_tool_allowed("mcp__ops__status", 2, False, broken)
    assert not ok and "'grafana' is not an MCP tool pattern" in why and "no MCP tool is allowed" in why
    ok, why = mp.mcp_tool_allowed("mcp__ops__status", 1, False, Settings())  # the default: none read-only
    assert not ok and "TIEROPS_MCP_READ_ONLY_TOOLS is empty" in why
    # a stored policy's patterns, as the guard keeps them for a session
    assert mp.allowed_by("mcp__ops__status", ["mcp__ops"], "the session's policy")[0]
    assert not mp.allowed_by("mcp__ops__status", [], "the session's policy")[0]


@pytest.mark.parametrize(("patterns", "servers", "rules"), [
    ("mcp__*", ["grafana", "ops"], ["mcp__grafana", "mcp__ops"]),
    ("mcp__grafana__query_*,mcp__grafana__list", ["grafana", "ops"], ["mcp__grafana__query_*", "mcp__grafana__list"]),
    ("mcp__*__status", ["grafana", "ops"], ["mcp__grafana__status", "mcp__ops__status"]),
    ("mcp__ops,mcp__ops__*,mcp__*", ["ops"], ["mcp__ops"]),
    ("mcp__gra*", ["grafana", "graphite", "ops"], ["mcp__grafana", "mcp__graphite"]),
    ("mcp__absent__x", ["ops"], []),
])
def test_cli_rules_name_each_server(patterns, servers, rules):
    parsed = [mp.parse_pattern(t, "X") for t in patterns.split(",")]
    assert mp.cli_rules(parsed, servers) == rules
    assert all(mp.server_reached(s, parsed) == any(r.startswith(f"mcp__{s}") for r in rules) for s in servers)


def test_tools_of_server_for_listings():
    read_only = mp.tier_patterns(SETTINGS, 1, False)
    assert mp.tools_of_server("grafana", read_only) == ["query_*", "list_dashboards"]
    assert mp.tools_of_server("ops", mp.tier_patterns(SETTINGS, 2, False)) == ["*"]
    assert mp.tools_of_server("db", read_only) == []
