"""app/supervisor/chain.py: escalation from tier to tier, its limits, its context, its totals."""

from __future__ import annotations

import contextlib
import json

import pytest

from app.config import PROMPTS_DIR
from app.store.chains import chain_links, chain_totals
from app.supervisor.chain import PromptError, base_prompt, run_chain
from tests.fakes import claude_control as cc
from tests.helpers import escalating, healthy

pytestmark = pytest.mark.timeout(60)


def stage(output: dict, *, cost: float = 0.01, **extra) -> dict:
    return {"lines": cc.structured_stream(cc.new_session_id(), output, cost=cost), **extra}


async def sessions(db) -> list[dict]:
    return [dict(r) for r in await db.fetchall("SELECT * FROM sessions ORDER BY id")]


async def test_healthy_tier1_is_one_session(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(healthy()), stage(healthy())])
    chain = await run_chain(db, make_settings(fake), validator, None)
    assert len(chain) == 1 and len(fake.invocations()) == 1
    [s] = chain
    assert (s["tier"], s["model"], s["status"], s["escalation_needed"]) == (1, "haiku", "completed", False)
    assert s["escalated_to"] is None and s["attention"] is None and s["parent_session_id"] is None
    [row] = await sessions(db)
    assert row["chain_id"] == row["id"] and row["trigger"] == "manual"
    inv = fake.last()
    assert inv["parsed"]["model"] == "haiku"
    assert inv["parsed"]["prompt"] == (PROMPTS_DIR / "tier1-observe.md").read_text().strip()
    assert "Escalation from tier" not in inv["parsed"]["append_system_prompt"]
    assert inv["parsed"]["append_system_prompt"] == row["system_prompt"]


async def test_escalation_runs_tier2_with_the_handoff(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [
        stage(escalating("disk almost full on web-1", context="/var at 99%, growing 1%/h",
                         failed=("disk_space_web1", "log_rotation"), summary="web-1 /var nearly full.")),
        stage(healthy("Cleaned old logs; /var at 60%.")),
    ])
    chain = await run_chain(db, make_settings(fake), validator, None, prompt="Only look at web-1.")
    assert [(s["tier"], s["status"]) for s in chain] == [(1, "completed"), (2, "completed")]
    parent, child = chain
    assert parent["escalated_to"] == child["id"] and parent["escalated_to_session_id"] == child["session_id"]
    assert child["parent_session_id"] == parent["id"] and child["escalated_to"] is None
    assert parent["attention"] is None and child["attention"] is None
    rows = await sessions(db)
    assert rows[1]["trigger"] == "escalation" and rows[1]["chain_id"] == rows[0]["id"] == rows[0]["chain_id"]

    first, second = fake.invocations()
    assert second["parsed"]["model"] == "sonnet"
    assert second["argv"][second["argv"].index("--allowedTools") + 1] == "Read,Bash"
    tier2_prompt = (PROMPTS_DIR / "tier2-investigate.md").read_text().strip()
    assert second["parsed"]["prompt"] == tier2_prompt + "\n\n## Operator request for this run\nOnly look at web-1."
    system = second["parsed"]["append_system_prompt"]
    assert system.startswith("You are TierOps tier 2 (investigate)")
    assert f"## Escalation from tier 1 (session {parent['id']})" in system
    assert "Reason: disk almost full on web-1" in system
    assert "Context: /var at 99%, growing 1%/h" in system
    assert "Failed checks:\n- disk_space_web1\n- log_rotation" in system
    assert "Services checked by the previous tier:\n- web-1-disk: degraded — /var 99%\n- nginx: healthy" in system
    assert "Previous tier's summary: web-1 /var nearly full." in system
    assert "Escalation from tier" not in first["parsed"]["append_system_prompt"]


@pytest.mark.parametrize("max_tier,start_tier", [(1, 1), (3, 3), (2, 2)])
async def test_escalation_at_the_highest_tier_needs_attention(db, make_settings, validator, tmp_path, max_tier,
                                                              start_tier):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating()), stage(healthy())])
    chain = await run_chain(db, make_settings(fake, max_tier=max_tier), validator, None, start_tier=start_tier)
    assert len(chain) == 1 and len(fake.invocations()) == 1
    [s] = chain
    assert s["tier"] == start_tier and s["status"] == "completed" and s["escalated_to"] is None
    assert s["attention"] == (f"escalation requested at tier {start_tier}, the highest tier allowed "
                              "(TIEROPS_MAX_TIER)")
    system = fake.last()["parsed"]["append_system_prompt"]
    assert "none — you are the last automated tier" in system


