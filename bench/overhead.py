"""Supervisor overhead per session (spawn + ingest + finalize) beside a fake CLI that exits at once.

A tiny ``/bin/sh`` script stands in for ``claude``: it prints three fixed stream-json lines (init,
assistant text, result ``success`` with schema-valid ``structured_output``, a session id made
unique by its pid) and exits 0. Measured, interleaved so drift hits both alike:

1. supervisor: ``app.supervisor.session.run_tier_session`` into a temp SQLite file — session row,
   argv/env build, spawn in its own process group, chunked stdout reading, activity rows,
   result/validation, routing (events, memories, checks), report;
2. floor: spawning the same script with the same argv, env, cwd and pipes through asyncio and
   reading its stdout to EOF, then waiting for it (what any supervisor must pay).

Overhead = median(1) - median(2); target: < 50 ms median.

    python bench/overhead.py [-n 50] [--chain]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.config import Settings  # noqa: E402
from app.output.validate import OutputValidator  # noqa: E402
from app.store.db import Database  # noqa: E402
from app.supervisor import launch, process_groups  # noqa: E402
from app.supervisor.chain import run_chain  # noqa: E402
from app.supervisor.session import TierRequest, run_tier_session  # noqa: E402

TARGET_MS = 50.0
OUTPUT = {
    "summary": "All services healthy.",
    "events": [{"level": "info", "service": "nginx", "message": "nginx active"}],
    "memories": [{"key": "nginx:baseline", "value": "nginx answers in 5 ms"}],
    "escalation": {"needed": False, "reason": None, "context": None, "failed_checks": []},
    "services_checked": [{"name": "nginx", "status": "healthy", "detail": None}],
}


def fake_cli(directory: Path) -> Path:
    """An executable that prints init, one assistant text, a successful result, and exits 0."""
    sid = "$sid"
    init = {"type": "system", "subtype": "init", "cwd": "$PWD", "session_id": sid,
            "tools": ["Bash", "StructuredOutput"], "model": "claude-haiku-4-5", "permissionMode": "default",
            "claude_code_version": "2.1.197", "uuid": "00000000-0000-4000-8000-000000000001"}
    assistant = {"type": "assistant", "message": {
        "id": "msg_bench", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
        "content": [{"type": "text", "text": "Checked nginx: healthy."}], "stop_reason": None,
        "usage": {"input_tokens": 100, "output_tokens": 1}}, "parent_tool_use_id": None,
        "session_id": sid, "uuid": "00000000-0000-4000-8000-000000000002"}
    result = {"type": "result", "subtype": "success", "is_error": False, "api_error_status": None,
              "duration_ms": 5, "duration_api_ms": 3, "num_turns": 3, "result": json.dumps(OUTPUT),
              "stop_reason": "tool_use", "session_id": sid, "total_cost_usd": 0.001,
              "usage": {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 0,
                        "cache_creation_input_tokens": 0},
              "modelUsage": {}, "permission_denials": [], "structured_output": OUTPUT,
              "uuid": "00000000-0000-4000-8000-000000000003"}
    lines = "\n".join(json.dumps(x, separators=(",", ":")) for x in (init, assistant, result))
    # An unquoted here-document expands $, ` and a backslash before $, ` or another backslash:
    # JSON's backslash-quote escapes stay literal; only $sid and $PWD may expand.
    assert "`" not in lines and "\\\\" not in lines
    assert lines.replace("$sid", "").replace("$PWD", "").count("$") == 0
    path = directory / "claude"
    path.write_text("#!/bin/sh\n"
                    "sid=$(printf '00000000-0000-4000-8000-%012d' $$)\n"
                    f"cat <<EOF\n{lines}\nEOF\n")
    path.chmod(0o755)
    return path


async def floor_once(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=str(cwd), env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
    out = b""
    while chunk := await proc.stdout.read(1 << 20):
        out += chunk
    await proc.stderr.read()
    await proc.wait()
    dt = time.perf_counter() - t0
    assert out.count(b"\n") == 3 and proc.returncode == 0, (out, proc.returncode)
    return dt


def stats(xs: list[float]) -> tuple[float, float]:
    ms = [x * 1000 for x in xs]
    p95 = statistics.quantiles(ms, n=20, method="inclusive")[18] if len(ms) >= 2 else ms[0]
    return statistics.median(ms), p95


async def main(n: int, chain: bool) -> int:
    with tempfile.TemporaryDirectory(prefix="tierops-overhead-") as tmp:
        tmp_path = Path(tmp)
        cli = fake_cli(tmp_path)
        settings = Settings(claude_bin=str(cli), home=tmp_path / "state", db=tmp_path / "bench.db",
                            output_max_retries=0, kill_grace=1)
        validator = OutputValidator.from_file()
        db = await Database.open(settings.db)
        try:
            cfg = settings.tier(1)
            prompt = cfg.prompt_file.read_text(encoding="utf-8")
            floor_cwd = tmp_path / "floor"
            floor_cwd.mkdir()
            (floor_cwd / "system-prompt.md").write_text("You are TierOps tier 1 (observe).", encoding="utf-8")
            argv = launch.build_argv(str(cli), model=cfg.model, wire_schema=validator.wire_schema(),
                                     system_prompt_file=str(floor_cwd / "system-prompt.md"),
                                     allowed_tools=cfg.allowed_tools, disallowed_tools=cfg.disallowed_tools,
                                     max_turns=cfg.max_turns)
            env = launch.child_env(tmp_path / "state" / "home", [])

            async def supervised() -> float:
                req = TierRequest(tier=1, prompt=prompt, system_prompt="You are TierOps tier 1 (observe).",
                                  trigger="bench")
                t0 = time.perf_counter()
                res = await run_tier_session(db, settings, validator, None, req)
                dt = time.perf_counter() - t0
                r = res.report
                assert r["status"] == "completed" and r["source"] == "structured_output" and not r["degraded"], r
                assert r["activity_count"] == 3, r
                return dt

            for _ in range(3):  # warm-up: imports, page cache, first SQLite pages
                await supervised()
                await floor_once(argv, floor_cwd, env)
            sup_t: list[float] = []
            floor_t: list[float] = []
            started = time.perf_counter()
            for _ in range(n):
                sup_t.append(await supervised())
                floor_t.append(await floor_once(argv, floor_cwd, env))
            wall = time.perf_counter() - started

            chain_t: list[float] = []
            if chain:
                for _ in range(n):
                    t0 = time.perf_counter()
                    await run_chain(db, settings, validator, None, trigger="bench")
                    chain_t.append(time.perf_counter() - t0)

            # What the runner's "no process outlives the session" sweep costs: it scans every
            # process on the host (psutil.process_iter + getpgid) after each CLI run.
            scans = []
            for _ in range(20):
                t0 = time.perf_counter()
                process_groups.group_members(os.getpid())
                scans.append(time.perf_counter() - t0)
            nproc = len(list(psutil.process_iter()))
        finally:
            await db.close()

    s_med, s_p95 = stats(sup_t)
    f_med, f_p95 = stats(floor_t)
    overhead = s_med - f_med
    print(f"supervisor overhead per session: {n} sessions + {n} bare spawns, interleaved, "
          f"{wall:.1f} s (Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, db in {tempfile.gettempdir()})")
    print(f"  (i)  run_tier_session, fake CLI:    median {s_med:7.2f} ms   p95 {s_p95:7.2f} ms")
    print(f"  (ii) floor: asyncio spawn + EOF:    median {f_med:7.2f} ms   p95 {f_p95:7.2f} ms")
    if chain_t:
        c_med, c_p95 = stats(chain_t)
        print(f"       run_chain (1 tier), fake CLI:  median {c_med:7.2f} ms   p95 {c_p95:7.2f} ms")
    sc_med, _ = stats(scans)
    print(f"       (i) includes one process-table sweep per CLI run: {nproc} processes, ~{sc_med:.2f} ms")
    verdict = "OK" if overhead < TARGET_MS else "OVER TARGET"
    print(f"  overhead = (i) - (ii) median:      {overhead:7.2f} ms   target < {TARGET_MS:.0f} ms median: {verdict}")
    return 0 if overhead < TARGET_MS else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=50, help="sessions to measure (default 50)")
    ap.add_argument("--chain", action="store_true", help="also time run_chain for a one-tier chain")
    args = ap.parse_args()
    sys.exit(asyncio.run(main(args.n, args.chain)))
