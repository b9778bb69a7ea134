"""The console's store reads and writes against a real SQLite file: acknowledging a session's
needs-attention flag, the overview's open attention items, today's sessions, the incident tally,
the per-service status grid (also timed at 10k sessions), which stream lines produced a session's
findings (``app/store/provenance.py``) and when a memory turns stale."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from app.clock import shift, utcnow
from app.output.route import Routed
from app.store import activity, dashboard, findings, incidents, provenance, sessions
from app.store.findings import write_routed
from app.store.incidents import Finding, Observation, ProbeResult
from app.store.memories import MemoryLifecycle
from app.store.sessions import AttentionStateError


async def set_cols(db, pk: int, **values: object) -> None:
    sets = ", ".join(f"{k} = ?" for k in values)
    async with db.write() as conn:
        await conn.execute(f"UPDATE sessions SET {sets} WHERE id = ?", (*values.values(), pk))


# -- attention and its acknowledgement ----------------------------------------------------------

async def test_acknowledging_attention_takes_it_off_the_open_list_and_keeps_who_and_when(db):
    a = await sessions.create_session(db, tier=1)
    b = await sessions.create_session(db, tier=2)
    quiet = await sessions.create_session(db, tier=1)
    await sessions.set_attention(db, a, "tier 1 failed: boom")
    await sessions.set_attention(db, b, "max tier reached")
    rows, total = await dashboard.open_attention(db, 5)
    assert [r["id"] for r in rows] == [b, a] and total == 2
    assert rows[0]["attention"] == "max tier reached" and rows[0]["status"] == "running"

    acked = await sessions.acknowledge_attention(db, b, "alice via API token")
    assert acked["id"] == b and acked["attention"] == "max tier reached"
    assert acked["attention_acked_by"] == "alice via API token" and acked["attention_acked_at"]
    rows, total = await dashboard.open_attention(db, 5)
    assert [r["id"] for r in rows] == [a] and total == 1
    row = await sessions.get_session(db, b)
    assert row["attention"] == "max tier reached"  # kept on the session, marked
    assert row["attention_acked_by"] == "alice via API token"  # type: ignore[typeddict-item]

    again = await sessions.acknowledge_attention(db, b, "bob via dashboard")  # the first one stays
    assert again["attention_acked_by"] == "alice via API token"
    assert again["attention_acked_at"] == acked["attention_acked_at"]

    with pytest.raises(AttentionStateError):
        await sessions.acknowledge_attention(db, quiet, "alice")
    with pytest.raises(LookupError):
        await sessions.acknowledge_attention(db, 9999, "alice")

    # a new reason needs a human again; the same reason repeated does not
    await sessions.set_attention(db, b, "max tier reached")
    assert (await dashboard.open_attention(db, 5))[1] == 1
    await sessions.set_attention(db, b, "approval #3 expired")
    rows, total = await dashboard.open_attention(db, 5)
    assert [r["id"] for r in rows] == [b, a] and total == 2
    assert (await sessions.get_session(db, b))["attention_acked_at"] is None  # type: ignore[typeddict-item]


async def test_open_attention_shows_the_newest_and_counts_the_rest(db):
    pks = [await sessions.create_session(db, tier=1) for _ in range(8)]
    for pk in pks:
        await sessions.set_attention(db, pk, f"why {pk}")
    rows, total = await dashboard.open_attention(db, 3)
    assert [r["id"] for r in rows] == pks[::-1][:3] and total == 8
    listed = await sessions.list_sessions(db, attention_open=True, limit=50)
    assert [r["id"] for r in listed] == pks[::-1]
    await sessions.acknowledge_attention(db, pks[0], "x")
    assert pks[0] not in [r["id"] for r in await sessions.list_sessions(db, attention_open=True)]
    assert [r["id"] for r in await sessions.list_sessions(db, attention_open=True, tier=2)] == []


# -- today --------------------------------------------------------------------------------------

async def test_today_counts_sessions_by_status_and_their_cost_since_midnight_utc(db):
    now = datetime.now(UTC)
    yesterday = (now - timedelta(days=1)).strftime("%Y-%m-%dT23:59:59.999Z")
    old = await sessions.create_session(db, tier=1)
    await set_cols(db, old, started_at=yesterday, status="completed", cost_usd=5.0)
    for status, cost in (("completed", 0.25), ("completed", 0.5), ("failed", None), ("running", None)):
        pk = await sessions.create_session(db, tier=1)
        await set_cols(db, pk, status=status, cost_usd=cost)
    t = await dashboard.today(db, now=now)
    assert t["since"] == now.strftime("%Y-%m-%dT00:00:00.000Z")
    assert t["sessions"] == 4 and t["cost_usd"] == pytest.approx(0.75)
    assert [(r["status"], r["sessions"]) for r in t["by_status"]] == [("completed", 2), ("failed", 1), ("running", 1)]
    assert t["by_status"][0]["cost_usd"] == pytest.approx(0.75)


# -- incidents ----------------------------------------------------------------------------------

def _failing(name: str, severity: str, service: str) -> Observation:
    return Observation(findings=[Finding(key=f"check:{name}", severity=severity, message=f"{name} failing",
                                         service=service, check_name=name, origin="probe")],
                       probe_results=[ProbeResult(name, "down", service, 5.0, f"{name} failing")])


async def test_incident_tally_counts_unresolved_and_names_the_worst(db):
    empty = await dashboard.incident_tally(db)
    assert empty == {"unresolved": 0, "acknowledged": 0, "worst": None}
    pk = await sessions.create_session(db, tier=0, trigger="schedule")
    obs = _failing("disk", "warning", "db")
    obs.findings += _failing("api", "critical", "api").findings
    changes = await incidents.observe(db, pk, 1, obs, flap_count=3, flap_window_s=3600)
    ids = {c.incident["check_name"]: c.incident["id"] for c in changes}
    tally = await dashboard.incident_tally(db)
    assert tally["unresolved"] == 2 and tally["acknowledged"] == 0
    assert tally["worst"] is not None and tally["worst"]["id"] == ids["api"]
    await incidents.acknowledge(db, ids["api"], "alice", None)
    tally = await dashboard.incident_tally(db)
    assert tally["unresolved"] == 2 and tally["acknowledged"] == 1
    await incidents.resolve(db, ids["api"], "alice", None)
    tally = await dashboard.incident_tally(db)
    assert tally["unresolved"] == 1 and tally["worst"]["id"] == ids["disk"]  # type: ignore[index]


# -- the service grid ---------------------------------------------------------------------------

async def _probe_cycle(db, results: list[tuple[str, str, str]]) -> int:
    """A tier-0 session whose probe results are (check, service, status); its own
    services_checked rows (check_results) repeat them, as the probe's do."""
    pk = await sessions.create_session(db, tier=0, trigger="schedule")
    await set_cols(db, pk, chain_id=pk)
    obs = Observation(probe_results=[ProbeResult(c, st, svc, 3.0, f"{c} {st}") for c, svc, st in results])
    await incidents.observe(db, pk, pk, obs, flap_count=3, flap_window_s=3600)
    async with db.write() as conn:
        await write_routed(conn, pk, Routed(source="structured_output",
                                            checks=[(c, st, None) for c, _, st in results]), utcnow(), 0.7, 0.2)
    return pk


