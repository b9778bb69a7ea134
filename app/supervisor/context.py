"""What each tier is told besides its prompt file: the appended system prompt and recovery prompts.

The appended system prompt (``--append-system-prompt``, re-sent on every resume because the CLI
does not persist it, reference §8) carries: the tier's role and limits, the most relevant active
memories under a size budget (never stale ones; with their decayed confidence), and for tiers 2-3
the previous tier's handoff and the chain so far, and the cooldowns: the limits and what each
service's window still allows. In a dry run it says so right after the role: the tools are
read-only then, and the model reports what it would have done. The runbooks of the incidents
(``runbooks.py``) come after the inventory, quoted: reference material, never TierOps' own words.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from app.engine import cooldowns
from app.store import memories
from app.store.db import Database
from app.store.rows import CheckRow, IncidentRow

log = logging.getLogger(__name__)

ROLES = {
    0: "tier 0 (probe): the deterministic checks of the inventory; no language model",
    1: "tier 1 (observe): read-only checks; never change anything",
    2: "tier 2 (investigate): find root causes and apply only safe, reversible fixes",
    3: "tier 3 (remediate): full remediation with backups, one change at a time",
}


async def memories_block(db: Database, budget: int, lifecycle: memories.MemoryLifecycle | None = None, *,
                         now: str | None = None) -> str:
    """Active memories by confidence, then recency, until ``budget`` characters are used.

    With a ``lifecycle`` (``MemoryLifecycle.from_settings(settings)``) the memories'
    decay is swept first — those fallen below the floor are marked stale — and the confidence
    shown and ordered by is the decayed one. Stale memories are never given, with or without it.
    ``now`` simulates time in tests."""
    if budget <= 0:
        return ""
    if lifecycle is not None:
        await memories.sweep_stale(db, lifecycle, now=now)
    rows = await memories.prompt_memories(db, lifecycle=lifecycle, now=now)
    lines: list[str] = []
    used = 0
    for r in rows:
        key = f"{r['service']}:{r['category']}" if r["service"] else r["category"]
        line = f"- [{r['confidence']:.2f}] {key}: {r['value']}"
        if used + len(line) + 1 > budget:
            break
        lines.append(line)
        used += len(line) + 1
    if not lines:
        return ""
    return ("## What earlier runs learned (memories; confidence in brackets)\n" + "\n".join(lines) +
            "\nTreat these as hints to verify, not facts. Report durable new observations as memories.")


def handoff_block(parent: Mapping[str, Any], checks: Sequence[CheckRow], chain: Sequence[Mapping[str, Any]]) -> str:
    """The previous tier's findings, as the next tier's starting point (``parent`` and ``chain``
    are session rows, JSON columns decoded)."""
    failed = parent.get("escalation_failed_checks")
    if not isinstance(failed, list):
        failed = []
    parts = [
        f"## Escalation from tier {parent['tier']} (session {parent['id']})",
        f"Reason: {parent.get('escalation_reason') or 'not given'}",
    ]
    if parent.get("escalation_context"):
        parts.append(f"Context: {parent['escalation_context']}")
    if failed:
        parts.append("Failed checks:\n" + "\n".join(f"- {c}" for c in failed))
    if checks:
        parts.append("Services checked by the previous tier:\n" + "\n".join(
            f"- {c['name']}: {c['status']}" + (f" — {c['detail']}" if c.get("detail") else "") for c in checks))
    if parent.get("summary"):
        parts.append(f"Previous tier's summary: {parent['summary']}")
    if len(chain) > 1:
        parts.append("Chain so far:\n" + "\n".join(
            f"- tier {s['tier']} session {s['id']}: {s['status']}, {s.get('escalation_reason') or s.get('summary') or ''}"
            for s in chain))
    parts.append("Start by re-checking these findings; they may have changed since.")
    return "\n\n".join(parts)


def incidents_block(escalating: Sequence[tuple[IncidentRow, str]]) -> str:
    """The incidents that made the previous tier escalate, with the keys to report
    them under, so the model's findings update these incidents instead of opening new ones."""
    if not escalating:
        return ""
    lines = [f"- key `{row['key']}`: incident #{row['id']}, {row['severity']}, service {row['service'] or '-'}, "
             f"open since {row['opened_at']} ({row['occurrences']} cycle(s)); escalated because {why}. "
             f"Latest evidence: {(row['evidence'] or '')[:600]}" for row, why in escalating]
    return ("## Incidents behind this escalation\n" + "\n".join(lines) +
            "\nWhen an event of yours is about one of these, set its `key` to the incident's key.")


async def cooldowns_block(db: Database, limits: Mapping[str, cooldowns.Limit], *, now: str | None = None) -> str:
    """The cooldown limits and the active windows: "restart api: 2 of 2 in 4h used,
    next allowed at …; do not restart api, propose it instead". Empty without limits."""
    return cooldowns.prompt_block(await cooldowns.active(db, limits, now, fresh=True), limits)


DRY_RUN_BLOCK = (
    "## Dry run: change nothing\n"
    "This run is a dry run. Do not change anything on any system, whatever your role allows: no restart, "
    "edit, deletion, cleanup, deploy or configuration change. Your tools are read-only for this run; "
    "investigate as usual. Report every action you would have taken as an event of level \"info\" whose "
    "message starts with \"would have: \" (for example \"would have: restart nginx on web-1, because its "
    "config test now passes\"), and list it in `actions` with result \"dry-run\". Escalate as you would "
    "in a real run."
)


def system_prompt(tier: int, max_tier: int, memories: str, handoff: str | None, inventory: str | None = None,
                  incidents: str | None = None, cooldowns: str | None = None, *, dry_run: bool = False,
                  runbooks: str | None = None) -> str:
    """``inventory``: the checks file as text, given to the language-model tiers;
    ``incidents``: :func:`incidents_block` of the escalation that started this tier;
    ``cooldowns``: :func:`cooldowns_block` (tiers 2 and 3, the tiers that act); ``dry_run``:
    :data:`DRY_RUN_BLOCK`; ``runbooks``: the runbook section (``runbooks.runbooks_for``)."""
    parts = [
        f"You are TierOps {ROLES.get(tier, f'tier {tier}')}. Tiers above you: "
        f"{'none — you are the last automated tier; anything you cannot fix goes to a human' if tier >= max_tier else f'up to tier {max_tier}'}.",
        "Finish by calling the StructuredOutput tool exactly once with your report.",
    ]
    if dry_run:
        parts.append(DRY_RUN_BLOCK)
    if handoff:
        parts.append(handoff)
    if incidents:
        parts.append(incidents)
    if cooldowns:
        parts.append(cooldowns)
    if inventory:
        parts.append(inventory)
    if runbooks:
        parts.append(runbooks)
    if memories:
        parts.append(memories)
    return "\n\n".join(parts)


def recovery_prompt(errors: list[dict[str, str]], had_output: bool) -> str:
    """The resume prompt of output recovery: what was wrong, and the one thing to do now."""
    if not had_output:
        head = "Your previous answer did not call the StructuredOutput tool, so TierOps received no report."
    else:
        head = "Your StructuredOutput did not match the required schema. TierOps found these problems:"
    listed = "\n".join(f"- {e['path']}: {e['message']}" for e in errors[:30]) if had_output else ""
    return (f"{head}\n{listed}\n\nDo not run any more checks. Call the StructuredOutput tool now, once, with your "
            "complete report (summary, events, memories, escalation, services_checked) based on what you already "
            "found, fixing the problems listed.").replace("\n\n\n", "\n\n")
