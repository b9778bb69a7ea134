"""From a finished session to incidents, and whether they are worth a language model.

Why a module of its own: storage (``app/store/incidents.py``) keeps an incident's life — opened,
counted, resolved — but *reading* a session for it and *deciding* on escalation are policy.
:func:`observation` reads a session (its valid structured output, else its routed events and
checks): failing findings at ``warning`` or above, keyed by the model's ``key`` or by service +
normalised message (:func:`derived_key`, so "disk 91 %" and "disk 92 %" are one incident), probe
results, and healthy services that resolve what the model opened. :func:`decide` says whether an
incident escalates: when it opens, worsens, or recurs ``TIEROPS_ESCALATE_AFTER`` cycles after its
last escalation — not every cycle; an acknowledged one never again, a silenced one not until the
silence ends, a flapping key once for it.

What it deliberately does: ``info`` findings never open an incident, and only tier 0's escalation
is gated this way (``app/supervisor/chain.py``): once a language model is looking, its own
decision stands. The rules in full: ARCHITECTURE.md, "Incidents".
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.clock import utcnow
from app.config import Settings
from app.engine.maintenance import ActiveWindow, covering
from app.errors import ConfigError
from app.store import cooldowns as action_store
from app.store import findings, incidents
from app.store.db import Database
from app.store.incidents import SEVERITY_RANK, Change, Finding, Observation, ProbeResult
from app.store.rows import IncidentRow, SessionRow
from app.vocab import PROBE_TIER, IncidentStatus

log = logging.getLogger(__name__)

ESCALATING = ("warning", "critical")
KEY_MAX = 200
_NUMBERS = re.compile(r"(?:0x)?[0-9a-f]*[0-9][0-9a-f]*(?:[.,:][0-9]+)*", re.I)
_SPACE = re.compile(r"[\s\"'`]+")


def derived_key(service: str | None, message: str) -> str:
    """A stable key for a finding the model gave no key: service + the message with numbers,
    hex ids and quoting folded, so the same problem measured differently keeps its incident."""
    text = _SPACE.sub(" ", _NUMBERS.sub("#", message.lower())).strip(" .:;,-")
    return f"{service or 'host'}:{text}"[:KEY_MAX]


def observation(row: Mapping[str, Any], events: Iterable[Mapping[str, Any]] = (),
                checks: Iterable[Mapping[str, Any]] = ()) -> Observation:
    """What a finished session saw. ``events``/``checks``: its routed rows, used only when it has
    no structured output (the legacy markers / handoff.json path)."""
    probe = row.get("tier") == PROBE_TIER
    origin = "probe" if probe else "agent"
    output = row.get("structured_output") if row.get("source") == "structured_output" else None
    if isinstance(output, dict):
        events = [e for e in output.get("events") or [] if isinstance(e, dict)]
        checks = [c for c in output.get("services_checked") or [] if isinstance(c, dict)]
    obs = Observation()
    for ev in events:
        level, message = ev.get("level"), ev.get("message")
        if level not in ESCALATING or not isinstance(message, str) or not message:
            continue
        service = ev.get("service") if isinstance(ev.get("service"), str) else None
        given = ev.get("key")
        key = given if isinstance(given, str) and given else derived_key(service, message)
        check = key.removeprefix("check:") if key.startswith("check:") else None
        obs.findings.append(Finding(key=key[:KEY_MAX], severity=level, message=message, service=service,
                                    check_name=check, origin=origin))
    for c in checks:
        name, status = c.get("name"), c.get("status")
        check = c.get("check") if isinstance(c.get("check"), str) and c.get("check") else None
        service = c.get("service") if isinstance(c.get("service"), str) else None
        if check is not None:
            latency = c.get("latency_ms")
            if probe:
                obs.probe_results.append(ProbeResult(
                    check_name=check, status=str(status), service=service,
                    latency_ms=float(latency) if isinstance(latency, int | float) and not isinstance(latency, bool)
                    else None, detail=c.get("detail") if isinstance(c.get("detail"), str) else None))
            if status == "healthy":
                obs.passing_checks.append(check)
        elif status == "healthy" and not probe:
            obs.healthy_services += [s for s in (name, service) if isinstance(s, str) and s]
    return obs


@dataclass
class Verdict:
    """The escalation decision over one session's incident changes."""

    escalate: list[tuple[IncidentRow, str]] = field(default_factory=list)  # (incident, why)
    held: list[tuple[IncidentRow, str]] = field(default_factory=list)  # failing, not escalated: why
    resolved: list[IncidentRow] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)  # everything the session changed (notifications)
    maintenance: dict[int, ActiveWindow] = field(default_factory=dict)  # incident id → the window holding it
    after_maintenance: dict[int, str] = field(default_factory=dict)  # incident id → the window that just ended

    def gate_text(self) -> str:
        """Why a request to escalate was not acted on (stored on the session, shown on its page)."""
        if not self.held:
            return "no incident is failing at warning or above"
        parts = [f"incident #{row['id']} ({row['key']}): {why}" for row, why in self.held[:10]]
        more = f"; and {len(self.held) - 10} more" if len(self.held) > 10 else ""
        return "not escalated: " + "; ".join(parts) + more

    def escalate_text(self) -> str:
        return "; ".join(f"incident #{row['id']} ({row['key']}): {why}" for row, why in self.escalate)


