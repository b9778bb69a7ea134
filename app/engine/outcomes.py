"""Deciding an attempt (status, validation of its output) and summing a session's attempts.

Pure functions over parsed result lines and validation results: no I/O, so the rules that
decide what a session *was* can be tested without a database.

Everything decided here is stored, so it must be storable whatever the stream held:
the output (a result's ``structured_output`` or a StructuredOutput tool input) goes through
``values.json_safe`` before it is validated and kept, and each total is a finite number within
SQLite's 64 bits (None otherwise).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from app.clock import utcnow
from app.output.extract import extract_json
from app.output.outcome import Budget, CredentialsRejected, RunStatus, decide_status
from app.output.validate import OutputValidator, ValidationIssue, ValidationResult
from app.store.attempts import AttemptRecord
from app.store.sessions import SessionSummary
from app.stream.parser import ResultLine
from app.stream.values import clean_text, finite, json_safe
from app.vocab import SessionStatus

log = logging.getLogger(__name__)

NO_OUTPUT = ("no structured_output in the result: the model never called the StructuredOutput tool"
             " (or the CLI ran without --json-schema)")
NO_JSON_ANSWER = "no JSON answer in the final text"


@dataclass
class Recording:
    """Per-attempt stream observations; a new one starts with every attempt."""

    result: ResultLine | None = None
    last_retry: dict[str, Any] | None = None
    structured_calls: list[Any] = field(default_factory=list)  # StructuredOutput tool inputs
    rejected: CredentialsRejected | None = None  # the first line saying the API refused the credentials


@dataclass
class AttemptOutcome:
    attempt: int
    kind: str
    run: RunStatus
    result: ResultLine | None
    has_output: bool
    output: Any = None
    validation: ValidationResult | None = None
    via: str = "tool"  # tool | extracted | prompted | conversation (no contract): where the output came from

    @property
    def output_ok(self) -> bool:
        return self.validation is not None and self.validation.valid

    @property
    def needs_recovery(self) -> bool:
        """Completed but without valid structured output: what output recovery resumes for."""
        return self.run.status == SessionStatus.COMPLETED and not self.output_ok and self.via != "conversation"

    def record(self) -> AttemptRecord:
        r = self.result
        return AttemptRecord(
            attempt=self.attempt, kind=self.kind, result_subtype=r.subtype if r else None,
            is_error=r.is_error if r else None, has_output=self.has_output, output=self.output,
            valid=None if self.validation is None else self.validation.valid,
            errors=None if self.validation is None else self.validation.errors_as_dicts(),
            origin=self.via if (self.has_output or self.output is not None) else None)


def decide_attempt(attempt: int, kind: str, rec: Recording, exit_code: int | None,
                   validator: OutputValidator, mode: str = "native", budget: Budget | None = None) -> AttemptOutcome:
    """The attempt's status from its last result line, and TierOps' verdict on its output.

    ``mode``: ``native`` takes the StructuredOutput tool's output; when a completed
    run has none, a JSON answer in the final text that validates is taken instead (``via``
    ``extracted``; the session is degraded) before a resume is spent. ``prompted`` takes the JSON
    in the final text (:func:`app.output.extract.extract_json`), the only place it can be."""
    run = decide_status(rec.result, exit_code, rec.last_retry, budget)
    result = rec.result
    if mode == "conversation":  # no contract: the answer is the text, nothing to validate or recover
        return AttemptOutcome(attempt, kind, run, result, False, None, None, "conversation")
    output: Any = None
    validation: ValidationResult | None = None
    has_output = result is not None and result.has_structured_output
    if mode == "prompted":
        if result is not None and run.status == SessionStatus.COMPLETED:
            found = extract_json(result.result_text or "")
            if found.ok:
                output = json_safe(found.value)
                return AttemptOutcome(attempt, kind, run, result, True, output, validator.validate(output), "prompted")
            validation = ValidationResult(False, [ValidationIssue("$", f"{NO_JSON_ANSWER}: {found.error}")])
        return AttemptOutcome(attempt, kind, run, result, False, None, validation, "prompted")
    if result is not None and has_output:
        output = result.structured_output  # json_safe already
        validation = validator.validate(output)
    elif rec.structured_calls and run.status == SessionStatus.FAILED:
        # error_max_structured_output_retries: keep the model's last rejected output and
        # TierOps' own verdict on it, so operators see what was wrong.
        output = json_safe(rec.structured_calls[-1])
        validation = validator.validate(output)
    elif run.status == SessionStatus.COMPLETED:
        if result is not None and (found := extract_json(result.result_text or "")).ok:
            text_output = json_safe(found.value)
            verdict = validator.validate(text_output)
            if verdict.valid:  # a valid answer given as text, not through the tool
                return AttemptOutcome(attempt, kind, run, result, True, text_output, verdict, "extracted")
        validation = ValidationResult(False, [ValidationIssue("$", NO_OUTPUT)])
    return AttemptOutcome(attempt, kind, run, result, has_output, output, validation)


def accepted_outcome(outcomes: list[AttemptOutcome]) -> AttemptOutcome | None:
    """The newest attempt whose structured output validated: the one that is routed."""
    return next((o for o in reversed(outcomes) if o.has_output and o.output_ok), None)


_TOTAL_KEYS = ("duration_ms", "duration_api_ms", "cost_usd", "input_tokens", "output_tokens",
               "cache_read_tokens", "cache_creation_tokens", "num_turns")


def totals(outcomes: list[AttemptOutcome]) -> dict[str, Any]:
    """Sum per-attempt figures. Within one process the last result line already accumulates
    (reference §4.4, stream-json input mode), so only each attempt's last result is counted."""
    sums: dict[str, Any] = dict.fromkeys(_TOTAL_KEYS)
    overflowed: set[str] = set()
    for o in outcomes:
        r = o.result
        if r is None:
            continue
        usage = r.usage
        figures = {
            "duration_ms": r.duration_ms, "duration_api_ms": r.duration_api_ms, "cost_usd": r.total_cost_usd,
            "input_tokens": usage.get("input_tokens"), "output_tokens": usage.get("output_tokens"),
            "cache_read_tokens": usage.get("cache_read_input_tokens"),
            "cache_creation_tokens": usage.get("cache_creation_input_tokens"), "num_turns": r.num_turns,
        }
        for k, v in figures.items():
            num = finite(v)
            if num is not None and k not in overflowed:
                # A sum beyond 64 bits (or a float sum reaching inf) is no figure: NULL, for good.
                sums[k] = finite((sums[k] or 0) + num)
                if sums[k] is None:
                    overflowed.add(k)
    return sums


