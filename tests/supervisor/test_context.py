"""app/supervisor/context.py: memories for the prompt, the handoff between tiers, recovery prompts."""

from __future__ import annotations

import pytest

from app.store.memories import MemoryLifecycle
from app.supervisor.context import handoff_block, memories_block, recovery_prompt, system_prompt

HEADER = "## What earlier runs learned (memories; confidence in brackets)\n"
FOOTER = "\nTreat these as hints to verify, not facts. Report durable new observations as memories."


async def add_memory(db, service, category, value, confidence, *, active=1, updated="2026-01-01T00:00:00.000Z"):
    async with db.write() as conn:
        await conn.execute(
            "INSERT INTO memories (service, category, value, confidence, active, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)", (service, category, value, confidence, active, updated, updated))


async def test_memories_block_orders_by_confidence_then_recency(db):
    await add_memory(db, "nginx", "port", "8080", 0.5, updated="2026-01-01T00:00:00.000Z")
    await add_memory(db, None, "disk", "web-1 /var fills weekly", 0.9)
    await add_memory(db, "db", "version", "postgres 16", 0.5, updated="2026-03-01T00:00:00.000Z")  # newer
    await add_memory(db, "old", "x", "deactivated", 1.0, active=0)
    block = await memories_block(db, 10_000)
    assert block == (HEADER + "- [0.90] disk: web-1 /var fills weekly\n- [0.50] db:version: postgres 16\n"
                     "- [0.50] nginx:port: 8080" + FOOTER)


async def test_memories_block_budget_cuts_whole_lines(db):
    for i, conf in enumerate((0.9, 0.8, 0.7, 0.6)):
        await add_memory(db, "svc", f"k{i}", "v" * 20, conf)
    line = len("- [0.90] svc:k0: " + "v" * 20) + 1
    block = await memories_block(db, 2 * line + line - 1)  # room for two lines, not three
    body = block.removeprefix(HEADER).removesuffix(FOOTER).split("\n")
    assert [b[:8] for b in body] == ["- [0.90]", "- [0.80]"]
    assert await memories_block(db, 3 * line) == block.replace(FOOTER, "\n- [0.70] svc:k2: " + "v" * 20 + FOOTER)
    assert await memories_block(db, line - 1) == ""  # not even one line fits: no empty header
    assert await memories_block(db, 0) == ""


async def test_memories_block_empty_without_memories(db):
    assert await memories_block(db, 4000) == ""


def _parent(**overrides) -> dict:
    parent = {"id": 41, "tier": 1, "status": "completed", "escalation_reason": "nginx returns 502",
              "escalation_context": "upstream app-1 refuses connections since 03:10",
              "escalation_failed_checks": ["nginx_http", "app1_port"],
              "summary": "nginx up but its upstream is down."}
    parent.update(overrides)
    return parent


def test_handoff_block_carries_the_previous_tiers_findings():
    parent = _parent()
    checks = [{"name": "nginx", "status": "degraded", "detail": "502 on /"},
              {"name": "app-1", "status": "down", "detail": None}]
    block = handoff_block(parent, checks, [parent])
    assert block == (
        "## Escalation from tier 1 (session 41)\n\n"
        "Reason: nginx returns 502\n\n"
        "Context: upstream app-1 refuses connections since 03:10\n\n"
        "Failed checks:\n- nginx_http\n- app1_port\n\n"
        "Services checked by the previous tier:\n- nginx: degraded — 502 on /\n- app-1: down\n\n"
        "Previous tier's summary: nginx up but its upstream is down.\n\n"
        "Start by re-checking these findings; they may have changed since.")


def test_handoff_block_with_little_to_hand_over_and_a_longer_chain():
    first = _parent()
    second = _parent(id=42, tier=2, escalation_reason=None, escalation_context=None, escalation_failed_checks=None,
                     summary=None)
    block = handoff_block(second, [], [first, second])
    assert block.startswith("## Escalation from tier 2 (session 42)\n\nReason: not given\n\n")
    for absent in ("Context:", "Failed checks:", "Services checked", "Previous tier's summary"):
        assert absent not in block
    assert ("Chain so far:\n- tier 1 session 41: completed, nginx returns 502\n"
            "- tier 2 session 42: completed, ") in block


