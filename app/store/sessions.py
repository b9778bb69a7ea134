"""The ``sessions`` table: one row per CLI session, from ``running`` to its final summary.

Why these functions and not an ORM: the row is written in a few well-defined moments of the run
lifecycle (create → launch details → CLI identity → summary with routed findings) and each is
one function here, one transaction. :class:`SessionSummary` replaces the 34-value ``UPDATE``
the recorder would otherwise build by hand.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypedDict, cast

from app.clock import utcnow
from app.output.route import Routed
from app.redact import Redactor
from app.store.db import Database
from app.store.findings import redact_routed, write_routed
from app.store.rows import SessionListRow, SessionRow, decode, decode_all, dumps, where
from app.vocab import FIRST_MODEL_TIER, SessionStatus, Trigger

if TYPE_CHECKING:  # only annotations: reading sessions does not load the JSON Schema machinery
    from app.output.spec import OutputSpec

log = logging.getLogger(__name__)

LIST_COLUMNS = (
    "id, session_id, tier, model, cli_model, trigger, status, status_reason, degraded, source, attempts,"
    " parent_session_id, escalated_to, chain_id, attention, started_at, ended_at, duration_ms, cost_usd,"
    " input_tokens, output_tokens, num_turns, result_subtype, is_error, api_error_status, exit_code,"
    " validation_valid, escalation_needed, escalation_reason, summary, line_count, dry_run, max_budget_usd"
)


@dataclass(frozen=True)
class SessionIdentity:
    """What the stream tells about the CLI session (its id, model, version, cwd)."""

    session_id: str
    cli_model: str | None
    cli_version: str | None
    cwd: str | None


@dataclass(frozen=True)
class SessionSummary:
    """Everything the end of a session writes to its row. JSON-valued fields are plain values;
    :func:`finish_session` encodes them. ``exit_code``/``stderr_tail``/``cli_model``/``cwd`` keep
    the stored value when None."""

    status: str
    status_reason: str | None
    degraded: bool
    exit_code: int | None
    ended_at: str
    duration_ms: int | float | None
    duration_api_ms: int | float | None
    cost_usd: float | None
    input_tokens: int | None
    output_tokens: int | None
    cache_read_tokens: int | None
    cache_creation_tokens: int | None
    num_turns: int | None
    result_subtype: str | None
    is_error: bool | None
    api_error_status: int | None
    stop_reason: str | None
    terminal_reason: str | None
    result_text: str | None
    result_errors: list[Any] | None
    permission_denials: Any
    model_usage: Any
    validation_valid: bool | None
    validation_errors: list[dict[str, str]] | None
    structured_output: Any
    invalid_output: Any
    attempts: int
    handoff_raw: str | None
    notes: list[str] | None
    stderr_tail: str | None
    line_count: int
    cli_model: str | None
    cwd: str | None
    output_via: str | None = None  # tool | extracted | prompted: how the accepted output came


_JSON_FIELDS = ("result_errors", "permission_denials", "model_usage", "validation_errors", "structured_output",
                "invalid_output", "notes")
_KEEP_IF_NULL = ("exit_code", "stderr_tail")
_FILL_IF_NULL = ("cli_model", "cwd")


def _summary_values(summary: SessionSummary, redact: Redactor) -> dict[str, Any]:
    values = {k: redact.deep(v) for k, v in asdict(summary).items()}
    for name in _JSON_FIELDS:
        if values[name] is not None:
            values[name] = dumps(values[name])
    if summary.notes == []:
        values["notes"] = None
    for name in ("degraded", "is_error", "validation_valid"):
        if values[name] is not None:
            values[name] = int(values[name])
    return values


async def create_session(db: Database, *, tier: int | None = None, model: str | None = None,
                         prompt: str | None = None, cwd: str | None = None, trigger: str = Trigger.INGEST,
                         parent_session_id: int | None = None, stream_sha256: str | None = None,
                         contract: OutputSpec | None = None, dry_run: bool = False,
                         max_budget_usd: float | None = None, node_id: str | None = None) -> int:
    """A new ``running`` session row; returns its id. ``contract``: the output contract it runs
    with: where the schema came from, the canonical schema itself (kept even if its
    registry name is deleted later) and its hash; written in the same INSERT. ``dry_run`` and
    ``max_budget_usd``: how it was guarded."""
    async with db.write() as conn:
        cur = await conn.execute(
            """INSERT INTO sessions (tier, model, prompt, cwd, trigger, status, started_at,
                                     parent_session_id, stream_sha256, schema_source, schema_name, schema_sha256,
                                     output_schema, output_mode, dry_run, max_budget_usd, node_id)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (tier, model, db.redact(prompt) if prompt else prompt, cwd, str(trigger), SessionStatus.RUNNING, utcnow(), parent_session_id,
             stream_sha256, *(_contract_values(contract)), int(dry_run), max_budget_usd, node_id),
        )
        return cast(int, cur.lastrowid)