@dataclass(frozen=True)
class SessionFacts:
    """What the recorder knows at the end besides the attempts."""

    line_count: int
    cli_model: str | None
    cwd: str | None
    handoff_raw: str | None
    notes: list[str]
    exit_code: int | None
    stderr_tail: str | None
    cli_rejections: int = 0  # StructuredOutput calls the CLI itself refused: attempts too


def summarize(outcomes: list[AttemptOutcome], facts: SessionFacts, *, status: str | None = None,
              reason: str | None = None) -> SessionSummary:
    """The session's final row. ``status``/``reason`` override the decided status (the
    supervisor's ``interrupted``, a timeout, an internal error)."""
    last = outcomes[-1]
    accepted = accepted_outcome(outcomes)
    final_status = status or last.run.status
    final_reason = reason if status else last.run.reason
    shown = accepted or next((o for o in reversed(outcomes) if o.output is not None), last)
    sums = totals(outcomes)
    res = last.result
    return SessionSummary(
        status=final_status, status_reason=final_reason,
        degraded=final_status == SessionStatus.COMPLETED and last.via != "conversation"
        and (accepted is None or accepted.via == "extracted"),
        exit_code=facts.exit_code, ended_at=utcnow(),
        duration_ms=sums["duration_ms"], duration_api_ms=sums["duration_api_ms"], cost_usd=sums["cost_usd"],
        input_tokens=sums["input_tokens"], output_tokens=sums["output_tokens"],
        cache_read_tokens=sums["cache_read_tokens"], cache_creation_tokens=sums["cache_creation_tokens"],
        num_turns=sums["num_turns"],
        result_subtype=res.subtype if res else None, is_error=res.is_error if res else None,
        api_error_status=res.api_error_status if res else None, stop_reason=res.stop_reason if res else None,
        terminal_reason=res.terminal_reason if res else None, result_text=res.result_text if res else None,
        result_errors=res.errors if res else None, permission_denials=res.permission_denials if res else None,
        model_usage=res.model_usage if res else None,
        validation_valid=None if shown.validation is None else shown.validation.valid,
        validation_errors=None if shown.validation is None else shown.validation.errors_as_dicts(),
        structured_output=accepted.output if accepted else None,
        invalid_output=shown.output if (shown.output is not None and accepted is None) else None,
        attempts=len(outcomes) + facts.cli_rejections, handoff_raw=facts.handoff_raw, notes=facts.notes,
        stderr_tail=facts.stderr_tail, line_count=facts.line_count, cli_model=_text_or_none(facts.cli_model),
        cwd=_text_or_none(facts.cwd), output_via=accepted.via if accepted else None,
    )


def _text_or_none(value: Any) -> str | None:
    """A fact read from the stream (``system/init``'s model, cwd) as storable text: any other
    JSON value there is None."""
    return clean_text(value) if isinstance(value, str) else None


def bare_summary(facts: SessionFacts, status: str, reason: str | None) -> SessionSummary:
    """A final row for a session whose attempts could not even be decided (an internal error
    before the first attempt was recorded): the status and reason, nothing else made up."""
    return SessionSummary(
        status=status, status_reason=reason, degraded=False, exit_code=facts.exit_code, ended_at=utcnow(),
        duration_ms=None, duration_api_ms=None, cost_usd=None, input_tokens=None, output_tokens=None,
        cache_read_tokens=None, cache_creation_tokens=None, num_turns=None, result_subtype=None, is_error=None,
        api_error_status=None, stop_reason=None, terminal_reason=None, result_text=None, result_errors=None,
        permission_denials=None, model_usage=None, validation_valid=None, validation_errors=None,
        structured_output=None, invalid_output=None, attempts=0, handoff_raw=facts.handoff_raw, notes=facts.notes,
        stderr_tail=facts.stderr_tail, line_count=facts.line_count, cli_model=_text_or_none(facts.cli_model),
        cwd=_text_or_none(facts.cwd),
    )
