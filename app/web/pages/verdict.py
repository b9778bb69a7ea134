"""The session page's verdict: what a session found and decided, in words, and which transcript
lines produced its findings.

An on-call engineer reads, in this order: the status with its reason, what was found (failed
checks, events by severity), what was decided (escalated to #N, needs a human, resolved, nothing
to do, escalation not started, waiting for approval) and what it cost, across every attempt.
:func:`verdict` builds exactly that from the stored row and its findings; the template lays it out.

The verdict never says "resolved" or "nothing to do" while an incident the session touched (or
that its chain handed it) is unresolved: :func:`still_open` names each such incident with who must
act and what happens next. The actions the session proposed are listed right after what it found.

Badges (:func:`transcript_badges`): nothing records the line a finding came from, so it is derived
here (``app/store/provenance.py``): structured output's findings on the ``result`` line of the run
whose output was accepted (or its ``StructuredOutput`` call); legacy markers on the assistant text
where each first appeared, scanned in stream order with one :class:`~app.output.markers.MarkerSet`
exactly as the recorder did. ARCHITECTURE.md ("Web") has the details.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict

from app.clock import parse_stamp, utcnow
from app.output.markers import MarkerSet
from app.store import approvals as approval_store
from app.store import cooldowns as action_store
from app.store import incidents as incident_store
from app.store import provenance
from app.store import sessions as session_store
from app.store.cooldowns import ProposalRow
from app.store.db import Database
from app.store.findings import RECORDED_RESULTS
from app.store.incidents import SEVERITY_RANK
from app.store.rows import AttemptRow, CheckRow, CooldownRow, EventRow, IncidentRow, SessionRow
from app.stream.parser import ArrayLine, AssistantLine, ParsedLine, parse_line
from app.vocab import ApprovalStatus, IncidentStatus, SessionStatus

log = logging.getLogger(__name__)

SEVERITIES = ("critical", "warning", "info")
_OK_CHECKS = frozenset({"healthy", "ok", "pass", "passed", "up", "running"})


class Badges(TypedDict):
    events: int
    memories: int
    cooldowns: int


def _empty() -> Badges:
    return {"events": 0, "memories": 0, "cooldowns": 0}


def _texts(parsed: ParsedLine | None) -> list[str]:
    """The assistant texts the recorder scans for markers (synthetic API errors are not findings)."""
    if isinstance(parsed, ArrayLine):
        return [t for item in parsed.items for t in _texts(item)]
    if isinstance(parsed, AssistantLine) and not parsed.is_synthetic_error:
        return parsed.texts()
    return []


def marker_badges(lines: Sequence[Mapping[str, Any]]) -> dict[int, Badges]:
    """Per seq, the markers first met on that line (``lines`` in stream order, ``seq`` and ``raw``)."""
    found: dict[int, Badges] = {}
    markers = MarkerSet()
    for line in lines:
        before = (len(markers.events), len(markers.memories), len(markers.cooldowns))
        for text in _texts(parse_line(line["raw"])):
            markers.scan(text)
        added = (len(markers.events) - before[0], len(markers.memories) - before[1],
                 len(markers.cooldowns) - before[2])
        if any(added):
            found[line["seq"]] = {"events": added[0], "memories": added[1], "cooldowns": added[2]}
    return found


def _accepted_run(attempt_rows: Sequence[AttemptRow]) -> int | None:
    """The CLI run whose output was accepted: the newest valid attempt's (None: unknown)."""
    for a in reversed(attempt_rows):
        if a["valid"]:
            run: int = a["run"] or a["attempt"]
            return run
    return None


async def transcript_badges(db: Database, s: SessionRow, attempt_rows: Sequence[AttemptRow],
                            events: Sequence[EventRow], cooldowns: Sequence[CooldownRow]) -> dict[int, Badges]:
    """Which transcript lines produced the session's routed findings, with how many of each."""
    if s["status"] == SessionStatus.RUNNING:
        return {}  # nothing is routed before the end
    if s["source"] == "markers":
        return marker_badges(await provenance.marker_lines(db, s["id"]))
    if s["source"] != "structured_output":
        return {}  # handoff.json or nothing: no line of the stream produced it
    output = s["structured_output"]
    memories = output.get("memories") if isinstance(output, dict) else None
    badge: Badges = {
        "events": sum(1 for e in events if e["source"] == "structured_output"),
        "memories": len(memories) if isinstance(memories, list) else 0,
        "cooldowns": sum(1 for c in cooldowns if c["outcome"] in RECORDED_RESULTS),
    }
    if not any(badge.values()):
        return {}
    seq = await provenance.output_line(db, s["id"], _accepted_run(attempt_rows))
    return {seq: badge} if seq is not None else {}