def _contract_values(spec: OutputSpec | None) -> tuple[str | None, ...]:
    if spec is None:
        return (None, None, None, None, None)
    return (spec.source, spec.name, spec.sha256, spec.canonical, spec.mode)


async def set_launch(db: Database, pk: int, *, cwd: str, chain_id: int, argv: list[str], system_prompt: str) -> None:
    """How the supervisor launched the session: its folder, chain, command line and system prompt."""
    async with db.write() as conn:
        await conn.execute("UPDATE sessions SET cwd = ?, chain_id = ?, argv = ?, system_prompt = ? WHERE id = ?",
                           (cwd, chain_id, dumps(db.redact.deep(argv)), db.redact(system_prompt), pk))


async def set_stream_sha256(db: Database, pk: int, sha256: str) -> None:
    async with db.write() as conn:
        await conn.execute("UPDATE sessions SET stream_sha256 = ? WHERE id = ?", (sha256, pk))


async def finish_session(db: Database, pk: int, summary: SessionSummary, routed: Routed, *,
                         initial_confidence: float, reinforce: float) -> None:
    """Route the findings and write the summary, in one transaction: a session is never half-final."""
    values = _summary_values(summary, db.redact)
    sets = ", ".join(
        f"{k} = coalesce(?, {k})" if k in _KEEP_IF_NULL else f"{k} = coalesce({k}, ?)" if k in _FILL_IF_NULL
        else f"{k} = ?" for k in values)
    async with db.write() as conn:
        await write_routed(conn, pk, redact_routed(routed, db.redact), summary.ended_at, initial_confidence,
                           reinforce)
        await conn.execute(f"UPDATE sessions SET {sets} WHERE id = ?", (*values.values(), pk))  # noqa: S608 (column names are this module's)


async def delete_session(db: Database, pk: int) -> None:
    """Remove a session with its events, and (by cascade) its lines, attempts, check results and
    cooldowns. Used to replace a half-done ingest; retention (``app/store/retention.py``) keeps
    events instead (migration 0004: their session becomes NULL)."""
    async with db.write() as conn:
        await conn.execute("DELETE FROM events WHERE session_pk = ?", (pk,))
        await conn.execute("DELETE FROM sessions WHERE id = ?", (pk,))


async def set_escalated_to(db: Database, parent: int, child: int) -> None:
    async with db.write() as conn:
        await conn.execute("UPDATE sessions SET escalated_to = ? WHERE id = ?", (child, parent))


async def set_attention(db: Database, pk: int, why: str, incident_ids: Sequence[int] = ()) -> None:
    """Flag the session as needing a human, with why. A new reason clears an earlier
    acknowledgement: what was acknowledged is not what needs a human now. ``incident_ids``: the
    incidents it needs a human for; the flag follows them (acknowledged once none is open:
    ``app/store/incidents.settle_attention``)."""
    async with db.write() as conn:
        await conn.execute("UPDATE sessions SET attention = ?, attention_acked_at = NULL, attention_acked_by = NULL"
                           " WHERE id = ? AND attention IS NOT ?", (why, pk, why))
        await conn.executemany(
            "INSERT OR IGNORE INTO attention_incidents (session_pk, incident_id)"
            " SELECT ?, id FROM incidents WHERE id = ?", [(pk, i) for i in sorted(set(incident_ids))])


class AttentionAck(TypedDict):
    """A session's needs-attention flag and its acknowledgement."""

    id: int
    attention: str | None
    attention_acked_at: str | None
    attention_acked_by: str | None


class AttentionStateError(ValueError):
    """The session has nothing to acknowledge (no attention flag)."""


async def acknowledge_attention(db: Database, pk: int, actor: str) -> AttentionAck:
    """Acknowledge session ``pk``'s needs-attention flag as ``actor``: the overview
    stops listing it, the session page shows it acknowledged with who and when. Acknowledging
    again keeps the first acknowledgement. Raises LookupError (no such session) or
    :class:`AttentionStateError` (it does not need attention)."""
    async with db.write() as conn:
        cur = await conn.execute(
            "UPDATE sessions SET attention_acked_at = coalesce(attention_acked_at, ?),"
            " attention_acked_by = CASE WHEN attention_acked_at IS NULL THEN ? ELSE attention_acked_by END"
            " WHERE id = ? AND attention IS NOT NULL"
            " RETURNING id, attention, attention_acked_at, attention_acked_by", (utcnow(), db.redact(actor), pk))
        row = await cur.fetchone()
        if row is None:
            cur = await conn.execute("SELECT 1 FROM sessions WHERE id = ?", (pk,))
            if await cur.fetchone() is None:
                raise LookupError(f"no session {pk}")
            raise AttentionStateError(f"session {pk} does not need attention")
    log.info("session %d: attention acknowledged by %s", pk, actor, extra={"session": pk})
    return cast(AttentionAck, dict(row))


