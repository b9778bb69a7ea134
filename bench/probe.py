"""One tier-0 cycle: ``python -m app probe`` over 50 checks, as the supervisor starts it.

The checks run against local targets started here: a threaded HTTP server on 127.0.0.1 and ports
nobody listens on. The cycle is 40 healthy checks (20 http GETs of a page that must contain a
text, 20 tcp connects), 5 http checks of a page that answers only after 5 s, with a 2 s timeout,
and 5 tcp checks of closed ports. Measured per run, from spawn to exit of the real subprocess
(``sys.executable -m app probe --checks FILE`` followed by the claude flags the runner passes):

* wall time; target: the longest check timeout (2 s) + less than 1 s, i.e. the checks run
  concurrently and the probe adds under a second (interpreter start, imports, reading the file,
  printing 102 stream lines);
* the same for a one-check file (``dns: localhost``): the fixed cost of a probe run;
* cost: the sum of ``total_cost_usd`` over every run's result line (target: $0, no tokens);
* the statuses the report gives (40 healthy, 10 unreachable), checked every run.

    python bench/probe.py [-n 5]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 2.0
TARGET_EXTRA_S = 1.0
CLAUDE_FLAGS = ["-p", "Run the tier-0 checks.", "--model", "tierops-probe", "--output-format", "stream-json",
                "--verbose", "--json-schema", "{}", "--append-system-prompt", "You are TierOps tier 0.",
                "--max-turns", "1"]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if urlsplit(self.path).path == "/slow":
            time.sleep(5)
        body = b"service healthy"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # the probe hangs up on the slow page at its timeout


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def checks_file(directory: Path, port: int) -> Path:
    lines = ["interval: 5m", "checks:"]
    lines += [f"  - {{name: page-{i}, service: web, http: 'http://127.0.0.1:{port}/ok', contains: healthy}}"
              for i in range(20)]
    lines += [f"  - {{name: port-{i}, service: web, tcp: '127.0.0.1:{port}'}}" for i in range(20)]
    lines += [f"  - {{name: slow-{i}, service: api, http: 'http://127.0.0.1:{port}/slow', timeout: {TIMEOUT_S:g}}}"
              for i in range(5)]
    lines += [f"  - {{name: closed-{i}, service: db, tcp: '127.0.0.1:{closed_port()}', severity: critical}}"
              for i in range(5)]
    path = directory / "checks.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_probe(checks: Path, cwd: Path) -> tuple[float, dict[str, Any]]:
    """(wall seconds, the result line) of one probe subprocess."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "app", "probe", "--checks", str(checks), *CLAUDE_FLAGS],
                          cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=120)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[-1]["type"] == "result" and not lines[-1]["is_error"], lines[-1]
    return wall, lines[-1]


def main(n: int) -> int:
    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        with tempfile.TemporaryDirectory(prefix="tierops-probe-bench-") as tmp:
            tmp_path = Path(tmp)
            checks = checks_file(tmp_path, port)
            one = tmp_path / "one.yaml"
            one.write_text("checks:\n  - {name: lh, dns: localhost}\n")
            run_probe(one, tmp_path)  # warm-up: page cache, .pyc files
            walls, floors, costs = [], [], []
            healthy_ms: list[float] = []
            for _ in range(n):
                wall, result = run_probe(checks, tmp_path)
                walls.append(wall)
                costs.append(result["total_cost_usd"])
                report = result["structured_output"]
                statuses = [s["status"] for s in report["services_checked"]]
                assert statuses.count("healthy") == 40 and statuses.count("unreachable") == 10, statuses
                assert report["escalation"]["needed"] and len(report["events"]) == 10
                healthy_ms += [s["latency_ms"] for s in report["services_checked"] if s["status"] == "healthy"]
                floors.append(run_probe(one, tmp_path)[0])
    finally:
        server.shutdown()
        server.server_close()

    target = TIMEOUT_S + TARGET_EXTRA_S
    worst = max(walls)
    print(f"tier-0 probe: 50 checks (40 healthy, 5 http past a {TIMEOUT_S:g} s timeout, 5 closed ports), "
          f"{n} runs as a subprocess (Python {sys.version.split()[0]}, {os.cpu_count()} CPUs)")
    print(f"  wall per run:             median {statistics.median(walls):6.2f} s   max {worst:6.2f} s")
    print(f"  one-check run (fixed):    median {statistics.median(floors):6.2f} s   max {max(floors):6.2f} s")
    print(f"  healthy check latency:    median {statistics.median(healthy_ms):6.1f} ms  max {max(healthy_ms):6.1f} ms"
          " (all 50 checks start at once)")
    print(f"  cost: sum of total_cost_usd over {n} runs = ${sum(costs):.2f}")
    ok = worst < target and sum(costs) == 0
    print(f"  target: max wall < {target:g} s (longest timeout + {TARGET_EXTRA_S:g} s) and $0: "
          f"{'OK' if ok else 'OVER TARGET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5, help="probe runs to measure (default 5)")
    sys.exit(main(ap.parse_args().n))