# -- the verdict -------------------------------------------------------------------------------

class Act(TypedDict):
    """Who must act on an incident still open, or what happens to it next."""

    text: str
    link: str | None


class Decision(TypedDict):
    kind: str  # escalated | approval | attention | gate | open | resolved | nothing | running | failed | undecided
    text: str
    link: str | None
    acts: NotRequired[list[Act]]  # kind "open": who must act


NAME_MAX = 120  # characters of a model-written name (incident, action, service) in a decision
REASON_MAX = 300  # characters of another session's attention reason
PROPOSALS_NAMED = 3  # proposals named in a decision; the rest are counted


def _wall_clock_ms(s: SessionRow, now: datetime) -> float | None:
    try:
        start = parse_stamp(s["started_at"])
        end = parse_stamp(s["ended_at"]) if s["ended_at"] else now
    except (TypeError, ValueError):
        return None
    return max(0.0, (end - start).total_seconds() * 1000)


def status_words(s: SessionRow) -> str:
    """Why the session has its status, in words (the stored reason when there is one)."""
    if s["status_reason"]:
        return str(s["status_reason"])
    if s["status"] == SessionStatus.RUNNING:
        return "the CLI is still running"
    if s["status"] == SessionStatus.COMPLETED:
        return "the CLI finished and its output was " + ("accepted" if s["validation_valid"] else "recorded")
    return str(s["status"])


def _short(text: str | None, limit: int = NAME_MAX) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _next_step(i: IncidentRow, escalate_after: int) -> str:
    """What happens next to an open, unsilenced, unacknowledged incident: for a check's incident the
    escalation rules of ``app/engine/incidents.decide`` (tier 0 gates on them)."""
    if SEVERITY_RANK.get(i["severity"], 1) < SEVERITY_RANK["warning"]:
        return "severity info: recorded, never escalated; a human resolves it"
    if i["origin"] == "alert":
        return "stays open until its sender reports it resolved or a human resolves it"
    if i["origin"] != "probe":
        return ("the next cycle's tiers look at it again; it resolves when a tier reports "
                f"{_short(i['service']) or 'its service'} healthy or a human resolves it")
    if i["escalations"] == 0:
        return "escalates the next cycle its check fails; resolves when the check passes"
    if escalate_after <= 0:
        return "re-escalates only if it worsens (TIEROPS_ESCALATE_AFTER=0); resolves when its check passes"
    since = i["occurrences"] - (i["escalated_occurrences"] or 0)
    n = max(escalate_after - since, 1)
    return (f"re-escalates after {_plural(n, 'more failing cycle')} (TIEROPS_ESCALATE_AFTER={escalate_after}) "
            "or if it worsens; resolves when its check passes")


def _acts(i: IncidentRow, s: SessionRow, *, pending: Sequence[Mapping[str, Any]],
          attention: Sequence[Mapping[str, Any]], proposals: Sequence[ProposalRow], escalate_after: int,
          now: str) -> list[Act]:
    """Who must act on the open incident ``i``, most direct first."""
    acts: list[Act] = [{"text": f"waiting for approval #{a['id']} to run tier {a['tier']}",
                        "link": f"/approvals/{a['id']}"} for a in pending]
    for row in attention:
        who = "this session needs attention" if row["id"] == s["id"] else \
            f"session #{row['id']} needs attention: {_short(row['attention'], REASON_MAX)}"
        acked = f"; acknowledged by {row['attention_acked_by'] or 'an operator'}" if row["attention_acked_at"] else ""
        acts.append({"text": f"a human: {who}{acked}", "link": f"/sessions/{row['id']}"})
    if i["status"] == IncidentStatus.ACKNOWLEDGED:
        acts.append({"text": f"a human: acknowledged by {i['acknowledged_by'] or 'an operator'} "
                             "(it does not re-escalate while it stays open)", "link": None})
    silenced = bool(i["silenced_until"] and i["silenced_until"] > now)
    if silenced:
        acts.append({"text": f"silenced until {i['silenced_until']} by {i['silenced_by'] or 'an operator'}: "
                             "no escalation until then", "link": None})
    if proposals:
        proposals = sorted(proposals, key=lambda p: p["id"])  # in the order they were proposed
        named = ", ".join(f"{_short(p['kind'])} {_short(p['service']) or '(host-wide)'}"
                          for p in proposals[:PROPOSALS_NAMED])
        more = f" and {len(proposals) - PROPOSALS_NAMED} more" if len(proposals) > PROPOSALS_NAMED else ""
        verb = "awaits" if len(proposals) == 1 else "await"
        acts.append({"text": f"{_plural(len(proposals), 'proposed action')} {verb} a human: {named}{more}",
                     "link": f"/incidents/{i['id']}#proposals"})
    if i["status"] == IncidentStatus.OPEN and not silenced:
        acts.append({"text": _next_step(i, escalate_after), "link": None})
    return acts


