"""An escalation chain: tier N runs; if its routed escalation says ``needed``, tier N+1 runs.

Steps of :func:`run_chain`:

1. build the tier's appended system prompt (role, memories, and the parent's handoff);
2. run the tier session (spawn, stream, output recovery, finalize: ``session.py``);
3. decide: stop when no escalation is needed; otherwise escalate to the next tier, unless the
   decision cannot be acted on — the max tier is reached, the model was unreachable (an API
   failure never escalates: the next tier would fail the same way), the session failed without
   a decision, or the chain's budget is spent — in which case the session is marked as needing
   human attention, with why;
4. link parent → child (``escalated_to``) and child → parent (``parent_session_id``).

Tiers only go up, so a chain never runs the same tier twice and cannot loop.
"""

from __future__ import annotations

from collections.abc import Callable

from app.config import Settings
from app.output.validate import OutputValidator
from app.store.db import Database
from app.supervisor.context import handoff_block, memories_block, system_prompt
from app.supervisor.hub import Hub
from app.supervisor.session import SessionHandle, TierRequest, run_tier_session


def base_prompt(settings: Settings, tier: int, extra: str | None) -> str:
    path = settings.tier(tier).prompt_file
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise PromptError(f"cannot read the tier {tier} prompt file {path}: {exc.strerror}; "
                          f"set TIEROPS_TIER{tier}_PROMPT_FILE") from None
    if extra:
        text += f"\n\n## Operator request for this run\n{extra.strip()}"
    return text


class PromptError(Exception):
    pass


async def run_chain(db: Database, settings: Settings, validator: OutputValidator, hub: Hub | None, *,
                    start_tier: int = 1, prompt: str | None = None, trigger: str = "manual",
                    on_session: Callable[[int, SessionHandle], None] | None = None) -> list[dict]:
    tier = start_tier
    parent: dict | None = None
    chain_id: int | None = None
    chain: list[dict] = []
    tier_prompt = base_prompt(settings, tier, prompt)
    while True:
        handoff = None
        if parent is not None:
            checks = [dict(r) for r in await db.fetchall(
                "SELECT name, status, detail FROM check_results WHERE session_pk = ? ORDER BY id", (parent["id"],))]
            handoff = handoff_block(parent, checks, chain)
        sysprompt = system_prompt(tier, settings.max_tier, await memories_block(db, settings.memory_prompt_budget),
                                  handoff)
        req = TierRequest(tier=tier, prompt=tier_prompt, system_prompt=sysprompt,
                          trigger="escalation" if parent else trigger,
                          parent_pk=parent["id"] if parent else None, chain_id=chain_id)
        result = await run_tier_session(db, settings, validator, hub, req, on_start=on_session)
        chain_id = chain_id or result.pk
        if parent is not None:
            async with db.write() as conn:
                await conn.execute("UPDATE sessions SET escalated_to = ? WHERE id = ?", (result.pk, parent["id"]))
        row = dict(await db.fetchone("SELECT * FROM sessions WHERE id = ?", (result.pk,)))
        chain.append(row)
        attention = await _decide(db, settings, row, result.api_failure, chain_id)
        if attention is None and row["escalation_needed"]:
            try:  # read before escalating: a missing prompt file must not silently drop the escalation
                tier_prompt = base_prompt(settings, tier + 1, prompt)
            except PromptError as exc:
                attention = f"escalation requested but {exc}"
        if attention is not None:
            async with db.write() as conn:
                await conn.execute("UPDATE sessions SET attention = ? WHERE id = ?", (attention, result.pk))
            break
        if not row["escalation_needed"]:
            break
        parent = row
        tier += 1
    return await chain_summary(db, chain_id)


async def _decide(db: Database, settings: Settings, row: dict, api_failure: bool, chain_id: int) -> str | None:
    """None to go on (or stop quietly); otherwise why a human must look."""
    if row["status"] == "interrupted":
        return None
    if row["status"] == "failed":
        if api_failure:
            return f"tier {row['tier']} could not reach the model ({row['status_reason']}); not escalated"
        return f"tier {row['tier']} failed: {row['status_reason']}"
    if not row["escalation_needed"]:
        if row["escalation_needed"] is None:
            return f"tier {row['tier']} gave no escalation decision (source {row['source']})"
        return None
    if row["tier"] >= settings.max_tier:
        return f"escalation requested at tier {row['tier']}, the highest tier allowed (TIEROPS_MAX_TIER)"
    if settings.chain_budget_usd > 0:
        spent = await db.fetchval("SELECT ifnull(sum(cost_usd), 0) FROM sessions WHERE chain_id = ?", (chain_id,))
        if spent >= settings.chain_budget_usd:
            return (f"escalation requested but the chain has spent ${spent:.2f} of its "
                    f"${settings.chain_budget_usd:.2f} budget (TIEROPS_CHAIN_BUDGET_USD)")
    return None


async def chain_summary(db: Database, chain_id: int | None) -> list[dict]:
    """The chain as `tierops run --json` prints it, oldest first."""
    if chain_id is None:
        return []
    rows = await db.fetchall(
        """SELECT s.id, s.session_id, s.tier, s.model, s.status, s.status_reason, s.degraded, s.source,
                  s.attempts, s.escalated_to, c.session_id AS escalated_to_session_id, s.parent_session_id,
                  s.escalation_needed, s.escalation_reason, s.attention, s.cost_usd, s.input_tokens,
                  s.output_tokens, s.duration_ms, s.started_at, s.ended_at
           FROM sessions s LEFT JOIN sessions c ON c.id = s.escalated_to
           WHERE s.chain_id = ? ORDER BY s.id""", (chain_id,))
    out = []
    for r in rows:
        d = dict(r)
        d["degraded"] = bool(d["degraded"])
        d["escalation_needed"] = None if d["escalation_needed"] is None else bool(d["escalation_needed"])
        out.append(d)
    return out


async def chain_totals(db: Database, chain_id: int) -> dict:
    row = await db.fetchone(
        """SELECT count(*) AS sessions, ifnull(sum(cost_usd), 0) AS cost_usd,
                  ifnull(sum(input_tokens), 0) AS input_tokens, ifnull(sum(output_tokens), 0) AS output_tokens,
                  ifnull(sum(duration_ms), 0) AS duration_ms FROM sessions WHERE chain_id = ?""", (chain_id,))
    return dict(row)
