"""Budgets: a tier's ``--max-budget-usd`` (TIEROPS_TIERn_MAX_BUDGET_USD) and the daily
budget of the language-model tiers (TIEROPS_DAILY_BUDGET_USD).

The fake CLI logs each command line; a run the real CLI stopped at its budget is replayed from its
capture (``o_max_budget_usd``, tests/realcli/test_budget.py). Earlier spend is real rows: chains
run here, or real captures ingested at a tier.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from app.engine.ingest import ingest_path
from app.store import incidents, sessions
from app.supervisor.chain import run_chain
from app.supervisor.guards import BudgetSpent
from app.supervisor.scheduler import Supervisor
from tests.fakes import claude_control as cc
from tests.helpers import escalating, fixture_stream, healthy
from tests.supervisor.test_cli_run import cli_env, tierops
from tests.supervisor.test_probe_cycles import Target, checks_file

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def target() -> Iterator[Target]:
    """A local HTTP service for tier 0's checks (tests/supervisor/test_probe_cycles.py)."""
    t = Target()
    yield t
    t.close()


def stage(output: dict, *, cost: float = 0.01, **extra) -> dict:
    return {"lines": cc.structured_stream(cc.new_session_id(), output, cost=cost), **extra}


def budget_flag(inv: dict) -> str | None:
    argv = inv["argv"]
    return argv[argv.index("--max-budget-usd") + 1] if "--max-budget-usd" in argv else None


async def count_sessions(db) -> int:
    return int(await db.fetchval("SELECT count(*) FROM sessions"))


# --- a tier's --max-budget-usd ------------------------------------------------------------------

async def test_max_budget_usd_is_passed_only_to_a_tier_that_has_one(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating()), stage(healthy())])
    chain = await run_chain(db, make_settings(fake, tier2_max_budget_usd=0.5), validator, None)
    assert [s["tier"] for s in chain] == [1, 2]
    first, second = fake.invocations()
    assert (budget_flag(first), budget_flag(second)) == (None, "0.5")
    # the value after the flag is not taken for a prompt: the prompt came on stdin
    assert second["usage_error"] is None and second["parsed"]["positionals"] == []
    assert second["parsed"]["prompt_from"] == "stdin"
    assert second["parsed"]["prompt"].startswith("# TierOps tier 2")
    rows = await db.fetchall("SELECT max_budget_usd FROM sessions ORDER BY id")
    assert [r["max_budget_usd"] for r in rows] == [None, 0.5]


async def test_a_tier_stopped_at_its_budget_failed_and_does_not_escalate(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [{"replay": str(cc.fixture("o_max_budget_usd"))},
                                                  stage(healthy())])
    chain = await run_chain(db, make_settings(fake, tier1_max_budget_usd=0.15), validator, None)
    assert len(chain) == 1 and len(fake.invocations()) == 1  # neither escalated nor resumed
    [s] = chain
    reason = "budget exceeded: $0.18 of $0.15 (TIEROPS_TIER1_MAX_BUDGET_USD)"
    assert (s["status"], s["status_reason"], s["escalated_to"]) == ("failed", reason, None)
    assert s["attention"] == f"tier 1 failed: {reason}"
    row = await sessions.get_session(db, s["id"])
    assert row is not None and row["max_budget_usd"] == 0.15 and row["result_subtype"] == "error_max_budget_usd"


async def test_a_resume_gets_what_is_left_of_the_budget(db, make_settings, validator, tmp_path):
    sid = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(sid, healthy(), cost=0.02), "mode": "no_structured"},
        {"lines": cc.structured_stream(sid, healthy(), text="", command=None, cost=0.01)},
    ])
    chain = await run_chain(db, make_settings(fake, tier1_max_budget_usd=0.05), validator, None)
    assert [(s["status"], s["attempts"], s["degraded"]) for s in chain] == [("completed", 2, False)]
    first, again = fake.invocations()
    assert "--resume" in again["argv"]
    assert (budget_flag(first), budget_flag(again)) == ("0.05", "0.03")  # the CLI counts per process