def still_open(s: SessionRow, incidents: Sequence[IncidentRow], *, pending: Sequence[Mapping[str, Any]] = (),
               attention: Sequence[Mapping[str, Any]] = (),
               proposals: Mapping[int, Sequence[ProposalRow]] | None = None, escalate_after: int = 0,
               now: str | None = None) -> list[Decision]:
    """One decision per unresolved incident among ``incidents`` (worst first): its id, name and
    severity, and who must act (:func:`_acts`). ``pending``: the chain's pending approvals;
    ``attention``: the chain's sessions needing attention (with ``attention_acked_*``);
    ``proposals``: per incident id, the actions proposed for it."""
    now = now or utcnow()
    unique = {i["id"]: i for i in incidents if i["status"] != IncidentStatus.RESOLVED}
    ordered = sorted(unique.values(), key=lambda i: (-SEVERITY_RANK.get(i["severity"], 1), i["id"]))
    out: list[Decision] = []
    for i in ordered:
        name = _short(i.get("name") or i["title"] or i["key"])
        out.append({"kind": "open", "text": f"still open: incident #{i['id']} {name} ({i['severity']}, {i['status']})",
                    "link": f"/incidents/{i['id']}",
                    "acts": _acts(i, s, pending=pending, attention=attention,
                                  proposals=(proposals or {}).get(i["id"], ()), escalate_after=escalate_after,
                                  now=now)})
    return out


async def read_still_open(db: Database, s: SessionRow, chain: Sequence[Mapping[str, Any]],
                          touched: Sequence[IncidentRow], escalate_after: int) -> list[Decision]:
    """:func:`still_open` from the store: the incidents ``s`` touched and those the sessions before
    it in its ``chain`` (``chain_links``) touched, with the pending approvals and the sessions
    needing attention of the whole chain, and the proposals linked to each open incident."""
    earlier = [link for link in chain if link["id"] < s["id"]]
    incidents = list(touched)
    for link in earlier:
        incidents += await incident_store.session_incidents(db, link["id"])
    if all(i["status"] == IncidentStatus.RESOLVED for i in incidents):
        return []
    links = [link for link in chain if link["id"] != s["id"]]
    pending: list[Mapping[str, Any]] = []
    attention: list[Mapping[str, Any]] = []
    for pk in sorted([link["id"] for link in links] + [s["id"]]):
        pending += await approval_store.list_approvals(db, status=ApprovalStatus.PENDING, session_pk=pk)
    for link in sorted([*links, s], key=lambda row: row["id"]):
        if link["attention"]:
            row = s if link["id"] == s["id"] else await session_store.get_session(db, link["id"])
            if row is not None:
                attention.append(row)
    proposals = {i["id"]: await action_store.proposals(db, incident_id=i["id"], limit=500)
                 for i in incidents if i["status"] != IncidentStatus.RESOLVED}
    return still_open(s, incidents, pending=pending, attention=attention, proposals=proposals,
                      escalate_after=escalate_after)


