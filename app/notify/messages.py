"""What TierOps tells people, and when (issue #13): one message per state change that matters.

Why a module of its own: the *sender* (``notify.Notifier``: Apprise, retries, digests, quiet
hours) does not know what an incident or an escalation is, and the chain should not format
messages. Here each event a person must hear about becomes one :class:`Notice` with a severity,
a title that leads with severity and service, a short body (the evidence or the agent's summary)
and a link to the page that shows it. Each has a ``dedup_key`` naming the state change (incident 7
opened; session 12 needs attention), so a retried or repeated call sends nothing twice.

Sent on: an incident opened, worsened (severity rose) or resolved; an escalation started and the
chain's outcome; a session needing human attention; an approval requested. The monitor's own
health (cycles failing, storage errors) is the scheduler's (``scheduler.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.store.incidents import Change
from app.store.rows import IncidentRow

log = logging.getLogger(__name__)

BODY_MAX = 1500  # characters of evidence or summary in a message; the link has the rest


class NoticeSink(Protocol):
    async def notify(self, kind: str, severity: str, title: str, body: str, *, link_path: str | None = None,
                     dedup_key: str | None = None) -> None: ...


@dataclass(frozen=True)
class Notice:
    kind: str
    severity: str
    title: str
    body: str
    link_path: str | None
    dedup_key: str


def _clip(text: str | None) -> str:
    text = (text or "").strip()
    return text if len(text) <= BODY_MAX else text[:BODY_MAX - 1] + "…"


def _title(severity: str, service: str | None, what: str) -> str:
    return f"[{severity.upper()}] {service or 'host'}: {what}"


def incident_notices(changes: Iterable[Change]) -> list[Notice]:
    """Opened, worsened and resolved incidents (a ``seen`` one is not news)."""
    out: list[Notice] = []
    for ch in changes:
        inc: IncidentRow = ch.incident
        link = f"/incidents/{inc['id']}"
        name = inc["check_name"] or inc["key"]
        if ch.kind == "opened":
            flap = " (flapping)" if inc["flapping"] else ""
            out.append(Notice("incident_opened", inc["severity"], _title(inc["severity"], inc["service"],
                                                                        f"incident opened{flap} — {name}"),
                              _clip(inc["evidence"]), link, f"incident:{inc['id']}:opened"))
        elif ch.kind == "worsened":
            out.append(Notice("incident_worsened", inc["severity"],
                              _title(inc["severity"], inc["service"], f"incident worsened to {inc['severity']} — {name}"),
                              _clip(inc["evidence"]), link, f"incident:{inc['id']}:worsened:{inc['severity']}"))
        elif ch.kind == "resolved":
            took = f" after {_duration(inc['duration_s'])}" if inc["duration_s"] is not None else ""
            by = "" if inc["resolved_by"] in (None, "auto") else f" by {inc['resolved_by']}"
            out.append(Notice("incident_resolved", "info", _title("resolved", inc["service"], f"{name} recovered{took}"),
                              _clip(f"Incident #{inc['id']} ({inc['key']}) resolved{by}{took}; "
                                    f"{inc['occurrences']} failing cycle(s)."), link,
                              f"incident:{inc['id']}:resolved"))
    return out


def escalation_notice(parent: Mapping[str, Any], to_tier: int, reasons: Sequence[str] = ()) -> Notice:
    why = "; ".join(reasons) if reasons else (parent.get("escalation_reason") or "escalation requested")
    return Notice("escalation", "warning",
                  _title("warning", None, f"tier {parent.get('tier')} escalated to tier {to_tier}"),
                  _clip(f"{why}\n\n{parent.get('summary') or ''}"), f"/sessions/{parent['id']}",
                  f"escalation:{parent['id']}:{to_tier}")


def outcome_notice(chain: Sequence[Mapping[str, Any]]) -> Notice | None:
    """How an escalated chain ended (None for a chain that did not escalate)."""
    if len(chain) < 2:
        return None
    last = chain[-1]
    ok = last.get("status") == "completed" and not last.get("attention")
    severity = "info" if ok else "warning"
    word = "finished" if ok else f"ended {last.get('status')}" + (" and needs attention" if last.get("attention") else "")
    return Notice("escalation_outcome", severity,
                  _title(severity, None, f"escalation {word} at tier {last.get('tier')}"),
                  _clip(last.get("summary") or last.get("status_reason") or last.get("attention")),
                  f"/sessions/{last['id']}", f"outcome:{chain[0]['id']}")


def attention_notice(session: Mapping[str, Any], why: str) -> Notice:
    return Notice("attention", "critical",
                  _title("critical", None, f"session {session['id']} (tier {session.get('tier')}) needs attention"),
                  _clip(why), f"/sessions/{session['id']}", f"attention:{session['id']}")


def approval_notice(approval: Mapping[str, Any]) -> Notice:
    return Notice("approval", "warning",
                  _title("warning", None, f"approval #{approval['id']} requested to run tier {approval['tier']}"),
                  _clip(approval.get("handoff")), f"/sessions/{approval['session_pk']}"
                  if approval.get("session_pk") is not None else "/", f"approval:{approval['id']}")


async def send(sink: NoticeSink | None, notices: Iterable[Notice | None]) -> None:
    """Hand every notice to the sender. Never raises: a message must never fail a cycle."""
    if sink is None:
        return
    for n in notices:
        if n is None:
            continue
        try:
            await sink.notify(n.kind, n.severity, n.title, n.body, link_path=n.link_path, dedup_key=n.dedup_key)
        except Exception:  # the Notifier never raises; this guards against a bug there
            log.exception("notification %s could not be queued", n.dedup_key)


def _duration(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"
