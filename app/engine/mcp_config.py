"""The MCP servers the language-model tiers may be given: read, validated, merged. Pure but for reading files.

Sources, in order: the baseline ``TIEROPS_MCP_CONFIG``, then each extension folder's ``mcp.json``
(``TIEROPS_EXTENSIONS``; the extension is named after its folder), all in Claude Code's format
``{"mcpServers": {NAME: {command, args, env} | {type: http|sse, url, headers}}}``. Merging never
overrides: a name already defined is refused for the later source and reported. A broken baseline
is a configuration error (:class:`McpConfigError`); a broken extension file is dropped whole.

No secret is ever in a file TierOps reads here: a value is written as ``${VAR}`` (the CLI expands
it in ``env``, ``headers``, ``args``, ``command``, ``url``, checked with 2.1.197; ``${VAR:-x}`` too)
and TierOps copies VAR from its own environment into the CLI's, or as an ``env`` entry
``NAME_FILE: /abs/path`` that TierOps reads at launch and passes as NAME (``mcp_launch``). A
literal that looks like a secret (a secret-named variable or header, a known token shape, a
password in a URL, the value after ``--token``) is refused, and the message never quotes it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from app.config import Settings
from app.errors import ConfigError
from app.redact import Redactor, secret_name

log = logging.getLogger(__name__)

BASELINE = "baseline"
EXTENSION_FILE = "mcp.json"
TRANSPORTS = ("stdio", "http", "sse")
KEYS = {"stdio": ("type", "command", "args", "env"), "http": ("type", "url", "headers"),
        "sse": ("type", "url", "headers")}
MAX_FILE_BYTES = 1024 * 1024
NAME_MAX = 64
SERVER_NAME = re.compile(r"[A-Za-z0-9_-]+")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
REFERENCE = re.compile(r"\$\{([^}]*)\}")
REFERENCE_INNER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(:-.*)?", re.S)
AUTH_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key"})
# Names TierOps never puts into the CLI's own environment for an MCP server (a ${VAR} reference or
# a NAME_FILE entry would): what the CLI, its runtime or its HTTP client read themselves.
RESERVED_PREFIXES = ("ANTHROPIC_", "CLAUDE_", "TIEROPS_", "NODE_", "BUN_", "LD_", "DYLD_", "DISABLE_", "MCP_", "OTEL_")
RESERVED_NAMES = frozenset({"PATH", "HOME", "SHELL", "TMPDIR", "USER", "PWD", "LANG", "LC_ALL", "TZ", "IS_SANDBOX",
                            "SSL_CERT_FILE", "SSL_CERT_DIR", "MAX_MCP_OUTPUT_TOKENS"})
FIX = "put it in TierOps' environment and write ${VAR}, or use an env entry NAME_FILE: /path/to/file"

_shapes = Redactor()  # the known credential shapes only (no values)


class McpConfigError(ConfigError):
    """The baseline MCP configuration cannot be used; ``problems`` says every reason."""

    def __init__(self, problems: list[McpProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


@dataclass(frozen=True)
class McpProblem:
    path: str
    server: str | None
    message: str  # what is wrong and what to do

    def __str__(self) -> str:
        where = f"{self.path}: server {self.server!r}" if self.server else self.path
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class McpServer:
    name: str
    source: str  # "baseline" or "extension NAME"
    path: Path
    transport: str  # stdio | http | sse
    config: dict[str, Any]  # as written, validated (NAME_FILE entries still in env)
    secret_files: dict[str, Path] = field(default_factory=dict)  # NAME → file read at launch
    references: frozenset[str] = frozenset()  # ${VAR}: VAR must be set at launch
    optional: frozenset[str] = frozenset()  # ${VAR:-default}: passed on when set
    secret_references: frozenset[str] = frozenset()  # VARs whose values are secrets (redacted)

    @property
    def target(self) -> str:
        """What it runs or reaches, for listings (the url, or the command and its arguments)."""
        if self.transport == "stdio":
            return " ".join([self.config["command"], *self.config.get("args", [])])
        return str(self.config["url"])


@dataclass
class McpServers:
    servers: dict[str, McpServer] = field(default_factory=dict)
    warnings: list[McpProblem] = field(default_factory=list)  # extension files dropped, names refused


def reserved(name: str) -> bool:
    upper = name.upper()
    return upper in RESERVED_NAMES or upper.startswith(RESERVED_PREFIXES) or upper.endswith("_PROXY")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} appears twice in one object; keep one")
        out[key] = value
    return out


class _Server:
    """Checks one server entry, collecting every problem (never raising)."""

    def __init__(self, path: str, name: str, entry: Any) -> None:
        self.path, self.name, self.entry = path, name, entry
        self.problems: list[McpProblem] = []
        self.refs: set[str] = set()
        self.optional: set[str] = set()
        self.secret_refs: set[str] = set()
        self.files: dict[str, Path] = {}

    def problem(self, message: str) -> None:
        self.problems.append(McpProblem(self.path, self.name, message))

    def check(self) -> str | None:
        """The server's transport, or None when the entry is unusable."""
        if len(self.name) > NAME_MAX or not SERVER_NAME.fullmatch(self.name) or "__" in self.name:
            self.problem(f"a server name holds 1 to {NAME_MAX} letters, digits, '_' and '-', never '__' (tools are "
                         "named mcp__SERVER__TOOL); rename it")
        if not isinstance(self.entry, dict):
            self.problem('a server is a JSON object: {"command": ..., "args": [...]} or {"type": "http", "url": ...}')
            return None
        kind = self.entry.get("type", "stdio" if "command" in self.entry or "url" not in self.entry else None)
        if kind is None:
            self.problem('a server with a "url" needs "type": "http" or "sse"')
            return None
        if kind not in TRANSPORTS:
            self.problem(f"unknown transport {str(kind)[:40]!r}: use a stdio server (\"command\") or \"type\": "
                         "\"http\" / \"sse\" with a \"url\"")
            return None
        for key in self.entry:
            if key not in KEYS[kind]:
                self.problem(f"unknown key {key[:40]!r} for a {kind} server; it may have {', '.join(KEYS[kind])}")
        if kind == "stdio":
            self._stdio()
        else:
            self._remote()
        return kind if not self.problems else None

    def _stdio(self) -> None:
        command = self.entry.get("command")
        if not isinstance(command, str) or not command.strip():
            self.problem('missing "command": a stdio server names the program to run ("command": "/usr/bin/x")')
        else:
            self._text(command, "command")
        args = self.entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            self.problem('"args" is a list of strings')
        else:
            for i, arg in enumerate(args):
                self._text(arg, f"args[{i}]")
                option, eq, value = arg.partition("=")
                if arg.startswith("-") and secret_name(option.lstrip("-").replace("-", "_")):
                    if eq and value and not REFERENCE.search(value):
                        self._literal_secret(f"args[{i}]")
                    elif not eq and i + 1 < len(args) and not REFERENCE.search(args[i + 1]):
                        self._literal_secret(f"args[{i + 1}] (the value of {option[:40]})")
        self._env(self.entry.get("env", {}))

    def _env(self, env: Any) -> None:
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            self.problem('"env" is an object of strings ({"NAME": "value"})')
            return
        for key, value in env.items():
            if not ENV_NAME.fullmatch(key):
                self.problem(f"env: {key[:40]!r} is not a variable name (letters, digits, '_')")
                continue
            if key.endswith("_FILE") and value and not REFERENCE.search(value):
                self._secret_file(key[: -len("_FILE")], value, env)
                continue
            refs = self._text(value, f"env {key}")
            if secret_name(key):
                self.secret_refs.update(refs)
                if value and not refs:
                    self._literal_secret(f"env {key}")

    def _secret_file(self, name: str, value: str, env: dict[str, Any]) -> None:
        where = f"env {name}_FILE"
        if not ENV_NAME.fullmatch(name):
            self.problem(f"{where}: {name!r} is not a variable name")
        elif reserved(name):
            self.problem(f"{where}: {name} is a name the CLI or its runtime reads itself; choose another name")
        elif name in env:
            self.problem(f"{where}: {name} is also given directly; keep one of them")
        elif not Path(value).is_absolute():
            self.problem(f"{where}: the secret file must be an absolute path (TierOps reads it at launch)")
        else:
            self.files[name] = Path(value)

    def _remote(self) -> None:
        url = self.entry.get("url")
        if not isinstance(url, str) or not url.strip():
            self.problem('missing "url": an http or sse server names its address ("url": "https://…/mcp")')
        else:
            self._url(url)
        headers = self.entry.get("headers", {})
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            self.problem('"headers" is an object of strings ({"Authorization": "Bearer ${TOKEN}"})')
            return
        for key, value in headers.items():
            if not HEADER_NAME.fullmatch(key):
                self.problem(f"headers: {key[:40]!r} is not a header name")
                continue
            refs = self._text(value, f"header {key}")
            if key.lower() in AUTH_HEADERS or secret_name(key.replace("-", "_")):
                self.secret_refs.update(refs)
                if value and not refs:
                    self._literal_secret(f"header {key}")

    def _url(self, url: str) -> None:
        self._text(url, "url")
        try:
            parts = urlsplit(url)
        except ValueError:
            self.problem('"url" is not a URL')
            return
        if parts.scheme not in ("http", "https") or not parts.netloc:
            self.problem('"url" must be an http:// or https:// address')
        if parts.password and not REFERENCE.search(parts.password):
            self._literal_secret("the url's password")
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if secret_name(key) and value and not REFERENCE.search(value):
                self._literal_secret(f"the url's query parameter {key[:40]}")

    def _text(self, value: str, where: str) -> set[str]:
        """The ${VAR} references in ``value`` (recorded); a malformed one or a literal secret shape is a problem."""
        if "\0" in value:
            self.problem(f"{where}: holds a NUL character")
        found: set[str] = set()
        for match in REFERENCE.finditer(value):
            inner = REFERENCE_INNER.fullmatch(match.group(1))
            if inner is None:
                self.problem(f"{where}: {match.group(0)[:60]!r} is not a reference; write ${{VAR}} or ${{VAR:-default}}")
                continue
            name = inner.group(1)
            if reserved(name):
                self.problem(f"{where}: ${{{name}}} names a variable of the CLI or its runtime, which TierOps never "
                             "hands to an MCP server; use a variable of its own")
                continue
            (self.optional if inner.group(2) is not None else self.refs).add(name)
            found.add(name)
        rest = REFERENCE.sub("", value)
        if "${" in rest:
            self.problem(f"{where}: an unclosed '${{'; write ${{VAR}}")
        if _shapes(rest) != rest:
            self._literal_secret(where)
        return found

    def _literal_secret(self, where: str) -> None:
        self.problem(f"{where} holds a literal secret (not shown); {FIX}")

    def server(self, transport: str, source: str, path: Path) -> McpServer:
        return McpServer(self.name, source, path, transport, dict(self.entry), dict(self.files),
                         frozenset(self.refs - self.optional), frozenset(self.optional - self.refs),
                         frozenset(self.secret_refs))


