"""An escalation chain: tier N runs; if its routed escalation says ``needed``, tier N+1 runs.

Steps of :func:`run_chain`: the tier's appended system prompt (``context.py``), the tier session
(``session.py``), the session's findings applied to the incidents (a default-contract session),
then the decision — stop, escalate, ask for an approval (:func:`request_approval`), or flag the
session as needing a human, with why (the questions are ``guards.py``). Parent and child are linked
both ways. Tiers only go up, so a chain never runs a tier twice and cannot loop. An interrupted
session never escalates, nor does one whose cycle was stopped meanwhile (its ``Halt``); an
escalation whose next tier cannot start flags its parent instead of vanishing, while a first tier
that cannot start raises. What people are told is collected per session as incident news
(``news.py``): one message per incident change with what the chain did about it, and an
investigation's outcome at its end. The whole story: ARCHITECTURE.md, "The supervisor".

Log lines: an escalation once, when it is decided (from session, to tier, the model's reason), at
INFO; a session that needs attention, with why, at WARNING. Both carry the session, chain and tier
as fields; the child's own start line names its parent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from app.config import Settings
from app.engine import cooldowns as cooldown_engine
from app.engine import incidents as incident_engine
from app.engine.incidents import Verdict
from app.errors import ConfigError
from app.logs import oneline
from app.notify.messages import NoticeSink
from app.output.spec import OutputSpec
from app.output.validate import OutputValidator
from app.probe.extensions import Merged
from app.probe.inventory import inventory_text
from app.store import approvals as approval_store
from app.store import chains, findings, run_queue, sessions
from app.store import guard as guard_store
from app.store import incidents as incident_store
from app.store import memories as memory_store
from app.store.db import Database
from app.store.rows import ChainLink, SessionRow
from app.supervisor import news
from app.supervisor.approvals import needs_approval
from app.supervisor.context import (
    cooldowns_block,
    handoff_block,
    incidents_block,
    memories_block,
    system_prompt,
)
from app.supervisor.credentials import ModelTiersPaused, model_tiers_paused
from app.supervisor.guards import (
    BudgetSpent,
    cooldown_refusal,
    daily_budget_spent,
    evidence_hold,
    held_by_maintenance,
    model_tiers_unavailable,
    why_a_human_looks,
)
from app.supervisor.halt import Halt, StopRequested
from app.supervisor.hub import Hub
from app.supervisor.runbooks import RunbookSection, load_checks, runbooks_for
from app.supervisor.session import SessionHandle, SessionResult, TierRequest, run_tier_session
from app.supervisor.tier_gate import TierGate
from app.vocab import FIRST_MODEL_TIER, PROBE_TIER, Level, SessionStatus, Trigger

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
                    spec: OutputSpec | None = None, parent: SessionRow | None = None,
                    handoff: str | None = None, dry_run: bool = False,
                    notifier: NoticeSink | None = None, incidents: Sequence[int] = (),
                    halt: Halt | None = None, gate: TierGate | None = None,
                    handoff_incidents: str = "") -> list[ChainLink]:
    """``spec`` is the first session's output contract; escalated tiers always use the default
    agent-response contract, the one that carries an escalation decision.

    ``parent``: continue the chain of this session, which escalated to ``start_tier`` and waited
    for an approval; ``handoff`` is the text the operator approved, given to that tier.

    ``dry_run``: this chain is a dry run (as is every chain with ``TIEROPS_DRY_RUN``).
    Raises :class:`BudgetSpent` when the daily budget forbids ``start_tier``, and
    :class:`~app.supervisor.credentials.ModelTiersPaused` when ``start_tier`` is a language-model
    tier and the API rejected the credentials it would get (with ``parent``: it needs attention).

    ``incidents``: the incidents this chain investigates from its start (an alert's, an approved
    escalation's); the chain adds every incident its sessions report.

    ``notifier`` hears, per session, one message per incident change with what the chain did about
    it, and at the end the outcome of an investigation (``news.py``); None sends nothing.

    ``halt``: the cycle's stop flag (``halt.py``). Once a stop or a shutdown set it, the chain does
    not escalate (the session that asked needs attention, with why; no approval is requested) and
    no tier starts: a first tier raises :class:`~app.supervisor.halt.StopRequested`.

    ``gate`` (``tier_gate.py``): each tier session holds its services' locks (tiers that may act);
    a tier this node may not run (``TIEROPS_RUNS_ON``) is queued, with the rest of the chain, for a
    node that may, and this chain ends. ``handoff_incidents``: the incidents block such a queued
    rest of a chain carries to its first tier."""
    dry_run = dry_run or settings.dry_run or bool(parent is not None and parent["dry_run"])
    about: dict[int, None] = dict.fromkeys(incidents)  # the incidents of this chain, in order
    investigation = parent is not None or trigger == Trigger.ALERT or bool(incidents)
    refused: type[ConfigError] = BudgetSpent
    spent = await daily_budget_spent(db, settings, start_tier)
    if spent is None and start_tier >= FIRST_MODEL_TIER and (spent := await model_tiers_paused(db, settings)):
        refused = ModelTiersPaused  # the API rejected these credentials: refused like a spent budget
    if spent is not None:
        if parent is None:
            raise refused(spent)
        await _needs_human(db, parent, spent, list(about))
        log.warning("session %d needs attention: %s", parent["id"], spent,
                    extra={"session": parent["id"], "chain": parent["chain_id"], "tier": parent["tier"]})
        links = await chains.chain_links(db, parent["chain_id"] or parent["id"], fresh=True)
        await news.send(notifier, [await news.outcome(db, links, about)])
        return links
    tier = start_tier
    chain_id: int | None = (parent["chain_id"] or parent["id"]) if parent is not None else None
    chain: list[SessionRow] = await _chain_so_far(db, parent) if parent is not None else []
    tier_prompt = base_prompt(settings, tier, prompt)
    cooldown_engine.parse_limits(settings.cooldowns)  # a bad TIEROPS_COOLDOWNS stops before any session
    focus: list[int] = []  # the incidents the next tier is started for, first in its runbooks
    waiting: tuple[int, int] | None = None
    loose_attention: list[tuple[SessionRow, str]] = []  # attention no incident message carries
    moved = False  # the rest of the chain waits in the run queue for a node with the labels it needs
    while True:
        tier_incidents = list(dict.fromkeys([*focus, *about]))
        if gate is not None and parent is not None \
                and (needs := await gate.needs_elsewhere(tier, tier_incidents)) is not None:
            await _move_on(db, parent, tier, handoff if handoff is not None else handoff_incidents,
                           "approval" if handoff is not None else "escalation", tier_incidents, needs)
            moved = True
            break
        try:
            async with gate.hold(tier, tier_incidents, dry_run=dry_run) if gate is not None \
                    else contextlib.nullcontext():
                result = await _start_tier(db, settings, validator, hub, tier, tier_prompt, trigger, parent, chain,
                                           chain_id, on_session, spec if parent is None else None, handoff_incidents,
                                           handoff, dry_run=dry_run, halt=halt, incident_ids=tier_incidents)
            handoff = None  # the approved text is the first tier's only
        except Exception as exc:
            if parent is None:
                raise
            if isinstance(exc, (ConfigError, StopRequested)):  # a refusal (the budget spent, a stop meanwhile)
                why = f"escalation to tier {tier} not started: {exc}"
                log.warning("session %d needs attention: %s", parent["id"], oneline(why),
                            extra={"session": parent["id"], "chain": chain_id, "tier": parent["tier"]})
            else:
                why = f"escalation to tier {tier} could not start: {type(exc).__name__}: {exc}"
                log.exception("session %d needs attention: %s", parent["id"], oneline(why),
                              extra={"session": parent["id"], "chain": chain_id, "tier": parent["tier"]})
            await _needs_human(db, parent, why, list(about))
            loose_attention.append((parent, why))
            break
        chain_id = chain_id or result.pk
        if parent is not None:
            await sessions.set_escalated_to(db, parent["id"], result.pk)
        row = await sessions.get_session(db, result.pk, fresh=True)  # the decision exactly as written
        if row is None:
            raise LookupError(f"session {result.pk} vanished from the database while its chain ran")
        chain.append(row)
        exceeded = "; ".join(filter(None, [await _flag_cooldowns_exceeded(db, settings, row, chain_id),
                                           await _flag_guard_denials(db, row, chain_id)])) or None
        verdict = await _track_incidents(db, settings, row, chain_id, routed=parent is not None or spec is None
                                         or spec.routed)
        hold = settings.evidence_policy == "hold"
        items = news.incident_news(verdict, await news.unverified_keys(db, row), hold=hold)
        if held := [i.incident["id"] for i in items if i.suppress == news.HELD_UNVERIFIED]:
            # no paging on unverified findings: the incident is kept, a human is asked to look
            why = (f"not paged (TIEROPS_EVIDENCE_POLICY=hold): incident{'s' if len(held) != 1 else ''} "
                   f"{', '.join(f'#{pk}' for pk in held)} {'rest' if len(held) != 1 else 'rests'} on findings no tool "
                   "output of this session shows")
            await _needs_human(db, row, why, held)
            log.warning("session %d needs attention: %s", row["id"], why,
                        extra={"session": row["id"], "chain": chain_id, "tier": row["tier"]})
        if verdict is not None:
            about.update(dict.fromkeys(ch.incident["id"] for ch in verdict.changes))
            if verdict.resolved:  # an approval waiting for an incident that just resolved has nothing left to run
                await approval_store.expire_due(db)
        if exceeded:
            if about:
                await sessions.set_attention(db, row["id"], exceeded, list(about))
            else:
                loose_attention.append((row, exceeded))
        if row["status"] == SessionStatus.INTERRUPTED:  # stopped by an operator or a shutdown: never escalates
            await news.send(notifier, news.notices(items))
            break
        if row["tier"] == PROBE_TIER and row["escalation_needed"] and verdict is not None and not verdict.escalate:
            # The probe asks whenever a check fails; a language model runs only when an incident
            # opens, worsens, recurs past TIEROPS_ESCALATE_AFTER or its maintenance window ended.
            gate_text = verdict.gate_text()
            await sessions.set_escalation_gate(db, result.pk, gate_text)
            log.info("session %d: %s", result.pk, oneline(gate_text),
                     extra={"session": result.pk, "chain": chain_id, "tier": tier})
            await news.send(notifier, news.notices(items))
            break
        attention = await why_a_human_looks(db, settings, row, result.api_failure, chain_id)
        if attention is None and row["escalation_needed"] and halt is not None and halt.reason is not None:
            attention = f"escalation to tier {tier + 1} not started: {halt.reason}"  # stop means stop
        if attention is None and row["escalation_needed"]:
            attention = await cooldown_refusal(db, settings, row) or await evidence_hold(db, settings, row)
        if attention is None and row["escalation_needed"]:
            try:  # read before escalating: a missing prompt file must not silently drop the escalation
                tier_prompt = base_prompt(settings, tier + 1, prompt)
            except PromptError as exc:
                attention = f"escalation requested but {exc}"
        if attention is None and row["escalation_needed"] and row["tier"] != PROBE_TIER:
            attention = await daily_budget_spent(db, settings, tier + 1)  # tier 0's case: below, with its incidents
        if attention is None and row["escalation_needed"] and row["tier"] != PROBE_TIER \
                and (window := held_by_maintenance(verdict, about)):
            await sessions.set_escalation_gate(db, result.pk, f"not escalated: {window}")
            await news.send(notifier, news.notices(items))
            break
        if attention is not None:
            attention = f"{exceeded}; {attention}" if exceeded else attention  # keep the cooldown flag
            await _needs_human(db, row, attention, list(about))
            log.warning("session %d needs attention: %s", result.pk, oneline(attention),
                        extra={"session": result.pk, "chain": chain_id, "tier": tier})
            news.act(items, f"Not escalated: {attention}. A human must look.")
            if not about:
                loose_attention.append((row, attention))
            await news.send(notifier, news.notices(items))
            break
        if not row["escalation_needed"]:
            await news.send(notifier, news.notices(items))
            break
        escalating = verdict.escalate if verdict is not None and row["tier"] == PROBE_TIER else []
        escalating_ids = [inc["id"] for inc, _ in escalating]
        focus = escalating_ids
        if row["tier"] == PROBE_TIER and (missing := await model_tiers_unavailable(db, settings)
                                          or await daily_budget_spent(db, settings, tier + 1)):
            # Tier 0 alone is a monitor: the incident and its evidence are stored; a human is told
            # in the incident's own message.
            why = f"{verdict.escalate_text() if verdict else 'checks failing'}; not escalated to tier 1: {missing}"
            await _needs_human(db, row, why, escalating_ids or list(about))
            if escalating:  # a human is the next tier now: the same once-per-incident rule applies
                await incident_store.mark_escalated(db, escalating_ids, result.pk,
                                                    f"to a human (needs attention): {missing}")
            log.warning("session %d needs attention: %s", result.pk, oneline(why),
                        extra={"session": result.pk, "chain": chain_id, "tier": tier})
            news.act(items, f"Not escalated to tier 1: {missing}. A human must look.", escalating_ids)
            if not about:
                loose_attention.append((row, why))
            await news.send(notifier, news.notices(items))
            break
        if escalating:
            await incident_store.mark_escalated(db, escalating_ids, result.pk, f"escalated to tier {tier + 1}")
        handoff_incidents = incidents_block(escalating)
        if needs_approval(settings, tier + 1):  # an operator decides; the chain ends here
            approval, attached = await request_approval(db, settings, row, chain, chain_id, tier + 1,
                                                        handoff_incidents, list(about))
            waiting = (approval["id"], tier + 1)
            news.act(items, f"Waiting for approval #{approval['id']} to run tier {tier + 1}"
                            + (" (this escalation was attached to it)" if attached else "")
                            + ": approve or reject it on its page.")
            await news.send(notifier, news.notices(items))
            break
        log.info("session %d escalated to tier %d: %s", result.pk, tier + 1,
                 oneline(row["escalation_reason"] or "no reason given"),
                 extra={"session": result.pk, "chain": chain_id, "tier": tier, "to_tier": tier + 1})
        news.act(items, f"Escalated to tier {tier + 1}: TierOps is investigating; the outcome follows.")
        await news.send(notifier, news.notices(items))
        parent = row
        tier += 1
    links = await chains.chain_links(db, chain_id, fresh=True) if chain_id is not None else []
    if moved:
        pass  # the node that runs the rest of the chain tells its outcome
    elif links and (investigation or len(links) > 1):
        await news.send(notifier, [await news.outcome(db, links, about, waiting=waiting)])
    else:
        await news.send(notifier, [news.standalone_attention(r, why, []) for r, why in loose_attention])
    return links


async def _move_on(db: Database, parent: SessionRow, tier: int, handoff: str, kind: str, incident_ids: list[int],
                   needs: frozenset[str]) -> None:
    """Queue tier ``tier`` and the rest of ``parent``'s chain for a node labelled ``needs``."""
    row = await run_queue.enqueue_continuation(db, tier=tier, parent_pk=parent["id"], handoff=handoff or None,
                                               kind=kind, incident_ids=incident_ids, needs=",".join(sorted(needs)))
    log.info("session %d: tier %d queued as run #%d for a node labelled %s (TIEROPS_RUNS_ON)", parent["id"], tier,
             row["id"], ", ".join(sorted(needs)),
             extra={"session": parent["id"], "chain": parent["chain_id"], "to_tier": tier})


async def _needs_human(db: Database, session: Mapping[str, Any], why: str, incident_ids: Sequence[int] = ()) -> None:
    """Flag ``session`` as needing attention for ``incident_ids`` (the flag follows them)."""
    await sessions.set_attention(db, session["id"], why, incident_ids)


async def _start_tier(db: Database, settings: Settings, validator: OutputValidator, hub: Hub | None, tier: int,
                      tier_prompt: str, trigger: str, parent: SessionRow | None, chain: list[SessionRow],
                      chain_id: int | None,
                      on_session: Callable[[int, SessionHandle], None] | None,
                      spec: OutputSpec | None = None, handoff_incidents: str = "",
                      approved_handoff: str | None = None, *, dry_run: bool = False,
                      halt: Halt | None = None, incident_ids: Sequence[int] = ()) -> SessionResult:
    """Steps 1 and 2: the tier's system prompt (with the parent's handoff, or the one an operator
    approved, and the runbooks of ``incident_ids``), then its session."""
    handoff = approved_handoff
    if parent is not None and handoff is None:
        handoff = await _handoff(db, parent, chain)
    runbooks = RunbookSection("")
    if tier == PROBE_TIER:  # the probe reads its checks file, not a prompt: spend nothing on memories
        sysprompt = system_prompt(tier, settings.max_tier, "", None)
    else:
        lifecycle = memory_store.MemoryLifecycle.from_settings(settings)  # decay and the stale floor
        failing = parent.get("escalation_failed_checks") if parent is not None else None
        checks = await asyncio.to_thread(load_checks, settings)
        runbooks = await _runbooks(db, settings, incident_ids, checks)
        sysprompt = system_prompt(tier, settings.max_tier,
                                  await memories_block(db, settings.memory_prompt_budget, lifecycle), handoff,
                                  inventory=_inventory(checks, failing if isinstance(failing, list) else []),
                                  incidents=handoff_incidents,
                                  cooldowns=await cooldowns_block(db, cooldown_engine.parse_limits(settings.cooldowns))
                                  if tier > FIRST_MODEL_TIER else None,  # the tiers that act
                                  dry_run=dry_run, runbooks=runbooks.text or None)
    req = TierRequest(tier=tier, prompt=tier_prompt, system_prompt=sysprompt,
                      trigger=Trigger.ESCALATION if parent else trigger,
                      parent_pk=parent["id"] if parent else None, chain_id=chain_id, spec=spec,
                      dry_run=dry_run and tier != PROBE_TIER,  # the probe never changes anything
                      approved_by="an operator's approval" if approved_handoff is not None else None,
                      runbooks=runbooks.given)
    return await run_tier_session(db, settings, validator, hub, req, on_start=on_session, halt=halt)


async def _handoff(db: Database, parent: SessionRow, chain: list[SessionRow]) -> str:
    """What the next tier is told about ``parent``'s findings (without the incidents)."""
    checks = await findings.session_checks(db, parent["id"], fresh=True)
    return handoff_block(parent, checks, chain)


async def request_approval(db: Database, settings: Settings, row: SessionRow, chain: list[SessionRow],
                           chain_id: int, tier: int, handoff_incidents: str,
                           incident_ids: Sequence[int] = ()) -> tuple[approval_store.ApprovalRow, bool]:
    """The one place an approval is asked for: ``row`` escalated to ``tier``, whose approval is
    manual. Stores the handoff that tier would have been given — on the pending approval of the
    same incidents and tier when there is one (attached: approving it runs the tier once), else
    on a new one — records on ``row`` why the chain stopped, logs it, and returns the approval and
    whether this escalation was attached to an existing one."""
    handoff = await _handoff(db, row, chain)
    if handoff_incidents:
        handoff += "\n\n" + handoff_incidents
    approval, attached = await approval_store.request_approval(
        db, session_pk=row["id"], chain_id=chain_id, tier=tier, handoff=handoff, timeout_s=settings.approval_timeout,
        incident_ids=incident_ids)
    gate = approval_store.waiting_gate(approval["id"], tier)
    if attached:
        gate += f" (attached to it: session #{approval['session_pk']} asked first)"
    await sessions.set_escalation_gate(db, row["id"], gate)
    log.info("session %d: %s (expires %s): %s", row["id"], gate, approval["expires_at"],
             oneline(row["escalation_reason"] or "no reason given"),
             extra={"session": row["id"], "chain": chain_id, "tier": row["tier"], "to_tier": tier})
    return approval, attached


async def _chain_so_far(db: Database, parent: SessionRow) -> list[SessionRow]:
    """The sessions of ``parent``'s chain up to it, oldest first (the handoff's "chain so far")."""
    links = await chains.chain_links(db, parent["chain_id"], fresh=True) if parent["chain_id"] is not None else []
    rows = [await sessions.get_session(db, link["id"], fresh=True) for link in links if link["id"] <= parent["id"]]
    return [r for r in rows if r is not None] or [parent]


async def _track_incidents(db: Database, settings: Settings, row: SessionRow, chain_id: int,
                           *, routed: bool) -> Verdict | None:
    """The session's findings into incidents. None when it was not tracked (a custom
    output contract, or a failure here: logged, and the chain goes on as without incidents)."""
    if not routed or row["status"] != SessionStatus.COMPLETED:
        return None
    try:
        return await incident_engine.track(db, settings, row, chain_id)
    except Exception:
        log.exception("session %d: its findings could not be applied to incidents", row["id"],
                      extra={"session": row["id"], "chain": chain_id})
        return None


def _inventory(checks: Merged | None, failing: list[Any]) -> str | None:
    """The checks file, with the extensions' checks, as the language-model tiers see it; None
    without one (``runbooks.load_checks`` logged why)."""
    if checks is None or checks.inventory is None:
        return None
    text: str = inventory_text(checks.inventory, failing=[str(f) for f in failing])
    return text


async def _runbooks(db: Database, settings: Settings, incident_ids: Sequence[int],
                    checks: Merged | None) -> RunbookSection:
    """The runbooks of the incidents the tier investigates; none when that fails (logged): a
    runbook helps a tier, its absence never stops one."""
    if not incident_ids:
        return RunbookSection("")
    try:
        return await runbooks_for(db, settings, incident_ids, checks)
    except Exception:
        log.exception("the runbooks of incidents %s could not be gathered; the tier starts without them",
                      ", ".join(f"#{i}" for i in incident_ids))
        return RunbookSection("")


async def _flag_cooldowns_exceeded(db: Database, settings: Settings, row: SessionRow, chain_id: int) -> str | None:
    """A session that reports an action taken over its cooldown limit gets a warning
    event per (kind, service) and ``attention``; returns the attention text (None: within limits)."""
    over = await cooldown_engine.exceeded_by(db, cooldown_engine.parse_limits(settings.cooldowns), row["id"])
    if not over:
        return None
    texts = []
    for window in over:
        text = (f"{window.kind} of {cooldown_engine.service_name(window.service)} exceeded its cooldown limit "
                f"{window.limit.text} ({window.used} taken in {window.limit.window_text})")
        await findings.add_event(db, row["id"], Level.WARNING, window.service, text)
        texts.append(text)
    why = "; ".join(texts)
    await sessions.set_attention(db, row["id"], why)
    log.warning("session %d needs attention: %s", row["id"], oneline(why),
                extra={"session": row["id"], "chain": chain_id, "tier": row["tier"]})
    return why


async def _flag_guard_denials(db: Database, row: SessionRow, chain_id: int) -> str | None:
    """A live (not dry-run) session whose calls that would change state the guard denied needs a
    human: it wanted to act and was stopped. Returns the attention text (None: no such denial)."""
    if row["dry_run"]:
        return None  # denying a dry run's changes is the dry run working
    denied = [d for d in await guard_store.decisions(db, row["id"], fresh=True) if d["decision"] == "deny" and d["mutating"]]
    if not denied:
        return None
    first = denied[0]
    why = (f"the guard denied {len(denied)} call{'s' if len(denied) != 1 else ''} that would change state "
           f"(first: {oneline(first['command'] or first['tool_name'])[:200]} — {oneline(first['reason'])[:300]})")
    await findings.add_event(db, row["id"], Level.WARNING, first["service"], why)
    await sessions.set_attention(db, row["id"], why)
    log.warning("session %d needs attention: %s", row["id"], oneline(why),
                extra={"session": row["id"], "chain": chain_id, "tier": row["tier"]})
    return why
