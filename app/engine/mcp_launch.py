"""What one CLI run is given for MCP: the inline ``--mcp-config``, the allow rules, the variables.

A run gets the servers its tier's patterns reach (``mcp_policy``), none for a tier allowed no MCP
tool (then no ``--mcp-config`` at all), always with ``--strict-mcp-config`` so no other MCP source
of the CLI counts. The config holds ``${VAR}`` references only, never a value: it is on the
command line and stored (``sessions.argv``). The values travel in the CLI's environment:
``${VAR}`` copied from TierOps' own, ``NAME_FILE`` entries read now and passed as NAME.

Deliberately unlike Claude Code's default: a stdio server inherits the CLI's whole environment
(verified with 2.1.197: the API key included), so every stdio server's ``env`` also sets each
secret-looking variable of the CLI's environment it does not use itself to ``""``: the CLI's
credentials and the other servers' secrets never reach it. The secret values are handed to the
session's redactor (:attr:`McpLaunch.secrets`), so a server echoing one is masked in the stream.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config import Settings
from app.engine.mcp_config import McpConfigError, McpProblem, McpServer, McpServers, load_servers
from app.engine.mcp_policy import (
    READ_ONLY_SETTING,
    cli_rules,
    patterns_of,
    server_reached,
    tier_patterns,
    tools_of_server,
)
from app.errors import ConfigError
from app.redact import secret_name

log = logging.getLogger(__name__)

SECRET_FILE_MAX = 64 * 1024


@dataclass(frozen=True)
class McpLaunch:
    servers: dict[str, dict[str, Any]]  # name → the config the CLI is given (references only)
    env: dict[str, str]  # added to the CLI's environment (the values: secrets)
    secrets: tuple[str, ...]  # for the session's redactor
    allowed_tools: list[str]  # --allowedTools rules
    uses: dict[str, frozenset[str]]  # server → the variables it refers to itself

    def config_json(self, cli_env: Mapping[str, str]) -> str:
        """The inline ``--mcp-config``: each stdio server's env also blanks the secret-looking
        variables of ``cli_env`` (the CLI's environment) and the other servers' variables."""
        out: dict[str, Any] = {}
        for name, config in self.servers.items():
            config = dict(config)
            if "command" in config:
                env = dict(config.get("env", {}))
                for var in sorted(cli_env):
                    if var not in env and var not in self.uses[name] and (secret_name(var) or var in self.env):
                        env[var] = ""
                if env:
                    config["env"] = env
            out[name] = config
        return json.dumps({"mcpServers": out}, separators=(",", ":"), ensure_ascii=False)


def read_secret(server: McpServer, name: str, path: Path) -> str:
    """A NAME_FILE secret: the file's text without its final line break. Raises :class:`McpConfigError`."""
    def fail(why: str) -> McpConfigError:
        return McpConfigError([McpProblem(str(server.path), server.name, f"env {name}_FILE: {path} {why}")])
    try:
        with path.open("rb") as fh:
            raw = fh.read(SECRET_FILE_MAX + 1)
    except OSError as exc:
        raise fail(f"cannot be read ({exc.strerror or exc}); make it readable by the user TierOps runs as") from None
    if len(raw) > SECRET_FILE_MAX:
        raise fail(f"is larger than {SECRET_FILE_MAX // 1024} KiB; is it the right file?")
    try:
        text = raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError:
        raise fail("is not UTF-8 text") from None
    if not text or "\0" in text:
        raise fail("is empty" if not text else "holds a NUL character")
    return text


def server_config(server: McpServer) -> dict[str, Any]:
    """The server as the CLI gets it: each ``NAME_FILE: path`` entry becomes ``NAME: ${NAME}``."""
    config = dict(server.config)
    if server.secret_files:
        env = {k: v for k, v in config.get("env", {}).items()
               if not (k.endswith("_FILE") and k.removesuffix("_FILE") in server.secret_files)}
        env.update({name: f"${{{name}}}" for name in server.secret_files})
        config["env"] = env
    return config


def plan_launch(settings: Settings, tier: int, dry_run: bool,
                environ: Mapping[str, str] | None = None) -> McpLaunch | None:
    """The MCP part of a run at ``tier`` (None: no MCP tool allowed, or no server reached).
    Raises :class:`McpConfigError` (a broken baseline, a pattern setting that cannot be read, a
    variable not set, a secret file that cannot be read): the session fails with that message."""
    environ = os.environ if environ is None else environ
    patterns = tier_patterns(settings, tier, dry_run)
    if not patterns:
        return None
    loaded = load_servers(settings)
    servers = [s for s in loaded.servers.values() if server_reached(s.name, patterns)]
    if not servers:
        return None
    env: dict[str, str] = {}
    origin: dict[str, str] = {}
    secrets: list[str] = []
    problems: list[McpProblem] = []

    def put(server: McpServer, name: str, value: str, how: str) -> None:
        if name in env and env[name] != value:
            problems.append(McpProblem(str(server.path), server.name, f"{how} gives {name} another value than "
                                       f"{origin[name]}; use a name of its own"))
        env[name], origin[name] = value, f"{how} of server {server.name!r}"

    for server in servers:
        for name in sorted(server.references):
            if name not in environ:
                problems.append(McpProblem(str(server.path), server.name, f"${{{name}}} is not set in TierOps' "
                                           f"environment; set it, or use an env entry {name}_FILE: /path"))
            else:
                put(server, name, environ[name], f"${{{name}}}")
        for name in sorted(server.optional):
            if name in environ:
                put(server, name, environ[name], f"${{{name}}}")
        secrets.extend(env[name] for name in sorted(server.secret_references & env.keys()))
        for name, path in server.secret_files.items():
            value = read_secret(server, name, path)
            put(server, name, value, f"{name}_FILE")
            secrets.append(value)
    if problems:
        raise McpConfigError(problems)
    uses = {s.name: frozenset(s.references | s.optional | s.secret_files.keys()) for s in servers}
    return McpLaunch({s.name: server_config(s) for s in servers}, env, tuple(dict.fromkeys(secrets)),
                     cli_rules(patterns, [s.name for s in servers]), uses)


def check_settings(settings: Settings) -> McpServers:
    """Every MCP setting read as a run would (at ``serve``/``run``/``supervise`` start and in
    ``doctor``): the servers, or :class:`~app.errors.ConfigError` for a broken baseline or a
    pattern setting that cannot be read. Secret files and variables are checked at launch."""
    for setting in (READ_ONLY_SETTING, *(f"tier{n}_mcp_tools" for n in (2, 3))):
        patterns_of(settings, setting)
    return load_servers(settings)


RUNS = ((1, False, "tier 1 and dry runs"), (2, False, "tier 2"), (3, False, "tier 3"))


def access(settings: Settings, server: str) -> list[tuple[str, str]]:
    """Which runs may call which tools of ``server``: ("tier 2", "every tool" | "query_*, list_*" |
    "none"). Raises :class:`~app.engine.mcp_policy.McpPatternError`."""
    rows = []
    for tier, dry_run, label in RUNS:
        globs = tools_of_server(server, tier_patterns(settings, tier, dry_run))
        rows.append((label, "every tool" if globs == ["*"] else ", ".join(globs) or "none"))
    return rows


def launch_problems(settings: Settings) -> list[str]:
    """What would fail a model run's launch now (a variable not set, a secret file unreadable),
    checked for every tier as :func:`plan_launch` does; no value is read into the answer."""
    found: list[str] = []
    for tier, dry_run, _ in (*RUNS, (2, True, "")):
        try:
            plan_launch(settings, tier, dry_run)
        except McpConfigError as exc:
            found.extend(str(p) for p in exc.problems if str(p) not in found)
        except ConfigError as exc:
            found.extend([str(exc)] if str(exc) not in found else [])
    return found
