"""``app/store/dashboard.py`` against a real SQLite file: the overview's aggregates."""

from __future__ import annotations

import pytest

from app.errors import StoreError
from app.store import activity, dashboard, sessions
from app.store.db import Database


async def set_cols(db, pk: int, **values: object) -> None:
    sets = ", ".join(f"{k} = ?" for k in values)
    async with db.write() as conn:
        await conn.execute(f"UPDATE sessions SET {sets} WHERE id = ?", (*values.values(), pk))


async def test_running_sessions_newest_first_up_to_limit(db):
    a = await sessions.create_session(db, tier=1, model="haiku", trigger="schedule")
    done = await sessions.create_session(db, tier=2, trigger="manual")
    await set_cols(db, done, status="completed")
    c = await sessions.create_session(db, trigger="ingest")
    rows = await dashboard.running_sessions(db)
    assert [r["id"] for r in rows] == [c, a]
    assert rows[1] == {"id": a, "tier": 1, "model": "haiku", "trigger": "schedule",
                       "started_at": (await sessions.get_session(db, a))["started_at"]}
    assert [r["id"] for r in await dashboard.running_sessions(db, limit=1)] == [c]


async def test_attention_sessions_only_flagged_newest_first(db):
    a = await sessions.create_session(db, tier=1)
    await sessions.create_session(db, tier=1)
    c = await sessions.create_session(db, tier=3)
    await sessions.set_attention(db, a, "api failure")
    await sessions.set_attention(db, c, "max tier")
    rows = await dashboard.attention_sessions(db)
    assert [(r["id"], r["tier"], r["attention"]) for r in rows] == [(c, 3, "max tier"), (a, 1, "api failure")]
    assert [r["id"] for r in await dashboard.attention_sessions(db, limit=1)] == [c]


async def test_session_counts_per_status_and_tier_with_zero_for_no_tier(db):
    for tier, status in [(1, "completed"), (1, "completed"), (2, "completed"), (1, "failed"), (None, "completed"),
                         (None, "running")]:
        pk = await sessions.create_session(db, tier=tier)
        await set_cols(db, pk, status=status)
    counts = sorted((r["status"], r["tier"], r["n"]) for r in await dashboard.session_counts(db))
    assert counts == [("completed", 0, 1), ("completed", 1, 2), ("completed", 2, 1), ("failed", 1, 1),
                      ("running", 0, 1)]


async def test_total_cost_and_lines_sum_every_session(db):
    assert await dashboard.total_cost(db) == 0.0
    assert await dashboard.total_lines(db) == 0
    a = await sessions.create_session(db)
    b = await sessions.create_session(db)
    await sessions.create_session(db)  # NULL cost, 0 lines
    await set_cols(db, a, cost_usd=0.5)
    await set_cols(db, b, cost_usd=0.25)
    await activity.append_lines(db, a, [], line_count=10)
    await activity.append_lines(db, b, [], line_count=5)
    assert await dashboard.total_cost(db) == pytest.approx(0.75)
    assert await dashboard.total_lines(db) == 15


async def test_ping_answers_and_raises_once_closed(tmp_path):
    store = await Database.open(tmp_path / "ping.db")
    await dashboard.ping(store)
    await store.close()
    with pytest.raises(StoreError, match=r"ping\.db"):
        await dashboard.ping(store)
