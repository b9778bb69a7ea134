"""``tierops revalidate``: would stored outputs pass a schema now? Changes nothing.

Why: a schema is tightened, or a validator bug fixed, and the operator wants to know which past
sessions' answers would now be refused — before switching the runs over. Each session's output
(the accepted one, or the rejected one kept verbatim) is checked against the schema given, or,
without one, against the exact schema that session ran with (``sessions.output_schema``; the
bundled agent-response schema for sessions recorded before output contracts, which have none).
"""

from __future__ import annotations

import json
import logging
from typing import Any, TypedDict

from app.output.spec import schema_sha256
from app.output.validate import OutputValidator, SchemaLoadError
from app.store import sessions
from app.store.db import Database

log = logging.getLogger(__name__)

__all__ = ["RevalidationReport", "revalidate"]


class Rechecked(TypedDict):
    id: int
    session_id: str | None
    started_at: str
    was_valid: bool | None
    now_valid: bool
    schema_sha256: str
    errors: list[dict[str, str]]


class RevalidationReport(TypedDict):
    checked: int
    now_failing: int
    newly_failing: int  # valid when recorded, invalid now
    newly_passing: int  # invalid when recorded, valid now
    schema: str  # "given" | "each session's own"
    sessions: list[Rechecked]  # the ones whose verdict is "invalid" now, or changed


async def revalidate(db: Database, default: OutputValidator, *, schema: Any = None, since: str | None = None
                     ) -> RevalidationReport:
    given = OutputValidator(schema, source="the given schema") if schema is not None else None
    compiled: dict[str, OutputValidator] = {}
    report: RevalidationReport = {"checked": 0, "now_failing": 0, "newly_failing": 0, "newly_passing": 0,
                                  "schema": "given" if given else "each session's own", "sessions": []}
    for row in await sessions.stored_outputs(db, since=since):
        output = row["structured_output"] if row["structured_output"] is not None else _decoded(row["invalid_output"])
        validator = given or _own(row["output_schema"], compiled, default)
        result = validator.validate(output)
        report["checked"] += 1
        was = row["validation_valid"]
        if not result.valid:
            report["now_failing"] += 1
        if was and not result.valid:
            report["newly_failing"] += 1
        if was is False and result.valid:
            report["newly_passing"] += 1
        if not result.valid or (was is not None and was != result.valid):
            report["sessions"].append({
                "id": row["id"], "session_id": row["session_id"], "started_at": row["started_at"],
                "was_valid": was, "now_valid": result.valid, "schema_sha256": schema_sha256(validator.schema),
                "errors": result.errors_as_dicts()})
    return report


def _decoded(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text  # kept verbatim: not JSON at all, which any object schema refuses


def _own(schema: Any, cache: dict[str, OutputValidator], default: OutputValidator) -> OutputValidator:
    if not isinstance(schema, dict):
        return default  # recorded before output contracts: the bundled agent-response schema
    key = schema_sha256(schema)
    if key not in cache:
        try:
            cache[key] = OutputValidator(schema, source=f"schema {key[:12]}")
        except SchemaLoadError:
            log.warning("a stored session schema (%s) no longer compiles; using the bundled one", key[:12])
            cache[key] = default
    return cache[key]