async def test_tiers_only_go_up_and_never_repeat(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating(f"reason {n}")) for n in (1, 2, 3, 4)])
    chain = await run_chain(db, make_settings(fake), validator, None)
    assert [s["tier"] for s in chain] == [1, 2, 3] and len(fake.invocations()) == 3
    assert [s["model"] for s in chain] == ["haiku", "sonnet", "opus"]
    assert [s["attention"] is not None for s in chain] == [False, False, True]
    assert chain[0]["escalated_to"] == chain[1]["id"] and chain[1]["escalated_to"] == chain[2]["id"]
    assert [s["parent_session_id"] for s in chain] == [None, chain[0]["id"], chain[1]["id"]]
    system3 = fake.invocations()[2]["parsed"]["append_system_prompt"]
    assert "Reason: reason 2" in system3
    assert (f"Chain so far:\n- tier 1 session {chain[0]['id']}: completed, reason 1\n"
            f"- tier 2 session {chain[1]['id']}: completed, reason 2") in system3


async def test_chain_budget_stops_escalation(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating(), cost=0.10), stage(healthy())])
    chain = await run_chain(db, make_settings(fake, chain_budget_usd=0.05), validator, None)
    assert len(chain) == 1 and len(fake.invocations()) == 1
    assert chain[0]["attention"] == ("escalation requested but the chain has spent $0.10 of its $0.05 budget "
                                     "(TIEROPS_CHAIN_BUDGET_USD)")


async def test_chain_budget_not_reached_escalates(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating(), cost=0.10), stage(healthy(), cost=0.30)])
    chain = await run_chain(db, make_settings(fake, chain_budget_usd=0.25), validator, None)
    assert [s["tier"] for s in chain] == [1, 2] and all(s["attention"] is None for s in chain)


async def _add_memory(db, service, category, value, confidence, active=1, updated="2026-01-01T00:00:00.000Z"):
    async with db.write() as conn:
        await conn.execute(
            "INSERT INTO memories (service, category, value, confidence, active, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)", (service, category, value, confidence, active, updated, updated))


async def test_memories_in_the_system_prompt_by_confidence_within_budget(db, make_settings, validator, tmp_path):
    await _add_memory(db, "nginx", "port", "listens on 8080", 0.6)
    await _add_memory(db, None, "disk", "web-1 /var fills up every Monday", 0.9)
    await _add_memory(db, "db", "version", "postgres 16", 0.95)
    await _add_memory(db, "cache", "size", "redis maxmemory 2gb", 0.3)
    await _add_memory(db, "old", "note", "deactivated by an operator", 0.99, active=0)
    wanted = ["- [0.95] db:version: postgres 16", "- [0.90] disk: web-1 /var fills up every Monday",
              "- [0.60] nginx:port: listens on 8080"]
    budget = sum(len(line) + 1 for line in wanted) + 5  # the 0.30 line does not fit
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating()), stage(healthy())])
    # memory_half_life_days=0: the seeded memories are old; decay is tested in test_memory_lifecycle
    chain = await run_chain(db, make_settings(fake, memory_prompt_budget=budget, memory_half_life_days=0), validator,
                            None)
    assert len(chain) == 2
    for inv in fake.invocations():  # every tier gets them
        system = inv["parsed"]["append_system_prompt"]
        assert "## What earlier runs learned (memories; confidence in brackets)\n" + "\n".join(wanted) + "\n" in system
        assert "redis maxmemory" not in system and "deactivated by an operator" not in system
    rows = await sessions(db)
    assert rows[0]["system_prompt"] == fake.invocations()[0]["parsed"]["append_system_prompt"]


async def test_memory_budget_zero_gives_no_memories(db, make_settings, validator, tmp_path):
    await _add_memory(db, "db", "version", "postgres 16", 0.95)
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(healthy())])
    await run_chain(db, make_settings(fake, memory_prompt_budget=0), validator, None)
    assert "earlier runs learned" not in fake.last()["parsed"]["append_system_prompt"]


async def test_cost_and_tokens_roll_up_per_chain(db, make_settings, validator, tmp_path):
    sid1 = cc.new_session_id()
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(sid1, escalating(), cost=0.25), "mode": "no_structured"},
        {"lines": cc.structured_stream(sid1, escalating(), cost=0.05, text="", command=None)},  # the resume
        stage(healthy(), cost=0.50),
    ])
    chain = await run_chain(db, make_settings(fake), validator, None)
    assert [(s["tier"], s["attempts"]) for s in chain] == [(1, 2), (2, 1)]
    assert [s["cost_usd"] for s in chain] == [pytest.approx(0.30), pytest.approx(0.50)]
    totals = await chain_totals(db, chain[0]["id"])
    assert totals["sessions"] == 2
    assert totals["cost_usd"] == pytest.approx(0.80)
    assert totals["input_tokens"] == 3 * 39760 and totals["output_tokens"] == 3 * 169
    assert totals["duration_ms"] == 3 * 172
    # another chain does not count
    fake.set_stages([stage(healthy(), cost=1.0)])
    other = await run_chain(db, make_settings(fake), validator, None)
    assert (await chain_totals(db, other[0]["id"]))["cost_usd"] == pytest.approx(1.0)
    assert (await chain_totals(db, chain[0]["id"]))["cost_usd"] == pytest.approx(0.80)
    assert await chain_links(db, 10**9) == []


