"""Whether a run or an escalation may go on: the questions the chain asks before the next tier.

Why a module of its own: each guard is a question with the reason for its answer, apart from the
chain's control flow that acts on it (``chain.py``). ``None`` always means "it may"; otherwise the
text says why not, and is what the session's ``attention`` (or its gate) says. A run starting at
tier 0 needs a checks file (:func:`tier0_problem`). A failed, undecided or top-tier session, or a
spent chain budget, does not escalate (:func:`why_a_human_looks`); nor does one whose handoff
proposes an action over its cooldown (:func:`cooldown_refusal`), nor, under the evidence policy
``hold``, one resting on no verified evidence (:func:`evidence_hold`). No language-model tier starts
once ``TIEROPS_DAILY_BUDGET_USD`` is spent today (:func:`daily_budget_spent`; a run that would
start there raises :class:`BudgetSpent` before any session exists). Tier 0 hands over to no model
without the claude CLI or while the model tiers are paused (:func:`model_tiers_unavailable`), and a
language-model tier whose every incident a maintenance window holds stops
(:func:`held_by_maintenance`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from app.config import Settings
from app.engine import cooldowns as cooldown_engine
from app.engine.incidents import Verdict
from app.errors import ConfigError
from app.output.route import proposed_actions
from app.store import chains, findings, sessions
from app.store.db import Database
from app.store.rows import SessionRow
from app.supervisor.credentials import model_tiers_paused
from app.supervisor.launch import CLINotFound, resolve_binary
from app.vocab import FIRST_MODEL_TIER, PROBE_TIER, SessionStatus, Source

log = logging.getLogger(__name__)


class BudgetSpent(ConfigError):
    """A run would start a language-model tier after ``TIEROPS_DAILY_BUDGET_USD`` was spent today;
    no session was created (the API answers 409, the CLI exits 2)."""


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


async def daily_budget_spent(db: Database, settings: Settings, tier: int) -> str | None:
    """Why ``tier`` must not start now — the language-model tiers have cost
    ``TIEROPS_DAILY_BUDGET_USD`` since 00:00 UTC — or None: it may (tier 0 always may)."""
    if tier < FIRST_MODEL_TIER or settings.daily_budget_usd <= 0:
        return None
    spent = await sessions.model_cost_today(db, fresh=True)
    if spent < settings.daily_budget_usd:
        return None
    return (f"daily budget spent: ${spent:.2f} of ${settings.daily_budget_usd:.2f} (TIEROPS_DAILY_BUDGET_USD); "
            f"tier {tier} not started")


async def why_a_human_looks(db: Database, settings: Settings, row: SessionRow, api_failure: bool,
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


async def cooldown_refusal(db: Database, settings: Settings, row: SessionRow) -> str | None:
    """Why an escalation must not run — its handoff (the session's ``actions`` with result
    ``proposed``) proposes an action the cooldown limits no longer allow; None: it may."""
    if row["source"] != Source.STRUCTURED_OUTPUT or not (proposals := proposed_actions(row["structured_output"])):
        return None
    limits = cooldown_engine.parse_limits(settings.cooldowns)
    over = cooldown_engine.over_limit([(kind, service) for kind, service, _, _ in proposals],
                                      await cooldown_engine.active(db, limits, fresh=True), limits)
    if over is None:
        return None
    kind, service, limit, next_allowed = over
    return (f"escalation refused: it proposes {kind} of {cooldown_engine.service_name(service)}, over the cooldown "
            f"limit {limit.text} (next allowed at {next_allowed or 'never: the limit is 0'})")


async def evidence_hold(db: Database, settings: Settings, row: SessionRow) -> str | None:
    """Under ``TIEROPS_EVIDENCE_POLICY=hold``, why an escalation must not run: neither one of its
    warning or critical findings (or services not healthy) nor the escalation's own citations is
    verified against the session's tool calls. None: it may (any other policy, tier 0, nothing
    checked, or one verified problem finding or escalation citation)."""
    status = row["escalation_evidence_status"]
    if settings.evidence_policy != "hold" or row["tier"] == PROBE_TIER or status is None or status == "verified":
        return None
    counts = await findings.problem_evidence(db, row["id"])
    if counts.get("verified"):
        return None
    unsupported, uncited = counts.get("unsupported", 0), counts.get("uncited", 0)
    return (f"escalation held (TIEROPS_EVIDENCE_POLICY=hold): it rests on no verified evidence — "
            f"{unsupported} warning/critical finding(s) cite tool output this session never got, {uncited} "
            f"cite none, and the escalation's own citations are {status}")


def held_by_maintenance(verdict: Verdict | None, about: Mapping[int, None]) -> str | None:
    """Why a language-model tier's escalation must not run: every incident it reported is held by
    a maintenance window (None: it may run)."""
    if verdict is None or not verdict.maintenance:
        return None
    unresolved = [ch.incident["id"] for ch in verdict.changes if ch.kind != "resolved"]
    if unresolved and all(pk in verdict.maintenance for pk in unresolved):
        window = verdict.maintenance[unresolved[0]]
        return f"in maintenance window {window.name} until {window.until}"
    return None


async def model_tiers_unavailable(db: Database, settings: Settings) -> str | None:
    """Why tier 0 cannot hand over to a language model (None: it can): no claude CLI, or the model
    tiers are paused because the API rejected these credentials (``credentials.py``)."""
    if settings.max_tier < FIRST_MODEL_TIER:
        return None  # why_a_human_looks says it: the highest tier allowed is 0
    try:
        resolve_binary(settings.claude_bin, os.environ.get("PATH"))
    except CLINotFound as exc:
        return str(exc)
    return await model_tiers_paused(db, settings)
