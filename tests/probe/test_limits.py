"""Open files: ``python -m app probe`` as a real subprocess started under a low ``RLIMIT_NOFILE``
(as under systemd's default soft limit of 1024, scaled down), with more checks than that limit
allows at once. Healthy targets stay healthy: the probe raises its soft limit to the hard one
and runs at most as many checks at once as the limit leaves room for; its commands get the limit
it was started with."""

from __future__ import annotations

import errno
import json
import os
import resource
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.probe.limits import FDS_PER_CHECK, RESERVED_FDS, concurrency, out_of_descriptors
from tests.fakes.claude_control import REPO

CHECKS = 300  # far more sockets than a limit of 128 holds at once


@pytest.fixture
def listener() -> Iterator[str]:
    """A TCP port that accepts (and closes) every connection: ``host:port``."""
    server = socket.create_server(("127.0.0.1", 0), backlog=1024)
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(5)
    server.close()


def limited(soft: int, hard: int) -> Callable[[], None]:
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return preexec


def run_probe(tmp_path: Path, address: str, soft: int, hard: int) -> tuple[dict[str, Any], str]:
    checks = tmp_path / "checks.yaml"
    checks.write_text("checks:\n" + "".join(f"  - {{name: port-{i}, tcp: '{address}', timeout: 30s}}\n"
                                            for i in range(CHECKS))
                      + "  - {name: limit, command: 'ulimit -n'}\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TIEROPS_CHECKS", None)
    out = subprocess.run([sys.executable, "-m", "app", "probe", "--checks", str(checks)], cwd=tmp_path,
                         capture_output=True, text=True, env=env, timeout=180, stdin=subprocess.DEVNULL,
                         preexec_fn=limited(soft, hard))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])["structured_output"], out.stderr


def test_more_checks_than_a_hard_limit_allows_all_pass(tmp_path, listener):
    report, stderr = run_probe(tmp_path, listener, 128, 128)
    statuses = {c["name"]: (c["status"], c["detail"]) for c in report["services_checked"]}
    failing = {name: s for name, s in statuses.items() if s[0] != "healthy"}
    assert failing == {} and len(statuses) == CHECKS + 1, (list(failing.items())[:3], stderr[-2000:])
    assert report["events"] == [] and "error" not in report
    assert report["summary"] == f"{CHECKS + 1} checks: {CHECKS + 1} passing, 0 failing"
    assert stderr.rstrip().endswith(", at most 16 at once (open-files limit 128)"), stderr[-500:]


def test_the_soft_limit_is_raised_for_the_probe_but_not_for_its_commands(tmp_path, listener):
    report, stderr = run_probe(tmp_path, listener, 128, 4096)
    statuses = {c["name"]: (c["status"], c["detail"]) for c in report["services_checked"]}
    assert all(status == "healthy" for status, _ in statuses.values()), stderr[-2000:]
    assert statuses["limit"][1].endswith(": 128")  # a command gets the limit the probe was started with


def test_how_many_checks_at_once():
    assert concurrency(limit=1024) == (1024 - RESERVED_FDS) // FDS_PER_CHECK == 240
    assert concurrency(50, limit=1024) == 50  # the checks file's concurrency, when lower
    assert concurrency(5000, limit=1024) == 240  # never more than the limit holds
    assert concurrency(limit=10) == 1
    assert concurrency(limit=524288) > 100_000


def test_out_of_descriptors_is_told_apart():
    assert out_of_descriptors(OSError(errno.EMFILE, "Too many open files"))
    assert out_of_descriptors(OSError(errno.ENFILE, "Too many open files in system"))
    assert not out_of_descriptors(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    assert not out_of_descriptors(ValueError("x"))
