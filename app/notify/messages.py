"""What each state change says to a person: one :class:`Notice` per thing worth a message.

Why a module of its own: the sender (``sender.py``) does not know what an incident or a chain is,
and the chain should not format messages. The rules an on-call engineer relies on live here: one
message per incident state change (opened or reopened, worsened, resolved, "still failing" when a
maintenance window that held it ends) at the incident's own severity, with what TierOps did about
it as a line of that message, never a second message; titles that name the service and the check
or alert (``api: api-health failing``); follow-ups (a resolution, an investigation's outcome, an
expired approval) that name the incidents they follow (:attr:`Notice.follows`), so the sender
sends them wherever the opening went; held messages (maintenance, silenced, flapping already told)
recorded with why (:attr:`Notice.suppress`), never sent.

A model's finding that rests only on unsupported or uncited evidence (its citations are not in its
session's tool output, or it cites none: ``app/engine/evidence_check.py``) says so in a word:
"(unverified)" after an incident's title, before a listed finding, after an outcome's title.
Verified and unchecked findings read as before.

Each notice has a ``dedup_key`` naming the state change (``incident:7:opened``), so a repeated
call sends nothing twice, across restarts and processes. The rules in full: ARCHITECTURE.md,
"Notifications".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from app.notify.routes import Subject
from app.store.incidents import Change
from app.store.rows import IncidentRow

log = logging.getLogger(__name__)

BODY_MAX = 1500  # characters of evidence or summary in a message; the link has the rest
LIST_MAX = 8  # items of each list in an outcome message
LABEL_MAX = 80  # characters of a model finding used as a title
TIEROPS = "tierops"  # the name of a message about no service
SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}
ORIGIN_SOURCE = {"probe": "check", "agent": "model", "alert": "alert"}
OPENING_KINDS = ("incident_opened", "incident_worsened")  # what a follow-up follows
_VERB = {"probe": "failing", "alert": "firing"}  # what a failing check or alert does, in a title
UNVERIFIED = " (unverified)"  # the mark of a finding resting only on unsupported or uncited evidence
UNVERIFIED_STATUSES = ("unsupported", "uncited")


@dataclass(frozen=True)
class Notice:
    """One message: what it says, what it is about (for routes), what it follows."""

    kind: str
    severity: str
    title: str  # without the [SEVERITY] tag, unless it carries its own ([RESOLVED] …)
    body: str
    link_path: str | None
    dedup_key: str | None
    source: str | None = None  # check | model | alert | monitor
    service: str | None = None
    check: str | None = None
    incident_id: int | None = None
    follows: tuple[int, ...] = ()  # incidents whose opening messages this one follows
    follows_key: str | None = None  # or: the dedup key of the message it follows
    suppress: str | None = None  # recorded, not sent: why

    @property
    def subject(self) -> Subject:
        return Subject(self.severity, self.source, self.service, self.check)


class NoticeSink(Protocol):
    async def post(self, notice: Notice) -> None: ...


async def send(sink: NoticeSink | None, notices: Iterable[Notice | None]) -> None:
    """Hand every notice to the sender. Never raises: a message must never fail a cycle."""
    if sink is None:
        return
    for n in notices:
        if n is None:
            continue
        try:
            await sink.post(n)
        except Exception:  # the Notifier never raises; this guards against a bug there
            log.exception("notification %s could not be queued", n.dedup_key)


# -- naming ------------------------------------------------------------------------------------

def clip(text: str | None, limit: int = BODY_MAX) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _line(text: str | None, limit: int) -> str:
    return clip(" ".join((text or "").split()), limit)


def label(inc: Mapping[str, Any]) -> str:
    """What people call the incident: ``api-health``, ``HighLatency (alertmanager)``, or the
    model's finding cut to a title."""
    name = inc.get("name") or inc.get("check_name")
    if inc.get("origin") == "alert":
        base = _line(name or inc.get("title") or inc.get("key"), LABEL_MAX)
        return f"{base} ({inc['alert_source']})" if inc.get("alert_source") else base
    return _line(name or inc.get("title") or inc.get("key"), LABEL_MAX)


