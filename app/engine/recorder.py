"""SessionRecorder: one CLI session's stream → activity rows → outcome → routed findings.

Why a class of its own: the same path serves ``tierops ingest`` (a recorded file, read as fast as
possible) and the supervisor (a live child process, lines stored as they arrive and published to
the hub, several CLI runs — "attempts" — resumed into one session). It only orchestrates:
deciding an attempt and the summary is :mod:`app.engine.outcomes`, every write is a named
function of :mod:`app.store`. Lifecycle::

    rec = await SessionRecorder.begin(db, validator, options, tier=1, ...)  # session row, running
    await rec.feed(line) ...                                               # every line, stored
    outcome = await rec.end_attempt(exit_code)                             # result → status, validation
    [rec.begin_attempt("resume"); feed ...; end_attempt ...]               # output recovery (supervisor)
    report = await rec.finalize()                                          # one transaction: route + status

What it deliberately does: lines are buffered and written in batches bounded by rows *and*
bytes, screened for secrets in one pass per batch (:mod:`app.engine.line_screen`); memory is flat
in the number of lines (only the last ``result``/``api_retry`` line, the markers and the CLI's
StructuredOutput inputs are kept); findings are routed once, in :meth:`finalize`, from the
accepted attempt, and an ``interrupted`` session's escalation decision never; a storage fault that
may pass is retried with backoff while the stream goes on being read. Measurements and log lines:
ARCHITECTURE.md, "Recording a session"; storage faults: "Durability".
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.clock import LineClock
from app.engine.evidence_check import verify_routed
from app.engine.line_screen import flagged_lines, parse_lines, screen_for
from app.engine.outcomes import (
    AttemptOutcome,
    Recording,
    SessionFacts,
    accepted_outcome,
    bare_summary,
    decide_attempt,
    summarize,
)
from app.engine.report import SessionReport, build_report
from app.errors import StorageUnavailable
from app.logs import oneline
from app.output.handoff import read_handoff
from app.output.markers import MarkerSet
from app.output.outcome import Budget, CredentialsRejected, credentials_rejected
from app.output.rejections import CliRejection, RejectionTracker
from app.output.route import Routed, for_interrupted, from_fallback, from_output
from app.output.spec import OutputSpec
from app.output.validate import OutputValidator
from app.redact import redactor_for
from app.store import activity, attempts, sessions
from app.store.activity import LineTuple
from app.store.attempts import AttemptRecord
from app.store.db import Database, is_transient
from app.store.rows import ActivityRow, McpServerStatus
from app.store.sessions import SessionIdentity
from app.stream.parser import ArrayLine, AssistantLine, ParsedLine, ResultLine, SystemLine
from app.vocab import AttemptKind, SessionStatus, Trigger

if TYPE_CHECKING:
    from app.config import Settings

log = logging.getLogger(__name__)

# 2,000 rows per write was tried: no gain measurable on 2 cores (SQLite alone takes the same time
# for batches of 500 or 5,000 rows) and 16 MB more peak RSS in bench/ingest.py.
FLUSH_ROWS = 500
FLUSH_BYTES = 8 * 1024 * 1024
# While storage fails, lines stay buffered up to this many bytes and the stream goes on being
# read; past it, feed() waits for storage (the child then blocks on its full pipe): memory stays
# bounded and nothing is dropped.
BUFFER_LIMIT = 64 * 1024 * 1024
BACKOFF_FIRST = 0.05
BACKOFF_MAX = 5.0


# Called after each committed batch with (session_pk, rows).
Publisher = Callable[[int, list[ActivityRow]], Awaitable[None] | None]


@dataclass(frozen=True)
class RecorderOptions:
    """How a recorder stores and routes; built once per session from the settings."""

    handoff_path: str = "handoff.json"
    initial_confidence: float = 0.7
    reinforce: float = 0.3
    publish: Publisher | None = None
    redact: Callable[[str], str] | None = None
    storage_retry_limit: float = 180.0  # seconds of failing writes before StorageUnavailable
    buffer_limit: int = BUFFER_LIMIT
    # Only the agent-response contract's output becomes events, memories and an escalation
    # decision; another schema's valid output is stored as the session's result data.
    route_output: bool = True
    output_mode: str = "native"  # native | prompted: where an attempt's output is read from
    budget: Budget | None = None  # the run's --max-budget-usd, named when the CLI stops at it
    evidence_policy: str = "flag"  # TIEROPS_EVIDENCE_POLICY: off leaves findings' evidence unchecked

    @classmethod
    def from_settings(cls, settings: Settings, publish: Publisher | None = None,
                      route_output: bool = True, output_mode: str = "native",
                      budget: Budget | None = None, secrets: Sequence[str] = ()) -> RecorderOptions:
        """``secrets``: values to mask beside the environment's (those a run's MCP servers get from files)."""
        return cls(handoff_path=settings.handoff_file, initial_confidence=settings.memory_initial_confidence,
                   reinforce=settings.memory_reinforce, publish=publish, redact=redactor_for(settings, secrets),
                   storage_retry_limit=settings.storage_retry_limit, route_output=route_output,
                   output_mode=output_mode, budget=budget, evidence_policy=settings.evidence_policy)


class SessionRecorder:
    def __init__(self, db: Database, validator: OutputValidator, session_pk: int,
                 options: RecorderOptions | None = None) -> None:
        self.db = db
        self.validator = validator
        self.session_pk = session_pk
        self.options = options or RecorderOptions()
        self.session_id: str | None = None
        self.tier: int | None = None
        self.cwd: str | None = None
        self.cli_model: str | None = None
        self.cli_version: str | None = None
        self._mcp_servers: list[McpServerStatus] | None = None  # the latest init's, until stored
        self.attempt = 1
        self.attempt_kind: str = AttemptKind.STREAM
        self.seq = 0
        self.line_count = 0
        self.markers = MarkerSet()
        self.current = Recording()
        self.outcomes: list[AttemptOutcome] = []
        # The CLI's own rejections of a StructuredOutput call count as attempts too.
        self._rejections = RejectionTracker()
        self._run_rejections: list[CliRejection] = []
        self.cli_rejections = 0
        self._attempt_no = 0  # output_attempts numbering: every attempt, rejections included
        self._rows: list[LineTuple] = []
        self._bytes = 0
        self._session_id_stored = False
        self._clock = LineClock()
        self._failing_since: float | None = None  # monotonic time of the first failed write in a row
        self._retry_at = 0.0
        self._backoff = BACKOFF_FIRST
        self._failures = 0  # failed writes in a row (the ``attempt`` of a storage retry line)
        # The fields of this session's log lines; the supervisor adds "chain".
        self.log_context: dict[str, object] = {"session": session_pk}
        # Lines are redacted before they are parsed, so parsed values (structured output, events)
        # carry no secret either; without an explicit redactor the database's own is used.
        self._redact: Callable[[str], str] = self.options.redact or db.redact
        self._screen = screen_for(self._redact)
        self._flush_bytes = min(FLUSH_BYTES, self.options.buffer_limit)

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    async def begin(cls, db: Database, validator: OutputValidator, options: RecorderOptions | None = None, *,
                    tier: int | None = None, model: str | None = None, prompt: str | None = None,
                    cwd: str | None = None, trigger: str = Trigger.INGEST, parent_session_id: int | None = None,
                    stream_sha256: str | None = None, contract: OutputSpec | None = None, dry_run: bool = False,
                    max_budget_usd: float | None = None, node_id: str | None = None) -> SessionRecorder:
        pk = await sessions.create_session(db, tier=tier, model=model, prompt=prompt, cwd=cwd, trigger=trigger,
                                           parent_session_id=parent_session_id, stream_sha256=stream_sha256,
                                           contract=contract, dry_run=dry_run, max_budget_usd=max_budget_usd,
                                           node_id=node_id)
        rec = cls(db, validator, pk, options)
        rec.cwd = cwd
        rec.tier = tier
        if tier is not None:
            rec.log_context["tier"] = tier
        return rec

    def begin_attempt(self, kind: str = AttemptKind.RESUME) -> None:
        self.attempt += 1
        self.attempt_kind = kind
        self.current = Recording()

    # -- streaming ---------------------------------------------------------------------------

    async def feed(self, line: bytes | str) -> ParsedLine | None:
        """Store one line (the supervisor's live path); returns it parsed (None: an empty line)."""
        parsed = self._parse([line])[0]
        if parsed is not None and self._record(parsed):
            await self.flush()
        return parsed

    async def feed_batch(self, lines: Sequence[bytes | str], screened: set[int] | None = None) -> int:
        """Store a batch of lines (e.g. one read's worth, as :mod:`app.stream.reader` frames them);
        the same as :meth:`feed` on each in order, but screened for secrets in one pass.
        ``screened``: what :meth:`screen_batch` returned for these lines, when the caller ran it
        already (ingest does, in a thread, while the previous batch is stored). Returns how many
        lines were stored (empty lines are not)."""
        stored = 0
        for parsed in self._parse(lines, screened):
            if parsed is not None:
                stored += 1
                if self._record(parsed):
                    await self.flush()
        return stored

    def screen_batch(self, lines: Sequence[bytes | str]) -> set[int]:
        """The indices of the lines that need the per-line path: full redaction and the stdlib
        decoder (:func:`app.engine.line_screen.flagged_lines`; every line, for a redactor that is
        not a :class:`~app.redact.Redactor`). Reads nothing of the recorder's state but the
        compiled pattern, so it may run in another thread."""
        return flagged_lines(self._screen, lines)

    def _parse(self, lines: Sequence[bytes | str], screened: set[int] | None = None) -> list[ParsedLine | None]:
        """Decode, redact and parse ``lines``: secrets never reach the database. Lines
        :meth:`screen_batch` did not flag are stored as read and decoded by orjson."""
        dirty = self.screen_batch(lines) if screened is None else screened
        return parse_lines(lines, self._redact, dirty)

    def _record(self, parsed: ParsedLine) -> bool:
        """Number, observe and buffer one line; True when the buffer is due to be written.
        Not a coroutine: one per line cost measurable time in bench/ingest.py."""
        self.seq += 1
        self.line_count += 1
        self._observe(parsed)
        self._run_rejections.extend(self._rejections.feed(parsed, self.seq))
        raw = parsed.raw
        self._rows.append((self.session_pk, self.seq, self.attempt, self._clock.now(), parsed.type,
                           parsed.subtype, parsed.display(), raw))
        self._bytes += len(raw)
        return len(self._rows) >= FLUSH_ROWS or self._bytes >= self._flush_bytes

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
            if self.current.rejected is None:
                self.current.rejected = credentials_rejected(result=parsed)
        elif isinstance(parsed, SystemLine):
            sub = parsed.subtype
            if sub == "init":
                self.cli_model = parsed.model or self.cli_model
                self.cli_version = parsed.cli_version or self.cli_version
                self.cwd = self.cwd or parsed.cwd
                if (servers := parsed.mcp_servers) is not None:
                    self._mcp_servers = [{"name": s["name"], "status": s["status"]} for s in servers]
            elif sub == "api_retry":
                self.current.last_retry = parsed.data
                if self.current.rejected is None:
                    self.current.rejected = credentials_rejected(parsed.data)

    @property
    def credentials_rejected(self) -> CredentialsRejected | None:
        """The current attempt's stream said the API refused the credentials (401/403): the
        supervisor stops the CLI at once rather than sit through its retries."""
        return self.current.rejected

    async def flush(self, *, wait: bool = False) -> None:
        """Write every buffered line and wait until it is committed (and published).

        When storage fails with a fault that may pass (:func:`app.store.db.is_transient`), the lines
        stay buffered, in order, and the write is retried with backoff on later flushes; the caller
        goes on reading. Past the buffer limit, or with ``wait``, this waits for storage instead.
        Raises :class:`StorageUnavailable` once writes have failed for ``storage_retry_limit`` s."""
        while True:
            identity = None
            if self.session_id and not self._session_id_stored:
                identity = SessionIdentity(self.session_id, self.cli_model, self.cli_version, self.cwd)
            mcp_servers = self._mcp_servers
            if not self._rows and identity is None and mcp_servers is None:
                return
            must_wait = wait or self._bytes >= self.options.buffer_limit
            if self._failing_since is not None and time.monotonic() < self._retry_at:
                if not must_wait:
                    return  # backing off: keep buffering, keep reading
                await asyncio.sleep(self._retry_at - time.monotonic())
            rows = self._rows
            try:
                await activity.append_lines(self.db, self.session_pk, rows, line_count=self.line_count,
                                            identity=identity, mcp_servers=mcp_servers)
            except Exception as exc:
                self._write_failed(exc, f"{len(rows)} line(s) buffered")
                if must_wait:
                    continue
                return
            self._rows, self._bytes = [], 0
            if self._mcp_servers is mcp_servers:
                self._mcp_servers = None  # stored (a later run's init brings its own)
            self._write_succeeded()
            if identity is not None:
                self._session_id_stored = True
            break
        publish = self.options.publish
        if publish is not None and rows:
            published = publish(self.session_pk, [activity.as_row(r) for r in rows])
            if published is not None:
                await published

    # -- storage faults ------------------------------------------------------------------------

    def _write_failed(self, exc: Exception, what: str) -> None:
        """Note a failed write; re-raise a bug, or give up past the retry limit."""
        if not is_transient(exc):
            raise exc
        now = time.monotonic()
        self._failures += 1
        if self._failing_since is None:
            self._failing_since = now
        elif now - self._failing_since >= self.options.storage_retry_limit:
            log.error("session %d: storage still failing after %.0f s, %d attempts (%s); giving up",
                      self.session_pk, now - self._failing_since, self._failures, exc,
                      extra={**self.log_context, "attempt": self._failures,
                             "duration_s": round(now - self._failing_since, 3)})
            raise StorageUnavailable(f"storage error: {exc} (writes failed for "
                                     f"{now - self._failing_since:.0f} s; TIEROPS_STORAGE_RETRY_LIMIT)") from exc
        if (self._failures & (self._failures - 1)) == 0:  # attempts 1, 2, 4, 8, …
            log.warning("session %d: storage write failed (attempt %d: %s); retrying in %.2f s, %s",
                        self.session_pk, self._failures, exc, self._backoff, what,
                        extra={**self.log_context, "attempt": self._failures, "backoff_s": self._backoff})
        self._retry_at = now + self._backoff
        self._backoff = min(self._backoff * 2, BACKOFF_MAX)

    def _write_succeeded(self) -> None:
        if self._failing_since is not None:
            seconds = time.monotonic() - self._failing_since
            log.warning("session %d: storage is back after %.1f s and %d failed attempt(s); every buffered line "
                        "is stored", self.session_pk, seconds, self._failures,
                        extra={**self.log_context, "attempt": self._failures, "duration_s": round(seconds, 3)})
        self._failing_since = None
        self._failures = 0
        self._backoff = BACKOFF_FIRST

    async def _stored(self, write: Callable[[], Awaitable[None]], what: str) -> None:
        """Run one store write, retrying transient faults with backoff up to the retry limit."""
        while True:
            try:
                await write()
            except Exception as exc:
                self._write_failed(exc, what)
                await asyncio.sleep(max(0.0, self._retry_at - time.monotonic()))
                continue
            self._write_succeeded()
            return

    # -- outcome -----------------------------------------------------------------------------

    async def end_attempt(self, exit_code: int | None = None) -> AttemptOutcome:
        """Decide this attempt's status, validate its output, store the attempt. Routes nothing."""
        await self.flush(wait=True)
        outcome = decide_attempt(self.attempt, self.attempt_kind, self.current, exit_code, self.validator,
                                 self.options.output_mode, self.options.budget)
        self.outcomes.append(outcome)
        records = [self._rejection_record(r) for r in self._run_rejections]
        self.cli_rejections += len(records)
        self._run_rejections = []
        self._attempt_no += 1
        records.append(dataclasses.replace(outcome.record(), attempt=self._attempt_no, run=self.attempt))

        async def save() -> None:
            for record in records:
                await attempts.save_attempt(self.db, self.session_pk, record)

        await self._stored(save, f"attempt {outcome.attempt}")
        return outcome

    def _rejection_record(self, rejection: CliRejection) -> AttemptRecord:
        """A StructuredOutput call the CLI itself refused (its schema check, or the tool missing)."""
        self._attempt_no += 1
        errors = rejection.errors or [{"path": "$", "message": rejection.error_text}]
        return AttemptRecord(attempt=self._attempt_no, kind=self.attempt_kind, result_subtype=None, is_error=None,
                             has_output=rejection.input is not None, output=rejection.input, valid=False,
                             errors=errors, origin="cli_rejected", run=self.attempt)

    async def finalize(self, *, status: str | None = None, reason: str | None = None,
                       exit_code: int | None = None, stderr_tail: str | None = None) -> SessionReport:
        """Route the findings and close the session, all in one transaction. Returns the report.

        ``status``/``reason`` override the decided status (the supervisor's ``interrupted``).
        Never raises for a bug in deciding or routing: the session then ends
        ``failed`` with "internal error: <type>: <message>", the traceback is logged, and the
        legacy markers are still routed. Only cancellation and :class:`StorageUnavailable` (nothing
        can be recorded; the next sweep marks the row) propagate.
        """
        try:
            return await self._finalize(status, reason, exit_code, stderr_tail)
        except (asyncio.CancelledError, StorageUnavailable):
            raise
        except Exception as exc:
            log.exception("session %d: internal error while finalizing", self.session_pk, extra=self.log_context)
            why = f"internal error: {type(exc).__name__}: {exc}"
            return await self._finalize(SessionStatus.FAILED, why, exit_code, stderr_tail, safe=True)

    async def _finalize(self, status: str | None, reason: str | None, exit_code: int | None,
                        stderr_tail: str | None, *, safe: bool = False) -> SessionReport:
        await self.flush(wait=True)
        if not self.outcomes:
            try:
                await self.end_attempt(exit_code)
            except (asyncio.CancelledError, StorageUnavailable):
                raise
            except Exception:
                if not safe:
                    raise
        accepted = None if safe else accepted_outcome(self.outcomes)
        notes: list[str] = [reason] if safe and reason else []
        routed: Routed
        handoff_raw: str | None = None
        if accepted is not None and not self.options.route_output:
            routed = Routed(source="structured_output")  # another contract's output: result data only
        elif accepted is not None:
            routed, unused = from_output(accepted.output)
            notes.extend(unused)
        elif safe:
            try:  # what can still be routed without the output
                routed = from_fallback(self.markers, None)
            except Exception:
                log.exception("session %d: the markers could not be routed either", self.session_pk,
                              extra=self.log_context)
                routed = Routed(source="none")
        else:
            handoff, problem = read_handoff(self.options.handoff_path, self.cwd)
            if problem:
                notes.append(problem)
            routed = from_fallback(self.markers, handoff)
            handoff_raw = handoff.raw if handoff else None
        if status == SessionStatus.INTERRUPTED:  # its findings yes, its escalation decision never
            routed, dropped = for_interrupted(routed)
            notes.extend(dropped)
        if not safe:  # a finding's evidence is checked against this session's stored tool calls
            routed = await verify_routed(self.db, self.session_pk, routed, self._redact, tier=self.tier,
                                         policy=self.options.evidence_policy)
        facts = SessionFacts(cli_rejections=self.cli_rejections, line_count=self.line_count, cli_model=self.cli_model, cwd=self.cwd,
                             handoff_raw=handoff_raw, notes=notes, exit_code=exit_code, stderr_tail=stderr_tail)
        summary = (summarize(self.outcomes, facts, status=status, reason=reason) if self.outcomes
                   else bare_summary(facts, status or SessionStatus.FAILED, reason))
        await self._stored(lambda: sessions.finish_session(
            self.db, self.session_pk, summary, routed, initial_confidence=self.options.initial_confidence,
            reinforce=self.options.reinforce), "the session's final write")
        cost = f"${summary.cost_usd:.4f}" if summary.cost_usd is not None else "no cost reported"
        reason = f" — {oneline(summary.status_reason)}" if summary.status_reason else ""
        log.info("session %d finished: %s%s (source %s, %d lines, %d attempt(s), %s)", self.session_pk,
                 summary.status, reason, routed.source, self.line_count, summary.attempts, cost,
                 extra={**self.log_context, "status": summary.status, "source": routed.source,
                        "lines": self.line_count, "attempts": summary.attempts, "cost_usd": summary.cost_usd})
        return await build_report(self.db, self.session_pk)