async def _model_session(db, chain: int, checks: list[tuple[str, str]]) -> int:
    pk = await sessions.create_session(db, tier=1, trigger="schedule", parent_session_id=chain)
    await set_cols(db, pk, chain_id=chain)
    async with db.write() as conn:
        await write_routed(conn, pk, Routed(source="structured_output",
                                            checks=[(n, st, f"{n} said {st}") for n, st in checks]), utcnow(), 0.7, 0.2)
    return pk


async def test_service_grid_rows_per_service_with_the_worst_status_per_cycle(db):
    assert await dashboard.service_grid(db) == {"cycles": [], "services": []}
    c1 = await _probe_cycle(db, [("api-health", "api", "healthy"), ("api-port", "api", "healthy"),
                                 ("dns", "dns", "healthy")])
    c2 = await _probe_cycle(db, [("api-health", "api", "down"), ("api-port", "api", "healthy"),
                                 ("dns", "dns", "healthy")])
    t1 = await _model_session(db, c2, [("nginx", "degraded"), ("api", "healthy")])
    c3 = await sessions.create_session(db, tier=1, trigger="manual")  # a cycle that checked nothing
    await set_cols(db, c3, chain_id=c3)
    grid = await dashboard.service_grid(db, cycles=20)
    assert [c["cycle"] for c in grid["cycles"]] == [c1, c2, c3]
    by_name = {s["service"]: s for s in grid["services"]}
    # probe checks grouped by their service; the probe's own services_checked rows left out
    assert set(by_name) == {"api", "dns", "nginx"}
    api = by_name["api"]
    assert [c["state"] if c else None for c in api["cells"]] == ["ok", "down", None]
    down = api["cells"][1]
    assert down is not None and down["checks"] == 3 and down["status"] == "down" and down["session_pk"] == c2
    assert api["current"]["state"] == "down"  # the newest cycle that checked it
    assert [c["state"] if c else None for c in by_name["nginx"]["cells"]] == [None, "degraded", None]
    assert by_name["nginx"]["current"]["session_pk"] == t1 and by_name["nginx"]["current"]["detail"] == \
        "nginx said degraded"
    # worst first, then by name
    assert [s["service"] for s in grid["services"]] == ["api", "nginx", "dns"]
    # only the last N cycles
    small = await dashboard.service_grid(db, cycles=2)
    assert [c["cycle"] for c in small["cycles"]] == [c2, c3]
    assert [c["state"] if c else None for c in {s["service"]: s for s in small["services"]}["api"]["cells"]] == \
        ["down", None]