def parse_text(text: str, path: Path, source: str) -> tuple[list[McpServer], list[McpProblem]]:
    """The servers of one file's text and every problem found (a file with a problem is unusable)."""
    where = str(path)
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates)
    except ValueError as exc:
        return [], [McpProblem(where, None, f"not valid JSON ({exc}); fix the file (`python -m json.tool` shows "
                                            "where)")]
    if not isinstance(doc, dict):
        return [], [McpProblem(where, None, 'not a JSON object; write {"mcpServers": {"NAME": {...}}}')]
    extra = [k for k in doc if k != "mcpServers"]
    problems = [McpProblem(where, None, f"unknown top-level key {k[:40]!r}; the file holds \"mcpServers\" only")
                for k in extra]
    servers_doc = doc.get("mcpServers")
    if not isinstance(servers_doc, dict):
        return [], [*problems, McpProblem(where, None, 'missing "mcpServers" object: {"mcpServers": {"NAME": {...}}}')]
    servers: list[McpServer] = []
    for name, entry in servers_doc.items():
        check = _Server(where, name, entry)
        transport = check.check()
        problems += check.problems
        if transport is not None:
            servers.append(check.server(transport, source, path))
    return servers, problems


def read_file(path: Path, source: str) -> tuple[list[McpServer], list[McpProblem]]:
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        return [], [McpProblem(str(path), None, f"cannot be read ({exc.strerror or exc}); fix the path or its "
                                                "permissions")]
    if len(raw) > MAX_FILE_BYTES:
        return [], [McpProblem(str(path), None, f"larger than {MAX_FILE_BYTES // 1024} KiB; is it the right file?")]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return [], [McpProblem(str(path), None, "not UTF-8 text")]
    return parse_text(text, path, source)


