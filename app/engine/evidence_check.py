"""Each routed finding's evidence verdict, decided when a session's output is routed.

Why a module of its own: ``app/engine/evidence.py`` decides one citation, pure; this one reads the
session's stored tool lines once (every attempt: a resumed run is one session) and gives every
event, service check, action and the escalation its verdict before ``finish_session`` stores them
with the findings, in the same transaction. Deliberately: the redactor is the one the session's
lines were recorded with, so a quote holding a secret matches its stored ``[REDACTED]``; tier 0's
findings are verified by construction (the probe's own results, nothing a model retyped); markers'
and ``handoff.json``'s findings cite nothing, so they are ``uncited``; an action's quote is looked
for in the commands run, a finding's in the results. ``TIEROPS_EVIDENCE_POLICY=off`` checks nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from app.engine.evidence import CitationResult, Redact, ToolCall, finding_status, tool_calls_of
from app.output.route import Cites, Routed, Verdict, Verdicts
from app.store.db import Database
from app.store.evidence import session_tool_lines
from app.vocab import PROBE_TIER

log = logging.getLogger(__name__)

POLICIES = ("flag", "hold", "off")
BY_CONSTRUCTION: Verdict = ("verified", [])


async def verify_routed(db: Database, session_pk: int, routed: Routed, redact: Redact, *,
                        tier: int | None, policy: str = "flag") -> Routed:
    """``routed`` with :attr:`Routed.verdicts` set (unchanged under policy ``off``)."""
    if policy == "off":
        return routed
    cited = any(routed.event_cites) or any(routed.check_cites) or any(routed.action_cites) \
        or bool(routed.escalation_cites)
    calls: list[ToolCall] = []
    if tier != PROBE_TIER and cited:  # nothing cited: every finding is uncited, the transcript is not read
        calls = tool_calls_of(await session_tool_lines(db, session_pk))

    def judge(cites: Cites | None, *, action: bool = False) -> Verdict:
        if tier == PROBE_TIER:
            return BY_CONSTRUCTION
        status, results = finding_status(cites or [], calls, redact, action=action)
        return status, [_checked(c, r) for c, r in zip(cites or [], results, strict=True)]

    verdicts = Verdicts(
        events=[judge(_nth(routed.event_cites, i)) for i in range(len(routed.events))],
        checks=[judge(_nth(routed.check_cites, i)) for i in range(len(routed.checks))],
        cooldowns=[judge(None, action=True) for _ in routed.cooldowns],
        actions=[judge(_nth(routed.action_cites, i), action=True) for i in range(len(routed.actions))],
        escalation=None if routed.escalation is None else judge(routed.escalation_cites),
    )
    counts = count(verdicts)
    if any(counts.values()):
        log.info("session %d: findings %d verified, %d unsupported, %d uncited (%d tool calls)", session_pk,
                 counts["verified"], counts["unsupported"], counts["uncited"], len(calls),
                 extra={"session": session_pk})
    return replace(routed, verdicts=verdicts)


def count(verdicts: Verdicts) -> dict[str, int]:
    """How many findings (events, service checks, actions; not the escalation) have each status."""
    out = {"verified": 0, "unsupported": 0, "uncited": 0}
    for status, _ in [*verdicts.events, *verdicts.checks, *verdicts.cooldowns, *verdicts.actions]:
        out[status] += 1
    return out


def _nth(items: Sequence[Cites], i: int) -> Cites:
    return items[i] if i < len(items) else []


def _checked(citation: dict[str, Any], result: CitationResult) -> dict[str, Any]:
    """A citation as stored: what the model cited, whether it holds, the call it holds in, why not."""
    quote = citation.get("quote")
    return {"quote": quote if isinstance(quote, str) else None, "tool_use_id": citation.get("tool_use_id"),
            "holds": result.holds, "found_in": result.tool_use_id, "why": result.why}
