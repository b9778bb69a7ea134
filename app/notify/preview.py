"""``tierops notify preview`` and the notifications page: which messages the settings in force would
send where, for the last incidents.

Why a module of its own: routes, the minimum severity and quiet hours are easy to get wrong and
expensive to find out about (a page that never came). The preview replays each recent incident's
life — opened at its first severity, each worsening, the outcome of its investigation when it was
escalated, its resolution — through the same message builders (``messages.py``) and the same
decision (``policy.decide``) the sender uses, with follow-ups following the preview's own
decision for the opening. Nothing is recorded or sent. What was really sent for each incident is
listed beside it (``recorded``), so a change of settings can be compared with what happened.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from app.notify import messages
from app.notify.messages import IncidentNews, Notice
from app.notify.policy import PENDING, Earlier, decide, format_title
from app.notify.routes import RouteTable
from app.notify.urls import shown_url
from app.store import incidents as incident_store
from app.store import notifications as notification_store
from app.store.db import Database
from app.store.incidents import Change
from app.store.notifications import NotificationRow
from app.store.rows import IncidentRow

log = logging.getLogger(__name__)

__all__ = ["IncidentPreview", "PreviewLine", "preview"]

_WORSENED = re.compile(r"^severity (info|warning|critical) → (info|warning|critical)")


@dataclass(frozen=True)
class PreviewLine:
    """One message the settings in force would produce, and its fate."""

    kind: str
    title: str  # as sent, with its [SEVERITY] tag
    severity: str
    sent: bool
    routes: tuple[str, ...]
    urls: tuple[str, ...]  # scheme and host only
    why: str | None  # why it would not be sent
    follows: bool  # a follow-up: it goes where the opening went


@dataclass
class IncidentPreview:
    incident: IncidentRow
    lines: list[PreviewLine] = field(default_factory=list)
    recorded: list[NotificationRow] = field(default_factory=list)  # what was really recorded for it


def _at_opening(inc: IncidentRow, timeline_details: list[str]) -> IncidentRow:
    """The incident as it was when it opened: its first severity, still open."""
    first = inc["severity"]
    for detail in timeline_details:
        if m := _WORSENED.match(detail or ""):
            first = m.group(1)
            break
    row = dict(inc)
    row.update(severity=first, status="open", resolved_at=None, resolved_by=None, duration_s=None)
    return row  # type: ignore[return-value]


async def preview(db: Database, *, table: RouteTable, min_severity: str, quiet: tuple[int, int] | None,
                  quiet_text: str, config_error: str | None, apprise: bool, last: int = 10,
                  now: datetime | None = None) -> list[IncidentPreview]:
    """The messages of the ``last`` incidents with the newest activity, decided with these settings."""
    now = now or datetime.now(UTC)
    out: list[IncidentPreview] = []
    for inc in await incident_store.list_incidents(db, limit=max(1, min(last, 200))):
        timeline = await incident_store.timeline(db, inc["id"])
        worsened = [t["detail"] or "" for t in timeline if t["kind"] == "worsened"]
        notices: list[Notice] = [messages.incident_notice(IncidentNews(Change(_at_opening(inc, worsened), "opened",
                                                                              True)))]
        for detail in worsened:
            if m := _WORSENED.match(detail):
                row = dict(inc)
                row.update(severity=m.group(2), status="open")
                notices.append(messages.incident_notice(IncidentNews(Change(row, "worsened", True))))  # type: ignore[arg-type]
        if inc["escalations"]:
            notices.append(messages.outcome_notice(messages.Outcome(
                root=inc["last_session_pk"] or 0, last={"id": inc["last_session_pk"] or 0, "tier": 1,
                                                        "status": "completed", "summary": "(the investigation's summary)"},
                incidents=[inc])))
        if inc["status"] == "resolved":
            notices.append(messages.incident_notice(IncidentNews(Change(inc, "resolved", False))))
        item = IncidentPreview(inc, recorded=await notification_store.for_incident(db, inc["id"]))
        opening: list[tuple[bool, tuple[str, ...], str | None]] = []
        for n in notices:
            follows = bool(n.follows)
            earlier = None
            if follows and opening:
                went = [o for o in opening if o[0]]
                earlier = (Earlier(True, tuple(dict.fromkeys(r for o in went for r in o[1]))) if went
                           else Earlier(False, why=opening[0][2]))
            d = decide(n, min_severity=min_severity, quiet=quiet, quiet_text=quiet_text, table=table,
                       config_error=config_error, apprise=lambda: apprise, now=now, earlier=earlier)
            sent = d.status == PENDING
            if not follows:
                opening.append((sent, d.routes, d.why or d.error))
            item.lines.append(PreviewLine(
                kind=n.kind, title=format_title(n.severity, n.title), severity=n.severity, sent=sent,
                routes=d.routes if sent else (), urls=tuple(shown_url(table.targets[i].url) for i in d.targets)
                if sent else (), why=None if sent else (d.why or d.error), follows=follows))
        out.append(item)
    return out
