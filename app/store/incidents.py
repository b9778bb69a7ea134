"""Incidents: findings with a life — opened, counted, escalated, resolved.

Why a module of its own: an ``events`` row per finding and cycle cannot say "failing since 09:12,
14 cycles" or "recovered". An incident is one *episode* of a problem, identified by a key
(``check:NAME`` for a probe check; the ``key`` a model gave its event, else service + normalised
message: ``app/engine/incidents.py``). At most one unresolved incident exists per key (a partial
unique index), so a failure seen every cycle updates one row.

What this module does differently from the rest of the store: :func:`observe` applies a whole
session's observation — probe results, failing findings, passing checks and healthy services —
in one write transaction and returns what changed (:class:`Change`), so the engine can decide on
escalation from exactly the state it wrote. The decision itself is not storage and lives in
``app/engine/incidents.py``; what it decided is written back with :func:`mark_escalated`.
Operator actions (acknowledge, resolve, silence) are recorded with who and when, on the row and in
the timeline. Occurrences count cycles, not sessions: a tier-1 session reporting on the incident
its tier-0 session opened (same chain) updates the evidence but is the same occurrence.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import aiosqlite

from app.clock import seconds_between, shift, utcnow
from app.store.db import Database
from app.store.rows import IncidentCount, IncidentRow, ProbeResultRow, TimelineRow, decode, decode_all, where
from app.vocab import IncidentStatus

log = logging.getLogger(__name__)

SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}
EVIDENCE_MAX = 4000  # characters of evidence kept on the incident (the full text is in the session)


class IncidentStateError(ValueError):
    """An operator action that does not apply to the incident's state (e.g. acknowledging a resolved one)."""


@dataclass(frozen=True)
class Finding:
    """One failing observation of a session."""

    key: str
    severity: str
    message: str
    service: str | None = None
    check_name: str | None = None  # set for probe checks (key ``check:NAME``)
    origin: str = "agent"  # probe | agent


@dataclass(frozen=True)
class ProbeResult:
    check_name: str
    status: str
    service: str | None = None
    latency_ms: float | None = None
    detail: str | None = None


@dataclass
class Observation:
    """What one session saw. ``passing_checks``: check names seen healthy (resolve ``check:NAME``);
    ``healthy_services``: services a language-model session saw healthy (resolve its incidents on
    that service that it did not report again)."""

    findings: list[Finding] = field(default_factory=list)
    probe_results: list[ProbeResult] = field(default_factory=list)
    passing_checks: list[str] = field(default_factory=list)
    healthy_services: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Change:
    """What :func:`observe` did to one incident, with the state the escalation decision needs."""

    incident: IncidentRow
    kind: str  # opened | seen | worsened | resolved
    counted: bool  # a new occurrence (another cycle), not a second session of the same cycle
    flap_escalated: bool = False  # flapping, and an incident of this key was already escalated for it


async def observe(db: Database, session_pk: int, chain_id: int | None, obs: Observation, *,
                  flap_count: int, flap_window_s: float, now: str | None = None) -> list[Change]:
    """Apply one session's observation; return every incident it opened, updated or resolved."""
    now = now or utcnow()
    changes: list[Change] = []
    async with db.write() as conn:
        result_ids = await _insert_probe_results(conn, session_pk, obs.probe_results, now)
        failing: set[str] = set()
        for f in obs.findings:
            if f.key in failing:  # the same problem twice in one report: once is enough
                continue
            failing.add(f.key)
            result_id = result_ids.get(f.check_name) if f.check_name else None
            changes.append(await _fail(conn, session_pk, chain_id, f, result_id, now, flap_count, flap_window_s))
        for name in obs.passing_checks:
            key = f"check:{name}"
            if key not in failing:
                change = await _resolve_auto(conn, key, session_pk, result_ids.get(name), now,
                                             f"check {name} passed again")
                if change:
                    changes.append(change)
        if obs.healthy_services:
            for row in await _open_agent_incidents(conn, obs.healthy_services):
                if row["key"] not in failing:
                    change = await _resolve_auto(conn, row["key"], session_pk, None, now,
                                                 f"service {row['service']} reported healthy")
                    if change:
                        changes.append(change)
    return changes


