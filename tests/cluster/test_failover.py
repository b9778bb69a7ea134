"""Three real ``tierops serve`` processes on one PostgreSQL: one leads; a leader killed with
SIGKILL is replaced within a lease, its running session is marked interrupted and the next
scheduled cycle runs on another node; PostgreSQL stopped for 10 s makes no two nodes lead, loses
no line of the session that was writing, and everything recovers.

The fake CLI prints a 64-line session over ~18 s, so a cycle is running when the leader dies and
while the database is down. Lease 2 s, interval 10 s.
"""

from __future__ import annotations

import time
from datetime import datetime

import psycopg
import pytest

from tests.cluster.nodes import leaders, start_nodes, wait_for
from tests.fakes.claude_control import make_fake_claude
from tests.web.pages.test_browser import chatty_stage

pytestmark = pytest.mark.timeout(240)

LEASE = 2.0
INTERVAL = 10.0


def _sessions(url: str) -> list[dict]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute("SELECT id, node_id, status, trigger, started_at, status_reason, line_count,"
                           " (SELECT count(*) FROM activity a WHERE a.session_pk = s.id) AS stored"
                           " FROM sessions s ORDER BY id")
        names = [d.name for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_failover_and_a_database_outage(pg_cluster, tmp_path) -> None:
    url = pg_cluster.create_database("failover")
    fake = make_fake_claude(tmp_path / "bin", [chatty_stage(60, 0.3)])
    nodes = start_nodes(3, tmp_path, url, str(fake.path), TIEROPS_INTERVAL=str(int(INTERVAL)),
                        TIEROPS_LEASE_SECONDS=str(LEASE), TIEROPS_TIER1_TIMEOUT="120", TIEROPS_STORAGE_RETRY_LIMIT="60")
    try:
        [leader] = wait_for("exactly one leader", lambda: (found := leaders(nodes)) and len(found) == 1 and found, 15)
        dead_id = leader.node_id()
        first = wait_for("the leader's scheduled session, running", lambda: next(
            (s for s in _sessions(url) if s["node_id"] == dead_id and s["status"] == "running"), None), 20)
        time.sleep(1)
        killed = time.time()
        leader.kill()
        others = [n for n in nodes if n is not leader]
        [new] = wait_for("another leader", lambda: (found := leaders(others)) and len(found) == 1 and found,
                         LEASE + 5)
        failover = time.time() - killed
        new_id = new.node_id()
        wait_for("the dead node's session interrupted", lambda: next(
            s for s in _sessions(url) if s["id"] == first["id"])["status"] == "interrupted", 2 * LEASE + 5)
        reason = next(s for s in _sessions(url) if s["id"] == first["id"])["status_reason"]
        assert dead_id in reason
        nxt = wait_for("the next scheduled cycle, on the new leader", lambda: next(
            (s for s in _sessions(url) if s["id"] > first["id"] and s["trigger"] == "schedule"), None),
            INTERVAL + LEASE + 10)
        due = _epoch(first["started_at"]) + INTERVAL
        assert nxt["node_id"] == new_id and _epoch(nxt["started_at"]) - max(killed, due) <= LEASE + 5, (nxt, failover)

        # The database goes away for 10 s while the new leader's session writes.
        pg_cluster.pg_ctl("stop")
        down = time.monotonic()
        most = 0
        while time.monotonic() - down < 10:
            most = max(most, len(leaders(others)))
            time.sleep(0.2)
        pg_cluster.pg_ctl("start")
        assert most <= 1
        wait_for("one leader again", lambda: len(leaders(others)) == 1, LEASE + 5)
        done = wait_for("the session that wrote through the outage, complete", lambda: next(
            (s for s in _sessions(url) if s["id"] == nxt["id"] and s["status"] != "running"), None), 90)
        assert done["status"] == "completed" and done["line_count"] == 64 and done["stored"] == 64, done
    finally:
        for node in nodes:
            node.stop()


def test_a_session_on_one_node_is_watched_and_stopped_from_another(pg_cluster, tmp_path) -> None:
    import httpx

    url = pg_cluster.create_database("across")
    fake = make_fake_claude(tmp_path / "bin", [chatty_stage(60, 0.3)])
    a, b = start_nodes(2, tmp_path, url, str(fake.path), TIEROPS_SCHEDULE="false", TIEROPS_LEASE_SECONDS=str(LEASE))
    try:
        health = wait_for("both nodes seen", lambda: (h := a.health()) and len(h.get("nodes", [])) == 2 and h, 10)
        assert {n["state"] for n in health["nodes"]} == {"up"} and sum(n["leader"] for n in health["nodes"]) == 1
        with httpx.Client(base_url=a.url, timeout=10) as on_a:
            overview = on_a.get("/").text
        assert 'id="nodes"' in overview and all(n["id"] in overview for n in health["nodes"])
        with httpx.Client(base_url=b.url, timeout=10) as on_b:
            pk = on_b.post("/api/v1/runs", json={"tier": 1}).json()["id"]
        seen: list[str] = []
        with httpx.Client(base_url=a.url, timeout=30) as on_a, \
                on_a.stream("GET", f"/sessions/{pk}/stream") as stream:
            for line in stream.iter_lines():  # lines of B's session, live, through A
                if line.startswith("data:") and "Checking step" in line:
                    seen.append(line)
                if len(seen) >= 3:
                    break
        with httpx.Client(base_url=a.url, timeout=10) as on_a:
            stopped = on_a.post(f"/api/v1/sessions/{pk}/stop")
            assert stopped.status_code == 202, stopped.text
        row = wait_for("B's session stopped from A", lambda: next(
            (s for s in _sessions(url) if s["id"] == pk and s["status"] != "running"), None), 10)
        assert row["status"] == "interrupted" and "stopped by an operator" in row["status_reason"], row
        assert row["line_count"] < 64 and len(seen) == 3
    finally:
        a.stop()
        b.stop()
