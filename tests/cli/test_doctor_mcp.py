"""`tierops doctor`'s MCP line and the commands that run cycles refusing a broken MCP baseline, as
real subprocesses: servers with their source, transport and the tools each run may call; what an
extension could not bring; what would fail a launch; never a secret value."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli import forkserver
from tests.cli.test_doctor import doctor
from tests.fakes.claude_control import REPO

TOKEN_VALUE = "doctor-mcp-secret-6e2f9a"


def mcp_line(out: str) -> tuple[str, str]:
    [line] = [x for x in out.splitlines() if x.split(None, 1)[1].startswith("mcp servers")]
    status, rest = line.split(None, 1)
    return status, rest[len("mcp servers"):].strip()


def write(path: Path, doc: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_doctor_lists_the_servers_and_what_each_run_may_call(tmp_path):
    secret = write(tmp_path / "ops-token", TOKEN_VALUE)
    baseline = write(tmp_path / "mcp.json", {"mcpServers": {
        "grafana": {"type": "http", "url": "https://grafana.internal/mcp",
                    "headers": {"Authorization": "Bearer ${GRAFANA_TOKEN}"}},
        "ops": {"command": "/usr/bin/ops-mcp", "env": {"OPS_TOKEN_FILE": str(secret)}}}})
    write(tmp_path / "infra" / "mcp.json", {"mcpServers": {"ops": {"command": "/tmp/evil"}}})
    env = {"TIEROPS_MCP_CONFIG": str(baseline), "TIEROPS_EXTENSIONS": str(tmp_path / "infra"),
           "TIEROPS_MCP_READ_ONLY_TOOLS": "mcp__grafana__query_*", "GRAFANA_TOKEN": TOKEN_VALUE}
    status, detail = mcp_line(doctor(tmp_path, env=env).stdout)
    assert status == "warn", detail
    assert detail.startswith("grafana (baseline, http https://grafana.internal/mcp): tier 1 and dry runs: query_*, "
                             "tier 2: every tool, tier 3: every tool; ops (baseline, stdio /usr/bin/ops-mcp): tier 1 "
                             "and dry runs: none, tier 2: every tool, tier 3: every tool; left out: ")
    assert "server 'ops': already defined by baseline" in detail and "extension infra cannot replace it" in detail

    # a variable not set: a session using the server would fail, and the doctor says so first
    out = doctor(tmp_path, env={**env, "GRAFANA_TOKEN": ""} | {"TIEROPS_EXTENSIONS": ""})
    status, detail = mcp_line(out.stdout)
    assert status == "ok", detail  # an empty value is set
    out = doctor(tmp_path, env={k: v for k, v in env.items() if k not in ("GRAFANA_TOKEN", "TIEROPS_EXTENSIONS")})
    status, detail = mcp_line(out.stdout)
    assert status == "fail" and "a session using them would fail: " in detail
    assert "${GRAFANA_TOKEN} is not set in TierOps' environment" in detail
    assert "mcp servers" in out.stderr  # among the failed checks
    assert TOKEN_VALUE not in out.stdout + out.stderr


def test_a_broken_baseline_fails_the_doctor_and_the_commands_that_run_cycles(tmp_path):
    baseline = write(tmp_path / "mcp.json", {"mcpServers": {"ops": {"command": "x",
                                                                    "env": {"DB_PASSWORD": TOKEN_VALUE}}}})
    env = {"TIEROPS_MCP_CONFIG": str(baseline)}
    status, detail = mcp_line(doctor(tmp_path, env=env).stdout)
    assert status == "fail"
    assert detail == (f"{baseline}: server 'ops': env DB_PASSWORD holds a literal secret (not shown); put it in "
                      "TierOps' environment and write ${VAR}, or use an env entry NAME_FILE: /path/to/file; model "
                      "sessions cannot start until it is fixed")
    run = forkserver.run("app", ["run", "--tier", "1"], env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                                                            "TIEROPS_HOME": str(tmp_path / "home"), **env},
                         cwd=tmp_path, timeout=60, text=True)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.startswith(f"tierops: error: the MCP configuration cannot be used: {baseline}: server 'ops': "
                                 "env DB_PASSWORD holds a literal secret (not shown)")
    assert TOKEN_VALUE not in run.stdout + run.stderr
    bad_pattern = forkserver.run("app", ["run", "--tier", "1"], env={
        "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "TIEROPS_HOME": str(tmp_path / "home"),
        "TIEROPS_TIER2_MCP_TOOLS": "grafana"}, cwd=tmp_path, timeout=60, text=True)
    assert bad_pattern.returncode == 2
    assert "TIEROPS_TIER2_MCP_TOOLS: 'grafana' is not an MCP tool pattern" in bad_pattern.stderr
