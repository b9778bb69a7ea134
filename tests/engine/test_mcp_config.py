"""``app/engine/mcp_config.py``: the MCP config files read strictly, merged without overrides,
and no literal secret accepted (the messages never quote one)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from app.config import Settings
from app.engine import mcp_config as mc

GHP = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"  # a GitHub token's shape


def servers_of(doc: object) -> dict:
    return {"mcpServers": doc}


def parse(doc: object, source: str = mc.BASELINE) -> tuple[list[mc.McpServer], list[str]]:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    servers, problems = mc.parse_text(text, Path("/etc/tierops/mcp.json"), source)
    return servers, [str(p) for p in problems]


# -- what is accepted -------------------------------------------------------------------------

@pytest.mark.parametrize(("entry", "transport", "refs", "optional", "files", "secret_refs"), [
    ({"command": "/usr/bin/python3", "args": ["server.py"]}, "stdio", set(), set(), {}, set()),
    ({"type": "stdio", "command": "ops-mcp", "env": {"LEVEL": "info", "PWD_HINT": ""}}, "stdio", set(), set(), {}, set()),
    ({"command": "x", "env": {"API_TOKEN": "${OPS_TOKEN}"}}, "stdio", {"OPS_TOKEN"}, set(), {}, {"OPS_TOKEN"}),
    ({"command": "x", "env": {"GRAFANA_TOKEN_FILE": "/run/secrets/grafana"}}, "stdio", set(), set(),
     {"GRAFANA_TOKEN": "/run/secrets/grafana"}, set()),
    ({"command": "x", "args": ["--url", "${OPS_URL}", "--token", "${OPS_TOKEN}"]}, "stdio", {"OPS_URL", "OPS_TOKEN"},
     set(), {}, set()),
    ({"command": "x", "args": ["--password=${DB_PW}"], "env": {"MODE": "${OPS_MODE:-read}"}}, "stdio", {"DB_PW"},
     {"OPS_MODE"}, {}, set()),
    # a *_FILE entry that refers to a variable is passed on as it is (a path the server reads itself)
    ({"command": "x", "env": {"CA_FILE": "${OPS_CA}"}}, "stdio", {"OPS_CA"}, set(), {}, set()),
    ({"type": "http", "url": "https://grafana.internal/mcp", "headers": {"Authorization": "Bearer ${GRAFANA_TOKEN}"}},
     "http", {"GRAFANA_TOKEN"}, set(), {}, {"GRAFANA_TOKEN"}),
    ({"type": "sse", "url": "http://127.0.0.1:9000/sse?token=${SSE_TOKEN}"}, "sse", {"SSE_TOKEN"}, set(), {}, set()),
    ({"type": "http", "url": "https://x/mcp", "headers": {"X-Team": "ops"}}, "http", set(), set(), {}, set()),
])
def test_a_valid_server(entry, transport, refs, optional, files, secret_refs):
    servers, problems = parse(servers_of({"ops": entry}))
    assert problems == []
    [server] = servers
    assert (server.name, server.transport, server.source) == ("ops", transport, "baseline")
    assert set(server.references) == refs and set(server.optional) == optional
    assert {k: str(v) for k, v in server.secret_files.items()} == files
    assert set(server.secret_references) == secret_refs
    assert server.config == entry


# -- what is refused, and what the message says ----------------------------------------------

@pytest.mark.parametrize(("doc", "says"), [
    ("{not json", "not valid JSON"),
    ("", "not valid JSON"),
    ("[]", "not a JSON object"),
    ("{}", 'missing "mcpServers" object'),
    ({"mcpServers": []}, 'missing "mcpServers" object'),
    ({"mcpServers": {}, "servers": {}}, "unknown top-level key 'servers'"),
    ('{"mcpServers": {"a": {"command": "x"}, "a": {"command": "y"}}}', "the key 'a' appears twice"),
    (servers_of({"ops": "python server.py"}), "a server is a JSON object"),
    (servers_of({"ops": {"type": "ws", "url": "ws://x"}}), "unknown transport 'ws'"),
    (servers_of({"ops": {"type": 7, "command": "x"}}), "unknown transport '7'"),
    (servers_of({"ops": {"url": "https://x/mcp"}}), 'needs "type": "http" or "sse"'),
    (servers_of({"ops": {"args": ["a"]}}), 'missing "command"'),
    (servers_of({"ops": {"command": "  "}}), 'missing "command"'),
    (servers_of({"ops": {"command": "x", "args": "a b"}}), '"args" is a list of strings'),
    (servers_of({"ops": {"command": "x", "url": "https://x"}}), "unknown key 'url' for a stdio server"),
    (servers_of({"ops": {"command": "x", "cwd": "/tmp"}}), "unknown key 'cwd'"),
    (servers_of({"ops": {"command": "x", "env": ["A=1"]}}), '"env" is an object of strings'),
    (servers_of({"ops": {"command": "x", "env": {"A": 1}}}), '"env" is an object of strings'),
    (servers_of({"ops": {"command": "x", "env": {"1A": "x"}}}), "'1A' is not a variable name"),
    (servers_of({"ops": {"type": "http"}}), 'missing "url"'),
    (servers_of({"ops": {"type": "http", "url": "ftp://x/mcp"}}), "must be an http:// or https:// address"),
    (servers_of({"ops": {"type": "http", "url": "https://x", "headers": {"A": 1}}}), '"headers" is an object'),
    (servers_of({"ops": {"type": "http", "url": "https://x", "headers": {"Bad Header": "x"}}}), "is not a header name"),
    (servers_of({"ops": {"type": "http", "url": "https://x", "command": "y"}}), "unknown key 'command' for a http"),
    (servers_of({"a b": {"command": "x"}}), "server 'a b': a server name holds"),
    (servers_of({"a__b": {"command": "x"}}), "never '__'"),
    (servers_of({"": {"command": "x"}}), "a server name holds"),
    (servers_of({"x" * 65: {"command": "x"}}), "a server name holds 1 to 64"),
    (servers_of({"ops": {"command": "x", "args": ["${}"]}}), "is not a reference"),
    (servers_of({"ops": {"command": "x", "args": ["${1X}"]}}), "is not a reference"),
    (servers_of({"ops": {"command": "x", "args": ["${OPEN"]}}), "an unclosed '${'"),
    (servers_of({"ops": {"command": "x", "env": {"K": "${ANTHROPIC_API_KEY}"}}}), "names a variable of the CLI"),
    (servers_of({"ops": {"command": "x", "env": {"K": "${TIEROPS_TOKEN}"}}}), "names a variable of the CLI"),
    (servers_of({"ops": {"command": "x", "args": ["${HTTPS_PROXY}"]}}), "names a variable of the CLI"),
    (servers_of({"ops": {"command": "x", "env": {"PATH_FILE": "/etc/p"}}}), "PATH is a name the CLI"),
    (servers_of({"ops": {"command": "x", "env": {"NODE_OPTIONS_FILE": "/etc/p"}}}), "a name the CLI or its runtime"),
    (servers_of({"ops": {"command": "x", "env": {"TOKEN_FILE": "secrets/t"}}}), "must be an absolute path"),
    (servers_of({"ops": {"command": "x", "env": {"TOKEN_FILE": "/t", "TOKEN": "${T}"}}}), "also given directly"),
])
def test_a_broken_file_or_server_says_what_and_where(doc, says):
    servers, problems = parse(doc)
    assert servers == [] or all(s.name != "ops" for s in servers)
    assert any(says in p for p in problems), problems
    assert all(p.startswith("/etc/tierops/mcp.json: ") for p in problems)


@pytest.mark.parametrize(("entry", "where"), [
    ({"command": "x", "env": {"GRAFANA_TOKEN": "glsa_0123456789abcdef"}}, "env GRAFANA_TOKEN"),
    ({"command": "x", "env": {"DB_PASSWORD": "hunter22"}}, "env DB_PASSWORD"),
    ({"command": "x", "env": {"NOTE": GHP}}, "env NOTE"),  # a token's shape under any name
    ({"command": "x", "args": ["--token", "s3cr3t-value"]}, "args[1] (the value of --token)"),
    ({"command": "x", "args": ["--api-key=s3cr3t-value"]}, "args[0]"),
    ({"command": "x", "args": [GHP]}, "args[0]"),
    ({"command": f"/opt/{GHP}/server"}, "command"),
    ({"type": "http", "url": "https://x/mcp", "headers": {"Authorization": "Bearer abcdef0123456789"}},
     "header Authorization"),
    ({"type": "http", "url": "https://x/mcp", "headers": {"X-Api-Key": "abcdef0123456789"}}, "header X-Api-Key"),
    ({"type": "http", "url": "https://x/mcp", "headers": {"Cookie": "session=abc"}}, "header Cookie"),
    ({"type": "http", "url": "https://ops:pa55word@x/mcp"}, "the url's password"),
    ({"type": "sse", "url": "https://x/sse?api_key=abcdef0123"}, "the url's query parameter api_key"),
])
def test_a_literal_secret_is_refused_and_never_quoted(entry, where):
    servers, problems = parse(servers_of({"ops": entry}))
    assert servers == []
    assert any(f"{where} holds a literal secret (not shown)" in p for p in problems), problems
    assert any("write ${VAR}, or use an env entry NAME_FILE: /path/to/file" in p for p in problems)
    secret_bits = ("glsa_0123", "hunter22", GHP, "s3cr3t", "abcdef0123", "pa55word", "session=abc")
    assert not any(bit in p for p in problems for bit in secret_bits), problems


# -- merging: baseline, then extensions, never an override ------------------------------------

def write(path: Path, doc: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_merge_baseline_then_extensions_without_overrides(tmp_path, caplog):
    baseline = write(tmp_path / "mcp.json", servers_of({"grafana": {"type": "http", "url": "https://g/mcp"},
                                                        "ops": {"command": "/bin/ops"}}))
    infra = write(tmp_path / "infra" / "mcp.json", servers_of({"grafana": {"command": "/tmp/evil"},
                                                               "k8s": {"command": "/bin/k8s"}}))
    write(tmp_path / "team" / "mcp.json", servers_of({"k8s": {"command": "/bin/other"}, "db": {"command": "/bin/db"}}))
    write(tmp_path / "broken" / "mcp.json", "{oops")
    write(tmp_path / "leaky" / "mcp.json", servers_of({"leak": {"command": "x", "env": {"API_TOKEN": "literal-1234"}},
                                                       "fine": {"command": "/bin/fine"}}))
    (tmp_path / "empty").mkdir()
    settings = Settings(mcp_config=baseline, extensions=",".join(str(tmp_path / n) for n in
                                                                 ("infra", "team", "broken", "leaky", "empty", "gone")))
    with caplog.at_level(logging.WARNING, logger="app.engine.mcp_config"):
        found = mc.load_servers(settings)
    assert {n: (s.source, s.target) for n, s in found.servers.items()} == {
        "grafana": ("baseline", "https://g/mcp"), "ops": ("baseline", "/bin/ops"),
        "k8s": ("extension infra", "/bin/k8s"), "db": ("extension team", "/bin/db")}
    warnings = [str(w) for w in found.warnings]
    assert f"{infra}: server 'grafana': already defined by baseline ({baseline}); extension infra cannot replace it" \
           in " | ".join(warnings)
    assert any("server 'k8s': already defined by extension infra" in w for w in warnings)
    assert any("broken/mcp.json: not valid JSON" in w for w in warnings)
    assert any("extension broken: its MCP servers are left out until the file is fixed" in w for w in warnings)
    # a broken extension file is dropped whole: its valid server too
    assert "fine" not in found.servers and any("extension leaky: its MCP servers are left out" in w for w in warnings)
    assert "literal-1234" not in " ".join(warnings)
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == len(warnings) and all("literal-1234" not in m for m in logged)
    # the same warnings are not logged again by the next session's load
    caplog.clear()
    mc.load_servers(settings)
    assert caplog.records == []


@pytest.mark.parametrize("content", ["{oops", servers_of({"ops": {"command": "x", "env": {"DB_PASSWORD": "x1234"}}})])
def test_a_broken_baseline_is_a_configuration_error(tmp_path, content):
    settings = Settings(mcp_config=write(tmp_path / "mcp.json", content))
    with pytest.raises(mc.McpConfigError) as err:
        mc.load_servers(settings)
    assert str(err.value).startswith(f"{tmp_path / 'mcp.json'}: ") and "x1234" not in str(err.value)


@pytest.mark.parametrize(("setup", "says"), [
    (lambda p: None, "cannot be read (No such file or directory)"),
    (lambda p: p.mkdir(), "cannot be read (Is a directory)"),
    (lambda p: p.write_bytes(b"\xff\xfe{}"), "not UTF-8 text"),
    (lambda p: p.write_bytes(b" " * (mc.MAX_FILE_BYTES + 1)), "larger than 1024 KiB"),
])
def test_an_unreadable_baseline(tmp_path, setup, says):
    path = tmp_path / "mcp.json"
    setup(path)
    with pytest.raises(mc.McpConfigError) as err:
        mc.load_servers(Settings(mcp_config=path))
    assert str(err.value) == f"{path}: {str(err.value).split(': ', 1)[1]}" and says in str(err.value)


def test_nothing_configured():
    found = mc.load_servers(Settings())
    assert found.servers == {} and found.warnings == []
