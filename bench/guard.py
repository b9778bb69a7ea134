"""The guard's cost per tool call: reading and deciding a command in process, and the whole hook as
the CLI runs it (a new ``python -m app guard`` process, the database opened, the decision recorded).

The hook's wall time is added to every guarded tool call of a session; its deadline
(``TIEROPS_GUARD_TIMEOUT``, 5 s) must stay far above it on a loaded machine. Targets: p95 of the
hook under 1 s (deadline / 5), the in-process decision under 5 ms for ordinary commands, and a
16 KiB command (the reader's cap) decided, or refused, within the deadline.

    python bench/guard.py [--calls N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from serving import report  # noqa: E402

from app.engine.guard import GuardPolicy, decide  # noqa: E402
from app.store import guard as guard_store  # noqa: E402
from app.store.db import Database  # noqa: E402

COMMANDS = [
    "systemctl status api",
    "sudo systemctl restart api",
    "ssh web-1 'sudo docker restart api'",
    'bash -c "cd /srv && docker compose up -d"',
    "journalctl -u api --since '1 hour ago' | grep -i error | tail -50",
    "for s in api worker; do systemctl is-active $s; done",
    "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8080/healthz",
    "kubectl -n prod get pods -o wide && kubectl -n prod rollout restart deploy/api",
]
POLICY = GuardPolicy(tier=3, allowed_tools=("Bash",), cooldowns="restart:1000/1h,redeploy:1000/1h",
                     approved_by="bench")


def in_process(rounds: int) -> tuple[float, float, float]:
    """µs per decision (median over commands), the slowest command's µs, and the 16 KiB case in ms."""
    per: list[float] = []
    for command in COMMANDS:
        started = time.perf_counter()
        for _ in range(rounds):
            decide(POLICY, "Bash", {"command": command})
        per.append((time.perf_counter() - started) / rounds * 1e6)
    big = "echo " + " && echo ".join(f"x{i}" for i in range(2400))
    big = big[:16 * 1024 - 1]
    started = time.perf_counter()
    decide(POLICY, "Bash", {"command": big})
    return statistics.median(per), max(per), (time.perf_counter() - started) * 1e3


async def _session(db_path: Path) -> int:
    async with await Database.open(db_path) as db:
        async with db.write() as conn:
            cur = await conn.execute("INSERT INTO sessions (status, tier, started_at, trigger)"
                                     " VALUES ('running', 3, '2026-01-01T00:00:00Z', 'manual')")
            pk = int(cur.lastrowid or 0)
        await guard_store.set_policy(db, pk, POLICY.as_json())
        return pk


def hook_calls(calls: int) -> list[float]:
    """Seconds per hook run, as the CLI starts it (stdin the hook JSON, a fresh interpreter)."""
    with tempfile.TemporaryDirectory() as tmp:
        db_path = Path(tmp) / "bench.db"
        pk = asyncio.run(_session(db_path))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        took = []
        for n in range(calls):
            body = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_use_id": f"toolu_{n}",
                               "tool_input": {"command": COMMANDS[n % len(COMMANDS)]}}).encode()
            started = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "app", "guard", "--db", str(db_path), "--session", str(pk)],
                                 input=body, capture_output=True, env=env, timeout=30)
            took.append(time.perf_counter() - started)
            if out.returncode != 0:
                raise SystemExit(f"the hook failed: {out.returncode} {out.stderr.decode()[:300]}")
        return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40, help="hook runs to time")
    args = parser.parse_args()
    median_us, worst_us, big_ms = in_process(200)
    took = sorted(hook_calls(args.calls))
    p50, p95 = took[len(took) // 2], took[min(len(took) - 1, int(len(took) * 0.95))]
    print(f"decide() in process: median {median_us:.0f} µs per command, slowest command {worst_us:.0f} µs "
          f"({len(COMMANDS)} commands, 200 times each)")
    print(f"decide() on a 16 KiB command: {big_ms:.0f} ms")
    print(f"hook process (python -m app guard, {args.calls} calls): p50 {p50 * 1e3:.0f} ms, p95 {p95 * 1e3:.0f} ms, "
          f"max {took[-1] * 1e3:.0f} ms")
    return report([
        (p95 < 1.0, f"hook p95 {p95 * 1e3:.0f} ms < 1000 ms (a fifth of the 5 s deadline)"),
        (worst_us < 5000, f"slowest ordinary decision {worst_us:.0f} µs < 5000 µs"),
        (big_ms < 5000, f"16 KiB command decided in {big_ms:.0f} ms < 5000 ms (the deadline)"),
    ])


if __name__ == "__main__":
    raise SystemExit(main())
