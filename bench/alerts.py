"""An alert storm: N distinct alerts at once against a real uvicorn, a fake claude CLI present so the
investigations start, queue and coalesce.

The app runs on uvicorn at 127.0.0.1 (a free port, in a thread of this process, uvloop and
httptools when installed, as ``tierops serve`` runs); the fake CLI's session hangs, so the first
alert's investigation holds the cycle and every later one is queued, coalesced or flagged. The
alerts are generic ``{title, service, severity, details}`` bodies, each its own incident, spread
over S services (default 50, so 10 alerts per service at N=500), sent by P client processes
(httpx, every request of a process in flight at once) released together. Default settings
(``TIEROPS_ALERT_QUEUE_MAX=20``).

Printed: the answers by status, alerts recorded and incidents (read back from the store),
investigations started / queued / coalesced / needing attention (from the answers, checked against
the run queue), 5xx count, and the time from the release to the last 202. Targets, as OK/MISSED
lines: every alert recorded (N alerts listed on N incidents), no 5xx, every answer 202.

    python bench/alerts.py [--alerts 500] [--services 50] [--processes 4]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing as mp
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.config import Settings  # noqa: E402
from app.store import alert_incidents, run_queue  # noqa: E402
from app.store import incidents as incident_store  # noqa: E402
from app.store.db import Database  # noqa: E402
from bench.machine import describe  # noqa: E402
from bench.serving import report, serve_in_thread  # noqa: E402
from tests.fakes import claude_control as cc  # noqa: E402


def bodies(n: int, services: int) -> list[dict[str, Any]]:
    return [{"title": f"disk almost full on node-{i}", "service": f"svc-{i % services:03}", "severity": "critical",
             "details": f"node-{i}: / at 9{i % 10}% and growing"} for i in range(n)]


# --- the clients (separate processes) -----------------------------------------------------------

def client_process(base: str, share: list[dict[str, Any]], release_at: float, conn: Any) -> None:
    """Wait until ``release_at`` (wall clock), send every body of ``share`` at once, report
    ``[(status, seconds after the release, answer or error)]``."""
    import httpx

    async def run() -> list[tuple[int, float, Any]]:
        limits = httpx.Limits(max_connections=len(share), max_keepalive_connections=len(share))
        async with httpx.AsyncClient(base_url=base, timeout=300, limits=limits) as client:
            async def one(body: dict[str, Any]) -> tuple[int, float, Any]:
                try:
                    r = await client.post("/api/v1/alerts", json=body)
                except httpx.HTTPError as exc:
                    return 0, time.time() - release_at, repr(exc)
                return r.status_code, time.time() - release_at, r.json() if r.status_code == 202 else r.text[:300]

            await asyncio.sleep(max(0.0, release_at - time.time()))
            return list(await asyncio.gather(*(one(b) for b in share)))

    try:
        conn.send(("done", asyncio.run(run())))
    except Exception as exc:  # report, never hang the bench
        conn.send(("error", repr(exc)))


# --- the server (a thread of this process) ----------------------------------------------------

def start_server(settings: Settings) -> tuple[Any, threading.Thread, str]:
    from app.web.app import create_app

    try:
        import uvloop
        return serve_in_thread(create_app(settings, token=None), loop_factory=uvloop.new_event_loop, http="httptools")
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        return serve_in_thread(create_app(settings, token=None))


async def read_back(path: Path) -> dict[str, int]:
    """What the store holds after the storm (a connection of its own, as another process would)."""
    db = await Database.open(path)
    try:
        rows = await incident_store.list_incidents(db, limit=100_000)
        alerts = 0
        for inc in rows:
            counts = await alert_incidents.alert_counts(db, inc["id"])
            alerts += counts["firing"] + counts["resolved"]
        queued = await run_queue.list_runs(db, status="queued", limit=1000)
        return {"incidents": len(rows), "alerts": alerts, "attention": sum(1 for i in rows if i["attention"]),
                "queued_runs": len(queued), "queued_incidents": sum(len(q["incident_ids"]) for q in queued)}
    finally:
        await db.close()


def main(args: argparse.Namespace) -> int:
    logging.disable(logging.WARNING)
    print(f"bench/alerts.py on {describe(python=True, load=True)}")
    with tempfile.TemporaryDirectory(prefix="tierops-bench-alerts-") as tmp:
        work = Path(tmp)
        fake = cc.make_fake_claude(work / "bin", [{"lines": [cc.init_line(cc.new_session_id())], "mode": "hang"}])
        settings = Settings(db=work / "tierops.db", home=work / "state", claude_bin=str(fake.path), schedule=False,
                            kill_grace=1)
        server, thread, base = start_server(settings)
        try:
            share = bodies(args.alerts, args.services)
            parts = [share[i::args.processes] for i in range(args.processes)]
            ctx = mp.get_context("spawn")
            release_at = time.time() + 3.0  # the processes start (spawn) before the release
            links = []
            for part in parts:
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=client_process, args=(base, part, release_at, child), daemon=True)
                proc.start()
                links.append((proc, parent))
            answers: list[tuple[int, float, Any]] = []
            for proc, parent in links:
                kind, value = parent.recv()
                proc.join(timeout=30)
                if kind != "done":
                    raise RuntimeError(f"a client process failed: {value}")
                answers.extend(value)
        finally:
            server.should_exit = True
            thread.join(timeout=60)
        stored = asyncio.run(read_back(settings.db))
    statuses = Counter(status for status, _, _ in answers)
    accepted = [a for status, _, a in answers if status == 202]
    runs = [a["alerts"][0]["run"] for a in accepted]
    started = sum(1 for r in runs if r["session_id"] is not None)
    queued = sum(1 for r in runs if r["queued_id"] is not None and not r["coalesced"])
    coalesced = sum(1 for r in runs if r["coalesced"])
    attention = sum(1 for r in runs if r["attention"])
    last_202 = max((t for status, t, _ in answers if status == 202), default=float("nan"))
    errors_5xx = sum(n for status, n in statuses.items() if status >= 500)
    print(f"\n{args.alerts} distinct alerts over {args.services} services from {args.processes} client processes "
          f"at once; a cycle running (fake CLI), TIEROPS_ALERT_QUEUE_MAX={settings.alert_queue_max}")
    shown = ", ".join(f"{n} answered {s}" if s else f"{n} without an answer" for s, n in sorted(statuses.items()))
    print(f"   answers: {shown}")
    print(f"   stored: {stored['alerts']} alerts on {stored['incidents']} incidents")
    print(f"   investigations: {started} started, {queued} queued ({stored['queued_runs']} runs waiting, listing "
          f"{stored['queued_incidents']} incidents), {coalesced} coalesced into a queued run of their service, "
          f"{attention} need attention ({stored['attention']} flagged in the store)")
    print(f"   5xx: {errors_5xx}; time from the release to the last 202: {last_202:.2f} s")
    lines = [
        (stored["alerts"] == args.alerts and stored["incidents"] == args.alerts,
         f"every alert recorded: {stored['alerts']} of {args.alerts} on {stored['incidents']} incidents"),
        (errors_5xx == 0, f"no 5xx: {errors_5xx}"),
        (statuses.get(202, 0) == args.alerts, f"every alert answered 202: {statuses.get(202, 0)} of {args.alerts}"),
        (started + queued + coalesced + attention == args.alerts and attention == stored["attention"],
         f"every investigation accounted for: {started} + {queued} + {coalesced} + {attention} = {args.alerts}"),
    ]
    return report(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--alerts", type=int, default=500)
    parser.add_argument("--services", type=int, default=50)
    parser.add_argument("--processes", type=int, default=4)
    sys.exit(main(parser.parse_args()))
