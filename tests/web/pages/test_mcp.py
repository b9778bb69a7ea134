"""MCP servers on the pages and in the API: a session's servers as its init line reported them
(a failed one is a warning on the session page), MCP tool calls in the transcript, and the
``/config`` page's list of servers without a secret value.

Sessions are the real CLI's captures (p_mcp_stdio_server, p_mcp_server_failed) ingested by the
engine; the real CLI run through TierOps' own runner is tests/realcli/test_mcp.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app.engine.ingest import ingest_path
from tests.helpers import fixture_stream

pytestmark = pytest.mark.timeout(60)


def ingest(srv, scenario: str) -> int:
    report, _ = srv.run_async(lambda st: ingest_path(st.db, fixture_stream(scenario), st.validator, st.settings, tier=1))
    return int(report["id"])


def _section(html: str, element_id: str) -> str:
    start = html.index(f'id="{element_id}"')
    return html[start:html.index("</section>", start)]


def test_a_connected_server_and_its_tool_call(app_server):
    srv = app_server()
    pk = ingest(srv, "p_mcp_stdio_server")
    with srv.client() as c:
        html = c.get(f"/sessions/{pk}").text
        body = c.get(f"/api/v1/sessions/{pk}").json()
        lines = c.get(f"/api/v1/sessions/{pk}/activity").json()
    assert body["mcp_servers"] == [{"name": "ops", "status": "connected"}]
    assert 'id="mcp-warning"' not in html
    details = _section(html, "details")
    assert re.search(r'id="mcp-servers"><code>ops</code> <span class="muted">connected</span>', details), details
    # the call and its result, as any tool call: named, with its input and the server's answer
    transcript = _section(html, "transcript-section")
    assert ('MCP tool call <span class="tool-name">mcp__ops__service_status</span> '
            '<span class="muted small">(server ops, tool service_status)</span>') in transcript
    assert '<pre class="json">{\n  &#34;name&#34;: &#34;api&#34;\n}</pre>' in transcript  # its input
    assert "service api: active (running) since 2026-11-26 08:00 UTC; 0 restarts" in transcript
    assert '<details class="tool-result">' in transcript  # a result, not an error
    # the init line's one-line display names the server too
    assert lines[0]["display"].endswith(" mcp ops=connected")


def test_a_server_that_failed_is_a_warning(app_server):
    srv = app_server()
    pk = ingest(srv, "p_mcp_server_failed")
    with srv.client() as c:
        html = c.get(f"/sessions/{pk}").text
        body = c.get(f"/api/v1/sessions/{pk}").json()
    assert body["mcp_servers"] == [{"name": "ops", "status": "failed"}]
    verdict = _section(html, "verdict")
    warning = verdict[verdict.index('id="mcp-warning"'):]
    warning = warning[:warning.index("</p>")]
    assert "<code>ops</code> (failed)" in warning and "its tools were not available to the model" in warning
    assert 'class="banner attention"' in verdict
    assert '<code>ops</code> <span class="badge warn">failed</span>' in _section(html, "details")
    # the model's call was refused by the CLI: shown as a tool error
    assert "No such tool available: mcp__ops__service_status" in _section(html, "transcript-section")


def test_sessions_without_mcp(app_server):
    srv = app_server()
    pk = ingest(srv, "c_structured")
    with srv.client() as c:
        html = c.get(f"/sessions/{pk}").text
        body = c.get(f"/api/v1/sessions/{pk}").json()
    assert body["mcp_servers"] == []
    assert 'id="mcp-warning"' not in html and 'id="mcp-servers">—</dd>' in html


def test_the_config_page_lists_servers_and_never_a_secret(app_server, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("GRAFANA_TOKEN", "grafana-secret-value-93c1")
    secret = tmp_path / "ops-token"
    secret.write_text("ops-secret-value-41aa")
    baseline = tmp_path / "mcp.json"
    baseline.write_text(json.dumps({"mcpServers": {
        "grafana": {"type": "http", "url": "https://grafana.internal/mcp",
                    "headers": {"Authorization": "Bearer ${GRAFANA_TOKEN}"}},
        "ops": {"command": "/usr/bin/ops-mcp", "env": {"OPS_TOKEN_FILE": str(secret)}}}}))
    ext = tmp_path / "infra-repo"
    ext.mkdir()
    (ext / "mcp.json").write_text(json.dumps({"mcpServers": {"grafana": {"command": "/tmp/other"},
                                                             "k8s": {"command": "/usr/bin/k8s-mcp"}}}))
    srv = app_server(mcp_config=baseline, extensions=str(ext), mcp_read_only_tools="mcp__grafana__query_*",
                     tier2_mcp_tools="mcp__grafana,mcp__k8s__get_*")
    with srv.client() as c:
        html = c.get("/config").text
    section = _section(html, "mcp")
    for row, cells in (("grafana", ["baseline", "http", "https://grafana.internal/mcp", "query_*", "every tool"]),
                       ("ops", ["baseline", "stdio", "/usr/bin/ops-mcp"]),
                       ("k8s", ["extension infra-repo", "stdio", "/usr/bin/k8s-mcp", "get_*"])):
        tr = section[section.index(f'id="mcp-{row}"'):]
        tr = tr[:tr.index("</tr>")]
        assert all(cell in tr for cell in cells), (row, tr)
    assert "Left out:" in section and "already defined by baseline" in section
    assert "grafana-secret-value-93c1" not in html and "ops-secret-value-41aa" not in html
    assert "A session using them would fail" not in section


def test_the_config_page_says_when_the_baseline_is_broken(app_server, tmp_path: Path):
    broken = tmp_path / "mcp.json"
    broken.write_text('{"mcpServers": {"ops": {"command": "x", "env": {"DB_PASSWORD": "hunter2hunter2"}}}}')
    srv = app_server(mcp_config=broken)
    with srv.client() as c:
        section = _section(c.get("/config").text, "mcp")
    assert "The MCP configuration cannot be used" in section and "env DB_PASSWORD holds a literal secret" in section
    assert "hunter2hunter2" not in section
