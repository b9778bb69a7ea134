"""Alert incidents: what an alert sender's delivery does to the incidents, and the alerts each lists.

Why a module of its own: a probe check or a model finding is one problem per key, but an
Alertmanager or Grafana webhook carries a notification *group*, and people expect one incident
per group that lists its alerts (``incident_alerts``: one row per fingerprint, firing or
resolved, with its labels, annotations and links). :func:`observe_alerts` applies one delivery —
a whole group, or one alert when grouping by fingerprint — in one write transaction, and returns
the incident's one :class:`~app.store.incidents.Change`, however many alerts it carried. A new
alert joining an open group is an update, never a second incident; the incident resolves when no
alert it lists is firing any more. Texts from the sender pass the database's redactor (JSON values
too) before they are stored and before they are cut. An alert incident whose investigation could
not start gets the incident's own needs-attention flag (:func:`flag_attention`): no session row
exists to carry it. The rules in full: ARCHITECTURE.md, "Alert incidents and the run queue".
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

import aiosqlite

from app.clock import seconds_between, utcnow
from app.store.db import Database
from app.store.incidents import (
    ALERT_KEY_PREFIX,
    EVIDENCE_MAX,
    SEVERITY_RANK,
    Change,
    Finding,
    _get,
    _open,
    _timeline,
    _unresolved,
    settle_attention,
)
from app.store.rows import IncidentRow, decode_all, dumps

log = logging.getLogger(__name__)

INCIDENT_LINKS_MAX = 20  # links listed on one incident (each alert keeps its own)
NAME_MAX = 200  # characters of an incident's name
TITLE_MAX = 500  # characters of a title, as for every incident
SERVICE_MAX = 200  # characters of a service
ATTENTION_MAX = 1000  # characters of why an incident needs a human
ALERTS_READ_MAX = 1000  # alerts one read returns (the API's incident detail, the CLI)
_SEVERITY_ORDER = "CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END"


class LinkRow(TypedDict):
    label: str  # runbook | dashboard | panel | source | silence (qualified by the alert's title when several)
    url: str  # http(s) only


class IncidentAlertRow(TypedDict):
    """One alert an alert incident lists (``incident_alerts``)."""

    id: int
    incident_id: int
    fingerprint: str
    status: str  # firing | resolved
    severity: str
    title: str
    labels: dict[str, str] | None
    annotations: dict[str, str] | None
    links: list[LinkRow] | None
    starts_at: str | None
    first_seen_at: str
    last_seen_at: str
    resolved_at: str | None


class AlertCounts(TypedDict):
    firing: int
    resolved: int


@dataclass(frozen=True)
class AlertEntry:
    """One alert of a delivery, as it is listed on its incident."""

    fingerprint: str
    firing: bool
    severity: str
    title: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    links: Sequence[Mapping[str, str]] = ()
    starts_at: str | None = None


@dataclass(frozen=True)
class AlertDelivery:
    """The alerts of one delivery that belong to one incident (``key``), and the incident's texts."""

    key: str
    source: str  # alertmanager | grafana | generic
    name: str | None
    title: str
    service: str | None
    evidence: str
    detail: str  # the timeline entry of this delivery
    alerts: Sequence[AlertEntry]
    annotations: Mapping[str, str] = field(default_factory=dict)
    group_resolved: bool = False  # the sender says every alert of the group is resolved
    left_out: int = 0  # alerts of the delivery not listed (the sender's max_alerts, TIEROPS_ALERT_MAX_ALERTS)


def _rank(severity: str) -> int:
    return SEVERITY_RANK.get(severity, 1)


