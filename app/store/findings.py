"""What sessions found: ``events``, ``check_results`` and ``cooldowns`` (and, via
:func:`write_routed`, the memories they taught).

``cooldowns`` holds every action a session reported — taken, dry runs and proposals — and
:func:`write_routed` reads the session's ``dry_run`` flag in the same transaction: a dry-run
session's "done"/"failed" (or markers' "success"/"failure") is stored as ``dry-run``, whatever the
model wrote, so a read-only run can never use up a cooldown.

Routing decides *what* to store (``app/output/route.py``: structured output wins, markers and
``handoff.json`` are the fallback); this module writes it, inside the caller's transaction
(:func:`app.store.sessions.finish_session`), so a session's findings appear all at once.
Memory identity and reinforcement are described in ``app/output/route.py``; what a session's
memories do to the stored ones (reinforce, revive, replace) in ``app/store/memories.py``.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import TypeVar, cast

import aiosqlite

from app.clock import utcnow
from app.output.route import Routed, Verdict, Verdicts
from app.redact import Redactor
from app.store import memories
from app.store.cooldowns import KIND_ALIASES, STARTED
from app.store.db import Database
from app.store.rows import CheckRow, CooldownRow, EventRow, ReportEvent, decode_all, dumps, where

log = logging.getLogger(__name__)

# The contract's action results written to ``cooldowns``: taken (done, failed), dry runs and
# proposals (shown, never counted: only ``app/store/cooldowns.TAKEN_OUTCOMES`` count).
RECORDED_RESULTS = ("done", "failed", "dry-run", "proposed")
# What a dry-run session claims as taken (the contract's results, the markers' outcomes) is stored
# as ``dry-run``: its tools were read-only, so nothing it reports can count against a limit.
CLAIMED_TAKEN = ("done", "failed", "success", "failure")
DRY_RUN = "dry-run"

# LEFT JOIN everywhere: an event outlives its session (retention sets session_pk to NULL),
# and then has no CLI session id or tier either.
EVENT_COLUMNS = ("e.id, e.session_pk, s.session_id, s.tier, e.level, e.original_level, e.service, e.message,"
                 " e.source, e.created_at, e.evidence_status, e.evidence")


def redact_routed(routed: Routed, redact: Redactor) -> Routed:
    """A copy of ``routed`` with every text redacted (handoff.json and operator input are not
    stream lines: nothing redacted them before). A learned memory is never a secret to re-inject."""
    deep = redact.deep  # every field may be None (a cooldown without a service, a check without detail)
    return Routed(
        source=routed.source,
        summary=deep(routed.summary),
        events=[(lvl, orig, deep(svc), deep(msg)) for lvl, orig, svc, msg in routed.events],
        memories=[(deep(svc), deep(cat), deep(val)) for svc, cat, val in routed.memories],
        checks=[(deep(n), s, deep(d)) for n, s, d in routed.checks],
        cooldowns=[(a, deep(s), o, deep(n)) for a, s, o, n in routed.cooldowns],
        escalation=deep(routed.escalation),
        actions=[(k, deep(s), r, deep(d)) for k, s, r, d in routed.actions],
        event_cites=deep(routed.event_cites), check_cites=deep(routed.check_cites),
        action_cites=deep(routed.action_cites), escalation_cites=deep(routed.escalation_cites),
        verdicts=None if routed.verdicts is None else Verdicts(
            events=deep(routed.verdicts.events), checks=deep(routed.verdicts.checks),
            cooldowns=deep(routed.verdicts.cooldowns), actions=deep(routed.verdicts.actions),
            escalation=deep(routed.verdicts.escalation)),
    )


def _verdict_at(verdicts: Verdicts | None, kind: str, i: int) -> tuple[str | None, str | None]:
    """``(evidence_status, evidence JSON)`` of the ``i``-th finding of ``kind`` (events, checks …);
    ``(None, None)``: not checked."""
    listed: list[Verdict] = [] if verdicts is None else getattr(verdicts, kind)
    if i >= len(listed):
        return None, None
    status, checked = listed[i]
    return status, dumps(checked)


def _counts(verdicts: Verdicts | None) -> tuple[int | None, int | None, int | None]:
    """(verified, unsupported, uncited) findings: events, service checks and actions."""
    if verdicts is None:
        return None, None, None
    statuses = [v[0] for v in (*verdicts.events, *verdicts.checks, *verdicts.cooldowns, *verdicts.actions)]
    return statuses.count("verified"), statuses.count("unsupported"), statuses.count("uncited")


async def write_routed(conn: aiosqlite.Connection, session_pk: int, routed: Routed, now: str,
                       initial_confidence: float, reinforce: float) -> None:
    """Store routed findings and the escalation decision. Runs inside an open write transaction."""
    verdicts = routed.verdicts
    if routed.events:
        await conn.executemany(
            "INSERT INTO events (session_pk, level, original_level, service, message, source, created_at,"
            " evidence_status, evidence) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(session_pk, lvl, orig, svc, msg, routed.source, now, *_verdict_at(verdicts, "events", i))
             for i, (lvl, orig, svc, msg) in enumerate(routed.events)],
        )
    if routed.memories:  # created, reinforced, revived and contradicted: the memory lifecycle
        await memories.teach(conn, session_pk, routed.memories, now, initial_confidence, reinforce)
    if routed.checks:
        await conn.executemany(
            "INSERT INTO check_results (session_pk, name, status, detail, created_at, evidence_status, evidence)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(session_pk, n, s, d, now, *_verdict_at(verdicts, "checks", i))
             for i, (n, s, d) in enumerate(routed.checks)],
        )
    dry = await _is_dry_run(conn, session_pk) if routed.cooldowns or routed.actions else False
    reported = [(a, s, *_as_recorded(o, n, dry), _verdict_at(verdicts, "cooldowns", i))
                for i, (a, s, o, n) in enumerate(routed.cooldowns)]
    reported += [(k, s or "", *_as_recorded(r, d, dry), _verdict_at(verdicts, "actions", i))
                 for i, (k, s, r, d) in enumerate(routed.actions) if r in RECORDED_RESULTS]  # "" = host-wide
    for action, service, outcome, note, (status, evidence) in reported:
        if outcome in CLAIMED_TAKEN and await _settle_started(conn, session_pk, action, service, outcome, note,
                                                              (status, evidence)):
            continue  # the guard counted it when it let the command run: now its result is known
        await conn.execute(
            "INSERT INTO cooldowns (session_pk, action, service, outcome, note, created_at, evidence_status, evidence)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (session_pk, action, service, outcome, note, now, status, evidence))
    esc = routed.escalation
    esc_verdict = None if verdicts is None or esc is None else verdicts.escalation
    await conn.execute(
        """UPDATE sessions SET source = ?, summary = ?, escalation_needed = ?, escalation_reason = ?,
                  escalation_context = ?, escalation_failed_checks = ?, findings_verified = ?,
                  findings_unsupported = ?, findings_uncited = ?, escalation_evidence_status = ?,
                  escalation_evidence = ? WHERE id = ?""",
        (
            routed.source,
            routed.summary,
            None if esc is None else int(bool(esc["needed"])),
            None if esc is None else esc.get("reason"),
            None if esc is None else esc.get("context"),
            None if esc is None else dumps(esc.get("failed_checks") or []),
            *_counts(verdicts),
            None if esc_verdict is None else esc_verdict[0],
            None if esc_verdict is None else dumps(esc_verdict[1]),
            session_pk,
        ),
    )


async def _settle_started(conn: aiosqlite.Connection, session_pk: int, action: str, service: str, outcome: str,
                          note: str | None, verdict: tuple[str | None, str | None]) -> bool:
    """The oldest ``started`` row of this session for the same kind and service takes the reported
    result (keeping the time the guard let it start); False when there is none."""
    word = " ".join(action.split()).lower()
    words = {word, KIND_ALIASES.get(word, word), *(k for k, v in KIND_ALIASES.items() if v == word)}
    marks = ",".join("?" * len(words))
    cur = await conn.execute(
        "UPDATE cooldowns SET outcome = ?, note = COALESCE(?, note), evidence_status = ?, evidence = ?"  # noqa: S608 (placeholders only)
        " WHERE id = (SELECT id FROM cooldowns"
        f" WHERE session_pk = ? AND service = ? AND outcome = ? AND lower(action) IN ({marks}) ORDER BY id LIMIT 1)",
        (outcome, note, *verdict, session_pk, service, STARTED, *sorted(words)))
    return bool(cur.rowcount)


async def _is_dry_run(conn: aiosqlite.Connection, session_pk: int) -> bool:
    async with conn.execute("SELECT dry_run FROM sessions WHERE id = ?", (session_pk,)) as cur:
        row = await cur.fetchone()
    return bool(row and row[0])


def _as_recorded(outcome: str, note: str | None, dry: bool) -> tuple[str, str | None]:
    """``(outcome, note)`` as stored: in a dry-run session an action claimed as taken becomes
    ``dry-run``, its note keeping the claim ("reported done in a dry run: …")."""
    if not dry or outcome not in CLAIMED_TAKEN:
        return outcome, note
    claim = f"reported {outcome} in a dry run"
    return DRY_RUN, f"{claim}: {note}" if note else claim


# -- events ------------------------------------------------------------------------------------

async def list_events(db: Database, *, level: str | None = None, service: str | None = None,
                      session: int | None = None, limit: int = 100, offset: int = 0) -> list[EventRow]:
    """Events newest first, with their session's CLI id and tier."""
    cond, params = where(e__level=level, e__service=service, e__session_pk=session)
    sql = (f"SELECT {EVENT_COLUMNS} FROM events e LEFT JOIN sessions s ON s.id = e.session_pk{cond}"  # noqa: S608
           " ORDER BY e.id DESC LIMIT ? OFFSET ?")
    return _evidence_decoded(decode_all(await db.fetchall(sql, [*params, limit, offset]), EventRow))


