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

Tier 0 and incidents (issue #12): every finished session with the default contract is applied
to the incidents (``app/engine/incidents.py``). Tier 0 (the probe) asks to escalate whenever a
check fails; the chain acts on it only when an incident opened, worsened, recurs past
``TIEROPS_ESCALATE_AFTER`` or started flapping — otherwise it stops and records why on the session
(``escalation_gate``). When it escalates, the incidents are marked escalated and given to tier 1
with the keys to report them under, and every language-model tier gets the inventory. When no
language model can run (the claude CLI is missing), the tier-0 session is flagged as needing
attention with the incidents' evidence instead: tier 0 alone is a monitor.

Tiers only go up, so a chain never runs the same tier twice and cannot loop.

Log lines (issue #10): an escalation once, when it is decided (from session, to tier, the
model's reason), at INFO; a session that needs attention, with why, at WARNING. Both carry the
session, chain and tier as fields; the child's own start line names its parent.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from app.config import Settings
from app.engine import incidents as incident_engine
from app.engine.incidents import Verdict
from app.errors import ConfigError
from app.logs import oneline
from app.output.spec import OutputSpec
from app.output.validate import OutputValidator
from app.probe.inventory import InventoryError, inventory_text, load_inventory
from app.store import chains, findings, sessions
from app.store import incidents as incident_store
from app.store import memories as memory_store
from app.store.db import Database
from app.store.rows import ChainLink, SessionRow
from app.supervisor.context import handoff_block, incidents_block, memories_block, system_prompt
from app.supervisor.hub import Hub
from app.supervisor.runner import CLINotFound, resolve_binary
from app.supervisor.session import SessionHandle, SessionResult, TierRequest, run_tier_session
from app.vocab import FIRST_MODEL_TIER, PROBE_TIER, SessionStatus, Trigger

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


def tier0_problem(settings: Settings, tier: int, *, custom_contract: bool = False) -> str | None:
    """Why a run cannot start at ``tier`` (None: it can). Tier 0 needs a checks file, and always
    reports with the default contract (the probe's output is the agent response)."""
    if tier != PROBE_TIER:
        return None
    if settings.checks is None:
        return "tier 0 runs the checks of a checks file: set TIEROPS_CHECKS (or pass --checks)"
    if custom_contract:
        return ("tier 0 (the probe) always reports with the default agent-response contract; an output schema or "
                "mode applies to runs starting at tier 1 or above")
    return None


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
    handoff_incidents = ""
    while True:
        try:
            result = await _start_tier(db, settings, validator, hub, tier, tier_prompt, trigger, parent, chain,
                                       chain_id, on_session, spec if parent is None else None, handoff_incidents)
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
        verdict = await _track_incidents(db, settings, row, chain_id, routed=parent is not None or spec is None
                                         or spec.routed)
        if row["tier"] == PROBE_TIER and row["escalation_needed"] and verdict is not None and not verdict.escalate:
            # Issue #12: the probe asks whenever a check fails; a language model runs only when
            # an incident opens, worsens or recurs past TIEROPS_ESCALATE_AFTER.
            gate = verdict.gate_text()
            await sessions.set_escalation_gate(db, result.pk, gate)
            log.info("session %d: %s", result.pk, oneline(gate),
                     extra={"session": result.pk, "chain": chain_id, "tier": tier})
            break
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
        escalating = verdict.escalate if verdict is not None and row["tier"] == PROBE_TIER else []
        if row["tier"] == PROBE_TIER and (missing := _model_tiers_unavailable(settings)):
            # Tier 0 alone is a monitor: the incident and its evidence are stored; a human is told.
            why = f"{verdict.escalate_text() if verdict else 'checks failing'}; not escalated to tier 1: {missing}"
            await sessions.set_attention(db, result.pk, why)
            if escalating:  # a human is the next tier now: the same once-per-incident rule applies
                await incident_store.mark_escalated(db, [inc["id"] for inc, _ in escalating], result.pk,
                                                    f"to a human (needs attention): {missing}")
            log.warning("session %d needs attention: %s", result.pk, oneline(why),
                        extra={"session": result.pk, "chain": chain_id, "tier": tier})
            break
        if escalating:
            await incident_store.mark_escalated(db, [inc["id"] for inc, _ in escalating], result.pk,
                                                f"escalated to tier {tier + 1}")
        handoff_incidents = incidents_block(escalating)
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
                      spec: OutputSpec | None = None, handoff_incidents: str = "") -> SessionResult:
    """Steps 1 and 2: the tier's system prompt (with the parent's handoff), then its session."""
    handoff = None
    if parent is not None:
        checks = await findings.session_checks(db, parent["id"], fresh=True)
        handoff = handoff_block(parent, checks, chain)
    if tier == PROBE_TIER:  # the probe reads its checks file, not a prompt: spend nothing on memories
        sysprompt = system_prompt(tier, settings.max_tier, "", None)
    else:
        lifecycle = memory_store.MemoryLifecycle.from_settings(settings)  # decay and the stale floor (issue #11)
        failing = parent.get("escalation_failed_checks") if parent is not None else None
        sysprompt = system_prompt(tier, settings.max_tier,
                                  await memories_block(db, settings.memory_prompt_budget, lifecycle), handoff,
                                  inventory=_inventory(settings, failing if isinstance(failing, list) else []),
                                  incidents=handoff_incidents)
    req = TierRequest(tier=tier, prompt=tier_prompt, system_prompt=sysprompt,
                      trigger=Trigger.ESCALATION if parent else trigger,
                      parent_pk=parent["id"] if parent else None, chain_id=chain_id, spec=spec)
    return await run_tier_session(db, settings, validator, hub, req, on_start=on_session)


async def _track_incidents(db: Database, settings: Settings, row: SessionRow, chain_id: int,
                           *, routed: bool) -> Verdict | None:
    """Issue #12: the session's findings into incidents. None when it was not tracked (a custom
    output contract, or a failure here: logged, and the chain goes on as without incidents)."""
    if not routed or row["status"] != SessionStatus.COMPLETED:
        return None
    try:
        return await incident_engine.track(db, settings, row, chain_id)
    except Exception:
        log.exception("session %d: its findings could not be applied to incidents", row["id"],
                      extra={"session": row["id"], "chain": chain_id})
        return None


def _model_tiers_unavailable(settings: Settings) -> str | None:
    """Why tier 0 cannot hand over to a language model (None: it can)."""
    if settings.max_tier < FIRST_MODEL_TIER:
        return None  # _decide says it: the highest tier allowed is 0
    try:
        resolve_binary(settings.claude_bin, os.environ.get("PATH"))
    except CLINotFound as exc:
        return str(exc)
    return None


def _inventory(settings: Settings, failing: list[Any]) -> str | None:
    """The checks file as the language-model tiers see it (issue #12); None without one."""
    if settings.checks is None:
        return None
    try:
        inv = load_inventory(settings.checks)
    except InventoryError as exc:
        log.warning("the checks file cannot be given to the tiers: %s", oneline(exc))
        return None
    text: str = inventory_text(inv, failing=[str(f) for f in failing])
    return text


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