async def observe_alerts(db: Database, delivery: AlertDelivery, *, flap_count: int, flap_window_s: float,
                         now: str | None = None) -> Change | None:
    """Apply one delivery to its incident; return the incident's change, or None when it carried
    only resolved alerts and nothing is open."""
    now = now or utcnow()
    red = db.redact
    title, evidence = red(delivery.title)[:TITLE_MAX], red(delivery.evidence)[:EVIDENCE_MAX]
    name = red(delivery.name)[:NAME_MAX] if delivery.name else None
    key, service = red(delivery.key), red(delivery.service)[:SERVICE_MAX] if delivery.service else None
    firing = [a for a in delivery.alerts if a.firing]
    async with db.write() as conn:
        row = await _unresolved(conn, key)
        if row is None and not firing:
            return None
        if row is None:
            worst = max((a.severity for a in firing), key=_rank)
            opened = await _open(conn, None, None, Finding(key=key, severity=worst, message=title,
                                                            service=service, origin="alert"),
                                 None, now, flap_count, flap_window_s)
            pk, previous = opened.incident["id"], None
        else:
            pk, previous = row["id"], row
        joined = await _list_alerts(conn, db, pk, delivery.alerts, now)
        if delivery.group_resolved:
            still = f" AND fingerprint NOT IN ({','.join('?' * len(firing))})" if firing else ""  # no empty IN ()
            sql = ("UPDATE incident_alerts SET status = 'resolved', resolved_at = ?, last_seen_at = ?"  # noqa: S608 (placeholders only)
                   f" WHERE incident_id = ? AND status = 'firing'{still}")
            await conn.execute(sql, (now, now, pk, *(red(a.fingerprint) for a in firing)))
        links, all_links = await _merged_links(conn, pk)
        detail = delivery.detail
        if previous is not None and joined:
            detail = f"{len(joined)} alert(s) joined: " + "; ".join(joined[:10]) \
                + (" …" if len(joined) > 10 else "") + "\n" + detail
        if all_links > len(links):
            detail += (f"\nlinks: {len(links)} of {all_links} listed on the incident (at most {INCIDENT_LINKS_MAX}); "
                       "every alert keeps its own")
        await conn.execute(
            "UPDATE incidents SET name = COALESCE(?, name), alert_source = ?, links = ?, annotations = ?, evidence = ?,"
            " alerts_truncated = ? WHERE id = ?",
            (name, delivery.source, dumps(links), dumps(red.deep(dict(delivery.annotations))), evidence,
             delivery.left_out, pk))
        await _timeline(conn, pk, "alert", now, detail=red(detail)[:EVIDENCE_MAX])
        if previous is None:
            return Change(await _get(conn, pk), "opened", True, flap_escalated=opened.flap_escalated)
        return await _update(conn, previous, now, counted=bool(firing), service=service)


async def _update(conn: aiosqlite.Connection, row: IncidentRow, now: str, *, counted: bool,
                  service: str | None) -> Change:
    """After a delivery to an open incident: resolved when none of its alerts fires, else seen or
    worsened (the worst firing alert's severity, only rising)."""
    pk = row["id"]
    async with conn.execute(f"SELECT severity FROM incident_alerts WHERE incident_id = ? AND status = 'firing'"  # noqa: S608 (a constant)
                            f" ORDER BY {_SEVERITY_ORDER} LIMIT 1", (pk,)) as cur:
        worst = await cur.fetchone()
    if worst is None:
        async with conn.execute("SELECT COUNT(*) FROM incident_alerts WHERE incident_id = ?", (pk,)) as cur:
            listed = (await cur.fetchone() or (0,))[0]
        await conn.execute(
            "UPDATE incidents SET status = 'resolved', resolved_at = ?, resolved_by = 'alert', duration_s = ?"
            " WHERE id = ?", (now, seconds_between(row["opened_at"], now), pk))
        why = "the alert's sender reported it resolved" if listed <= 1 else f"all {listed} alerts of the group resolved"
        await _timeline(conn, pk, "resolved", now, detail=why)
        await settle_attention(conn, [pk], f"incident #{pk} resolved ({why})", now)
        return Change(await _get(conn, pk), "resolved", False)
    severity, before = str(worst[0]), row["severity"]
    worse = _rank(severity) > _rank(before)
    await conn.execute(
        "UPDATE incidents SET occurrences = occurrences + ?, last_seen_at = CASE WHEN ? THEN ? ELSE last_seen_at END,"
        " severity = CASE WHEN ? THEN ? ELSE severity END, service = COALESCE(service, ?) WHERE id = ?",
        (int(counted), int(counted), now, int(worse), severity, service, pk))
    if worse:
        await _timeline(conn, pk, "worsened", now, detail=f"severity {before} → {severity}: {row['title']}")
    return Change(await _get(conn, pk), "worsened" if worse else "seen", counted)


async def _list_alerts(conn: aiosqlite.Connection, db: Database, pk: int, alerts: Sequence[AlertEntry],
                       now: str) -> list[str]:
    """Insert or update each alert on incident ``pk``; return the titles of firing alerts it did
    not list before."""
    async with conn.execute("SELECT fingerprint FROM incident_alerts WHERE incident_id = ?", (pk,)) as cur:
        known = {r[0] for r in await cur.fetchall()}
    joined: list[str] = []
    red = db.redact
    for a in alerts:
        fingerprint = red(a.fingerprint)
        if a.firing and fingerprint not in known:
            joined.append(red(a.title)[:200])
        known.add(fingerprint)
        status = "firing" if a.firing else "resolved"
        await conn.execute(
            "INSERT INTO incident_alerts (incident_id, fingerprint, status, severity, title, labels, annotations,"
            " links, starts_at, first_seen_at, last_seen_at, resolved_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (incident_id, fingerprint) DO UPDATE SET status = excluded.status,"
            " severity = excluded.severity, title = excluded.title, labels = excluded.labels,"
            " annotations = excluded.annotations, links = excluded.links,"
            " starts_at = COALESCE(excluded.starts_at, incident_alerts.starts_at), last_seen_at = excluded.last_seen_at,"
            " resolved_at = CASE WHEN excluded.status = 'resolved'"
            " THEN COALESCE(incident_alerts.resolved_at, excluded.resolved_at) END",
            (pk, fingerprint, status, a.severity, red(a.title)[:TITLE_MAX], dumps(red.deep(dict(a.labels))),
             dumps(red.deep(dict(a.annotations))), dumps(red.deep([dict(link) for link in a.links])), a.starts_at,
             now, now, None if a.firing else now))
    return joined