def decide(changes: Iterable[Change], escalate_after: int, now: str | None = None, *,
           maintenance: Mapping[int, ActiveWindow] | None = None,
           after_maintenance: Mapping[int, str] | None = None) -> Verdict:
    """``maintenance``: incidents a window holds (never escalated while it does);
    ``after_maintenance``: incidents whose window just ended (escalated as if they had just
    opened, unless acknowledged or silenced)."""
    now = now or utcnow()
    changes = list(changes)
    verdict = Verdict(changes=changes, maintenance=dict(maintenance or {}),
                      after_maintenance=dict(after_maintenance or {}))
    for ch in changes:
        row = ch.incident
        if ch.kind == "resolved":
            verdict.resolved.append(row)
            continue
        if SEVERITY_RANK.get(row["severity"], 1) < SEVERITY_RANK["warning"]:
            verdict.held.append((row, "severity info: recorded, never escalated"))
            continue
        if (window := verdict.maintenance.get(row["id"])) is not None:
            verdict.held.append((row, f"in maintenance window {window.name} until {window.until}"))
            continue
        if row["silenced_until"] and row["silenced_until"] > now:
            verdict.held.append((row, f"silenced until {row['silenced_until']} by {row['silenced_by'] or 'an operator'}"))
            continue
        if (ended := verdict.after_maintenance.get(row["id"])) is not None \
                and row["status"] != IncidentStatus.ACKNOWLEDGED:
            verdict.escalate.append((row, f"maintenance window {ended} ended and it is still failing"))
            continue
        if ch.kind == "opened":
            if row["flapping"] and ch.flap_escalated:
                verdict.held.append((row, "flapping; already escalated once for it in the flapping window"))
            elif row["flapping"]:
                verdict.escalate.append((row, "flapping: it keeps opening and resolving"))
            else:
                verdict.escalate.append((row, "opened"))
            continue
        if row["status"] == IncidentStatus.ACKNOWLEDGED:
            verdict.held.append((row, f"acknowledged by {row['acknowledged_by'] or 'an operator'}"))
            continue
        if ch.kind == "worsened":
            verdict.escalate.append((row, f"worsened to {row['severity']}"))
            continue
        if row["escalations"] == 0:
            verdict.escalate.append((row, f"failing for {row['occurrences']} cycle(s), never escalated"))
            continue
        since = row["occurrences"] - (row["escalated_occurrences"] or 0)
        if ch.counted and escalate_after > 0 and since >= escalate_after:
            verdict.escalate.append((row, f"still failing: {since} more cycles since it was last escalated"))
            continue
        again = (f"again after {escalate_after - since} more cycle(s) or if it worsens" if escalate_after > 0
                 else "again only if it worsens (TIEROPS_ESCALATE_AFTER=0)")
        verdict.held.append((row, f"already escalated at {row['escalated_at']}, {row['occurrences']} cycle(s) "
                                  f"failing; escalates {again}"))
    return verdict


async def track(db: Database, settings: Settings, row: SessionRow, chain_id: int | None) -> Verdict:
    """Apply a finished session to the incidents and decide on escalation. Never raises for a
    session it cannot read (logged); storage errors propagate."""
    events: list[Mapping[str, Any]] = []
    checks: list[Mapping[str, Any]] = []
    if row["source"] in ("markers", "handoff"):
        events = [dict(e) for e in await findings.session_events(db, row["id"])]
        checks = [dict(c) for c in await findings.session_checks(db, row["id"], fresh=True)]
    obs = observation(row, events, checks)
    if not (obs.findings or obs.probe_results or obs.passing_checks or obs.healthy_services):
        return Verdict()
    now = utcnow()
    changes = await incidents.observe(db, row["id"], chain_id, obs, flap_count=settings.flap_count,
                                      flap_window_s=settings.flap_window, now=now)
    held, ended = await apply_maintenance(db, settings, changes, now)
    verdict = decide(changes, settings.escalate_after, now, maintenance=held, after_maintenance=ended)
    for ch in changes:
        if ch.kind in ("opened", "worsened", "resolved"):
            inc = ch.incident
            log.log(logging.INFO if ch.kind == "resolved" else logging.WARNING,
                    "incident %d %s: %s (%s, %s)%s", inc["id"], ch.kind, inc["key"], inc["service"] or "-",
                    inc["severity"],
                    f" after {inc['duration_s']:.0f} s" if ch.kind == "resolved" and inc["duration_s"] else "",
                    extra={"incident": inc["id"], "session": row["id"], "chain": chain_id})
    # the session's proposed actions belong to the incident they would fix (its service, else the only one)
    await action_store.link_proposals(db, row["id"], [ch.incident for ch in changes])
    return verdict


async def apply_maintenance(db: Database, settings: Settings, changes: Iterable[Change],
                            now: str) -> tuple[dict[int, ActiveWindow], dict[int, str]]:
    """Which of the changed, unresolved incidents a maintenance window holds now (marked so on the
    incident), and which one held them and has ended (the mark cleared): ``(held, ended)``, by
    incident id. A broken ``TIEROPS_MAINTENANCE`` (refused at start) holds nothing; logged."""
    held: dict[int, ActiveWindow] = {}
    ended: dict[int, str] = {}
    for ch in changes:
        inc = ch.incident
        if ch.kind == "resolved":
            continue
        try:
            window = await covering(db, settings, service=inc["service"],
                                    check=inc.get("name") or inc["check_name"], now=now)
        except ConfigError as exc:
            log.error("maintenance windows cannot be read (%s); incident %d is not held", exc, inc["id"])
            window = None
        if window is not None:
            held[inc["id"]] = window
        elif inc.get("maintenance"):
            ended[inc["id"]] = str(inc["maintenance"])
    if held:
        await incidents.hold_in_maintenance(db, [(pk, w.name, w.until) for pk, w in held.items()], now)
    if ended:
        await incidents.end_maintenance(db, list(ended), now)
    return held, ended
