"""The failure record of output enforcement after its last attempt.

Why: when neither the CLI's own retries (reference §5.3, ``error_max_structured_output_retries``)
nor TierOps' resumes produced valid output, the session's result must say so in one fixed shape
that the API, the pages and the next tier can rely on::

    {"type": "output_schema_validation_failed",
     "validation_errors": [{"path": "$.events[0].level", "message": "…"}, …],
     "last_output": <the last output received, or null>,
     "attempts": <how many attempts were made, the CLI's rejections included>}

The per-attempt detail lives in ``output_attempts``; this is the summary.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from app.output.validate import ValidationIssue
from app.stream.values import as_text, json_safe

log = logging.getLogger(__name__)

__all__ = ["OUTPUT_SCHEMA_VALIDATION_FAILED", "validation_failure"]

OUTPUT_SCHEMA_VALIDATION_FAILED = "output_schema_validation_failed"
MESSAGE_MAX = 1_000  # as app.output.validate caps one message


def _issue(error: Mapping[str, Any] | ValidationIssue) -> dict[str, str]:
    if isinstance(error, ValidationIssue):
        return error.as_dict()
    return {"path": as_text(error.get("path", "$"), MESSAGE_MAX), "message": as_text(error.get("message", ""), MESSAGE_MAX)}


def validation_failure(errors: Iterable[Mapping[str, Any] | ValidationIssue], last_output: Any,
                       attempts: int) -> dict[str, Any]:
    """Exactly ``{type, validation_errors, last_output, attempts}``. ``errors`` are the
    last attempt's (``{path, message}`` dicts or :class:`ValidationIssue`); ``last_output`` goes
    through ``values.json_safe`` so the record is storable JSON; ``attempts`` counts every attempt."""
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ValueError(f"attempts must be a positive integer, got {attempts!r}")
    return {
        "type": OUTPUT_SCHEMA_VALIDATION_FAILED,
        "validation_errors": [_issue(e) for e in errors],
        "last_output": json_safe(last_output),
        "attempts": attempts,
    }
