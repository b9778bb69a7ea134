"""app/probe/variables.py: ``${TIEROPS_SERVE_URL}`` and friends in a checks file, and the example
file's self-checks following ``tierops serve --port`` (a real ``serve`` on a free port, its real
tier-0 cycle, read back from its SQLite file)."""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.probe.inventory import InventoryError, load_inventory
from app.probe.variables import SERVE_DEFAULTS, SERVE_VARIABLES, serve_environment, substitute
from tests.fakes.claude_control import REPO

pytestmark = pytest.mark.timeout(120)


def test_serve_environment_is_how_this_host_reaches_serve():
    assert serve_environment("127.0.0.1", 8080) == {"TIEROPS_SERVE_URL": "http://127.0.0.1:8080",
                                                    "TIEROPS_SERVE_HOST": "127.0.0.1", "TIEROPS_SERVE_PORT": "8080"}
    assert serve_environment("0.0.0.0", 9000)["TIEROPS_SERVE_URL"] == "http://127.0.0.1:9000"
    assert serve_environment("::", 9000) == {"TIEROPS_SERVE_URL": "http://[::1]:9000", "TIEROPS_SERVE_HOST": "[::1]",
                                             "TIEROPS_SERVE_PORT": "9000"}
    assert serve_environment("10.1.2.3", 81)["TIEROPS_SERVE_URL"] == "http://10.1.2.3:81"


def test_substitute_uses_the_environment_then_the_default_then_serve_s_own():
    data = {"checks": [{"http": "${TIEROPS_SERVE_URL}/healthz", "tcp": "${TIEROPS_SERVE_HOST}:${TIEROPS_SERVE_PORT:-9}",
                        "command": "test ${HOME:-x} && echo ${TIEROPS_SERVE_PORT}", "timeout": 5}]}
    env = {"TIEROPS_SERVE_URL": "http://127.0.0.1:7001", "TIEROPS_SERVE_HOST": "127.0.0.1",
           "TIEROPS_SERVE_PORT": "7001"}
    out, problems = substitute(data, env)
    assert problems == []
    assert out == {"checks": [{"http": "http://127.0.0.1:7001/healthz", "tcp": "127.0.0.1:7001",
                               "command": "test ${HOME:-x} && echo 7001", "timeout": 5}]}  # ${HOME}: the shell's
    out, _ = substitute(data, {})
    assert out["checks"][0]["http"] == f"{SERVE_DEFAULTS['TIEROPS_SERVE_URL']}/healthz"
    assert out["checks"][0]["tcp"] == "127.0.0.1:9"  # the file's own default wins over serve's
    assert set(SERVE_DEFAULTS) == set(SERVE_VARIABLES)


def test_an_unknown_tierops_variable_is_a_problem_with_its_line(tmp_path):
    path = tmp_path / "checks.yaml"
    path.write_text("checks:\n  - name: self\n    service: t\n    http: '${TIEROPS_SERVE_ULR}/healthz'\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert (f"{path}:4: checks[0].http: unknown variable ${{TIEROPS_SERVE_ULR}}; a checks file may use "
            "${TIEROPS_SERVE_URL}, ${TIEROPS_SERVE_HOST}, ${TIEROPS_SERVE_PORT} (with a default: "
            "${TIEROPS_SERVE_PORT:-8080})") in str(info.value).splitlines()


@pytest.mark.parametrize("name", ["checks.yaml", "checks-starter.yaml"])
def test_the_example_files_validate_with_and_without_serve(name, monkeypatch):
    for var in SERVE_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    inv = load_inventory(REPO / "examples" / name)
    targets = {c.name: c.target for c in inv.checks}
    assert targets["tierops-health"] == "http://127.0.0.1:8080/healthz" and targets["tierops-port"] == "127.0.0.1:8080"
    for key, value in serve_environment("0.0.0.0", 9123).items():
        monkeypatch.setenv(key, value)
    targets = {c.name: c.target for c in load_inventory(REPO / "examples" / name).checks}
    assert targets["tierops-health"] == "http://127.0.0.1:9123/healthz" and targets["tierops-port"] == "127.0.0.1:9123"


# -- a real `tierops serve --port` ----------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _probe_results(db: Path) -> dict[str, str]:
    """check name → status of the first finished tier-0 session ({} while there is none)."""
    with contextlib.suppress(sqlite3.OperationalError), contextlib.closing(sqlite3.connect(db, timeout=5)) as conn:
        first = conn.execute("SELECT id FROM sessions WHERE tier = 0 AND status != 'running' ORDER BY id LIMIT 1"
                             ).fetchone()
        if first is not None:
            rows = conn.execute("SELECT name, status FROM check_results WHERE session_pk = ?", (first[0],)).fetchall()
            return dict(rows)
    return {}


@pytest.mark.parametrize("name,failing", [("checks.yaml", {"demo-failing"}), ("checks-starter.yaml", set())])
def test_serve_on_another_port_checks_itself_there(tmp_path, name, failing):
    """The example files' self-checks reach `serve --port N`, not 8080; the starter's checks all
    pass on a fresh host (compose.yaml mounts it), the quick start's has its one failing demo."""
    port = _free_port()
    home = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIEROPS_", "ANTHROPIC_", "CLAUDE_CODE_"))}
    env.update({"PYTHONPATH": str(REPO), "TIEROPS_HOME": str(home), "TIEROPS_CLAUDE_BIN": str(tmp_path / "no-claude"),
                "TIEROPS_REQUIRE_CHECKS": "true"})
    err = (tmp_path / "serve.err").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--port", str(port), "--checks",
                             str(REPO / "examples" / name)], stdout=subprocess.DEVNULL, stderr=err, env=env,
                            cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not (results := _probe_results(home / "tierops.db")):
            assert proc.poll() is None, (tmp_path / "serve.err").read_text()
            assert time.monotonic() < deadline, "no tier-0 cycle finished"
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        err.close()
    down = {check for check, status in results.items() if status != "healthy"}
    assert down == failing, results
    assert {"tierops-health", "tierops-port"} <= set(results)
