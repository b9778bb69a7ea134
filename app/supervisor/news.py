"""What a chain tells people: its incident changes and its outcome, as ``app/notify/messages`` notices.

Why a module of its own: the chain decides (escalate, wait for an approval, ask a human); this
module turns what it saw and decided into the few messages an on-call engineer gets, so that the
chain's control flow is not interleaved with message text. The rules:

* Each incident change of a session becomes one message, carrying what TierOps did about it as a
  line (:func:`incident_news`, then the chain adds the action): a session needing a human because
  of an incident, an approval requested for it, or an escalation started for it never send a
  message of their own.
* A change a maintenance window holds, of a silenced key, or of a flapping key already told once in
  the flapping window is recorded, not sent; the end of a maintenance window over a still-failing
  incident is told as if it had just opened.
* The outcome of an investigation (:func:`outcome`) is read from the store after the chain ends:
  the last tier's summary, findings, actions and proposals, and the incidents still open.
* A model's finding resting only on unsupported or uncited evidence is marked "(unverified)": the
  incident it opened or worsened (:func:`unverified_keys` matches the session's stored events to
  the incident keys of its structured output), each such finding listed in the outcome, and the
  outcome itself when all its warning/critical findings are.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.engine.incidents import KEY_MAX, Verdict, derived_key
from app.notify.messages import (
    UNVERIFIED_STATUSES,
    IncidentNews,
    Notice,
    Outcome,
    attention_notice,
    incident_notice,
    outcome_notice,
    send,
)
from app.output.route import proposed_actions
from app.store import cooldowns as action_store
from app.store import findings, sessions
from app.store import incidents as incident_store
from app.store.db import Database
from app.store.rows import ChainLink, IncidentRow, SessionRow
from app.vocab import PROBE_TIER, Source

log = logging.getLogger(__name__)

__all__ = ["HELD_UNVERIFIED", "act", "incident_news", "notices", "outcome", "send", "standalone_attention", "unverified_keys"]


HELD_UNVERIFIED = ("held: TIEROPS_EVIDENCE_POLICY=hold and the finding that changed it rests on no "
                   "verified evidence")


def incident_news(verdict: Verdict | None, unverified: Iterable[str] = (), *,
                  hold: bool = False) -> list[IncidentNews]:
    """The messages a session's incident changes are worth, each with why it is held if it is;
    ``unverified``: the incident keys whose finding rests on no verified evidence; ``hold``
    (``TIEROPS_EVIDENCE_POLICY=hold``): their messages are recorded, not sent."""
    marked = set(unverified)
    if verdict is None:
        return []
    out: list[IncidentNews] = []
    held = {row["id"]: why for row, why in verdict.held}
    for ch in verdict.changes:
        inc = ch.incident
        if ch.kind == "seen":
            if (ended := verdict.after_maintenance.get(inc["id"])) is not None:
                out.append(IncidentNews(ch, after_maintenance=ended))
            continue
        if ch.kind not in ("opened", "worsened", "resolved"):
            continue
        item = IncidentNews(ch, unverified=ch.kind != "resolved" and inc["key"] in marked)
        if ch.kind != "resolved":
            if (window := verdict.maintenance.get(inc["id"])) is not None:
                item.suppress = f"in maintenance window {window.name} (until {window.until})"
            elif held.get(inc["id"], "").startswith("silenced"):
                item.suppress = held[inc["id"]]
            elif ch.kind == "opened" and inc["flapping"] and ch.flap_escalated:
                item.suppress = "flapping: already told once within TIEROPS_FLAP_WINDOW"
            elif hold and item.unverified:
                item.suppress = HELD_UNVERIFIED
        out.append(item)
    return out


async def unverified_keys(db: Database, row: SessionRow) -> set[str]:
    """The incident keys of a language-model session's warning/critical findings whose stored
    evidence status is unsupported or uncited (empty for tier 0 and for unchecked findings)."""
    output = row["structured_output"] if row["source"] == Source.STRUCTURED_OUTPUT else None
    if row["tier"] == PROBE_TIER or not isinstance(output, dict):
        return set()
    status = {(service, message): st for _, service, message, st in await findings.problem_events(db, row["id"])}
    keys: set[str] = set()
    for ev in output.get("events") or []:
        if not isinstance(ev, dict) or not isinstance(ev.get("message"), str):
            continue
        service = ev.get("service") if isinstance(ev.get("service"), str) else None
        if status.get((service, ev["message"])) in UNVERIFIED_STATUSES:
            given = ev.get("key")
            keys.add((given if isinstance(given, str) and given else derived_key(service, ev["message"]))[:KEY_MAX])
    return keys


def act(items: Iterable[IncidentNews], action: str, incident_ids: Iterable[int] | None = None) -> None:
    """Add what TierOps did to the news of ``incident_ids`` (all of them when None), once."""
    wanted = set(incident_ids) if incident_ids is not None else None
    for item in items:
        if item.change.kind == "resolved" or (wanted is not None and item.incident["id"] not in wanted):
            continue
        if item.action is None:
            item.action = action


def notices(items: Iterable[IncidentNews]) -> list[Notice]:
    return [incident_notice(item) for item in items]


def standalone_attention(row: Mapping[str, Any], why: str, incidents: Sequence[Mapping[str, Any]]) -> Notice | None:
    """A session needing a human is a message of its own only when no incident carries it."""
    if incidents:
        return None
    return attention_notice(row, why)


async def outcome(db: Database, links: Sequence[ChainLink], incident_ids: Iterable[int], *,
                  waiting: tuple[int, int] | None = None) -> Notice | None:
    """The message of how an investigation ended (None for a chain without sessions)."""
    if not links:
        return None
    last = links[-1]
    incidents: list[IncidentRow] = await incident_store.get_incidents(db, list(incident_ids), fresh=True)
    row = await sessions.get_session(db, last["id"], fresh=True)
    found: list[tuple[str, str | None, str]] = []
    unverified = False
    done: list[tuple[str, str | None, str, str | None]] = []
    proposed: list[tuple[str, str | None, str | None]] = []
    if row is not None:
        problems = await findings.problem_events(db, last["id"])
        found = [(level, service, f"(unverified) {message}" if st in UNVERIFIED_STATUSES else message)
                 for level, service, message, st in problems]
        unverified = bool(problems) and all(st in UNVERIFIED_STATUSES for *_, st in problems)
        done = [(a["action"], a["service"] or None, a["outcome"], a["note"])
                for a in await action_store.session_taken(db, last["id"], fresh=True)]
        if row["source"] == Source.STRUCTURED_OUTPUT:
            proposed = [(kind, service, detail) for kind, service, _, detail in proposed_actions(row["structured_output"])]
    attention = next((link["attention"] for link in reversed(links) if link["attention"]), None)
    summary_row: Mapping[str, Any] = dict(row) if row is not None else dict(last)
    return outcome_notice(Outcome(root=links[0]["id"], last=summary_row, incidents=incidents, found=found, done=done,
                                  proposed=proposed, waiting=waiting, attention=attention,
                                  tiers=[link["tier"] or 0 for link in links], unverified=unverified))
