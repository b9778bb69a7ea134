"""The result of a session as the API gives it (``GET /api/v1/sessions/{id}/result``, issue #11).

Why a module: the session page shows the same verdict, and the shape has rules worth keeping in
one place — ``result_data`` (the accepted output, whatever the schema) or ``result_text`` (free
text, only for a session that ran without a schema), never both; the contract it ran under
(source, name, SHA-256); every attempt; and, when the last attempt still failed validation, a
``failure`` object ``{type: output_schema_validation_failed, validation_errors, last_output,
attempts}``.
"""

from __future__ import annotations

import json
from typing import Any, cast

from app.output.failure import validation_failure
from app.store.rows import AttemptRow, SessionRow
from app.vocab import SessionStatus
from app.web.openapi import OutputAttempt, ResultBody, ValidationFailure


def result_body(row: SessionRow, attempts: list[AttemptRow]) -> ResultBody:
    has_schema = row.get("schema_sha256") is not None or row.get("validation_valid") is not None
    body: ResultBody = {
        "session_id": row["session_id"], "status": row["status"], "source": row["source"],
        "attempts": row["attempts"], "degraded": bool(row["degraded"]),
        "schema": {"source": row.get("schema_source"), "name": row.get("schema_name"),
                   "sha256": row.get("schema_sha256")},
        "validation": {"valid": row["validation_valid"], "errors": row["validation_errors"] or []},
        "output_attempts": [_listed(a) for a in attempts],
    }
    if row["structured_output"] is not None:
        body["result_data"] = row["structured_output"]
    elif not has_schema:
        body["result_text"] = row["result_text"]
    if (failure := failure_of(row, attempts)) is not None:
        body["failure"] = failure
    return body


def failure_of(row: SessionRow, attempts: list[AttemptRow]) -> ValidationFailure | None:
    """The validation failure after the last attempt, or None (valid, no output asked, running)."""
    if row["validation_valid"] is not False or row["status"] == SessionStatus.RUNNING:
        return None
    return cast(ValidationFailure, validation_failure(
        row["validation_errors"] or [], _last_output(row, attempts), max(1, row["attempts"] or 1)))


def _listed(a: AttemptRow) -> OutputAttempt:
    return {"attempt": a["attempt"], "run": a["run"], "kind": a["kind"], "origin": a["origin"], "result_subtype": a["result_subtype"],
            "is_error": a["is_error"], "has_output": a["has_output"], "valid": a["valid"], "errors": a["errors"],
            "created_at": a["created_at"]}


def _last_output(row: SessionRow, attempts: list[AttemptRow]) -> Any:
    for attempt in reversed(attempts):
        if attempt.get("output") is not None:
            return attempt["output"]
    try:  # kept verbatim (JSON text)
        return json.loads(row["invalid_output"]) if row["invalid_output"] is not None else None
    except ValueError:
        return row["invalid_output"]
