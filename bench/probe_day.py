"""A simulated day of tier-0 cycles on a healthy inventory (issue #12): how many language-model
launches, what it costs, and what one cycle takes.

The real supervisor (``Supervisor.run_cycle``, the path of scheduled cycles) runs the real probe
(``python -m app probe``, a subprocess) against a checks file of local targets that stay healthy:
an HTTP server, a listening TCP port, ``localhost`` DNS and a shell command. ``claude`` is a
script that only counts its launches (it would fail if it ran). A day of 5-minute cycles is 288
cycles, run back to back (the schedule's waiting is not what is measured). Printed: cycles, CLI
launches (target: 0), total cost (target: $0), wall time per cycle (median, p95), incidents
opened (target: 0), and the database's growth per cycle.

    python bench/probe_day.py [--cycles 288]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.config import Settings  # noqa: E402
from app.output.validate import OutputValidator  # noqa: E402
from app.store import incidents  # noqa: E402
from app.store.db import Database  # noqa: E402
from app.supervisor.scheduler import Supervisor  # noqa: E402


class Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def checks(directory: Path, url: str, port: int) -> Path:
    path = directory / "checks.yaml"
    path.write_text(f"""\
interval: 5m
checks:
  - {{name: web, service: web, http: "{url}", status: 200, contains: ok, max_ms: 2000}}
  - {{name: port, service: web, tcp: "127.0.0.1:{port}"}}
  - {{name: resolver, service: dns, dns: localhost}}
  - {{name: disk, service: host, command: "test -d /"}}
""", encoding="utf-8")
    return path


async def main(cycles: int) -> int:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    listener = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:  # a real service accepts: an unaccepted backlog fills up after ~128 cycles
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    with tempfile.TemporaryDirectory(prefix="tierops-probe-day-") as tmp:
        tmp_path = Path(tmp)
        launches = tmp_path / "claude-launches"
        claude = tmp_path / "claude"
        claude.write_text(f"#!/bin/sh\necho launched >> {launches}\nexit 1\n")
        claude.chmod(0o755)
        port = server.server_address[1]
        settings = Settings(claude_bin=str(claude), home=tmp_path / "state", db=tmp_path / "bench.db",
                            checks=checks(tmp_path, f"http://127.0.0.1:{port}/", listener.getsockname()[1]))
        db = await Database.open(settings.db)
        sup = Supervisor(db, settings, OutputValidator.from_file())
        times: list[float] = []
        cost = 0.0
        statuses: dict[str, int] = {}
        started = time.perf_counter()
        try:
            size0 = settings.db_path.stat().st_size
            for _ in range(cycles):
                t0 = time.perf_counter()
                chain = await sup.run_cycle(tier=settings.first_tier, trigger="schedule")
                times.append(time.perf_counter() - t0)
                cost += sum(link["cost_usd"] or 0.0 for link in chain)
                for link in chain:
                    key = f"tier {link['tier']} {link['status']}"
                    statuses[key] = statuses.get(key, 0) + 1
            opened = len(await incidents.list_incidents(db, limit=10_000))
        finally:
            await db.close()
            server.shutdown()
            listener.close()
        size1 = settings.db_path.stat().st_size + sum(
            p.stat().st_size for p in tmp_path.glob("bench.db-*") if p.is_file())
        wall = time.perf_counter() - started
        n_launches = len(launches.read_text().splitlines()) if launches.exists() else 0

    ms = sorted(t * 1000 for t in times)
    p95 = statistics.quantiles(ms, n=20, method="inclusive")[18] if len(ms) >= 2 else ms[0]
    print(f"simulated day: {cycles} tier-0 cycles (5-minute schedule, run back to back) in {wall:.1f} s")
    print(f"  sessions by tier and status:  {statuses}")
    print(f"  claude CLI launches:          {n_launches}   (target 0)")
    print(f"  cost:                         ${cost:.4f}   (target $0)")
    print(f"  incidents opened:             {opened}")
    print(f"  one cycle (probe + ingest):   median {statistics.median(ms):.0f} ms, p95 {p95:.0f} ms")
    print(f"  database growth:              {(size1 - size0) / 1024 / cycles:.1f} KiB per cycle "
          f"({(size1 - size0) / 1024 / 1024:.1f} MiB for the day, before `tierops prune`)")
    ok = n_launches == 0 and cost == 0 and opened == 0
    print("  verdict:", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=288, help="cycles to run (default 288: a day of 5-minute cycles)")
    args = ap.parse_args()
    sys.exit(asyncio.run(main(args.cycles)))
