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

An escalation whose next tier cannot even start (its row, folder or prompt cannot be created, a
bug) never vanishes (issue #9 §4): the parent is flagged as needing attention with the error, the
error is logged with its traceback, and the chain ends there. A first tier that cannot start
raises, as before: there is no session to flag.

Tiers only go up, so a chain never runs the same tier twice and cannot loop.

Log lines (issue #10): an escalation once, when it is decided (from session, to tier, the
model's reason), at INFO; a session that needs attention, with why, at WARNING. Both carry the
session, chain and tier as fields; the child's own start line names its parent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from app.config import Settings
from app.errors import ConfigError
from app.logs import oneline
from app.output.spec import OutputSpec
from app.output.validate import OutputValidator
from app.store import chains, findings, sessions
from app.store import memories as memory_store
from app.store.db import Database
from app.store.rows import ChainLink, SessionRow
from app.supervisor.context import handoff_block, memories_block, system_prompt
from app.supervisor.hub import Hub
from app.supervisor.session import SessionHandle, SessionResult, TierRequest, run_tier_session
from app.vocab import SessionStatus, Trigger

log = logging.getLogger(__name__)


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


class PromptError(ConfigError):
    """A tier's prompt file cannot be read; the message names the file and the setting."""


async def run_chain(db: Database, settings: Settings, validator: OutputValidator, hub: Hub | None, *,
                    start_tier: int = 1, prompt: str | None = None, trigger: str = Trigger.MANUAL,
                    on_session: Callable[[int, SessionHandle], None] | None = None,
                    spec: OutputSpec | None = None) -> list[ChainLink]:
    """``spec`` is the first session's output contract (issue #11); escalated tiers always use the
    default agent-response contract, the one that carries an escalation decision."""
    tier = start_tier
    parent: SessionRow | None = None
    chain_id: int | None = None
    chain: list[SessionRow] = []
    tier_prompt = base_prompt(settings, tier, prompt)
    while True:
        try:
            result = await _start_tier(db, settings, validator, hub, tier, tier_prompt, trigger, parent, chain,
                                       chain_id, on_session, spec if parent is None else None)
        except Exception as exc:
            if parent is None:
                raise
            why = f"escalation to tier {tier} could not start: {type(exc).__name__}: {exc}"
            log.exception("session %d needs attention: %s", parent["id"], oneline(why),
                          extra={"session": parent["id"], "chain": chain_id, "tier": parent["tier"]})
            await sessions.set_attention(db, parent["id"], why)
            break
        chain_id = chain_id or result.pk
        if parent is not None:
            await sessions.set_escalated_to(db, parent["id"], result.pk)
        row = await sessions.get_session(db, result.pk, fresh=True)  # the decision exactly as written
        if row is None:
            raise LookupError(f"session {result.pk} vanished from the database while its chain ran")
        chain.append(row)
        attention = await _decide(db, settings, row, result.api_failure, chain_id)
        if attention is None and row["escalation_needed"]:
            try:  # read before escalating: a missing prompt file must not silently drop the escalation
                tier_prompt = base_prompt(settings, tier + 1, prompt)
            except PromptError as exc:
                attention = f"escalation requested but {exc}"
        if attention is not None:
            await sessions.set_attention(db, result.pk, attention)
            log.warning("session %d needs attention: %s", result.pk, oneline(attention),
                        extra={"session": result.pk, "chain": chain_id, "tier": tier})
            break
        if not row["escalation_needed"]:
            break
        log.info("session %d escalated to tier %d: %s", result.pk, tier + 1,
                 oneline(row["escalation_reason"] or "no reason given"),
                 extra={"session": result.pk, "chain": chain_id, "tier": tier, "to_tier": tier + 1})
        parent = row
        tier += 1
    return await chains.chain_links(db, chain_id, fresh=True) if chain_id is not None else []


async def _start_tier(db: Database, settings: Settings, validator: OutputValidator, hub: Hub | None, tier: int,
                      tier_prompt: str, trigger: str, parent: SessionRow | None, chain: list[SessionRow],
                      chain_id: int | None,
                      on_session: Callable[[int, SessionHandle], None] | None,
                      spec: OutputSpec | None = None) -> SessionResult:
    """Steps 1 and 2: the tier's system prompt (with the parent's handoff), then its session."""
    handoff = None
    if parent is not None:
        checks = await findings.session_checks(db, parent["id"], fresh=True)
        handoff = handoff_block(parent, checks, chain)
    lifecycle = memory_store.MemoryLifecycle.from_settings(settings)  # decay and the stale floor (issue #11)
    sysprompt = system_prompt(tier, settings.max_tier, await memories_block(db, settings.memory_prompt_budget,
                                                                           lifecycle),
                              handoff)
    req = TierRequest(tier=tier, prompt=tier_prompt, system_prompt=sysprompt,
                      trigger=Trigger.ESCALATION if parent else trigger,
                      parent_pk=parent["id"] if parent else None, chain_id=chain_id, spec=spec)
    return await run_tier_session(db, settings, validator, hub, req, on_start=on_session)


async def _decide(db: Database, settings: Settings, row: SessionRow, api_failure: bool,
                  chain_id: int) -> str | None:
    """None to go on (or stop quietly); otherwise why a human must look."""
    if row["status"] == SessionStatus.INTERRUPTED:
        return None
    if row["status"] == SessionStatus.FAILED:
        if api_failure:
            return f"tier {row['tier']} could not reach the model ({row['status_reason']}); not escalated"
        return f"tier {row['tier']} failed: {row['status_reason']}"
    if not row["escalation_needed"]:
        if row["escalation_needed"] is None:
            return f"tier {row['tier']} gave no escalation decision (source {row['source']})"
        return None
    if (row["tier"] or 0) >= settings.max_tier:
        return f"escalation requested at tier {row['tier']}, the highest tier allowed (TIEROPS_MAX_TIER)"
    if settings.chain_budget_usd > 0:
        spent = await chains.chain_cost(db, chain_id)
        if spent >= settings.chain_budget_usd:
            return (f"escalation requested but the chain has spent ${spent:.2f} of its "
                    f"${settings.chain_budget_usd:.2f} budget (TIEROPS_CHAIN_BUDGET_USD)")
    return None