async def _merged_links(conn: aiosqlite.Connection, pk: int) -> tuple[list[LinkRow], int]:
    """The incident's links from its alerts' (firing first, then as first seen): one per URL,
    runbooks first, a label shared by several URLs qualified by the alert's title; at most
    :data:`INCIDENT_LINKS_MAX`, and how many distinct URLs there were."""
    async with conn.execute("SELECT title, links FROM incident_alerts WHERE incident_id = ?"
                            " ORDER BY status = 'firing' DESC, id", (pk,)) as cur:
        rows = await cur.fetchall()
    found: list[tuple[str, str, str]] = []  # label, url, title
    seen: set[str] = set()
    for title, text in rows:
        for link in _decoded_links(text):
            if link["url"] not in seen:
                seen.add(link["url"])
                found.append((link["label"], link["url"], title))
    found.sort(key=lambda f: f[0] != "runbook")  # stable: otherwise as found
    per_label: dict[str, int] = {}
    for label, _, _ in found:
        per_label[label] = per_label.get(label, 0) + 1
    links: list[LinkRow] = [{"label": label if per_label[label] == 1 else f"{label}: {title[:80]}", "url": url}
                            for label, url, title in found[:INCIDENT_LINKS_MAX]]
    return links, len(found)


def _decoded_links(text: str | None) -> list[LinkRow]:
    try:
        value = json.loads(text) if text else []
    except ValueError:
        return []
    return [{"label": str(v["label"]), "url": str(v["url"])} for v in value
            if isinstance(v, dict) and isinstance(v.get("label"), str) and isinstance(v.get("url"), str)] \
        if isinstance(value, list) else []


async def observe_alert(db: Database, *, fingerprint: str, firing: bool, severity: str, title: str, evidence: str,
                        service: str | None, detail: str, flap_count: int, flap_window_s: float,
                        source: str = "generic", now: str | None = None) -> Change | None:
    """One alert as its own incident ``alert:<fingerprint>`` (``TIEROPS_ALERT_GROUPING=fingerprint``,
    payloads without a groupKey): a firing delivery opens or updates it, a resolved one resolves it."""
    entry = AlertEntry(fingerprint=fingerprint, firing=firing, severity=severity, title=title)
    return await observe_alerts(db, AlertDelivery(key=f"{ALERT_KEY_PREFIX}{fingerprint}", source=source, name=title,
                                                  title=title, service=service, evidence=evidence, detail=detail,
                                                  alerts=[entry]),
                                flap_count=flap_count, flap_window_s=flap_window_s, now=now)


async def flag_attention(conn: aiosqlite.Connection, pk: int, why: str, now: str) -> None:
    """Inside the caller's write transaction: incident ``pk`` needs a human, because ``why`` (a
    timeline entry says so). A later reason replaces an earlier one."""
    await conn.execute("UPDATE incidents SET attention = ?, attention_at = ? WHERE id = ?",
                       (why[:ATTENTION_MAX], now, pk))
    await _timeline(conn, pk, "attention", now, detail=why[:ATTENTION_MAX])


async def needs_attention(db: Database, pk: int, why: str, now: str | None = None) -> None:
    """:func:`flag_attention` in a transaction of its own."""
    async with db.write() as conn:
        await flag_attention(conn, pk, db.redact(why), now or utcnow())


# -- reading ---------------------------------------------------------------------------------

async def incident_alerts(db: Database, pk: int, *, limit: int = ALERTS_READ_MAX,
                          fresh: bool = False) -> list[IncidentAlertRow]:
    """The alerts incident ``pk`` lists: firing first, the worst first, then as first seen."""
    rows = await db.fetchall(f"SELECT * FROM incident_alerts WHERE incident_id = ?"  # noqa: S608 (a constant)
                             f" ORDER BY status = 'firing' DESC, {_SEVERITY_ORDER}, id LIMIT ?", (pk, limit),
                             fresh=fresh)
    return decode_all(rows, IncidentAlertRow)


async def alert_counts(db: Database, pk: int, *, fresh: bool = False) -> AlertCounts:
    """How many of the alerts incident ``pk`` lists fire and how many resolved."""
    row = await db.fetchone("SELECT COALESCE(SUM(status = 'firing'), 0), COALESCE(SUM(status = 'resolved'), 0)"
                            " FROM incident_alerts WHERE incident_id = ?", (pk,), fresh=fresh)
    return {"firing": int(row[0]), "resolved": int(row[1])} if row else {"firing": 0, "resolved": 0}
