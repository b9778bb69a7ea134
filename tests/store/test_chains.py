"""``app/store/chains.py`` against a real SQLite file: escalation chains and their sums."""

from __future__ import annotations

import pytest

from app.output.route import Routed
from app.store import activity, chains, sessions
from app.store.sessions import SessionIdentity, SessionSummary


def summary(cost: float | None, inp: int | None, out: int | None, ms: int | None) -> SessionSummary:
    return SessionSummary(
        status="completed", status_reason=None, degraded=False, exit_code=0, ended_at="2026-01-01T00:00:00.000Z",
        duration_ms=ms, duration_api_ms=None, cost_usd=cost, input_tokens=inp, output_tokens=out,
        cache_read_tokens=None, cache_creation_tokens=None, num_turns=1, result_subtype="success", is_error=False,
        api_error_status=None, stop_reason=None, terminal_reason=None, result_text=None, result_errors=None,
        permission_denials=None, model_usage=None, validation_valid=True, validation_errors=None,
        structured_output=None, invalid_output=None, attempts=1, handoff_raw=None, notes=None, stderr_tail=None,
        line_count=0, cli_model=None, cwd=None)


async def link(db, tier: int, chain_id: int | None, *, parent: int | None = None, cli_id: str | None = None,
               cost: float | None = None, inp: int | None = None, out: int | None = None,
               ms: int | None = None) -> int:
    """A supervised session in chain ``chain_id`` (its own id when None), finished with these figures."""
    pk = await sessions.create_session(db, tier=tier, trigger="escalation" if parent else "schedule",
                                       parent_session_id=parent)
    await sessions.set_launch(db, pk, cwd=f"/s/{pk}", chain_id=chain_id or pk, argv=["claude"], system_prompt="")
    if cli_id:
        await activity.append_lines(db, pk, [], line_count=0, identity=SessionIdentity(cli_id, None, None, None))
    await sessions.finish_session(db, pk, summary(cost, inp, out, ms),
                                  Routed(source="structured_output",
                                         escalation={"needed": parent is None, "reason": "r", "failed_checks": []}),
                                  initial_confidence=0.7, reinforce=0.3)
    return pk


async def test_chain_links_oldest_first_with_the_escalated_to_cli_id(db):
    root = await link(db, 1, None, cli_id="cli-1", cost=0.1)
    noise = await link(db, 1, None, cli_id="cli-other")
    mid = await link(db, 2, root, parent=root, cli_id="cli-2", cost=0.2)
    top = await link(db, 3, root, parent=mid)  # no CLI id (died before init)
    await sessions.set_escalated_to(db, root, mid)
    await sessions.set_escalated_to(db, mid, top)
    await sessions.set_attention(db, top, "max tier")

    rows = await chains.chain_links(db, root)
    assert [r["id"] for r in rows] == [root, mid, top]
    assert [r["tier"] for r in rows] == [1, 2, 3]
    assert [r["escalated_to"] for r in rows] == [mid, top, None]
    assert [r["escalated_to_session_id"] for r in rows] == ["cli-2", None, None]
    assert [r["parent_session_id"] for r in rows] == [None, root, mid]
    assert [r["attention"] for r in rows] == [None, None, "max tier"]
    assert rows[0]["escalation_needed"] is True
    assert rows[1]["escalation_needed"] is False
    assert rows[0]["degraded"] is False
    assert rows[0]["session_id"] == "cli-1"
    assert await chains.chain_links(db, noise) == await chains.chain_links(db, noise, fresh=True)
    assert [r["id"] for r in await chains.chain_links(db, noise)] == [noise]
    assert await chains.chain_links(db, 9999) == []


async def test_chain_totals_sum_one_chain_only(db):
    root = await link(db, 1, None, cost=0.5, inp=100, out=10, ms=1000)
    await link(db, 2, root, parent=root, cost=1.25, inp=200, out=20, ms=2000)
    await link(db, 3, root, parent=root)  # no figures: counts as a session, adds nothing
    await link(db, 1, None, cost=100.0, inp=9999, out=9999, ms=9999)  # another chain
    totals = await chains.chain_totals(db, root)
    assert totals == {"sessions": 3, "cost_usd": pytest.approx(1.75), "input_tokens": 300, "output_tokens": 30,
                      "duration_ms": 3000}
    assert await chains.chain_cost(db, root) == pytest.approx(1.75)


async def test_chain_totals_and_cost_of_an_unknown_chain_are_zero(db):
    assert await chains.chain_totals(db, 42) == {"sessions": 0, "cost_usd": 0, "input_tokens": 0,
                                                 "output_tokens": 0, "duration_ms": 0}
    assert await chains.chain_cost(db, 42) == 0.0


async def test_chain_cost_includes_this_process_last_write(db):
    root = await link(db, 1, None, cost=0.5)
    child = await sessions.create_session(db, tier=2, trigger="escalation", parent_session_id=root)
    await sessions.set_launch(db, child, cwd="/c", chain_id=root, argv=[], system_prompt="")
    async with db.write() as conn:
        await conn.execute("UPDATE sessions SET cost_usd = 0.25 WHERE id = ?", (child,))
    assert await chains.chain_cost(db, root) == pytest.approx(0.75)


async def test_latest_chain_id(db):
    assert await chains.latest_chain_id(db) is None
    await sessions.create_session(db)  # an ingested session has no chain
    assert await chains.latest_chain_id(db) is None
    first = await link(db, 1, None)
    assert await chains.latest_chain_id(db) == first
    second = await link(db, 1, None)
    await link(db, 2, second, parent=second)
    await sessions.create_session(db)
    assert await chains.latest_chain_id(db) == second