async def test_failed_tier_needs_attention_and_does_not_escalate(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), escalating()), "mode": "crash", "after": 3},
        stage(healthy()),
    ])
    chain = await run_chain(db, make_settings(fake), validator, None)
    assert len(chain) == 1 and len(fake.invocations()) == 1
    assert chain[0]["attention"].startswith("tier 1 failed: stream ended without a result line")


async def test_no_escalation_decision_needs_attention(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), healthy(), text="[EVENT:warning:nginx] slow"),
         "mode": "no_structured"}])
    chain = await run_chain(db, make_settings(fake, output_max_retries=0), validator, None)
    assert len(chain) == 1
    assert chain[0]["degraded"] is True and chain[0]["escalation_needed"] is None
    assert chain[0]["attention"] == "tier 1 gave no escalation decision (source markers)"


async def test_handoff_file_fallback_can_escalate(db, make_settings, validator, tmp_path):
    # Without valid structured output the legacy handoff.json in the session's cwd decides.
    handoff_dir = tmp_path / "state" / "sessions" / "1"  # the first session of a new database
    handoff_dir.mkdir(parents=True)
    (handoff_dir / "handoff.json").write_text(json.dumps(
        {"escalate": True, "reason": "nginx keeps crashing", "failed_checks": ["nginx"]}))
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), healthy()), "mode": "no_structured"},
        stage(healthy()),
    ])
    chain = await run_chain(db, make_settings(fake, output_max_retries=0), validator, None)
    assert chain[0]["id"] == 1
    assert [(s["tier"], s["source"]) for s in chain] == [(1, "handoff"), (2, "structured_output")]
    system = fake.invocations()[1]["parsed"]["append_system_prompt"]
    assert "Reason: nginx keeps crashing" in system and "Failed checks:\n- nginx" in system


async def test_missing_prompt_file_is_a_clear_error_before_anything_runs(db, make_settings, validator, tmp_path):
    missing = tmp_path / "prompts" / "nope.md"
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(healthy())])
    settings = make_settings(fake, tier1_prompt_file=missing)
    with pytest.raises(PromptError) as info:
        await run_chain(db, settings, validator, None)
    message = str(info.value)
    assert message == (f"cannot read the tier 1 prompt file {missing}: No such file or directory; "
                       "set TIEROPS_TIER1_PROMPT_FILE")
    assert fake.invocations() == [] and await sessions(db) == []
    with pytest.raises(PromptError, match="tier 2 prompt file"):
        base_prompt(make_settings(fake, tier2_prompt_file=tmp_path), 2, None)  # a directory


async def test_missing_next_tier_prompt_does_not_lose_the_escalation(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating()), stage(healthy())])
    settings = make_settings(fake, tier2_prompt_file=tmp_path / "missing-tier2.md")
    with contextlib.suppress(PromptError):
        await run_chain(db, settings, validator, None)
    rows = await sessions(db)
    # Either refused before tier 1 ran, or tier 1 is flagged for a human with why.
    assert rows == [] or (rows[0]["attention"] and "prompt file" in rows[0]["attention"])


# --- an escalation whose child cannot start -------------------------------------------------

async def test_an_escalation_whose_child_cannot_start_flags_the_parent(db, make_settings, validator, tmp_path):
    """Tier 2's folder cannot be created (a file is in the way): the child row ends failed with
    why (never left running), and tier 1 is flagged for a human. Before: run_chain raised, tier 1
    said nothing and the child row stayed running."""
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), escalating())},
        {"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    settings = make_settings(fake)
    blocker = settings.state_dir / "sessions" / "2"  # the second session of a new database
    blocker.parent.mkdir(parents=True)
    blocker.write_text("in the way")
    chain = await run_chain(db, settings, validator, None)
    assert len(chain) == 1 and len(fake.invocations()) == 1
    [parent] = chain
    assert parent["status"] == "completed" and parent["escalation_needed"] is True
    assert parent["attention"].startswith("escalation to tier 2 could not start: FileExistsError: ")
    child = dict(await db.fetchone("SELECT * FROM sessions WHERE id = 2"))
    assert child["status"] == "failed" and child["parent_session_id"] == parent["id"]
    assert child["status_reason"].startswith("internal error: FileExistsError: ")
