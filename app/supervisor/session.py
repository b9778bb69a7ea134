"""One tier session: spawn the CLI, stream it into the recorder, recover its output, finalize.

Output recovery (issue #3): a run that ends ``success`` without ``structured_output`` (the CLI
lets a model answer in text, reference §5.4) or whose output fails TierOps' own validation is
resumed in the same CLI session (``--resume <session_id>``, same cwd and HOME, ``--json-schema``
and ``--append-system-prompt`` passed again because the CLI forgets them, §8) with a short prompt
listing the validation errors. ``TIEROPS_OUTPUT_MAX_RETRIES`` bounds it. Each attempt is an
``output_attempts`` row; after the last one the recorder falls back to markers / handoff.json
and marks the session degraded. Failures (``is_error``, error subtypes, no result line) are not
retried: they are recorded with their reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from app.config import Settings
from app.engine.outcomes import AttemptOutcome
from app.engine.recorder import RecorderOptions, SessionRecorder
from app.engine.report import SessionReport
from app.errors import CLIError
from app.output.validate import OutputValidator
from app.store import sessions
from app.store.db import Database
from app.supervisor.context import recovery_prompt
from app.supervisor.hub import Hub
from app.supervisor.runner import Launch, LineSink, ProcessOutcome, RunningProcess, build_argv, child_env
from app.vocab import AttemptKind, SessionStatus

log = logging.getLogger(__name__)


@dataclass
class TierRequest:
    tier: int
    prompt: str
    system_prompt: str
    trigger: str
    parent_pk: int | None = None
    chain_id: int | None = None


@dataclass
class SessionResult:
    pk: int
    report: SessionReport
    api_failure: bool
    attempts: int


class SessionHandle:
    """Lets the scheduler (and the Stop button) reach a running session's process."""

    def __init__(self) -> None:
        self.process: RunningProcess | None = None
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True
        if self.process is not None:
            self.process.stop()


