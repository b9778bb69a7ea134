"""What a command check detaches never outlives it: ``python -m app probe`` as a real subprocess,
with checks that ``setsid`` a helper and daemonize one with a double fork (both leave the check's
process group, so the group kill misses them). The probe adopts them (a child subreaper), kills
them when their check ends — while the probe still runs — and kills whatever is left at its exit."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.fakes.claude_control import REPO

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreapers are Linux only")


def gone(pid: int) -> bool:
    """No longer running: no such process, or a zombie its (new) parent has not reaped yet."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def read_pids(*files: Path) -> list[int]:
    return [int(f.read_text()) for f in files if f.exists() and f.read_text().strip()]


def test_detached_helpers_die_with_their_check_and_untagged_ones_with_the_probe(tmp_path):
    setsid_pid, double_pid, bare_pid = tmp_path / "setsid.pid", tmp_path / "double.pid", tmp_path / "bare.pid"
    setsid = "$(command -v setsid)"
    leaves = (f"setsid sleep 300 & echo $! > {setsid_pid}; "
              f"( setsid sh -c 'echo $$ > {double_pid}; exec sleep 300' & ); "
              f"while [ ! -s {double_pid} ]; do sleep 0.02; done; echo started")
    # a helper that also clears its environment: no tag to know its check by, so it goes at exit
    bare = f"env -i {setsid} /bin/sleep 300 & echo $! > {bare_pid}; echo started"
    # Runs beside them: passes once both helpers of `leaves` are gone (reaped: kill -0 succeeds on
    # a zombie), i.e. once its check has ended, while the probe still runs.
    watch = (f"for i in $(seq 300); do "
             f"if [ -s {setsid_pid} ] && [ -s {double_pid} ] && ! kill -0 $(cat {setsid_pid}) 2>/dev/null "
             f"&& ! kill -0 $(cat {double_pid}) 2>/dev/null; then echo gone; exit 0; fi; sleep 0.1; done; "
             "echo still running; exit 1")
    checks = tmp_path / "checks.yaml"
    checks.write_text("checks:\n" + "".join(
        f"  - {{name: {name}, command: {json.dumps(cmd)}, timeout: 60s}}\n"
        for name, cmd in (("leaves", leaves), ("bare", bare), ("watch", watch))))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TIEROPS_CHECKS", None)
    try:
        out = subprocess.run([sys.executable, "-m", "app", "probe", "--checks", str(checks)], cwd=tmp_path,
                             capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout.splitlines()[-1])["structured_output"]
        status = {c["name"]: (c["status"], c["detail"]) for c in report["services_checked"]}
        assert status["leaves"][0] == status["bare"][0] == "healthy", status
        assert status["watch"] == ("healthy", status["watch"][1]) and status["watch"][1].endswith(": gone"), status
        pids = read_pids(setsid_pid, double_pid, bare_pid)
        assert len(pids) == 3
        deadline = time.monotonic() + 5
        while not all(gone(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [pid for pid in pids if not gone(pid)] == []
        assert "left running outside its group" in out.stderr  # what a check left behind is said
    finally:
        for pid in read_pids(setsid_pid, double_pid, bare_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