def decisions(s: SessionRow, approvals: Sequence[Mapping[str, Any]], incidents: Sequence[IncidentRow],
              events: Sequence[EventRow], *, open_now: Sequence[Decision] = ()) -> list[Decision]:
    """What was decided, most consequential first (several can hold: escalated and flagged).

    ``open_now`` (:func:`still_open`): the incidents the session touched, or its chain handed it,
    that are not resolved. While there is one the verdict never says "resolved" or "nothing to
    do": it says what is still open and who must act."""
    out: list[Decision] = []
    pk = s["id"]
    if s["escalated_to"]:
        out.append({"kind": "escalated", "text": f"escalated to #{s['escalated_to']}",
                    "link": f"/sessions/{s['escalated_to']}"})
    out.extend({"kind": "approval", "text": f"waiting for approval #{a['id']} to run tier {a['tier']}",
                "link": f"/approvals/{a['id']}"} for a in approvals if a["status"] == "pending")
    if s["attention"]:
        out.append({"kind": "attention", "text": f"needs a human: {s['attention']}", "link": None})
    if s["escalation_gate"]:
        out.append({"kind": "gate", "text": f"escalation not started: {s['escalation_gate']}", "link": None})
    if s["status"] == SessionStatus.RUNNING:
        return [{"kind": "running", "text": "nothing yet: the session is still running", "link": None}, *out]
    if out:
        return [*out, *open_now]
    if s["status"] == SessionStatus.FAILED:
        return [{"kind": "failed", "text": f"nothing could be decided: the session failed ({status_words(s)})",
                 "link": None}, *open_now]
    if s["status"] == SessionStatus.INTERRUPTED:
        return [{"kind": "failed", "text": f"nothing was decided: {status_words(s)}", "link": None}, *open_now]
    if s["escalation_needed"] is None:
        return [{"kind": "undecided", "text": f"no escalation decision (output source: {s['source'] or 'none'})",
                 "link": None}, *open_now]
    if open_now:
        return list(open_now)
    # every incident it touched is resolved (or it touched none): "resolved" or "nothing to do" is true
    resolved = [i for i in incidents if i["status"] == "resolved" and i["last_session_pk"] == pk]
    if resolved:
        names = ", ".join(f"#{i['id']}" for i in resolved)
        return [{"kind": "resolved", "text": f"resolved: incident(s) {names} recovered", "link": None}]
    if s["parent_session_id"]:
        return [{"kind": "resolved", "text": f"resolved: no further escalation needed after #{s['parent_session_id']}",
                 "link": f"/sessions/{s['parent_session_id']}"}]
    serious = sum(1 for e in events if e["level"] in ("critical", "warning"))
    text = "nothing to do: everything checked was healthy" if not serious else (
        f"nothing to do: no escalation needed ({serious} warning or critical event(s) reported)")
    return [{"kind": "nothing", "text": text, "link": None}]


def verdict(s: SessionRow, *, checks: Sequence[CheckRow], events: Sequence[EventRow],
            incidents: Sequence[IncidentRow], approvals: Sequence[Mapping[str, Any]],
            runs: provenance.RunTotals, event_counts: Mapping[str, int] | None = None,
            now: datetime | None = None, proposals: Sequence[ProposalRow] = (),
            open_now: Sequence[Decision] = ()) -> dict[str, Any]:
    """Everything the page's ``#verdict`` section shows, in its order. ``proposals``: the actions
    the session proposed (listed right after what was found); ``open_now``: :func:`still_open`."""
    now = now or datetime.now(UTC)
    failed_checks = [c for c in checks if (c["status"] or "").strip().lower() not in _OK_CHECKS]
    named = {c["name"] for c in failed_checks}
    reported = s["escalation_failed_checks"] if isinstance(s["escalation_failed_checks"], list) else []
    extra_failed = [str(n) for n in reported if str(n) not in named]
    if event_counts is None:
        event_counts = {lvl: sum(1 for e in events if e["level"] == lvl) for lvl in SEVERITIES}
    by_level = {lvl: int(event_counts.get(lvl, 0)) for lvl in SEVERITIES}
    running = s["status"] == SessionStatus.RUNNING
    cost = runs["cost_usd"] if running or s["cost_usd"] is None else s["cost_usd"]
    return {
        "status": s["status"], "reason": status_words(s), "running": running,
        "failed_checks": failed_checks, "other_failed_checks": extra_failed, "checked": len(checks),
        "events_by_level": by_level, "events_total": sum(by_level.values()),
        "proposals": list(proposals),
        "decisions": decisions(s, approvals, incidents, events, open_now=open_now),
        "cost_usd": cost, "runs": max(runs["runs"], 1 if s["attempts"] else 0), "attempts": s["attempts"],
        "wall_clock_ms": _wall_clock_ms(s, now), "cli_duration_ms": s["duration_ms"],
    }
