"""``app/store/stats.py`` against a real SQLite file: per-day sums of a window, chain
sums and the chain roll-up, with sessions seeded through the store's own functions over several
days, tiers and statuses (:func:`seed`, shared with tests/web/api/test_stats.py), then moved to their
day the way tests/store/test_retention.py ages sessions."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from app.output.route import Routed
from app.store import alert_incidents, incidents, sessions, stats
from app.store.db import Database
from app.store.sessions import SessionSummary

NOW = datetime.now(UTC)


def day(n: int) -> str:
    """The UTC day ``n`` days before today, ``YYYY-MM-DD``."""
    return (NOW.date() - timedelta(days=n)).isoformat()


def summary(status: str, cost: float | None) -> SessionSummary:
    return SessionSummary(
        status=status, status_reason=None if status == "completed" else status, degraded=False, exit_code=0,
        ended_at="2000-01-01T00:00:00.000Z", duration_ms=1000, duration_api_ms=None, cost_usd=cost, input_tokens=10,
        output_tokens=5, cache_read_tokens=None, cache_creation_tokens=None, num_turns=1, result_subtype="success",
        is_error=status != "completed", api_error_status=None, stop_reason=None, terminal_reason=None,
        result_text=None, result_errors=None, permission_denials=None, model_usage=None, validation_valid=True,
        validation_errors=None, structured_output=None, invalid_output=None, attempts=1, handoff_raw=None,
        notes=None, stderr_tail=None, line_count=0, cli_model=None, cwd=None)


async def on_day(db: Database, pk: int, n: int) -> None:
    """Start (and end) the session at noon of day ``n`` before today."""
    stamp = f"{day(n)}T12:00:00.000Z"
    async with db.write() as conn:
        await conn.execute("UPDATE sessions SET started_at = ?, ended_at = CASE WHEN ended_at IS NULL THEN NULL"
                           " ELSE ? END WHERE id = ?", (stamp, stamp, pk))


async def session(db: Database, n: int, tier: int | None, status: str, cost: float | None, *,
                  chain: int | None = 0, parent: int | None = None, attention: str | None = None) -> int:
    """A session started on day ``n``: in chain ``chain`` (0: its own; None: none, as ingested)."""
    pk = await sessions.create_session(db, tier=tier, trigger="escalation" if parent else "schedule",
                                       parent_session_id=parent)
    if chain is not None:
        await sessions.set_launch(db, pk, cwd=f"/s/{pk}", chain_id=chain or pk, argv=["claude"], system_prompt="")
    if parent is not None:
        await sessions.set_escalated_to(db, parent, pk)
    if status != "running":
        await sessions.finish_session(db, pk, summary(status, cost), Routed(source="structured_output"),
                                      initial_confidence=0.7, reinforce=0.3)
    if attention:
        await sessions.set_attention(db, pk, attention)
    await on_day(db, pk, n)
    return pk


@dataclass
class Seeded:
    chain_a: list[int] = field(default_factory=list)  # day 2: tier 0 → 1 → 2 (failed, attention)
    chain_b: list[int] = field(default_factory=list)  # root day 20 (outside 14 days), its tier 1 on day 10
    singles: list[int] = field(default_factory=list)  # days 1 and 0, one chain each
    running: int = 0
    ingested: int = 0
    old: int = 0  # day 20, tier 1, $1.00


async def seed(db: Database) -> Seeded:
    """12 sessions: 10 in the last 14 days (6 today and yesterday), 2 more 20 days ago."""
    s = Seeded()
    a0 = await session(db, 2, 0, "completed", 0.0)
    a1 = await session(db, 2, 1, "completed", 0.10, chain=a0, parent=a0)
    a2 = await session(db, 2, 2, "failed", 0.50, chain=a0, parent=a1, attention="max tier")
    s.chain_a = [a0, a1, a2]
    b0 = await session(db, 20, 0, "completed", 0.0)
    b1 = await session(db, 10, 1, "completed", 0.30, chain=b0, parent=b0)
    s.chain_b = [b0, b1]
    s.singles = [await session(db, 1, 0, "completed", 0.0), await session(db, 1, 1, "interrupted", 0.05),
                 await session(db, 0, 0, "completed", 0.0), await session(db, 0, 1, "completed", 0.25)]
    s.running = await session(db, 0, 1, "running", None)
    s.ingested = await session(db, 0, None, "completed", 0.02, chain=None)
    s.old = await session(db, 20, 1, "completed", 1.00)
    # open incidents: one critical, one warning acknowledged, one resolved (not counted)
    for fp, severity in (("db", "critical"), ("disk", "warning"), ("gone", "info")):
        await alert_incidents.observe_alert(db, fingerprint=fp, firing=True, severity=severity, title=fp, evidence=fp,
                                            service="svc", detail="", flap_count=3, flap_window_s=3600)
    disk = next(i for i in await incidents.list_incidents(db) if i["key"] == "alert:disk")
    await incidents.acknowledge(db, disk["id"], "tester")
    await alert_incidents.observe_alert(db, fingerprint="gone", firing=False, severity="info", title="gone",
                                        evidence="gone", service="svc", detail="", flap_count=3, flap_window_s=3600)
    return s


def by_day(rows: list[stats.StatsDay]) -> dict[str, stats.StatsDay]:
    return {r["day"]: r for r in rows}


async def test_daily_covers_every_day_of_the_window_with_exact_sums(db):
    await seed(db)
    rows = await stats.daily(db, 14)
    assert [r["day"] for r in rows] == [day(n) for n in range(13, -1, -1)]
    days = by_day(rows)
    assert days[day(2)] | {"tiers": None} == {
        "day": day(2), "sessions": 3, "running": 0, "completed": 2, "failed": 1, "interrupted": 0,
        "escalations": 2, "attention": 1, "cost_usd": 0.6, "tiers": None}
    assert days[day(2)]["tiers"] == [{"tier": 0, "sessions": 1, "cost_usd": 0.0},
                                     {"tier": 1, "sessions": 1, "cost_usd": 0.1},
                                     {"tier": 2, "sessions": 1, "cost_usd": 0.5},
                                     {"tier": 3, "sessions": 0, "cost_usd": 0.0}]
    today = days[day(0)]
    assert (today["sessions"], today["completed"], today["running"], today["cost_usd"]) == (4, 3, 1, 0.27)
    assert today["tiers"][-1] == {"tier": None, "sessions": 1, "cost_usd": 0.02}  # the ingested session
    assert (days[day(1)]["sessions"], days[day(1)]["interrupted"], days[day(1)]["cost_usd"]) == (2, 1, 0.05)
    assert days[day(10)]["sessions"] == 1 and days[day(10)]["cost_usd"] == 0.3  # chain B's tier 1, by its own day
    assert days[day(5)] == {"day": day(5), "sessions": 0, "running": 0, "completed": 0, "failed": 0,
                            "interrupted": 0, "escalations": 0, "attention": 0, "cost_usd": 0.0,
                            "tiers": [{"tier": t, "sessions": 0, "cost_usd": 0.0} for t in range(4)]}
    assert sum(r["sessions"] for r in rows) == 10


async def test_a_window_of_one_day_is_today_and_a_longer_one_reaches_old_sessions(db):
    await seed(db)
    assert [r["day"] for r in await stats.daily(db, 1)] == [day(0)]
    month = await stats.daily(db, 30)
    assert len(month) == 30 and sum(r["sessions"] for r in month) == 12
    assert round(sum(r["cost_usd"] for r in month), 6) == 2.22
    assert stats.since_day(14, NOW) == day(13)


async def test_all_time_and_chain_sums(db):
    s = await seed(db)
    assert await stats.all_time(db) == {"sessions": 12, "cost_usd": 2.22}
    sums = await stats.chain_sums(db, [s.chain_a[0], s.chain_b[0], s.chain_a[0], 999_999])
    assert sums == {s.chain_a[0]: {"sessions": 3, "cost_usd": 0.6}, s.chain_b[0]: {"sessions": 2, "cost_usd": 0.3}}
    assert await stats.chain_sums(db, []) == {}


async def test_chain_rollup_lists_chains_that_began_in_the_window_newest_first(db):
    s = await seed(db)
    rows = await stats.chain_rollup(db, 14)
    # chain B began 20 days ago: left out whole, though its tier 1 ran 10 days ago; so is the old session
    assert [r["chain_root_id"] for r in rows] == sorted([s.chain_a[0], *s.singles, s.running, s.ingested],
                                                        reverse=True)
    a = next(r for r in rows if r["chain_root_id"] == s.chain_a[0])
    assert a == {"chain_root_id": s.chain_a[0], "sessions": 3, "max_tier": 2, "running": 0, "failed": 1,
                 "attention": 1, "cost_usd": 0.6, "input_tokens": 30, "output_tokens": 15, "duration_ms": 3000,
                 "started_at": f"{day(2)}T12:00:00.000Z", "ended_at": f"{day(2)}T12:00:00.000Z"}
    running = next(r for r in rows if r["chain_root_id"] == s.running)
    assert running["running"] == 1 and running["ended_at"] is None and running["cost_usd"] == 0.0
    ingested = next(r for r in rows if r["chain_root_id"] == s.ingested)
    assert (ingested["sessions"], ingested["max_tier"], ingested["cost_usd"]) == (1, None, 0.02)
    assert [r["chain_root_id"] for r in await stats.chain_rollup(db, 14, limit=2, offset=1)] == \
        [r["chain_root_id"] for r in rows[1:3]]
    month = await stats.chain_rollup(db, 30)
    assert {s.chain_b[0], s.old} <= {r["chain_root_id"] for r in month}
    assert next(r for r in month if r["chain_root_id"] == s.chain_b[0])["cost_usd"] == 0.3