async def _insert_probe_results(conn: aiosqlite.Connection, session_pk: int, results: Sequence[ProbeResult],
                                now: str) -> dict[str, int]:
    ids: dict[str, int] = {}
    for r in results:
        cur = await conn.execute(
            "INSERT INTO probe_results (session_pk, check_name, service, status, latency_ms, detail, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (session_pk, r.check_name, r.service, r.status, r.latency_ms, r.detail, now))
        if cur.lastrowid is not None:
            ids[r.check_name] = cur.lastrowid
    return ids


async def _unresolved(conn: aiosqlite.Connection, key: str) -> IncidentRow | None:
    async with conn.execute("SELECT * FROM incidents WHERE key = ? AND status != 'resolved'", (key,)) as cur:
        row = await cur.fetchone()
    return decode(row) if row else None  # type: ignore[return-value]


async def _get(conn: aiosqlite.Connection, pk: int) -> IncidentRow:
    async with conn.execute("SELECT * FROM incidents WHERE id = ?", (pk,)) as cur:
        row = await cur.fetchone()
    if row is None:  # pragma: no cover - read back inside the transaction that wrote it
        raise LookupError(f"incident {pk} vanished")
    return decode(row)  # type: ignore[return-value]


async def _timeline(conn: aiosqlite.Connection, incident_id: int, kind: str, now: str, *, session_pk: int | None = None,
                    probe_result_id: int | None = None, actor: str | None = None, detail: str | None = None) -> None:
    await conn.execute(
        "INSERT INTO incident_timeline (incident_id, at, kind, session_pk, probe_result_id, actor, detail)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)", (incident_id, now, kind, session_pk, probe_result_id, actor, detail))


async def _fail(conn: aiosqlite.Connection, session_pk: int, chain_id: int | None, f: Finding, result_id: int | None,
                now: str, flap_count: int, flap_window_s: float) -> Change:
    evidence = f.message[:EVIDENCE_MAX]
    row = await _unresolved(conn, f.key)
    if row is None:
        return await _open(conn, session_pk, chain_id, f, result_id, now, flap_count, flap_window_s)
    counted = chain_id is None or row["last_chain_id"] != chain_id
    worse = SEVERITY_RANK.get(f.severity, 1) > SEVERITY_RANK.get(row["severity"], 1)
    await conn.execute(
        "UPDATE incidents SET occurrences = occurrences + ?, last_seen_at = ?, evidence = ?, last_session_pk = ?,"
        " last_chain_id = COALESCE(?, last_chain_id), severity = CASE WHEN ? THEN ? ELSE severity END,"
        " service = COALESCE(service, ?) WHERE id = ?",
        (int(counted), now, evidence, session_pk, chain_id, int(worse), f.severity, f.service, row["id"]))
    kind = "worsened" if worse else "seen"
    detail = f"severity {row['severity']} → {f.severity}: {evidence}" if worse else evidence
    await _timeline(conn, row["id"], kind, now, session_pk=session_pk, probe_result_id=result_id, detail=detail)
    return Change(await _get(conn, row["id"]), kind, counted)


async def _open(conn: aiosqlite.Connection, session_pk: int | None, chain_id: int | None, f: Finding, result_id: int | None,
                now: str, flap_count: int, flap_window_s: float) -> Change:
    since = shift(now, -flap_window_s)
    async with conn.execute(
            "SELECT COUNT(*), COALESCE(MAX(flapping <> 0 AND escalations > 0), 0)"
            " FROM incidents WHERE key = ? AND opened_at >= ?", (f.key, since)) as cur:
        recent, flap_escalated = await cur.fetchone()  # type: ignore[misc]
    async with conn.execute(
            "SELECT silenced_until, silenced_by FROM incidents WHERE key = ? AND silenced_until > ?"
            " ORDER BY silenced_until DESC LIMIT 1", (f.key, now)) as cur:
        silence = await cur.fetchone()
    flapping = recent >= flap_count  # opened (and so resolved) flap_count times already in the window
    async with conn.execute(
            "SELECT id FROM incidents WHERE key = ? AND status = 'resolved' AND resolved_at >= ?"
            " ORDER BY resolved_at DESC, id DESC LIMIT 1", (f.key, since)) as cur:
        before = await cur.fetchone()  # resolved within the flapping window: this one reopens it
    cur = await conn.execute(
        "INSERT INTO incidents (key, service, check_name, origin, status, severity, title, evidence, opened_at,"
        " last_seen_at, occurrences, last_chain_id, first_session_pk, last_session_pk, flapping, silenced_until,"
        " silenced_by, name) VALUES (?, ?, ?, ?, 'open', ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?)",
        (f.key, f.service, f.check_name, f.origin, f.severity, f.message[:500], f.message[:EVIDENCE_MAX], now, now,
         chain_id, session_pk, session_pk, int(flapping), silence[0] if silence else None,
         silence[1] if silence else None, f.check_name))
    pk = cur.lastrowid
    if pk is None:  # pragma: no cover - an INSERT always sets it
        raise RuntimeError("incident insert returned no id")
    if before is not None:
        await conn.execute("UPDATE incidents SET reopened_from = ? WHERE id = ?", (before[0], pk))
    await _timeline(conn, pk, "opened", now, session_pk=session_pk, probe_result_id=result_id, detail=f.message[:EVIDENCE_MAX])
    if flapping:
        await _timeline(conn, pk, "flapping", now, session_pk=session_pk,
                        detail=f"opened {recent + 1} times within {flap_window_s:g} s")
    if silence:
        await _timeline(conn, pk, "silenced", now, actor=silence[1],
                        detail=f"still silenced until {silence[0]} (set on an earlier incident of this key)")
    return Change(await _get(conn, pk), "opened", True, flap_escalated=bool(flap_escalated))


async def _resolve_auto(conn: aiosqlite.Connection, key: str, session_pk: int, result_id: int | None, now: str,
                        why: str) -> Change | None:
    row = await _unresolved(conn, key)
    if row is None:
        return None
    await conn.execute(
        "UPDATE incidents SET status = 'resolved', resolved_at = ?, resolved_by = 'auto', last_session_pk = ?,"
        " duration_s = ? WHERE id = ?", (now, session_pk, seconds_between(row["opened_at"], now), row["id"]))
    await _timeline(conn, row["id"], "resolved", now, session_pk=session_pk, probe_result_id=result_id, detail=why)
    await settle_attention(conn, [row["id"]], f"incident #{row['id']} resolved ({why})", now)
    return Change(await _get(conn, row["id"]), "resolved", False)


async def settle_attention(conn: aiosqlite.Connection, incident_ids: Sequence[int], why: str, now: str) -> int:
    """A needs-attention flag raised because of incidents follows them: once none of a session's
    incidents is still ``open`` (each resolved or acknowledged), its flag is acknowledged with why.
    Runs inside the caller's write transaction; returns how many flags it acknowledged."""
    if not incident_ids:
        return 0
    marks = ",".join("?" * len(incident_ids))
    cur = await conn.execute(
        "UPDATE sessions SET attention_acked_at = ?, attention_acked_by = ? WHERE attention IS NOT NULL"  # noqa: S608 (placeholders only)
        " AND attention_acked_at IS NULL"
        f" AND id IN (SELECT session_pk FROM attention_incidents WHERE incident_id IN ({marks}))"
        " AND NOT EXISTS (SELECT 1 FROM attention_incidents a JOIN incidents i ON i.id = a.incident_id"
        " WHERE a.session_pk = sessions.id AND i.status = 'open')", (now, why[:300], *incident_ids))
    return cur.rowcount or 0


async def _open_agent_incidents(conn: aiosqlite.Connection, services: Sequence[str]) -> list[IncidentRow]:
    marks = ",".join("?" * len(services))
    async with conn.execute(
            f"SELECT * FROM incidents WHERE status != 'resolved' AND origin = 'agent' AND service IN ({marks})",  # noqa: S608 (placeholders only)
            tuple(services)) as cur:
        return [decode(r) for r in await cur.fetchall()]  # type: ignore[misc]


async def mark_escalated(db: Database, incident_ids: Sequence[int], session_pk: int | None, reason: str,
                         now: str | None = None) -> None:
    """Record that these incidents escalated to the next tier from ``session_pk``."""
    now = now or utcnow()
    async with db.write() as conn:
        for pk in incident_ids:
            await conn.execute(
                "UPDATE incidents SET escalations = escalations + 1, escalated_at = ?,"
                " escalated_occurrences = occurrences WHERE id = ?", (now, pk))
            await _timeline(conn, pk, "escalated", now, session_pk=session_pk, detail=reason)


# -- maintenance windows ---------------------------------------------------------------------
# Inside a window an incident is still recorded, marked with the window that holds it; nothing
# escalates and nothing is sent. Which window covers what is decided in app/engine/maintenance.py.

async def hold_in_maintenance(db: Database, holds: Sequence[tuple[int, str, str]], now: str | None = None) -> None:
    """Mark each ``(incident id, window, until)`` as held by that window; a timeline entry when
    the mark is new or names another window."""
    now = now or utcnow()
    async with db.write() as conn:
        for pk, window, until in holds:
            async with conn.execute("SELECT maintenance FROM incidents WHERE id = ?", (pk,)) as cur:
                row = await cur.fetchone()
            if row is None:
                continue
            await conn.execute("UPDATE incidents SET maintenance = ?, maintenance_until = ? WHERE id = ?",
                               (window[:200], until, pk))
            if row[0] != window[:200]:
                await _timeline(conn, pk, "maintenance", now,
                                detail=f"in maintenance window {window[:200]} until {until}: recorded, not escalated, "
                                       "no message")


async def end_maintenance(db: Database, incident_ids: Sequence[int], now: str | None = None) -> list[IncidentRow]:
    """Clear the maintenance mark of these incidents (their window ended); returns them as they
    are now (the unresolved ones escalate and notify as if they had just opened)."""
    now = now or utcnow()
    out: list[IncidentRow] = []
    async with db.write() as conn:
        for pk in incident_ids:
            async with conn.execute("SELECT maintenance FROM incidents WHERE id = ? AND maintenance IS NOT NULL",
                                    (pk,)) as cur:
                row = await cur.fetchone()
            if row is None:
                continue
            await conn.execute("UPDATE incidents SET maintenance = NULL WHERE id = ?", (pk,))
            await _timeline(conn, pk, "maintenance", now, detail=f"maintenance window {row[0]} ended")
            out.append(await _get(conn, pk))
    return out


async def held_in_maintenance(db: Database, limit: int = 1000) -> list[IncidentRow]:
    """Unresolved incidents a maintenance window holds (or held: its end not acted on yet)."""
    rows = await db.fetchall("SELECT * FROM incidents WHERE maintenance IS NOT NULL AND status != 'resolved'"
                             " ORDER BY id LIMIT ?", (limit,), fresh=True)
    return decode_all(rows, IncidentRow)


async def get_incidents(db: Database, ids: Sequence[int], *, fresh: bool = False) -> list[IncidentRow]:
    """These incidents as they are now, by id (unknown ids left out)."""
    unique = sorted({int(i) for i in ids})[:500]
    if not unique:
        return []
    marks = ",".join("?" * len(unique))
    rows = await db.fetchall(f"SELECT * FROM incidents WHERE id IN ({marks}) ORDER BY id",  # noqa: S608 (placeholders only)
                             unique, fresh=fresh)
    return decode_all(rows, IncidentRow)


# -- operator actions ------------------------------------------------------------------------

async def acknowledge(db: Database, pk: int, actor: str, note: str | None = None, now: str | None = None) -> IncidentRow:
    """Stop re-escalation; the incident stays open until it resolves. Raises LookupError or
    :class:`IncidentStateError`."""
    now = now or utcnow()
    async with db.write() as conn:
        row = await _require(conn, pk)
        if row["status"] != IncidentStatus.OPEN:
            raise IncidentStateError(f"incident {pk} is {row['status']}; only an open incident can be acknowledged")
        await conn.execute("UPDATE incidents SET status = 'acknowledged', acknowledged_at = ?, acknowledged_by = ?,"
                           " note = COALESCE(?, note) WHERE id = ?", (now, actor, note, pk))
        await _timeline(conn, pk, "acknowledged", now, actor=actor, detail=note)
        await settle_attention(conn, [pk], f"incident #{pk} acknowledged by {actor}", now)
        return await _get(conn, pk)


async def resolve(db: Database, pk: int, actor: str, note: str | None = None, now: str | None = None) -> IncidentRow:
    """Resolve by hand. A check still failing opens a new incident at its next failure."""
    now = now or utcnow()
    async with db.write() as conn:
        row = await _require(conn, pk)
        if row["status"] == IncidentStatus.RESOLVED:
            raise IncidentStateError(f"incident {pk} is already resolved (at {row['resolved_at']})")
        await conn.execute("UPDATE incidents SET status = 'resolved', resolved_at = ?, resolved_by = ?, duration_s = ?,"
                           " note = COALESCE(?, note) WHERE id = ?",
                           (now, actor, seconds_between(row["opened_at"], now), note, pk))
        await _timeline(conn, pk, "resolved", now, actor=actor, detail=note or "resolved by hand")
        await settle_attention(conn, [pk], f"incident #{pk} resolved by {actor}", now)
        return await _get(conn, pk)


async def silence(db: Database, pk: int, until: str, actor: str, note: str | None = None,
                  now: str | None = None) -> IncidentRow:
    """No escalation for this incident's key until ``until`` (an ISO time), across reopenings."""
    now = now or utcnow()
    if until <= now:
        raise IncidentStateError(f"silence until {until} is not in the future (now {now})")
    async with db.write() as conn:
        await _require(conn, pk)
        await conn.execute("UPDATE incidents SET silenced_until = ?, silenced_by = ?, note = COALESCE(?, note)"
                           " WHERE id = ?", (until, actor, note, pk))
        await _timeline(conn, pk, "silenced", now, actor=actor,
                        detail=f"until {until}" + (f": {note}" if note else ""))
        return await _get(conn, pk)


async def _require(conn: aiosqlite.Connection, pk: int) -> IncidentRow:
    async with conn.execute("SELECT * FROM incidents WHERE id = ?", (pk,)) as cur:
        row = await cur.fetchone()
    if row is None:
        raise LookupError(f"no incident {pk}")
    return decode(row)  # type: ignore[return-value]


# -- reading ---------------------------------------------------------------------------------

async def list_incidents(db: Database, *, status: str | None = None, service: str | None = None,
                         limit: int = 100, offset: int = 0, fresh: bool = False) -> list[IncidentRow]:
    """Newest activity first. ``status``: open, acknowledged, resolved, or ``unresolved`` (open
    and acknowledged)."""
    if status == "unresolved":
        clause, params = where(service=service)
        clause = (clause + " AND" if clause else " WHERE") + " status != 'resolved'"
    else:
        clause, params = where(status=status, service=service)
    sql = f"SELECT * FROM incidents{clause} ORDER BY last_seen_at DESC, id DESC LIMIT ? OFFSET ?"  # noqa: S608 (where() columns)
    rows = await db.fetchall(sql,
                             [*params, limit, offset], fresh=fresh)
    return decode_all(rows, IncidentRow)


async def get_incident(db: Database, pk: int, *, fresh: bool = False) -> IncidentRow | None:
    row = await db.fetchone("SELECT * FROM incidents WHERE id = ?", (pk,), fresh=fresh)
    return decode(row) if row else None  # type: ignore[return-value]


async def timeline(db: Database, pk: int, *, limit: int = 500, fresh: bool = False) -> list[TimelineRow]:
    """The latest ``limit`` entries, oldest first."""
    rows = await db.fetchall(
        "SELECT * FROM (SELECT t.id, t.at, t.kind, t.session_pk, s.tier, t.actor, t.detail, p.check_name,"
        " p.status AS check_status, p.latency_ms FROM incident_timeline t"
        " LEFT JOIN sessions s ON s.id = t.session_pk LEFT JOIN probe_results p ON p.id = t.probe_result_id"
        " WHERE t.incident_id = ? ORDER BY t.id DESC LIMIT ?) latest ORDER BY id", (pk, limit), fresh=fresh)
    return decode_all(rows, TimelineRow)


async def counts(db: Database) -> list[IncidentCount]:
    """Unresolved incidents by service, severity and status (``/metrics``, the overview)."""
    rows = await db.fetchall("SELECT service, severity, status, COUNT(*) AS count FROM incidents"
                             " WHERE status != 'resolved' GROUP BY service, severity, status")
    return decode_all(rows, IncidentCount)


async def latest_probe_results(db: Database) -> list[ProbeResultRow]:
    """The last result of every check the probe has run (``/metrics``)."""
    rows = await db.fetchall(
        "SELECT p.* FROM probe_results p JOIN (SELECT check_name, MAX(id) AS id FROM probe_results"
        " GROUP BY check_name) last ON last.id = p.id ORDER BY p.check_name")
    return decode_all(rows, ProbeResultRow)


async def session_incidents(db: Database, session_pk: int, *, fresh: bool = False) -> list[IncidentRow]:
    """Incidents a session touched (its page links them)."""
    rows = await db.fetchall(
        "SELECT * FROM incidents WHERE id IN (SELECT incident_id FROM incident_timeline WHERE session_pk = ?)"
        " ORDER BY id", (session_pk,), fresh=fresh)
    return decode_all(rows, IncidentRow)




async def incident_services(db: Database, limit: int = 500) -> list[str]:
    """Distinct services incidents name (the incidents page's filter choices)."""
    rows = await db.fetchall("SELECT DISTINCT service FROM incidents WHERE service IS NOT NULL ORDER BY service"
                             " LIMIT ?", (limit,))
    return [r[0] for r in rows]


# -- what an operator sends -------------------------------------------------------------------
# One set of rules for every way an operator acts (the API, the dashboard's forms, the CLI).

NOTE_MAX = 2000  # characters of an operator's note
OPERATOR_MAX = 100  # characters of the name an operator gives (the API's "by")
SILENCE_MAX_DAYS = 90
_DURATION = re.compile(r"([0-9]{1,9})([mhd])")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400}
UNTIL_HELP = "a duration such as 30m, 2h or 1d, or an ISO-8601 time with a zone such as 2026-11-23T18:00:00Z"


