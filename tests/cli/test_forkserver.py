"""The test helper that forks the `tierops` command (``forkserver.py``): a command that outlives its
timeout is killed and raises like ``subprocess.run``, and the next command runs on a new server."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from tests.cli import forkserver
from tests.fakes.claude_control import REPO


def test_a_command_past_its_timeout_is_killed_and_the_next_one_runs(tmp_path) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TIEROPS_")}, "PYTHONPATH": str(REPO),
           "TIEROPS_HOME": str(tmp_path / "home")}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    first = forkserver.SERVER_FOR_WORKER.proc
    with pytest.raises(subprocess.TimeoutExpired):
        forkserver.run("app", ["serve", "--port", str(port)], env=env, cwd=tmp_path, timeout=3)
    assert forkserver.SERVER_FOR_WORKER.proc is None or forkserver.SERVER_FOR_WORKER.proc is not first
    after = forkserver.run("app", ["--version"], env=env, cwd=tmp_path, timeout=60, text=True)
    assert after.returncode == 0 and after.stdout.strip(), after
