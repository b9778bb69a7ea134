"""SessionRecorder: one CLI session's stream → activity rows → outcome → routed findings.

Why a class of its own: the same path serves ``tierops ingest`` (a recorded file, read as fast as
possible) and the supervisor (a live child process, lines stored as they arrive and published to
the hub, several CLI runs — "attempts" — resumed into one session). Lifecycle::

    rec = await SessionRecorder.begin(db, validator, tier=1, ...)   # session row, status running
    await rec.feed(line) ...                                        # every line, stored
    outcome = await rec.end_attempt(exit_code)                      # result line → status, validation
    [rec.begin_attempt("resume"); feed ...; end_attempt ...]        # output recovery (supervisor)
    report = await rec.finalize()                                   # one transaction: route + status

Deliberate choices:

* Lines are buffered and written with ``executemany`` (bounded by row count *and* bytes, so a
  run of 20 MB lines never piles up in memory); ``flush()`` forces a write, which the supervisor
  calls whenever the child has nothing more to read, so live pages lag by one line at most.
* Memory is flat in the number of lines: only the last ``result``/``api_retry`` line, the
  markers found so far and the CLI's StructuredOutput tool inputs are kept, never the transcript.
* Findings are routed once, in :meth:`finalize`, from the accepted attempt; nothing is routed per
  attempt, so a recovered session cannot produce duplicates.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.output.contract import AgentResponse
from app.output.handoff import read_handoff
from app.output.markers import MarkerSet
from app.output.outcome import RunStatus, decide_status
from app.output.route import Routed, from_fallback, from_structured, write_routed
from app.output.validate import OutputValidator, ValidationIssue, ValidationResult
from app.store.db import Database
from app.stream.parser import ArrayLine, AssistantLine, ParsedLine, ResultLine, SystemLine, parse_line

FLUSH_ROWS = 500
FLUSH_BYTES = 8 * 1024 * 1024

# Called after each committed batch with (session_pk, rows); rows are activity dicts.
Publisher = Callable[[int, list[dict]], Awaitable[None] | None]


def utcnow() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Clock:
    """Per-line timestamps at millisecond resolution, formatted once per millisecond.

    Formatting a datetime per line cost ~20 % of bulk ingest time (bench/ingest.py)."""

    __slots__ = ("_ms", "_text")

    def __init__(self) -> None:
        self._ms = -1
        self._text = ""

    def now(self) -> str:
        ms = time.time_ns() // 1_000_000
        if ms != self._ms:
            self._ms = ms
            self._text = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"
        return self._text


@dataclass
class AttemptOutcome:
    attempt: int
    run: RunStatus
    result: ResultLine | None
    has_output: bool
    output: Any = None
    validation: ValidationResult | None = None

    @property
    def output_ok(self) -> bool:
        return self.validation is not None and self.validation.valid

    @property
    def needs_recovery(self) -> bool:
        """Completed but without valid structured output: what output recovery resumes for."""
        return self.run.status == "completed" and not self.output_ok


@dataclass
class Recording:
    """Per-attempt stream state; reset by :meth:`SessionRecorder.begin_attempt`."""

    result: ResultLine | None = None
    last_retry: dict | None = None
    structured_calls: list[Any] = field(default_factory=list)  # StructuredOutput tool inputs


class SessionRecorder:
    def __init__(self, db: Database, validator: OutputValidator, session_pk: int, *,
                 handoff_path: str = "handoff.json", initial_confidence: float = 0.7,
                 reinforce: float = 0.3, publish: Publisher | None = None,
                 redact: Callable[[str], str] | None = None) -> None:
        self.db = db
        self.validator = validator
        self.session_pk = session_pk
        self.handoff_path = handoff_path
        self.initial_confidence = initial_confidence
        self.reinforce = reinforce
        self.publish = publish
        self.redact = redact
        self.session_id: str | None = None
        self.cwd: str | None = None
        self.cli_model: str | None = None
        self.cli_version: str | None = None
        self.attempt = 1
        self.attempt_kind = "stream"
        self.seq = 0
        self.line_count = 0
        self.markers = MarkerSet()
        self.current = Recording()
        self.outcomes: list[AttemptOutcome] = []
        self._rows: list[tuple] = []
        self._bytes = 0
        self._session_id_stored = False
        self._clock = _Clock()

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    async def begin(cls, db: Database, validator: OutputValidator, *, tier: int | None = None,
                    model: str | None = None, prompt: str | None = None, cwd: str | None = None,
                    trigger: str = "ingest", parent_session_id: int | None = None,
                    stream_sha256: str | None = None, **kwargs: Any) -> SessionRecorder:
        async with db.write() as conn:
            cur = await conn.execute(
                """INSERT INTO sessions (tier, model, prompt, cwd, trigger, status, started_at,
                                         parent_session_id, stream_sha256)
                   VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?)""",
                (tier, model, prompt, cwd, trigger, utcnow(), parent_session_id, stream_sha256),
            )
            pk = cur.lastrowid
        rec = cls(db, validator, pk, **kwargs)
        rec.cwd = cwd
        return rec

    def begin_attempt(self, kind: str = "resume") -> None:
        self.attempt += 1
        self.attempt_kind = kind
        self.current = Recording()

    # -- streaming ---------------------------------------------------------------------------

    async def feed(self, line: bytes | str) -> ParsedLine | None:
        if self.redact is not None:
            if isinstance(line, bytes):
                try:
                    line = line.decode("utf-8")
                except UnicodeDecodeError:
                    line = line.decode("utf-8", "backslashreplace")
            line = self.redact(line)  # secrets never reach the database (issue #4)
        parsed = parse_line(line)
        if parsed is None:
            return None
        self.seq += 1
        self.line_count += 1
        self._observe(parsed)
        self._rows.append((self.session_pk, self.seq, self.attempt, self._clock.now(), parsed.type,
                           parsed.subtype, parsed.display(), parsed.raw))
        self._bytes += len(parsed.raw)
        if len(self._rows) >= FLUSH_ROWS or self._bytes >= FLUSH_BYTES:
            # Writing a batch in the background while parsing the next was tried and measured no
            # gain: sqlite3 needs the GIL to bind every row, so the two do not overlap.
            await self.flush()
        return parsed

    def _observe(self, parsed: ParsedLine) -> None:
        if isinstance(parsed, ArrayLine):
            for item in parsed.items:
                self._observe(item)
            return
        if self.session_id is None and parsed.session_id:
            self.session_id = parsed.session_id
        if isinstance(parsed, AssistantLine):
            if parsed.is_synthetic_error:
                return  # the CLI's own API-error text, not the agent's findings
            for text in parsed.texts():
                self.markers.scan(text)
            for tool in parsed.tool_uses():
                if tool.get("name") == "StructuredOutput":
                    self.current.structured_calls.append(tool.get("input"))
        elif isinstance(parsed, ResultLine):
            self.current.result = parsed
        elif isinstance(parsed, SystemLine):
            sub = parsed.subtype
            if sub == "init":
                self.cli_model = parsed.data.get("model") or self.cli_model
                self.cli_version = parsed.data.get("claude_code_version") or self.cli_version
                if isinstance(parsed.data.get("cwd"), str):
                    self.cwd = self.cwd or parsed.data["cwd"]
            elif sub == "api_retry":
                self.current.last_retry = parsed.data

    async def flush(self) -> None:
        """Write every buffered line now and wait until it is committed (and published)."""
        if not self._rows and (self._session_id_stored or self.session_id is None):
            return
        rows, self._rows, self._bytes = self._rows, [], 0
        await self._write(rows)

    async def _write(self, rows: list[tuple]) -> None:
        async with self.db.write() as conn:
            if rows:
                await conn.executemany(
                    "INSERT INTO activity (session_pk, seq, attempt, ts, type, subtype, display, raw)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
            if self.session_id and not self._session_id_stored:
                # A CLI session id already stored elsewhere (a re-ingested stream) is left out
                # rather than failing the write; the ingest command refuses duplicates up front.
                await conn.execute(
                    """UPDATE sessions SET session_id = ?, cli_model = ?, cli_version = ?, cwd = ifnull(cwd, ?)
                       WHERE id = ? AND NOT EXISTS (SELECT 1 FROM sessions WHERE session_id = ?)""",
                    (self.session_id, self.cli_model, self.cli_version, self.cwd, self.session_pk, self.session_id),
                )
                self._session_id_stored = True
            await conn.execute("UPDATE sessions SET line_count = ? WHERE id = ?", (self.line_count, self.session_pk))
        if self.publish and rows:
            published = self.publish(self.session_pk, [_row_dict(r) for r in rows])
            if published is not None:
                await published

    # -- outcome -----------------------------------------------------------------------------

    async def end_attempt(self, exit_code: int | None = None) -> AttemptOutcome:
        """Decide this attempt's status, validate its output, store the attempt. Routes nothing."""
        await self.flush()
        cur = self.current
        run = decide_status(cur.result, exit_code, cur.last_retry)
        result = cur.result
        has_output = bool(result and result.has_structured_output)
        output: Any = None
        validation: ValidationResult | None = None
        if has_output:
            output = result.structured_output  # type: ignore[union-attr]
            validation = self.validator.validate(output)
        elif cur.structured_calls and run.status == "failed":
            # error_max_structured_output_retries: keep the model's last rejected output and
            # TierOps' own verdict on it, so operators see what was wrong.
            output = cur.structured_calls[-1]
            validation = self.validator.validate(output)
        elif run.status == "completed":
            validation = ValidationResult(False, [ValidationIssue(
                "$", "no structured_output in the result: the model never called the StructuredOutput tool"
                     " (or the CLI ran without --json-schema)")])
        outcome = AttemptOutcome(self.attempt, run, result, has_output, output, validation)
        self.outcomes.append(outcome)
        async with self.db.write() as conn:
            await conn.execute(
                """INSERT OR REPLACE INTO output_attempts
                       (session_pk, attempt, kind, result_subtype, is_error, has_output, output, valid,
                        errors, created_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (self.session_pk, self.attempt, self.attempt_kind, result.subtype if result else None,
                 int(result.is_error) if result else None, int(has_output),
                 _dumps(output) if output is not None else None,
                 None if validation is None else int(validation.valid),
                 None if validation is None else json.dumps(validation.errors_as_dicts()),
                 utcnow()),
            )
        return outcome

    async def finalize(self, *, status: str | None = None, reason: str | None = None,
                       exit_code: int | None = None, stderr_tail: str | None = None) -> dict:
        """Route the findings and close the session, all in one transaction. Returns the report.

        ``status``/``reason`` override the decided status (the supervisor's ``interrupted``).
        """
        await self.flush()
        if not self.outcomes:
            await self.end_attempt(exit_code)
        last = self.outcomes[-1]
        accepted = next((o for o in reversed(self.outcomes) if o.has_output and o.output_ok), None)
        notes: list[str] = []
        routed: Routed
        handoff_raw: str | None = None
        if accepted is not None:
            routed = from_structured(AgentResponse.model_validate(accepted.output))
        else:
            handoff, problem = read_handoff(self.handoff_path, self.cwd)
            if problem:
                notes.append(problem)
            routed = from_fallback(self.markers, handoff)
            handoff_raw = handoff.raw if handoff else None
        final_status = status or last.run.status
        final_reason = reason if status else last.run.reason
        shown = accepted or next((o for o in reversed(self.outcomes) if o.output is not None), last)
        degraded = final_status == "completed" and accepted is None
        totals = _totals(self.outcomes)
        res = last.result
        now = utcnow()
        async with self.db.write() as conn:
            await write_routed(conn, self.session_pk, routed, now, self.initial_confidence, self.reinforce)
            await conn.execute(
                """UPDATE sessions SET status = ?, status_reason = ?, degraded = ?, exit_code = ifnull(?, exit_code),
                       ended_at = ?, duration_ms = ?, duration_api_ms = ?, cost_usd = ?, input_tokens = ?,
                       output_tokens = ?, cache_read_tokens = ?, cache_creation_tokens = ?, num_turns = ?,
                       result_subtype = ?, is_error = ?, api_error_status = ?, stop_reason = ?,
                       terminal_reason = ?, result_text = ?, result_errors = ?, permission_denials = ?,
                       model_usage = ?, validation_valid = ?, validation_errors = ?, structured_output = ?,
                       invalid_output = ?, attempts = ?, handoff_raw = ?, notes = ?,
                       stderr_tail = ifnull(?, stderr_tail), line_count = ?,
                       cli_model = ifnull(cli_model, ?), cwd = ifnull(cwd, ?)
                   WHERE id = ?""",
                (
                    final_status, final_reason, int(degraded), exit_code, now,
                    totals["duration_ms"], totals["duration_api_ms"], totals["cost_usd"],
                    totals["input_tokens"], totals["output_tokens"], totals["cache_read_tokens"],
                    totals["cache_creation_tokens"], totals["num_turns"],
                    res.subtype if res else None, int(res.is_error) if res else None,
                    res.api_error_status if res else None, res.stop_reason if res else None,
                    res.terminal_reason if res else None, res.result_text if res else None,
                    json.dumps(res.errors) if res else None,
                    _dumps(res.permission_denials) if res else None,
                    _dumps(res.model_usage) if res else None,
                    None if shown.validation is None else int(shown.validation.valid),
                    None if shown.validation is None else json.dumps(shown.validation.errors_as_dicts()),
                    _dumps(accepted.output) if accepted else None,
                    _dumps(shown.output) if (shown.output is not None and accepted is None) else None,
                    len(self.outcomes),
                    handoff_raw,
                    json.dumps(notes) if notes else None,
                    stderr_tail, self.line_count, self.cli_model, self.cwd, self.session_pk,
                ),
            )
        return await build_report(self.db, self.session_pk)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _totals(outcomes: list[AttemptOutcome]) -> dict:
    """Sum per-attempt figures. Within one process the last result line already accumulates
    (reference §4.4, stream-json input mode), so only each attempt's last result is counted."""
    keys = ("duration_ms", "duration_api_ms", "cost_usd", "input_tokens", "output_tokens",
            "cache_read_tokens", "cache_creation_tokens", "num_turns")
    totals: dict[str, Any] = dict.fromkeys(keys)
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
            if isinstance(v, int | float) and not isinstance(v, bool):
                totals[k] = (totals[k] or 0) + v
    return totals


def _row_dict(row: tuple) -> dict:
    session_pk, seq, attempt, ts, type_, subtype, display, raw = row
    return {"session_pk": session_pk, "seq": seq, "attempt": attempt, "ts": ts, "type": type_,
            "subtype": subtype, "display": display, "raw": raw}


async def build_report(db: Database, session_pk: int) -> dict:
    """The ingest report: what is stored for one session (also the ``--json`` output)."""
    s = await db.fetchone("SELECT * FROM sessions WHERE id = ?", (session_pk,))
    if s is None:
        raise KeyError(session_pk)
    events = await db.fetchall(
        "SELECT level, original_level, service, message FROM events WHERE session_pk = ? ORDER BY id", (session_pk,))
    memories = await db.fetchall(
        """SELECT id, service, category, value, confidence, active, times_seen FROM memories
           WHERE created_by_session = ? OR reinforced_by_session = ? ORDER BY id""", (session_pk, session_pk))
    checks = await db.fetchall(
        "SELECT name, status, detail FROM check_results WHERE session_pk = ? ORDER BY id", (session_pk,))
    cooldowns = await db.fetchall(
        "SELECT action, service, outcome, note FROM cooldowns WHERE session_pk = ? ORDER BY id", (session_pk,))
    activity_count = await db.fetchval("SELECT count(*) FROM activity WHERE session_pk = ?", (session_pk,))
    escalation = None
    if s["escalation_needed"] is not None:
        escalation = {
            "needed": bool(s["escalation_needed"]),
            "reason": s["escalation_reason"],
            "context": s["escalation_context"],
            "failed_checks": json.loads(s["escalation_failed_checks"] or "[]"),
        }
    return {
        "id": s["id"],
        "session_id": s["session_id"],
        "tier": s["tier"],
        "status": s["status"],
        "status_reason": s["status_reason"],
        "degraded": bool(s["degraded"]),
        "is_error": None if s["is_error"] is None else bool(s["is_error"]),
        "result_subtype": s["result_subtype"],
        "api_error_status": s["api_error_status"],
        "source": s["source"],
        "validation": {
            "valid": None if s["validation_valid"] is None else bool(s["validation_valid"]),
            "errors": json.loads(s["validation_errors"] or "[]"),
        },
        "attempts": s["attempts"],
        "summary": s["summary"],
        "events": [dict(r) for r in events],
        "memories": [dict(r) | {"active": bool(r["active"])} for r in memories],
        "escalation": escalation,
        "services_checked": [dict(r) for r in checks],
        "cooldowns": [dict(r) for r in cooldowns],
        "cost_usd": s["cost_usd"],
        "num_turns": s["num_turns"],
        "activity_count": activity_count,
        "notes": json.loads(s["notes"] or "[]"),
    }