def parse_until(text: str, now: str | None = None) -> str:
    """``text`` as a stored timestamp (``2026-11-23T18:00:00.000Z``): a duration from ``now``
    (``30m``, ``2h``, ``1d``) or an ISO-8601 time with its zone, at most :data:`SILENCE_MAX_DAYS`
    ahead. A time in the past is returned as such (:func:`silence` refuses it as a state error).
    Raises ValueError saying what was wrong."""
    start = datetime.fromisoformat((now or utcnow()).replace("Z", "+00:00"))
    raw = text.strip()
    limit = timedelta(days=SILENCE_MAX_DAYS)
    if m := _DURATION.fullmatch(raw):
        amount = int(m[1]) * _UNIT_S[m[2]]
        if amount <= 0:
            raise ValueError(f"until {raw!r} is not a duration of more than zero")
        if amount > limit.total_seconds():
            raise ValueError(f"until {raw!r} is longer than a silence may last ({SILENCE_MAX_DAYS} days)")
        until = start + timedelta(seconds=amount)
    else:
        try:
            until = datetime.fromisoformat(raw)
        except ValueError:
            raise ValueError(f"until must be {UNTIL_HELP}; got {raw[:60]!r}") from None
        if until.tzinfo is None:
            raise ValueError(f"until {raw[:60]!r} has no time zone: add Z (UTC) or an offset such as +01:00")
        if until - start > limit:
            raise ValueError(f"until {raw[:60]!r} is more than {SILENCE_MAX_DAYS} days ahead")
    try:
        return until.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except OverflowError:  # e.g. 0001-01-01T00:00+01:00: before the first representable UTC time
        raise ValueError(f"until {raw[:60]!r} is not a time that can be stored") from None


# -- alerts in ------------------------------------------------------------------------------
# What an alert sender's delivery does to the incidents (one per alert group, or per alert, with
# the alerts each lists) is app/store/alert_incidents.py; it opens them with _open, origin "alert".

ALERT_KEY_PREFIX = "alert:"


async def unresolved_keys(db: Database, keys: Sequence[str]) -> set[str]:
    """Which of ``keys`` have an unresolved incident (an alert for one of them would not open one)."""
    found: set[str] = set()
    unique = sorted(set(keys))
    for start in range(0, len(unique), 500):
        chunk = unique[start:start + 500]
        marks = ",".join("?" * len(chunk))
        rows = await db.fetchall(
            f"SELECT key FROM incidents WHERE status != 'resolved' AND key IN ({marks})",  # noqa: S608 (placeholders only)
            chunk)
        found.update(r[0] for r in rows)
    return found
