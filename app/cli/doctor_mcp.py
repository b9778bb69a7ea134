"""``tierops doctor``'s MCP line: the servers, where each comes from, which runs may use which tools.

A check of its own module because it reads as a run would (``engine/mcp_launch``): the baseline
and every extension's ``mcp.json``, the tool patterns, then every tier's launch (variables set,
secret files readable) so a session does not find out first. Names, transports, commands and
URLs only: the configs hold no secret (literal ones are refused) and no value is printed.
"""

from __future__ import annotations

import logging

from app.cli.doctor_checks import Check
from app.config import Settings
from app.engine.mcp_launch import access, check_settings, launch_problems
from app.errors import ConfigError

log = logging.getLogger(__name__)

NAME = "mcp servers"


def check_mcp(settings: Settings) -> Check:
    try:
        found = check_settings(settings)
        listing = [f"{s.name} ({s.source}, {s.transport} {s.target}): "
                   + ", ".join(f"{label}: {tools}" for label, tools in access(settings, s.name))
                   for s in found.servers.values()]
    except ConfigError as exc:
        return Check(NAME, "fail", f"{exc}; model sessions cannot start until it is fixed")
    if not found.servers and not found.warnings:
        return Check(NAME, "skip", "none configured (TIEROPS_MCP_CONFIG, an extension's mcp.json)")
    detail = "; ".join(listing) or "no usable server"
    if problems := launch_problems(settings):
        return Check(NAME, "fail", f"{detail}; a session using them would fail: {'; '.join(problems)}")
    if found.warnings:
        return Check(NAME, "warn", f"{detail}; left out: {'; '.join(str(w) for w in found.warnings)}")
    return Check(NAME, "ok", detail)