async def set_escalation_gate(db: Database, pk: int, why: str) -> None:
    """Why the session's request to escalate was not acted on (its incidents were
    already escalated, acknowledged or silenced)."""
    async with db.write() as conn:
        await conn.execute("UPDATE sessions SET escalation_gate = ? WHERE id = ?", (why, pk))


async def interrupt_running(db: Database, reason: str) -> int:
    """Mark every supervised session still ``running`` as ``interrupted``; returns how many."""
    async with db.write() as conn:
        cur = await conn.execute(
            "UPDATE sessions SET status = ?, status_reason = ?, ended_at = ? WHERE status = ? AND trigger != ?",
            (SessionStatus.INTERRUPTED, reason, utcnow(), SessionStatus.RUNNING, Trigger.INGEST))
        return cur.rowcount


# -- reads -------------------------------------------------------------------------------------

async def get_session(db: Database, pk: int, *, fresh: bool = False) -> SessionRow | None:
    """Every column of one session, decoded; ``fresh`` reads after this process's last write."""
    row = await db.fetchone("SELECT * FROM sessions WHERE id = ?", (pk,), fresh=fresh)
    return cast(SessionRow, decode(row)) if row else None


async def model_cost_today(db: Database, *, now: datetime | None = None, fresh: bool = False) -> float:
    """Dollars the language-model tiers (tier >= 1) cost in sessions started since 00:00 UTC of
    ``now``'s day: what ``TIEROPS_DAILY_BUDGET_USD`` is checked against. A session
    still running counts once it is finished (its cost is written then)."""
    day = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT00:00:00.000Z")  # utcnow()'s format
    value = await db.fetchval("SELECT coalesce(sum(cost_usd), 0) FROM sessions WHERE tier >= ? AND started_at >= ?",
                              (FIRST_MODEL_TIER, day), fresh=fresh)
    return float(value or 0)


async def last_scheduled_start(db: Database) -> str | None:
    """When the newest scheduled cycle began (its first session's start), whichever node ran it."""
    value = await db.fetchval("SELECT max(started_at) FROM sessions WHERE trigger = 'schedule' AND parent_session_id"
                              " IS NULL", fresh=True)
    return str(value) if value is not None else None


async def session_status(db: Database, pk: int) -> str | None:
    """The session's status, or None when there is no such session."""
    return cast(str | None, await db.fetchval("SELECT status FROM sessions WHERE id = ?", (pk,)))


async def list_sessions(db: Database, *, status: str | None = None, tier: int | None = None,
                        limit: int = 50, offset: int = 0, attention_open: bool = False) -> list[SessionListRow]:
    """Sessions newest first; ``attention_open``: only those needing attention that
    nobody acknowledged yet (the overview's "and N more" link)."""
    cond, params = where(status=status, tier=tier)
    if attention_open:
        cond += (" AND " if cond else " WHERE ") + "attention IS NOT NULL AND attention_acked_at IS NULL"
    sql = f"SELECT {LIST_COLUMNS} FROM sessions{cond} ORDER BY id DESC LIMIT ? OFFSET ?"  # noqa: S608 (constant columns)
    return decode_all(await db.fetchall(sql, [*params, limit, offset]), SessionListRow)


@dataclass(frozen=True)
class StoredStream:
    id: int
    stream_sha256: str | None
    status: str
    trigger: str


async def find_by_cli_session_id(db: Database, session_id: str) -> StoredStream | None:
    """The session stored under this CLI ``session_id``, if any."""
    row = await db.fetchone("SELECT id, stream_sha256, status, trigger FROM sessions WHERE session_id = ?",
                            (session_id,))
    return StoredStream(**dict(row)) if row else None


async def find_anonymous_stream(db: Database, sha256: str) -> StoredStream | None:
    """A session without a CLI session id whose stream had this SHA-256."""
    row = await db.fetchone("SELECT id, stream_sha256, status, trigger FROM sessions"
                            " WHERE stream_sha256 = ? AND session_id IS NULL", (sha256,))
    return StoredStream(**dict(row)) if row else None


class StoredOutput(TypedDict):
    """What a session answered and what it was judged against (``tierops revalidate``)."""

    id: int
    session_id: str | None
    started_at: str
    status: str
    validation_valid: bool | None
    structured_output: Any
    invalid_output: str | None  # JSON text, kept verbatim
    output_schema: Any
    schema_source: str | None
    schema_name: str | None
    schema_sha256: str | None


async def stored_outputs(db: Database, *, since: str | None = None, limit: int = 100_000) -> list[StoredOutput]:
    """Finished sessions that gave an output (valid or not), oldest first, started at or after ``since``."""
    rows = await db.fetchall(
        "SELECT id, session_id, started_at, status, validation_valid, structured_output, invalid_output,"
        " output_schema, schema_source, schema_name, schema_sha256 FROM sessions"
        " WHERE status != 'running' AND (structured_output IS NOT NULL OR invalid_output IS NOT NULL)"
        " AND started_at >= ? ORDER BY id LIMIT ?", (since or "", limit))
    return cast(list[StoredOutput], decode_all(rows, StoredOutput))
