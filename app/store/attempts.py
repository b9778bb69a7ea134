"""The ``output_attempts`` table: each CLI run of a session (the first, then output-recovery
resumes) with its result subtype and the structured output it produced, valid or not.

Invalid output is kept verbatim: operators must see what the model sent and why it was refused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from app.clock import utcnow
from app.store.db import Database
from app.store.rows import AttemptRow, decode_all, dumps

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttemptRecord:
    attempt: int
    kind: str
    result_subtype: str | None
    is_error: bool | None
    has_output: bool
    output: Any  # None: no output at all
    valid: bool | None
    errors: list[dict[str, str]] | None
    origin: str | None = None  # tool | cli_rejected | extracted | prompted
    run: int | None = None  # the CLI run it belongs to (None: the attempt number, one attempt per run)


async def save_attempt(db: Database, session_pk: int, rec: AttemptRecord) -> None:
    async with db.write() as conn:
        await conn.execute(
            """INSERT INTO output_attempts
                   (session_pk, attempt, kind, result_subtype, is_error, has_output, output, valid, errors,
                    created_at, origin, run)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (session_pk, attempt) DO UPDATE SET kind = excluded.kind,
                   result_subtype = excluded.result_subtype, is_error = excluded.is_error,
                   has_output = excluded.has_output, output = excluded.output, valid = excluded.valid,
                   errors = excluded.errors, created_at = excluded.created_at, origin = excluded.origin,
                   run = excluded.run""",
            (session_pk, rec.attempt, rec.kind, rec.result_subtype,
             None if rec.is_error is None else int(rec.is_error), int(rec.has_output),
             dumps(db.redact.deep(rec.output)) if rec.output is not None else None,
             None if rec.valid is None else int(rec.valid),
             None if rec.errors is None else dumps(db.redact.deep(rec.errors)), utcnow(), rec.origin,
             rec.run if rec.run is not None else rec.attempt))


async def list_attempts(db: Database, session_pk: int, *, with_output: bool = False) -> list[AttemptRow]:
    """The session's attempts in order; ``errors`` decoded (``[]`` when none), ``output`` only if asked."""
    cols = "attempt, run, kind, origin, result_subtype, is_error, has_output, valid, errors, created_at"
    if with_output:
        cols += ", output"
    rows: list[AttemptRow] = decode_all(await db.fetchall(
        f"SELECT {cols} FROM output_attempts WHERE session_pk = ? ORDER BY attempt", (session_pk,)),  # noqa: S608
        AttemptRow)
    for row in rows:
        if not isinstance(row["errors"], list):
            row["errors"] = []
    return rows