def extension_files(dirs: Iterable[Path]) -> list[tuple[str, Path]]:
    """(``extension NAME``, its mcp.json) for every extension folder holding one (or where one
    cannot be looked for: reading it then reports why)."""
    found = []
    for d in dirs:
        try:
            present = (d / EXTENSION_FILE).is_file()
        except OSError:
            present = True
        if present:
            found.append((f"extension {d.name}", d / EXTENSION_FILE))
    return found


def merge(sources: Iterable[tuple[str, list[McpServer], list[McpProblem]]]) -> McpServers:
    """Merge in order, never overriding. The baseline (source ``baseline``) with problems raises
    :class:`McpConfigError`; an extension with problems is dropped whole, with warnings."""
    merged = McpServers()
    for source, servers, problems in sources:
        if problems:
            if source == BASELINE:
                raise McpConfigError(problems)
            merged.warnings += problems
            merged.warnings.append(McpProblem(problems[0].path, None, f"{source}: its MCP servers are left out until "
                                                                     "the file is fixed"))
            continue
        for server in servers:
            earlier = merged.servers.get(server.name)
            if earlier is not None:
                merged.warnings.append(McpProblem(str(server.path), server.name, f"already defined by {earlier.source} "
                                                  f"({earlier.path}); {source} cannot replace it: rename it there"))
                continue
            merged.servers[server.name] = server
    return merged


def load_servers(settings: Settings) -> McpServers:
    """Every usable server of the baseline and the extensions. Raises :class:`McpConfigError` for a
    broken baseline; extension problems are in ``warnings`` (and logged once each)."""
    sources: list[tuple[str, list[McpServer], list[McpProblem]]] = []
    if settings.mcp_config is not None:
        sources.append((BASELINE, *read_file(settings.mcp_config, BASELINE)))
    for source, path in extension_files(settings.extension_dirs()):
        sources.append((source, *read_file(path, source)))
    merged = merge(sources)
    for warning in merged.warnings:
        _warn_once(str(warning))
    return merged


_warned: set[str] = set()


def _warn_once(text: str) -> None:
    """Log an extension's problem once per process, not on every session that loads the servers."""
    if text not in _warned:
        _warned.add(text)
        log.warning("MCP servers: %s", text)