async def events_after(db: Database, after: int, limit: int) -> list[EventRow]:
    """Events with ``id > after``, oldest first (the live events stream)."""
    return _evidence_decoded(decode_all(await db.fetchall(
        f"SELECT {EVENT_COLUMNS} FROM events e LEFT JOIN sessions s ON s.id = e.session_pk"  # noqa: S608
        " WHERE e.id > ? ORDER BY e.id LIMIT ?", (after, limit)), EventRow))


async def last_event_id(db: Database) -> int:
    return int(await db.fetchval("SELECT coalesce(max(id), 0) FROM events"))


async def recent_alerts(db: Database, limit: int = 20) -> list[EventRow]:
    """The newest critical and warning events (the overview's alert list)."""
    # Newest N of each level first, via the (level, id) index: sorting every warning took 19 ms
    # at 20k events (bench/pages.py), this takes under 1 ms.
    return _evidence_decoded(decode_all(await db.fetchall(
        f"SELECT {EVENT_COLUMNS} FROM ("  # noqa: S608
        " SELECT * FROM (SELECT * FROM events WHERE level = 'critical' ORDER BY id DESC LIMIT ?) c"
        " UNION ALL SELECT * FROM (SELECT * FROM events WHERE level = 'warning' ORDER BY id DESC LIMIT ?) w) e"
        " LEFT JOIN sessions s ON s.id = e.session_pk ORDER BY e.id DESC LIMIT ?", (limit, limit, limit)), EventRow))