def test_system_prompt_parts_and_order():
    text = system_prompt(2, 3, "MEMS", "HANDOFF")
    assert text.startswith("You are TierOps tier 2 (investigate): find root causes")
    assert "Tiers above you: up to tier 3." in text
    assert "Finish by calling the StructuredOutput tool exactly once" in text
    assert text.index("HANDOFF") < text.index("MEMS")
    last = system_prompt(3, 3, "", None)
    assert "none — you are the last automated tier; anything you cannot fix goes to a human" in last
    assert "HANDOFF" not in last and "\n\n\n" not in last


def test_recovery_prompt_for_missing_output():
    text = recovery_prompt([{"path": "$", "message": "no structured_output in the result"}], False)
    assert text == (
        "Your previous answer did not call the StructuredOutput tool, so TierOps received no report.\n\n"
        "Do not run any more checks. Call the StructuredOutput tool now, once, with your complete report "
        "(summary, events, memories, escalation, services_checked) based on what you already found, fixing the "
        "problems listed.")
    assert "$" not in text  # no meaningless "$:" line when there was nothing to validate


def test_recovery_prompt_for_invalid_output_lists_paths():
    errors = [{"path": "$.events[0].level", "message": "'bogus' is not one of ['info', 'warning', 'critical']"},
              {"path": "$", "message": "'services_checked' is a required property"}]
    text = recovery_prompt(errors, True)
    assert text.startswith("Your StructuredOutput did not match the required schema. TierOps found these problems:\n"
                           "- $.events[0].level: 'bogus' is not one of ['info', 'warning', 'critical']\n"
                           "- $: 'services_checked' is a required property\n\nDo not run any more checks.")
    assert not text.startswith("-")  # safe as a -p value


@pytest.mark.parametrize("count,shown", [(30, 30), (45, 30)])
def test_recovery_prompt_lists_at_most_30_errors(count, shown):
    errors = [{"path": f"$.events[{i}].level", "message": "bad"} for i in range(count)]
    text = recovery_prompt(errors, True)
    assert text.count("- $.events[") == shown


async def test_memories_block_with_a_lifecycle_decays_sweeps_and_reorders(db):
    """What the tiers are told decays with age since last seen; below the floor a
    memory is marked stale and left out."""
    life = MemoryLifecycle(half_life_days=30, floor=0.3)
    async with db.write() as conn:
        await conn.execute(
            "INSERT INTO memories (service, category, value, confidence, created_at, updated_at, last_seen_at)"
            " VALUES ('nginx', 'port', '8080', 0.9, ?, ?, ?), ('db', 'version', 'postgres 16', 0.6, ?, ?, ?),"
            " (NULL, 'disk', 'old news', 0.9, ?, ?, ?)",
            ("2026-01-01T00:00:00.000Z",) * 3 + ("2026-01-31T00:00:00.000Z",) * 3 + ("2025-10-01T00:00:00.000Z",) * 3)
    block = await memories_block(db, 10_000, life, now="2026-01-31T00:00:00.000Z")
    assert block == (HEADER + "- [0.60] db:version: postgres 16\n- [0.45] nginx:port: 8080" + FOOTER)
    assert await db.fetchval("SELECT stale FROM memories WHERE value = 'old news'") == 1
    assert await db.fetchval("SELECT sum(stale) FROM memories") == 1
    # without a lifecycle: stored confidences, but the stale one stays out
    assert await memories_block(db, 10_000) == (HEADER + "- [0.90] nginx:port: 8080\n"
                                                "- [0.60] db:version: postgres 16" + FOOTER)


async def test_memories_block_with_no_budget_sweeps_nothing(db):
    await add_memory(db, None, "disk", "old", 0.9, updated="2020-01-01T00:00:00.000Z")
    assert await memories_block(db, 0, MemoryLifecycle()) == ""
    assert await db.fetchval("SELECT stale FROM memories") == 0