async def run_tier_session(db: Database, settings: Settings, validator: OutputValidator, hub: Hub | None,
                           req: TierRequest, handle: SessionHandle | None = None,
                           on_start: Callable[[int, SessionHandle], None] | None = None) -> SessionResult:
    """1. create the session row; 2. spawn and stream; 3. recover output by resuming;
    4. finalize (route, status) and return the report."""
    handle = handle or SessionHandle()
    cfg = settings.tier(req.tier)
    options = RecorderOptions.from_settings(settings, publish=hub.publish if hub else None)
    rec = await SessionRecorder.begin(db, validator, options, tier=req.tier, model=cfg.model, prompt=req.prompt,
                                      trigger=req.trigger, parent_session_id=req.parent_pk)
    state = settings.state_dir.resolve()
    cwd = state / "sessions" / str(rec.session_pk)
    home = state / "home"
    cwd.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    rec.cwd = str(cwd)
    env = child_env(home, settings.allowed_env())
    wire_schema = validator.wire_schema()

    def argv_for(prompt: str, resume: str | None = None) -> list[str]:
        """Every flag again on each run: ``--resume`` forgets ``--json-schema`` and
        ``--append-system-prompt`` (reference §8)."""
        return build_argv(settings.claude_bin, prompt=prompt, model=cfg.model, wire_schema=wire_schema,
                          system_prompt=req.system_prompt, allowed_tools=cfg.allowed_tools,
                          disallowed_tools=cfg.disallowed_tools, max_turns=cfg.max_turns,
                          add_dirs=settings.read_dirs(), resume=resume)

    argv = argv_for(req.prompt)
    await sessions.set_launch(db, rec.session_pk, cwd=str(cwd), chain_id=req.chain_id or rec.session_pk, argv=argv,
                              system_prompt=req.system_prompt)
    log.info("session %d started: tier %d (%s), trigger %s", rec.session_pk, req.tier, cfg.model, req.trigger)
    if hub:
        hub.notify(rec.session_pk, "session_started", tier=req.tier)
    if on_start:
        on_start(rec.session_pk, handle)

    async def sink(batch: list[bytes]) -> None:
        for line in batch:
            await rec.feed(line)
        await rec.flush()  # one commit per read: live pages see lines as they come

    exit_code: int | None = None
    stderr_tail = ""
    override: tuple[str, str] | None = None
    outcome: AttemptOutcome | None = None
    try:
        proc_out = await _spawn(handle, Launch(argv, cwd, env, cfg.timeout), sink, settings)
        exit_code, stderr_tail = proc_out.exit_code, proc_out.stderr_tail
        outcome = await rec.end_attempt(exit_code)
        override = _override(proc_out, cfg.timeout)
        retries = 0
        while (override is None and outcome.needs_recovery and rec.session_id
               and retries < settings.output_max_retries and not handle.stopped):
            retries += 1
            rec.begin_attempt(AttemptKind.RESUME)
            log.info("session %d: output recovery, resume %d of %d", rec.session_pk, retries,
                     settings.output_max_retries)
            errors = outcome.validation.errors_as_dicts() if outcome.validation else []
            resume_argv = argv_for(recovery_prompt(errors, outcome.has_output), resume=rec.session_id)
            proc_out = await _spawn(handle, Launch(resume_argv, cwd, env, cfg.timeout), sink, settings)
            exit_code, stderr_tail = proc_out.exit_code, proc_out.stderr_tail or stderr_tail
            outcome = await rec.end_attempt(exit_code)
            override = _override(proc_out, cfg.timeout)
        if len(rec.outcomes) > 1 and rec.outcomes[0].run.status == SessionStatus.COMPLETED and (
                (override and override[0] == SessionStatus.FAILED) or outcome.run.status == SessionStatus.FAILED):
            # The check itself completed; only a recovery resume failed (timeout, API error): keep
            # the run as completed (degraded: no valid output) rather than failing the session.
            why = override[1] if override else outcome.run.reason
            override = (SessionStatus.COMPLETED, f"output recovery stopped: resume attempt {outcome.attempt} failed ({why})")
    except CLIError as exc:
        override = (SessionStatus.FAILED, str(exc))
    except asyncio.CancelledError:
        # The supervisor itself is stopping: the only case that is "interrupted". Never leave the
        # row 'running'; the process group was killed by the runner's own cancellation path.
        await rec.finalize(status=SessionStatus.INTERRUPTED, reason="supervisor stopped while the session ran",
                           exit_code=exit_code, stderr_tail=stderr_tail or None)
        raise
    except Exception as exc:
        # A bug (ours, or storage failing): the session failed, and the operator sees why (issue #8).
        log.exception("session %d: internal error", rec.session_pk)
        await rec.finalize(status=SessionStatus.FAILED, reason=f"internal error: {type(exc).__name__}: {exc}",
                           exit_code=exit_code, stderr_tail=stderr_tail or None)
        raise
    report = await rec.finalize(status=override[0] if override else None, reason=override[1] if override else None,
                                exit_code=exit_code, stderr_tail=stderr_tail or None)
    if hub:
        hub.notify(rec.session_pk, "session_finished", status=report["status"])
    api_failure = bool(outcome and outcome.run.api_failure and override is None)
    return SessionResult(rec.session_pk, report, api_failure, report["attempts"])


async def _spawn(handle: SessionHandle, launch: Launch, sink: LineSink, settings: Settings) -> ProcessOutcome:
    process = RunningProcess(launch)
    handle.process = process
    if handle.stopped:
        process.stop()
    return await process.run(sink, settings.kill_grace)


def _override(proc: ProcessOutcome, timeout: float) -> tuple[str, str] | None:
    if proc.stopped:
        return (SessionStatus.INTERRUPTED, "stopped by an operator")
    if proc.timed_out:
        return (SessionStatus.FAILED, f"timed out after {timeout:g} s; the process group was killed")
    return None
