"""Which MCP tools a tier may call: TierOps' patterns, what the CLI is given, what the guard decides.

Tier 1 and every dry run get the tools matching ``TIEROPS_MCP_READ_ONLY_TOOLS``; tiers 2 and 3
those of ``TIEROPS_TIER2_MCP_TOOLS`` / ``TIEROPS_TIER3_MCP_TOOLS``; tier 0 (the probe) none. A
pattern is ``mcp__SERVER`` (every tool of a server), ``mcp__SERVER__TOOL``, with ``*`` as the only
wildcard in either part (``mcp__*``, ``mcp__grafana__query_*``). Server names hold no ``__``, so
a tool name splits at its first ``__`` after ``mcp__`` into server and tool, and each part is
matched on its own: :func:`cli_rules` and :func:`mcp_tool_allowed` read a pattern the same way.

Why a translation: CLI 2.1.197 ignores an allow rule with a wildcard in the server position
(stderr: 'Wildcard tool name "mcp__*" is not supported in allow rules'); it accepts ``mcp__S``
and a glob in the tool position only. :func:`cli_rules` therefore names the configured servers
each pattern reaches. The CLI's rules are the first fence; the PreToolUse guard calls
:func:`mcp_tool_allowed` on every call (fail closed: unreadable patterns allow nothing). Pure.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from app.config import Settings
from app.errors import ConfigError
from app.vocab import FIRST_MODEL_TIER

log = logging.getLogger(__name__)

PREFIX = "mcp__"
_PART = re.compile(r"[A-Za-z0-9_*-]+")
READ_ONLY_SETTING = "mcp_read_only_tools"


class McpPatternError(ConfigError):
    """A TIEROPS_*MCP_TOOLS setting holds a pattern TierOps cannot read."""


@dataclass(frozen=True)
class ToolPattern:
    text: str  # as written
    server: str  # a glob over server names
    tool: str  # a glob over tool names ("*": every tool)

    def matches(self, server: str, tool: str) -> bool:
        return fnmatchcase(server, self.server) and fnmatchcase(tool, self.tool)


def split_tool_name(name: str) -> tuple[str, str] | None:
    """``mcp__SERVER__TOOL`` → (SERVER, TOOL); None for a name that is not an MCP tool's."""
    if not name.startswith(PREFIX):
        return None
    server, sep, tool = name[len(PREFIX):].partition("__")
    return (server, tool) if server and sep and tool else None


def parse_pattern(text: str, var: str) -> ToolPattern:
    if not text.startswith(PREFIX):
        raise McpPatternError(f"{var}: {text!r} is not an MCP tool pattern; write mcp__SERVER, mcp__SERVER__TOOL "
                              "or use * as a wildcard (mcp__grafana__query_*, mcp__*)")
    server, sep, tool = text[len(PREFIX):].partition("__")
    tool = tool if sep else "*"
    for part, what in ((server, "server"), (tool, "tool")):
        if not part or not _PART.fullmatch(part):
            raise McpPatternError(f"{var}: {text!r} has an empty or unreadable {what} part; a part holds letters, "
                                  "digits, '_', '-' and '*' (the only wildcard), e.g. mcp__grafana__query_*")
    return ToolPattern(text, server, tool)


def setting_for(tier: int, dry_run: bool) -> str | None:
    """The setting naming the MCP tools of a run (None: tier 0, which gets none)."""
    if tier < FIRST_MODEL_TIER:
        return None
    if dry_run or tier == FIRST_MODEL_TIER:
        return READ_ONLY_SETTING
    return f"tier{tier}_mcp_tools"


def env_name(setting: str) -> str:
    return f"TIEROPS_{setting.upper()}"


def patterns_of(settings: Settings, setting: str) -> list[ToolPattern]:
    """A setting's patterns, in order, without repeats. Raises :class:`McpPatternError`."""
    raw = getattr(settings, setting)
    texts = dict.fromkeys(part.strip() for part in raw.split(",") if part.strip())
    return [parse_pattern(text, env_name(setting)) for text in texts]


def tier_patterns(settings: Settings, tier: int, dry_run: bool) -> list[ToolPattern]:
    """The patterns of a run at ``tier`` (empty: no MCP tool). Raises :class:`McpPatternError`."""
    setting = setting_for(tier, dry_run)
    return patterns_of(settings, setting) if setting else []


def server_reached(server: str, patterns: Iterable[ToolPattern]) -> bool:
    """Whether some pattern may allow a tool of ``server`` (a server no pattern reaches is not started)."""
    return any(fnmatchcase(server, p.server) for p in patterns)


def cli_rules(patterns: Iterable[ToolPattern], servers: Iterable[str]) -> list[str]:
    """``--allowedTools`` rules for the configured ``servers``: ``mcp__S`` for a pattern allowing
    every tool of S, ``mcp__S__TOOLGLOB`` otherwise (the CLI takes a glob in the tool position)."""
    names = list(servers)
    rules = [f"{PREFIX}{server}" if p.tool == "*" else f"{PREFIX}{server}__{p.tool}"
             for p in patterns for server in names if fnmatchcase(server, p.server)]
    return list(dict.fromkeys(rules))


def tools_of_server(server: str, patterns: Iterable[ToolPattern]) -> list[str]:
    """The tool globs ``patterns`` allow on ``server`` ("*" alone when one allows every tool)."""
    globs = list(dict.fromkeys(p.tool for p in patterns if fnmatchcase(server, p.server)))
    return ["*"] if "*" in globs else globs


def mcp_tool_allowed(tool_name: str, tier: int, dry_run: bool, settings: Settings) -> tuple[bool, str]:
    """The guard's decision on one MCP tool call, with the reason the model (and the log) is given.
    Fails closed: a setting that cannot be read allows nothing."""
    setting = setting_for(tier, dry_run)
    if setting is None:
        return False, f"tier {tier} may call no MCP tool"
    return allowed_by(tool_name, getattr(settings, setting).split(","), env_name(setting),
                      f"tier {tier}{' (dry run)' if dry_run else ''}")


def allowed_by(tool_name: str, patterns: Iterable[str], var: str, run: str = "this run") -> tuple[bool, str]:
    """Whether one of ``patterns`` (as written; e.g. a session's stored policy) allows ``tool_name``,
    and why; ``var`` names where the patterns came from. Fails closed on an unreadable pattern."""
    parts = split_tool_name(tool_name)
    if parts is None:
        return False, f"{tool_name!r} is not an MCP tool name (mcp__SERVER__TOOL)"
    try:
        parsed = [parse_pattern(text, var) for text in dict.fromkeys(t.strip() for t in patterns if t.strip())]
    except McpPatternError as exc:
        return False, f"{exc}; no MCP tool is allowed until it is fixed"
    if not parsed:
        return False, f"{run} may call no MCP tool: {var} is empty"
    for p in parsed:
        if p.matches(*parts):
            return True, f"{tool_name} is allowed at {run} by {var} ({p.text})"
    return False, f"{tool_name} is not allowed at {run}: {var} allows only {', '.join(p.text for p in parsed)}"