def service_of(inc: Mapping[str, Any]) -> str:
    return _line(inc.get("service"), 100) or TIEROPS


def source_of(inc: Mapping[str, Any]) -> str:
    return ORIGIN_SOURCE.get(str(inc.get("origin")), "model")


def worst(severities: Iterable[str], default: str = "info") -> str:
    found = [s for s in severities if s in SEVERITY_RANK]
    return max(found, key=SEVERITY_RANK.__getitem__) if found else default


def duration(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    if s < 172800:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def _about(inc: Mapping[str, Any]) -> dict[str, Any]:
    """The routing fields of a message about ``inc``."""
    return {"source": source_of(inc), "service": inc.get("service"),
            "check": inc.get("name") or inc.get("check_name"), "incident_id": inc["id"]}


# -- incidents ---------------------------------------------------------------------------------

@dataclass
class IncidentNews:
    """One incident change worth a message, with what TierOps did about it (filled by the chain
    once it knows) and why the message must not be sent, if it must not."""

    change: Change
    action: str | None = None
    suppress: str | None = None
    after_maintenance: str | None = None  # the window that held it and has ended
    unverified: bool = False  # the session's finding that changed it rests on no verified evidence

    @property
    def incident(self) -> IncidentRow:
        return self.change.incident


def news(changes: Iterable[Change]) -> list[IncidentNews]:
    """The changes a person hears of: opened, worsened, resolved (a ``seen`` one is not news,
    unless a maintenance window that held it just ended: the caller builds that one)."""
    return [IncidentNews(ch) for ch in changes if ch.kind in ("opened", "worsened", "resolved")]


def incident_notice(item: IncidentNews) -> Notice:
    inc, kind = item.incident, item.change.kind
    who, what = service_of(inc), label(inc)
    alert = inc.get("origin") == "alert"
    link = f"/incidents/{inc['id']}"
    facts = f"Incident #{inc['id']} ({inc['key']}), {inc['severity']}"
    action = f"\n{item.action}" if item.action else ""
    about = _about(inc)
    if item.after_maintenance is not None:
        title = f"{who}: {what} still {_VERB.get(str(inc.get('origin')), 'open')} after maintenance window {item.after_maintenance}"
        body = (f"{clip(inc.get('evidence'))}\n\n{facts}, open since {inc['opened_at']}: the maintenance window "
                f"{item.after_maintenance} held it and has ended.{action}")
        return Notice("incident_opened", inc["severity"], title, clip(body, BODY_MAX + 500), link,
                      f"incident:{inc['id']}:opened:after-maintenance:{inc.get('maintenance_until') or ''}",
                      suppress=item.suppress, **about)
    if kind == "opened":
        verb = _VERB.get(str(inc.get("origin")), "")
        title = f"{who}: {what}{' ' + verb if verb and not alert else ''}"
        again = ""
        if inc.get("reopened_from"):
            title += f" {verb} again" if alert else " again"
            again = f"; it reopens #{inc['reopened_from']}, resolved shortly before"
        if inc.get("flapping"):
            title += " (flapping)"
        title += UNVERIFIED if item.unverified else ""
        body = f"{clip(inc.get('evidence'))}\n\n{facts}, opened {inc['opened_at']}{again}.{action}"
        return Notice("incident_opened", inc["severity"], title, clip(body, BODY_MAX + 500), link,
                      f"incident:{inc['id']}:opened", suppress=item.suppress, **about)
    if kind == "worsened":
        verb = _VERB.get(str(inc.get("origin")), "")
        title = f"{who}: {what}{' ' + verb if verb and not alert else ''}, now {inc['severity']}"
        title += UNVERIFIED if item.unverified else ""
        body = f"{clip(inc.get('evidence'))}\n\n{facts}: worse than when it opened at {inc['opened_at']}.{action}"
        return Notice("incident_worsened", inc["severity"], title, clip(body, BODY_MAX + 500), link,
                      f"incident:{inc['id']}:worsened:{inc['severity']}", suppress=item.suppress, **about)
    seconds = inc.get("duration_s")
    took = f" after {duration(seconds)}" if seconds is not None else ""
    by = "" if inc.get("resolved_by") in (None, "auto", "alert") else f" by {inc['resolved_by']}"
    how = {"auto": "its check passed again", "alert": "its sender reported it resolved"}.get(
        str(inc.get("resolved_by")), "resolved by hand")
    title = f"[RESOLVED] {who}: {what} {'resolved' if alert else 'recovered'}{took}"
    body = (f"Incident #{inc['id']} ({inc['key']}) resolved{by}{took}: {how}; "
            f"{inc.get('occurrences', 1)} failing cycle(s). It was {inc['severity']}.")
    return Notice("incident_resolved", inc["severity"], title, body, link, f"incident:{inc['id']}:resolved",
                  follows=(inc["id"],), suppress=item.suppress, **about)


def incident_notices(items: Iterable[IncidentNews | Change]) -> list[Notice]:
    """The notices of ``items`` (plain changes are taken as news without an action)."""
    out = []
    for item in items:
        if isinstance(item, Change):
            if item.kind not in ("opened", "worsened", "resolved"):
                continue
            item = IncidentNews(item)
        out.append(incident_notice(item))
    return out


# -- investigations ----------------------------------------------------------------------------

@dataclass
class Outcome:
    """How an investigation (a chain that went beyond its first look, or started for an alert or
    an approval) ended, as its message tells it."""

    root: int  # the chain's first session
    last: Mapping[str, Any]  # the session it ended with (a row or a chain link)
    incidents: Sequence[Mapping[str, Any]] = ()  # the incidents it was about, current state
    found: Sequence[tuple[str, str | None, str]] = ()  # (level, service, message) of the last tier
    done: Sequence[tuple[str, str | None, str, str | None]] = ()  # (kind, service, outcome, note)
    proposed: Sequence[tuple[str, str | None, str | None]] = ()  # (kind, service, detail)
    waiting: tuple[int, int] | None = None  # (approval id, tier) it waits for
    attention: str | None = None  # why a human must look
    tiers: Sequence[int] = field(default_factory=list)
    unverified: bool = False  # its warning/critical findings all rest on unsupported or uncited evidence


def outcome_notice(o: Outcome) -> Notice:
    last = o.last
    tier = last.get("tier")
    open_incidents = [i for i in o.incidents if i.get("status") != "resolved"]
    if o.waiting is not None:
        word = f"waiting for approval #{o.waiting[0]} to run tier {o.waiting[1]}"
    elif o.attention:
        word = f"tier {tier} needs a human"
    elif last.get("status") != "completed":
        word = f"tier {tier} {last.get('status')}"
    else:
        word = f"investigated by tier {tier}" + ("" if open_incidents or not o.incidents else ", resolved")
    word += UNVERIFIED if o.unverified else ""
    if o.incidents:
        lead = max(o.incidents, key=lambda i: (i.get("status") != "resolved", SEVERITY_RANK.get(i["severity"], 0)))
        more = f" +{len(o.incidents) - 1} more" if len(o.incidents) > 1 else ""
        head = f"{service_of(lead)}: {label(lead)}{more}"
        severity = worst(i["severity"] for i in o.incidents)
        about: dict[str, Any] = _about(lead)
    else:
        services = sorted({s for _, s, _ in o.found if s})
        head = f"{services[0] if len(services) == 1 else TIEROPS}: session {last['id']}"
        severity = "warning" if o.attention or last.get("status") != "completed" else worst(lv for lv, _, _ in o.found)
        about = {"source": "model", "service": services[0] if len(services) == 1 else None, "check": None}
    lines = [clip(last.get("summary") or last.get("status_reason") or "(no summary)", 600), ""]
    if o.found:
        lines.append("Found:")
        lines += [f"- [{lv}] {s + ': ' if s else ''}{_line(m, 200)}" for lv, s, m in o.found[:LIST_MAX]]
        lines += [f"- … and {len(o.found) - LIST_MAX} more"] if len(o.found) > LIST_MAX else []
    if o.done:
        lines.append("Did:")
        lines += [f"- {k} {s or '(host-wide)'}: {out}" + (f" — {_line(n, 160)}" if n else "")
                  for k, s, out, n in o.done[:LIST_MAX]]
    if o.proposed:
        lines.append("Proposes (not done; a human or a higher tier decides):")
        lines += [f"- {k} {s or '(host-wide)'}" + (f": {_line(d, 200)}" if d else "") for k, s, d in o.proposed[:LIST_MAX]]
        lines += [f"- … and {len(o.proposed) - LIST_MAX} more"] if len(o.proposed) > LIST_MAX else []
    if o.waiting is not None:
        lines.append(f"Waiting for approval #{o.waiting[0]} to run tier {o.waiting[1]}: approve or reject it on "
                     "its page.")
    if o.attention:
        lines.append(f"Needs a human: {_line(o.attention, 400)}")
    if open_incidents:
        lines.append("Still open: " + "; ".join(f"#{i['id']} {label(i)} ({i['severity']})" for i in open_incidents[:LIST_MAX]))
    elif o.incidents:
        lines.append("Every incident it was about is resolved.")
    link = f"/approvals/{o.waiting[0]}" if o.waiting is not None else f"/sessions/{last['id']}"
    follows = tuple(int(i["id"]) for i in o.incidents)
    return Notice("escalation_outcome", severity, f"{head} — {word}", clip("\n".join(lines).strip(), BODY_MAX + 1500),
                  link, f"outcome:{o.root}:{last['id']}", source=about["source"], service=about["service"],
                  check=about["check"], incident_id=about.get("incident_id"), follows=follows)


def attention_notice(session: Mapping[str, Any], why: str, service: str | None = None) -> Notice:
    """A session that needs a human for a reason no incident message carries."""
    tier = session.get("tier")
    who = _line(service, 100) or TIEROPS
    return Notice("attention", "warning", f"{who}: session {session['id']} (tier {tier}) needs attention",
                  clip(why), f"/sessions/{session['id']}", f"attention:{session['id']}",
                  source="check" if tier == 0 else "model", service=service)


def approval_expired_notice(approval: Mapping[str, Any], incidents: Sequence[Mapping[str, Any]], why: str) -> Notice:
    """An approval nobody decided in time: the problem it was for still needs a human."""
    open_ones = [i for i in incidents if i.get("status") != "resolved"]
    if open_ones:
        lead = max(open_ones, key=lambda i: SEVERITY_RANK.get(i["severity"], 0))
        head, severity, about = f"{service_of(lead)}: {label(lead)}", worst(i["severity"] for i in open_ones), _about(lead)
    else:
        head, severity, about = TIEROPS, "warning", {"source": "model", "service": None, "check": None}
    body = f"{why}\nThe escalation did not run; a human must look."
    if open_ones:
        body += "\nStill open: " + "; ".join(f"#{i['id']} {label(i)} ({i['severity']})" for i in open_ones[:LIST_MAX])
    return Notice("approval_expired", severity, f"{head} — approval #{approval['id']} expired, needs a human",
                  clip(body), f"/approvals/{approval['id']}", f"approval:{approval['id']}:expired",
                  source=about["source"], service=about["service"], check=about["check"],
                  incident_id=about.get("incident_id"), follows=tuple(int(i["id"]) for i in incidents))


def monitor_notice(kind: str, severity: str, title: str, body: str, dedup_key: str,
                   follows_key: str | None = None) -> Notice:
    """The monitor's own health (``source: monitor``); "healthy again" follows "unhealthy"."""
    return Notice(kind, severity, f"{TIEROPS}: {title}", clip(body), "/", dedup_key, source="monitor",
                  follows_key=follows_key)


def with_action(notice: Notice, action: str) -> Notice:
    """``notice`` with one more line saying what TierOps did."""
    return replace(notice, body=f"{notice.body}\n{action}")
