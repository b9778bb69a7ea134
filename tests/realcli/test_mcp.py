"""MCP servers through TierOps' own session runner, with the REAL claude CLI (2.1.197) against the
fake Messages API and a real stdio MCP server written with the official ``mcp`` SDK
(tests/fixtures/mcp/ops_server.py).

One CLI start covers it all (each costs about a second): the tier-1 run gets ``--mcp-config``
inline with ``--strict-mcp-config`` and its read-only MCP tools in ``--allowedTools``; the model
calls the allowed tool and the call and its result are in the transcript; a tool tier 1 is not
given is refused by the CLI; the server receives its secret from a ``NAME_FILE`` entry and a
``${VAR}`` from TierOps' environment (the CLI expands it), but not the CLI's API key; what the
server echoes of its secret is masked in the stored stream; the stored command line holds
references only; the session row keeps ``mcp_servers`` with a server that failed to start, and
the session page and the API show it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest

from app.redact import MASK
from app.supervisor.session import TierRequest, run_tier_session
from app.web.app import create_app
from tests.fakes.fake_anthropic import FakeAnthropic, message, structured
from tests.realcli.test_supervisor_e2e import (
    HEALTHY,
    activity,
    child_env,  # noqa: F401 (a fixture: the CLI's environment, pointed at the fake API)
    make_settings,
    open_supervisor,
    session_row,
)

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(120), pytest.mark.usefixtures("child_env")]

SERVERS = Path(__file__).resolve().parents[1] / "fixtures" / "mcp"
MATCH = "TIEROPS-MCP-CASE-3c9e"
FILE_SECRET = "mcp-file-secret-5d1e8a7b2c"
READ_ONLY = "mcp__ops__service_status,mcp__ops__env_value,mcp__broken__*"


def call(tool: str, **inp: str) -> dict:
    return {"type": "tool_use", "name": tool, "input": inp}


def tool_results(lines: list[dict]) -> dict[str, dict]:
    """tool_use id → its tool_result block, from the stored stream."""
    out: dict[str, dict] = {}
    for line in lines:
        data = json.loads(line["raw"])
        for block in (data.get("message") or {}).get("content") or []:
            if block.get("type") == "tool_result":
                out[block["tool_use_id"]] = block
    return out


async def test_a_tier_session_uses_an_mcp_server(claude_bin, fake_api, tmp_path, monkeypatch) -> None:
    token = tmp_path / "ops-token"
    token.write_text(FILE_SECRET + "\n")
    token.chmod(0o600)
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "ops": {"command": sys.executable, "args": [str(SERVERS / "ops_server.py")],
                "env": {"OPS_TOKEN_FILE": str(token), "OPS_REGION": "${OPS_REGION}"}},
        "broken": {"command": sys.executable, "args": [str(SERVERS / "broken_server.py")]},
        "unused": {"command": "/nonexistent/never-started"},  # no tier-1 pattern reaches it
    }}))
    monkeypatch.setenv("OPS_REGION", "eu-west-1")
    settings = make_settings(claude_bin, tmp_path, mcp_config=config, mcp_read_only_tools=READ_ONLY, guard=False)
    fake_api.script(MATCH, [
        message({"type": "text", "text": "Checking the service."}, call("mcp__ops__service_status", name="api"),
                call("mcp__ops__env_value", name="OPS_TOKEN"), call("mcp__ops__env_value", name="ANTHROPIC_API_KEY"),
                call("mcp__ops__env_value", name="OPS_REGION"), call("mcp__ops__restart_service", name="api")),
        structured(HEALTHY)])

    async with open_supervisor(settings) as (sup, db):
        req = TierRequest(tier=1, prompt=f"{MATCH}: is api running?", system_prompt="You are TierOps tier 1.",
                          trigger="manual")
        result = await run_tier_session(db, settings, sup.validator, None, req)
        row = await session_row(db, result.pk)
        lines = await activity(db, result.pk)

    assert (row["status"], row["source"]) == ("completed", "structured_output"), (row["status_reason"],
                                                                                row["stderr_tail"])
    # The servers as the init line reported them: one connected, one that could not start. TierOps
    # runs the CLI with MCP_CONNECTION_NONBLOCKING=0, so no server is still "pending" at the first turn.
    assert json.loads(row["mcp_servers"]) == [{"name": "ops", "status": "connected"},
                                              {"name": "broken", "status": "failed"}]

    # The command line: the config inline with references only, strict, the allowed MCP tools.
    argv = json.loads(row["argv"])
    mcp = json.loads(argv[argv.index("--mcp-config") + 1])["mcpServers"]
    assert argv[argv.index("--mcp-config") + 2] == "--strict-mcp-config"
    assert set(mcp) == {"ops", "broken"}  # "unused" is reached by no tier-1 pattern: not started
    assert mcp["ops"]["env"]["OPS_TOKEN"] == "${OPS_TOKEN}" and mcp["ops"]["env"]["ANTHROPIC_API_KEY"] == ""
    assert "OPS_TOKEN_FILE" not in mcp["ops"]["env"] and FILE_SECRET not in row["argv"]
    allowed = argv[argv.index("--allowedTools") + 1].split(",")
    assert allowed[-3:] == ["mcp__ops__service_status", "mcp__ops__env_value", "mcp__broken"]

    # The calls in the transcript with their results.
    results = tool_results(lines)
    uses = [b for line in lines if line["type"] == "assistant"
            for b in json.loads(line["raw"])["message"]["content"] if b.get("type") == "tool_use"]
    assert [u["name"] for u in uses][:5] == ["mcp__ops__service_status", "mcp__ops__env_value", "mcp__ops__env_value",
                                             "mcp__ops__env_value", "mcp__ops__restart_service"], uses
    status, secret, api_key, region, restart = (results[u["id"]] for u in uses[:5])
    assert "service api: active (running) since 2026-11-26 08:00 UTC; 0 restarts" in status["content"]
    assert status.get("is_error") is not True
    # The secret reached the server (from its file), and what the server echoed is masked.
    assert f"OPS_TOKEN='{MASK}'" in secret["content"]
    assert all(FILE_SECRET not in line["raw"] and FILE_SECRET not in line["display"] for line in lines)
    # The CLI's own credential is not inherited by the server; ${OPS_REGION} was expanded by the CLI.
    assert "ANTHROPIC_API_KEY=''" in api_key["content"]
    assert "OPS_REGION='eu-west-1'" in region["content"]
    # A tool tier 1 is not given: the CLI refused it.
    assert restart["is_error"] is True and "restart_service" in restart["content"]
    assert [d["tool_name"] for d in json.loads(row["permission_denials"])] == ["mcp__ops__restart_service"]
    # The model saw the server's tools (those of the failed one: none).
    first = next(r for r in fake_api.message_requests if r.get("script") == MATCH)
    assert {"mcp__ops__service_status", "mcp__ops__env_value"} <= set(FakeAnthropic.tool_names(first))
    assert not [t for t in FakeAnthropic.tool_names(first) if t.startswith("mcp__broken")]

    # The session page warns about the failed server; the API carries the list.
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app, client=("127.0.0.1", 50000))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as client:
            html = (await client.get(f"/sessions/{result.pk}")).text
            body = (await client.get(f"/api/v1/sessions/{result.pk}")).json()
    assert body["mcp_servers"] == [{"name": "ops", "status": "connected"}, {"name": "broken", "status": "failed"}]
    warning = html[html.index('id="mcp-warning"'):]
    assert "<code>broken</code> (failed)" in warning[:warning.index("</p>")]
    assert "MCP tool call <span class=\"tool-name\">mcp__ops__service_status</span>" in html
    assert FILE_SECRET not in html