@pytest.mark.parametrize(("status", "state"), [("healthy", "ok"), ("OK", "ok"), ("degraded", "degraded"),
                                               ("down", "down"), ("unreachable", "down"), ("failed", "down"),
                                               ("fine?", "unknown"), (None, "unknown")])
def test_grid_states(status, state):
    assert dashboard.grid_state(status) == state


async def test_console_reads_stay_fast_at_ten_thousand_sessions(db):
    """10k sessions (2 500 probe cycles of 4 checks, 2 500 model sessions, attention on 500):
    everything the overview reads from the store, timed."""
    start = datetime(2026, 11, 1, tzinfo=UTC)
    stamp = start.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    sessions, probes, checks = [], [], []
    for i in range(1, 10_001):
        tier = 0 if i % 2 else 1
        chain = i if tier == 0 else i - 1
        sessions.append((i, tier, shift(stamp, i * 60), chain, 0.01 * tier, "why" if i % 20 == 0 else None))
        if tier == 0:
            probes += [(i, f"check-{n}", f"svc-{n % 2}", "healthy" if (i + n) % 7 else "down", shift(stamp, i * 60))
                       for n in range(4)]
        else:
            checks.append((i, shift(stamp, i * 60)))
    async with db.write() as conn:  # in batches: one round trip per statement, not per row, on either backend
        await conn.executemany("INSERT INTO sessions (id, tier, trigger, status, started_at, chain_id, cost_usd,"
                               " attention) VALUES (?, ?, 'schedule', 'completed', ?, ?, ?, ?)", sessions)
        await conn.executemany("INSERT INTO probe_results (session_pk, check_name, service, status, latency_ms, detail,"
                               " created_at) VALUES (?, ?, ?, ?, 1.0, NULL, ?)", probes)
        await conn.executemany("INSERT INTO check_results (session_pk, name, status, detail, created_at)"
                               " VALUES (?, 'nginx', 'healthy', NULL, ?)", checks)
    took = []
    for _ in range(3):
        t0 = time.perf_counter()
        grid = await dashboard.service_grid(db, 20)
        rows, total = await dashboard.open_attention(db, 5)
        await dashboard.today(db)
        await dashboard.incident_tally(db)
        took.append(time.perf_counter() - t0)
    assert len(grid["cycles"]) == 20 and {s["service"] for s in grid["services"]} == {"svc-0", "svc-1", "nginx"}
    assert all(c is not None for c in grid["services"][0]["cells"] if grid["services"][0]["service"] != "nginx")
    assert total == 500 and len(rows) == 5
    # measured ~5 ms on 2 shared cores; a scan of every session would be far above this bound
    assert min(took) < 0.25, took


