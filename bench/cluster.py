"""Several nodes on one PostgreSQL, measured: failover, and the store on PostgreSQL beside SQLite.

Starts a throwaway PostgreSQL cluster from Debian's server package (tests/pg_cluster.py), then:

1. failover: three real ``tierops serve`` processes (lease ``--lease`` s, no schedule); ``--kills``
   times, kill -9 the leader and time until another node reports itself leader on /healthz (a node
   is started again after each kill, so three are always up). Printed: p50 and max, and the target
   (within the lease + 5 s).
2. ingest: the same generated session (bench/ingest.py's generator, ``--lines`` lines) ingested into
   a new SQLite file and into a new PostgreSQL database: seconds and lines/s for each.
3. store lag: a write committed by one connection until a reader of another connection sees it
   (what a live page of another node waits for before its next poll), p50/p95 over ``--samples``.
4. alert storm: ``--incidents`` distinct incidents on 10 services (fake CLI: tier 1 takes 5 s and
   escalates, tier 2 takes 1 s), sent to the nodes in turn; the time from the first alert sent
   until the last investigation (tier-1 session) started, and until all ended, for 1 node running
   one cycle at a time, 1 node with TIEROPS_MAX_CONCURRENT=4, and 3 nodes with 4 each.

    python bench/cluster.py [--kills 10] [--lease 2] [--lines 20000] [--samples 200] [--incidents 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from machine import describe  # bench/machine.py

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.config import Settings  # noqa: E402
from app.engine.ingest import ingest_path  # noqa: E402
from app.output.validate import OutputValidator  # noqa: E402
from app.store.backends import open_database  # noqa: E402
from tests.cluster.nodes import (  # noqa: E402
    STORM_TOKEN,
    leaders,
    rows,
    settled,
    start_nodes,
    storm,
    storm_fake,
    wait_for,
)
from tests.pg_cluster import Cluster  # noqa: E402


def failover(cluster: Cluster, folder: Path, kills: int, lease: float) -> list[float]:
    url = cluster.create_database("failover")
    settings = {"TIEROPS_SCHEDULE": "false", "TIEROPS_LEASE_SECONDS": str(lease)}
    nodes = start_nodes(3, folder / "start", url, "claude", **settings)
    took: list[float] = []
    try:
        for i in range(kills):
            [leader] = wait_for("one leader", lambda up=nodes: (f := leaders(up)) and len(f) == 1 and f, lease + 10)
            killed = time.monotonic()
            leader.kill()
            nodes.remove(leader)
            wait_for("a new leader", lambda up=nodes: len(leaders(up)) == 1, lease + 10, every=0.05)
            took.append(time.monotonic() - killed)
            nodes.extend(start_nodes(1, folder / f"again{i}", url, "claude", **settings))
    finally:
        for node in nodes:
            node.stop()
    return took


async def ingest(target: str | Path, stream: Path) -> float:
    db = await open_database(target)
    try:
        started = time.perf_counter()
        await ingest_path(db, stream, OutputValidator.from_file(), Settings(), tier=1)
        return time.perf_counter() - started
    finally:
        await db.close()


async def lag(target: str | Path, samples: int) -> list[float]:
    writer = await open_database(target, readers=1)
    reader = await open_database(target, readers=1)
    out = []
    try:
        async with writer.write() as conn:
            await conn.execute("CREATE TABLE IF NOT EXISTS bench_lag (id INTEGER PRIMARY KEY, at TEXT)")
        for i in range(1, samples + 1):
            async with writer.write() as conn:
                await conn.execute("INSERT INTO bench_lag (id, at) VALUES (?, 'x')", (i,))
            started = time.perf_counter()
            while await reader.fetchval("SELECT id FROM bench_lag WHERE id = ?", (i,)) is None:
                await asyncio.sleep(0)
            out.append(time.perf_counter() - started)
    finally:
        await writer.close()
        await reader.close()
    return out


def alert_storm(cluster: Cluster, folder: Path, name: str, nodes: int, per_node: int,
                incidents: int) -> tuple[float, float, int]:
    """Seconds from the first alert until the last investigation started, and until all ended; and
    how many tier-1 sessions investigated the incidents (queued incidents of one service share one)."""
    url = cluster.create_database(name)
    fake = storm_fake(folder / name / "bin")
    up = start_nodes(nodes, folder / name, url, str(fake.path), TIEROPS_CRON="0 0 1 1 *", TIEROPS_LEASE_SECONDS="2",
                     TIEROPS_MAX_CONCURRENT=str(per_node), TIEROPS_WEBHOOK_TOKEN=STORM_TOKEN)
    try:
        began = time.time()
        storm(up, incidents)
        wait_for("the storm, investigated", lambda: settled(url), 60 + incidents * 10, every=0.2)
        ended = time.time()
        [row] = rows(url, "SELECT max(started_at) AS last, count(*) AS n FROM sessions WHERE tier = 1")
        last = datetime.fromisoformat(str(row["last"]).replace("Z", "+00:00")).timestamp()
        return last - began, ended - began, int(row["n"])
    finally:
        for node in up:
            node.stop()


def ms(values: list[float], q: float) -> str:
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--incidents", type=int, default=20)
    args = parser.parse_args()
    print(describe())
    cluster = Cluster.start()
    try:
        with tempfile.TemporaryDirectory(prefix="tierops-bench-cluster-") as tmp:
            folder = Path(tmp)
            took = failover(cluster, folder, args.kills, args.lease)
            target = args.lease + 5
            print(f"failover over {len(took)} kills (lease {args.lease:g} s): p50 {statistics.median(took):.2f} s, "
                  f"max {max(took):.2f} s; target within lease + 5 s = {target:g} s: "
                  f"{'OK' if max(took) <= target else 'MISSED'}")
            sys.path.insert(0, str(ROOT / "bench"))
            from ingest import generate  # bench/ingest.py

            stream = folder / "stream.jsonl"
            generate(stream, args.lines)
            sqlite_s = asyncio.run(ingest(folder / "ingest.db", stream))
            pg_s = asyncio.run(ingest(cluster.create_database("ingest"), stream))
            print(f"ingest of {args.lines} lines: SQLite {sqlite_s:.2f} s ({args.lines / sqlite_s:,.0f} lines/s), "
                  f"PostgreSQL {pg_s:.2f} s ({args.lines / pg_s:,.0f} lines/s), {pg_s / sqlite_s:.2f}x")
            for name, target_db in (("SQLite", folder / "lag.db"), ("PostgreSQL", cluster.create_database("lag"))):
                values = asyncio.run(lag(target_db, args.samples))
                print(f"store lag ({name}, a commit until another connection reads it, {args.samples} samples): "
                      f"p50 {ms(values, 0.5)}, p95 {ms(values, 0.95)}")
            for name, count, per_node in (("serial", 1, 1), ("concurrent", 1, 4), ("three", 3, 4)):
                start, done, runs = alert_storm(cluster, folder, name, count, per_node, args.incidents)
                print(f"alert storm of {args.incidents} incidents, {count} node(s) x TIEROPS_MAX_CONCURRENT={per_node}: "
                      f"last investigation started after {start:.1f} s, all finished after {done:.1f} s "
                      f"({runs} tier-1 sessions: queued incidents of one service share one)")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
