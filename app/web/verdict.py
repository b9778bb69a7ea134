"""The session page's verdict (issue #14): what a session found and decided, in words, and which
transcript lines produced its findings.

Why a module of its own: the page used to open with metadata and the transcript, and the verdict
was spread over banners and the outcome panel. An on-call engineer reads, in this order: the
status with its reason, what was found (failed checks, events by severity), what was decided
(escalated to #N, needs a human, resolved, nothing to do, escalation not started, waiting for
approval) and what it cost, across every attempt. :func:`verdict` builds exactly that from the
stored row and its findings; the template only lays it out.

Badges (:func:`transcript_badges`): nothing records the line a finding came from, so it is
derived here (see ``app/store/provenance.py``). Structured output: its findings are badged on the
``result`` line of the run whose output was accepted (or that run's ``StructuredOutput`` call).
Legacy markers: every assistant text is scanned in stream order with one
:class:`~app.output.markers.MarkerSet`, exactly as the recorder did, and a line is credited with
the markers that were new when it was scanned (a repeated marker is one finding, credited where
it first appeared).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypedDict

from app.clock import parse_stamp
from app.output.markers import MarkerSet
from app.store import provenance
from app.store.db import Database
from app.store.findings import RECORDED_RESULTS
from app.store.rows import AttemptRow, CheckRow, CooldownRow, EventRow, IncidentRow, SessionRow
from app.stream.parser import ArrayLine, AssistantLine, ParsedLine, parse_line
from app.vocab import SessionStatus

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

class Decision(TypedDict):
    kind: str  # escalated | approval | attention | gate | resolved | nothing | running | failed | undecided
    text: str
    link: str | None


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


def decisions(s: SessionRow, approvals: Sequence[Mapping[str, Any]], incidents: Sequence[IncidentRow],
              events: Sequence[EventRow]) -> list[Decision]:
    """What was decided, most consequential first (several can hold: escalated and flagged)."""
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
        return out
    if s["status"] == SessionStatus.FAILED:
        return [{"kind": "failed", "text": f"nothing could be decided: the session failed ({status_words(s)})",
                 "link": None}]
    if s["status"] == SessionStatus.INTERRUPTED:
        return [{"kind": "failed", "text": f"nothing was decided: {status_words(s)}", "link": None}]
    if s["escalation_needed"] is None:
        return [{"kind": "undecided", "text": f"no escalation decision (output source: {s['source'] or 'none'})",
                 "link": None}]
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
            now: datetime | None = None) -> dict[str, Any]:
    """Everything the page's ``#verdict`` section shows, in its order."""
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
        "decisions": decisions(s, approvals, incidents, events),
        "cost_usd": cost, "runs": max(runs["runs"], 1 if s["attempts"] else 0), "attempts": s["attempts"],
        "wall_clock_ms": _wall_clock_ms(s, now), "cli_duration_ms": s["duration_ms"],
    }