# -- provenance ---------------------------------------------------------------------------------

def _line(pk: int, seq: int, attempt: int, kind: str, data: dict) -> activity.LineTuple:
    return (pk, seq, attempt, utcnow(), kind, data.get("subtype"), kind, json.dumps(data))


def _assistant(text: str | None = None, tool: tuple[str, dict] | None = None) -> dict:
    content: list[dict] = []
    if text is not None:
        content.append({"type": "text", "text": text})
    if tool is not None:
        content.append({"type": "tool_use", "id": "t1", "name": tool[0], "input": tool[1]})
    return {"type": "assistant", "message": {"role": "assistant", "content": content}}


async def test_provenance_reads_the_output_line_the_marker_lines_and_the_runs_cost(db):
    pk = await sessions.create_session(db, tier=1)
    lines = [
        _line(pk, 1, 1, "system", {"type": "system", "subtype": "init"}),
        _line(pk, 2, 1, "assistant", _assistant("[EVENT:warning:api] slow")),
        _line(pk, 3, 1, "assistant", _assistant(tool=("StructuredOutput", {"summary": "x"}))),
        _line(pk, 4, 1, "result", {"type": "result", "subtype": "success", "total_cost_usd": 0.25}),
        _line(pk, 5, 2, "assistant", _assistant("no marker here")),
        _line(pk, 6, 2, "assistant", _assistant(tool=("StructuredOutput", {"summary": "y"}))),
        _line(pk, 7, 2, "assistant", _assistant("[MEMORY:port:api] 8080")),
    ]
    await activity.append_lines(db, pk, lines, line_count=len(lines))
    assert await provenance.run_totals(db, pk) == {"runs": 2, "results": 1, "cost_usd": 0.25}
    assert await provenance.output_line(db, pk, 1) == 4  # the result line of run 1
    assert await provenance.output_line(db, pk, 2) == 6  # no result line: its last StructuredOutput call
    assert await provenance.output_line(db, pk, None) == 6  # the last run
    assert await provenance.output_line(db, pk, 3) is None
    assert [m["seq"] for m in await provenance.marker_lines(db, pk)] == [2, 7]
    for level in ("warning", "critical", "warning"):
        await findings.add_event(db, pk, level, "api", f"{level} seen")
    assert await provenance.event_counts(db, pk) == {"warning": 2, "critical": 1}
    empty = await sessions.create_session(db, tier=1)
    assert await provenance.event_counts(db, empty) == {}
    assert await provenance.run_totals(db, empty) == {"runs": 0, "results": 0, "cost_usd": None}
    assert await provenance.output_line(db, empty, None) is None


# -- memory decay -------------------------------------------------------------------------------

def test_a_memory_turns_stale_when_its_decayed_confidence_reaches_the_floor():
    life = MemoryLifecycle(half_life_days=30, floor=0.2)
    seen = "2026-11-01T00:00:00.000Z"
    # 0.8 halves twice to reach 0.2: 60 days
    assert life.stale_at(0.8, seen) == "2026-12-31T00:00:00.000Z"
    assert life.below_floor(0.8, seen, shift("2026-12-31T00:00:00.000Z", 60))
    assert not life.below_floor(0.8, seen, shift("2026-12-31T00:00:00.000Z", -60))
    assert life.stale_at(0.2, seen) is None and life.stale_at(0.1, seen) is None  # already there
    assert MemoryLifecycle(half_life_days=0, floor=0.2).stale_at(0.8, seen) is None  # no decay
    assert life.stale_at(0.8, None) is None
