"""The result of a session as the API gives it (``GET /api/v1/sessions/{id}/result``).

Why a module: the session page shows the same verdict, and the shape has rules worth keeping in
one place — ``result_data`` (the accepted output, whatever the schema) or ``result_text`` (free
text, only for a session that ran without a schema), never both; the contract it ran under
(source, name, SHA-256); every attempt; and, when the last attempt still failed validation, a
``failure`` object ``{type: output_schema_validation_failed, validation_errors, last_output,
attempts}``. The shapes are the ``TypedDict``\\ s below, which the OpenAPI document is generated from.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, NotRequired, TypedDict, cast

from app.output.failure import validation_failure
from app.store.rows import AttemptRow, SessionRow
from app.vocab import SessionStatus

log = logging.getLogger(__name__)


class OutputAttempt(TypedDict):
    """An output attempt as listed with its session (``store.attempts.list_attempts``, no output)."""

    attempt: int
    run: int | None
    kind: str
    origin: str | None
    result_subtype: str | None
    is_error: bool | None
    has_output: bool
    valid: bool | None
    errors: list[Any]
    created_at: str


class Validation(TypedDict):
    valid: bool | None
    errors: list[Any]


class SchemaRef(TypedDict):
    """The contract a session ran under: inline | named | default, and its hash."""

    source: str | None
    name: str | None
    sha256: str | None


class ValidationFailure(TypedDict):
    type: str  # output_schema_validation_failed
    validation_errors: list[Any]
    last_output: Any
    attempts: int


class ResultBody(TypedDict):
    """``result_data`` (the accepted structured output) or ``result_text`` (only without a schema),
    never both; ``failure`` when the last attempt still failed validation."""

    session_id: str | None
    status: str
    source: str | None
    attempts: int
    degraded: bool
    schema: SchemaRef
    validation: Validation
    output_attempts: Sequence[OutputAttempt]
    result_data: NotRequired[Any]
    result_text: NotRequired[str | None]
    failure: NotRequired[ValidationFailure]


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
