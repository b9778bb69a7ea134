"""An alert storm on three real ``tierops serve`` processes sharing one PostgreSQL, each running up
to four cycles at once (TIEROPS_MAX_CONCURRENT=4): 20 distinct incidents on 10 services, sent to
the three nodes in turn. Every incident is investigated once and never twice, the work spreads over
the nodes, and no two tiers that may act (tier 2) work on one service at the same time.

The fake CLI's tier 1 takes 5 s and escalates; tier 2 takes 1 s. No schedule runs (cron far away).
"""

from __future__ import annotations

import itertools
import re

import pytest

from tests.cluster.nodes import STORM_TOKEN, rows, settled, start_nodes, storm, storm_fake, wait_for

pytestmark = pytest.mark.timeout(240)

INCIDENTS, PER_NODE = 20, 4


def test_an_alert_storm_spreads_over_three_nodes_each_incident_once(pg_cluster, tmp_path) -> None:
    url = pg_cluster.create_database("storm")
    fake = storm_fake(tmp_path / "bin")
    nodes = start_nodes(3, tmp_path, url, str(fake.path), TIEROPS_CRON="0 0 1 1 *", TIEROPS_LEASE_SECONDS="2",
                        TIEROPS_MAX_CONCURRENT=str(PER_NODE), TIEROPS_WEBHOOK_TOKEN=STORM_TOKEN)
    try:
        titles = storm(nodes, INCIDENTS)
        wait_for("every investigation, finished", lambda: settled(url), 120, every=0.5)
        sessions = rows(url, "SELECT id, tier, node_id, status, prompt, parent_session_id, started_at, ended_at"
                             " FROM sessions ORDER BY id")
        tier1 = [s for s in sessions if s["tier"] == 1]
        # Every incident once, none twice: each title in exactly one tier-1 prompt, one "investigated" entry each.
        for title in titles:
            assert sum(title in (s["prompt"] or "") for s in tier1) == 1, title
        marks = rows(url, "SELECT incident_id, count(*) AS n FROM incident_timeline WHERE kind = 'escalated'"
                          " AND detail LIKE 'alert: investigated%' GROUP BY incident_id")
        assert len(marks) == INCIDENTS and {m["n"] for m in marks} == {1}
        assert all(s["status"] == "completed" for s in sessions), [(s["id"], s["status"]) for s in sessions]
        assert len({s["node_id"] for s in tier1}) == 3  # spread over the nodes
        spans = sorted((s["started_at"], s["ended_at"]) for s in tier1)
        most = max(sum(a <= start < b for a, b in spans) for start, _ in spans)
        assert PER_NODE < most <= 3 * PER_NODE  # more at once than one node may run, never beyond the three
        # Never two acting tiers on one service at a time.
        by_id = {s["id"]: s for s in sessions}
        acting = []
        for s in sessions:
            if s["tier"] == 2:
                service = re.search(r"svc-\d+", by_id[s["parent_session_id"]]["prompt"]).group(0)
                acting.append((service, s["started_at"], s["ended_at"]))
        assert len(acting) == len(tier1)
        for a, b in itertools.combinations(acting, 2):
            assert a[0] != b[0] or a[2] <= b[1] or b[2] <= a[1], (a, b)
        assert rows(url, "SELECT count(*) AS n FROM leases WHERE name LIKE 'service:%'")[0]["n"] == 0
    finally:
        for node in nodes:
            node.stop()