async def event_services(db: Database, limit: int = 500) -> list[str]:
    """Distinct service names that events mention (a filter's choices)."""
    rows = await db.fetchall("SELECT DISTINCT service FROM events WHERE service IS NOT NULL ORDER BY service LIMIT ?",
                             (limit,))
    return [r[0] for r in rows]


async def add_event(db: Database, session_pk: int | None, level: str, service: str | None, message: str, *,
                    source: str = "tierops") -> int:
    """An event TierOps itself raises about a session, outside its routed findings (e.g. an
    action reported over its cooldown limit); returns its id."""
    async with db.write() as conn:
        cur = await conn.execute(
            "INSERT INTO events (session_pk, level, original_level, service, message, source, created_at)"
            " VALUES (?, ?, NULL, ?, ?, ?, ?)",
            (session_pk, level, db.redact(service) if service else service, db.redact(message), source, utcnow()))
        return cast(int, cur.lastrowid)


async def session_events(db: Database, session_pk: int) -> list[ReportEvent]:
    """One session's events in routing order (the ingest report)."""
    rows = await db.fetchall(
        "SELECT level, original_level, service, message FROM events WHERE session_pk = ? ORDER BY id", (session_pk,))
    return cast(list[ReportEvent], [dict(r) for r in rows])


async def problem_evidence(db: Database, session_pk: int) -> dict[str, int]:
    """How many of the session's problem findings — warning and critical events, services not
    healthy — have each evidence status (verified, unsupported, uncited; unchecked ones left out)."""
    rows = await db.fetchall(
        "SELECT evidence_status, count(*) FROM (SELECT evidence_status FROM events WHERE session_pk = ?"
        " AND level IN ('warning', 'critical') UNION ALL SELECT evidence_status FROM check_results"
        " WHERE session_pk = ? AND status != 'healthy') f WHERE evidence_status IS NOT NULL GROUP BY evidence_status",
        (session_pk, session_pk), fresh=True)
    return {str(r[0]): int(r[1]) for r in rows}