async def test_no_resume_once_the_budget_is_spent(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), healthy(), cost=0.02), "mode": "no_structured"},
        stage(healthy())])
    chain = await run_chain(db, make_settings(fake, tier1_max_budget_usd=0.01), validator, None)
    assert len(fake.invocations()) == 1
    [s] = chain
    assert (s["status"], s["degraded"], s["attempts"]) == ("completed", True, 1)
    assert s["status_reason"] == ("output recovery not started: the session spent $0.02 of its $0.01 budget "
                                  "(TIEROPS_TIER1_MAX_BUDGET_USD)")


# --- the daily budget ---------------------------------------------------------------------------

async def test_today_s_spend_counts_the_language_model_tiers_only(db, validator, settings):
    for scenario, tier in (("c_structured", 1), ("a_plain", 2), ("d_text_only", 0)):  # $0.203, $0.0977, $0.30
        _, stored = await ingest_path(db, fixture_stream(scenario), validator, settings, tier=tier)
        assert stored
    assert await sessions.model_cost_today(db) == pytest.approx(0.203025 + 0.097665)
    assert await sessions.model_cost_today(db, now=datetime.now(UTC) + timedelta(days=1)) == 0


async def test_the_daily_budget_stops_the_next_language_model_tier(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating(), cost=0.30), stage(healthy())])
    settings = make_settings(fake, daily_budget_usd=0.25)
    chain = await run_chain(db, settings, validator, None)  # $0 spent today: tier 1 starts
    assert len(chain) == 1 and len(fake.invocations()) == 1
    assert chain[0]["escalation_needed"] is True and chain[0]["escalated_to"] is None
    assert chain[0]["attention"] == ("daily budget spent: $0.30 of $0.25 (TIEROPS_DAILY_BUDGET_USD); "
                                     "tier 2 not started")

    with pytest.raises(BudgetSpent, match=r"^daily budget spent: \$0.30 of \$0.25 \(TIEROPS_DAILY_BUDGET_USD\); "
                                          r"tier 1 not started$"):
        await run_chain(db, settings, validator, None)
    assert await count_sessions(db) == 1 and len(fake.invocations()) == 1  # no session, no CLI

    # under the budget, the same chain escalates
    fake.set_stages([stage(escalating()), stage(healthy())])
    chain = await run_chain(db, make_settings(fake, daily_budget_usd=0.65), validator, None)
    assert [s["tier"] for s in chain] == [1, 2]


async def test_earlier_spend_today_skips_tier_1_while_tier_0_keeps_running(db, make_settings, validator, target,
                                                                          tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(healthy())])
    settings = make_settings(fake, checks=checks_file(tmp_path, target.url), daily_budget_usd=0.20)
    _, stored = await ingest_path(db, fixture_stream("c_structured"), validator, settings, tier=1)  # $0.203 today
    assert stored
    sup = Supervisor(db, settings, validator)
    target.mode = "fail"  # an incident opens: tier 0 asks for tier 1
    chain = await sup.run_cycle(tier=0)
    assert [(s["tier"], s["status"]) for s in chain] == [(0, "completed")]
    assert chain[0]["attention"].endswith("; not escalated to tier 1: daily budget spent: $0.20 of $0.20 "
                                          "(TIEROPS_DAILY_BUDGET_USD); tier 1 not started")
    assert "check:api-health" in chain[0]["attention"] and fake.invocations() == []
    [inc] = await incidents.list_incidents(db)
    assert inc["escalations"] == 1  # escalated to a human: not asked again every cycle
    assert [s["tier"] for s in await sup.run_cycle(tier=0)] == [0]  # the next cycle: tier 0 runs again
    with pytest.raises(BudgetSpent, match="tier 1 not started"):
        await sup.run_cycle(tier=1)


def test_tierops_run_refused_once_the_daily_budget_is_spent(tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(healthy(), cost=0.3)])
    env = cli_env(tmp_path, fake.path, TIEROPS_DAILY_BUDGET_USD="0.25")
    assert tierops(tmp_path, env, "run").returncode == 0
    out = tierops(tmp_path, env, "run")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines()[-1] == ("tierops: error: daily budget spent: $0.30 of $0.25 "
                                                   "(TIEROPS_DAILY_BUDGET_USD); tier 1 not started")
    assert len(fake.invocations()) == 1