async def problem_events(db: Database, session_pk: int) -> list[tuple[str, str | None, str, str | None]]:
    """The session's warning and critical events in routing order: (level, service, message,
    evidence status; None when not checked), what a message about its outcome lists."""
    rows = await db.fetchall(
        "SELECT level, service, message, evidence_status FROM events WHERE session_pk = ?"
        " AND level IN ('warning', 'critical') ORDER BY id", (session_pk,), fresh=True)
    return [(str(r[0]), r[1], str(r[2]), r[3]) for r in rows]


# -- service checks and cooldowns --------------------------------------------------------------

async def session_checks(db: Database, session_pk: int, *, fresh: bool = False) -> list[CheckRow]:
    """The services one session checked, in its order."""
    rows = await db.fetchall(
        "SELECT name, status, detail, created_at, session_pk, evidence_status, evidence FROM check_results"
        " WHERE session_pk = ? ORDER BY id", (session_pk,), fresh=fresh)
    return _evidence_decoded(cast(list[CheckRow], [dict(r) for r in rows]))


async def latest_checks(db: Database) -> list[CheckRow]:
    """The newest result of every check name (the overview's service health)."""
    rows = await db.fetchall(
        "SELECT c.name, c.status, c.detail, c.created_at, c.session_pk, c.evidence_status, c.evidence"
        " FROM check_results c WHERE c.id IN (SELECT max(id) FROM check_results GROUP BY name) ORDER BY c.name")
    return _evidence_decoded(cast(list[CheckRow], [dict(r) for r in rows]))


async def session_cooldowns(db: Database, session_pk: int) -> list[CooldownRow]:
    rows = await db.fetchall(
        "SELECT action, service, outcome, note, evidence_status, evidence FROM cooldowns WHERE session_pk = ?"
        " ORDER BY id", (session_pk,))
    return _evidence_decoded(cast(list[CooldownRow], [dict(r) for r in rows]))


_R = TypeVar("_R", EventRow, CheckRow, CooldownRow)


def _evidence_decoded(rows: list[_R]) -> list[_R]:
    """``rows`` with their ``evidence`` JSON decoded (a list of checked citations; None: not checked).
    Not a JSON column by name: an incident's ``evidence`` is plain text."""
    for row in rows:
        raw = row.get("evidence")
        if isinstance(raw, str):
            with contextlib.suppress(ValueError):
                row["evidence"] = json.loads(raw)
    return rows
