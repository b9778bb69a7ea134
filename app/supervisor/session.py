"""One tier session: spawn the CLI, stream it into the recorder, recover its output, finalize.

* Output recovery: a run that completes without valid output is resumed in the same CLI session
  (``--resume``, same cwd and HOME, every flag again) with a prompt listing the errors, at most
  ``TIEROPS_OUTPUT_MAX_RETRIES`` times; failures are recorded with their reason, never retried.
* Prompts: built from redacted text whatever the trigger, and never on the command line — the
  prompt goes to stdin, the system prompt to ``SYSTEM_PROMPT_FILE`` (0600, rewritten before every
  run). The database keeps exactly what the CLI was given.
* A dry run gets read-only tools (:func:`tools_for`); a tier budget is ``--max-budget-usd``, and a
  resume gets what is left of it (:func:`tier_budget`). MCP servers: :func:`mcp_for`.
* The CLI's identity is stored on the row as soon as it starts (for the sweep); any failure after
  the row exists ends the session ``failed`` with why. Rejected credentials stop the CLI at once
  and pause the model tiers (``credentials.py``); a Stop recorded by another process ends the
  session ``interrupted`` by an operator. The CLI's own transcript goes once the session is final.
  Why each rule: ARCHITECTURE.md, "The supervisor".

Log lines: the session's start (id, tier, model, trigger, parent) and each output recovery resume
at INFO, here; its end once, by the recorder's finalize, the one place every session ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.config import READ_ONLY_TOOLS, Settings, TierConfig
from app.engine.cli_transcripts import remove_session_files
from app.engine.mcp_launch import McpLaunch, plan_launch
from app.engine.outcomes import AttemptOutcome
from app.engine.recorder import Publisher, RecorderOptions, SessionRecorder
from app.engine.report import SessionReport
from app.errors import CLIError, ConfigError, StorageUnavailable
from app.logs import oneline
from app.output.extract import format_section, recovery_section
from app.output.outcome import Budget, CredentialsRejected, usd
from app.output.spec import OutputSpec
from app.output.validate import OutputValidator
from app.paths import PACKAGE_ROOT
from app.probe.variables import SERVE_VARIABLES
from app.store import guard as guard_store
from app.store import processes, sessions
from app.store import runbooks as runbook_store
from app.store.db import Database
from app.store.rows import ActivityRow
from app.store.runbooks import RunbookGiven
from app.supervisor.context import recovery_prompt
from app.supervisor.credentials import ModelTiersPaused, model_tiers_paused, pause_model_tiers
from app.supervisor.guarding import database_arguments, hook_settings, policy_for
from app.supervisor.halt import Halt
from app.supervisor.hub import Hub
from app.supervisor.launch import Launch, build_argv, child_env, stdin_bytes
from app.supervisor.node import current as current_node
from app.supervisor.process_groups import ProcessIdentity
from app.supervisor.runner import LineSink, ProcessOutcome, RunningProcess
from app.supervisor.skills import sync_skills
from app.tasks import spawn
from app.vocab import FIRST_MODEL_TIER, PROBE_TIER, AttemptKind, SessionStatus

log = logging.getLogger(__name__)

# In the session's cwd: the appended system prompt (--append-system-prompt-file), 0600.
SYSTEM_PROMPT_FILE = ".tierops-system-prompt.md"


@dataclass
class TierRequest:
    tier: int
    prompt: str
    system_prompt: str
    trigger: str
    parent_pk: int | None = None
    chain_id: int | None = None
    spec: OutputSpec | None = None  # the output contract; None: the default, native
    dry_run: bool = False  # read-only tools, told to only say what it would do
    approved_by: str | None = None  # the approval that let this tier run (the guard's policy says so)
    runbooks: Sequence[RunbookGiven] = ()  # what its system prompt quotes or links (recorded with the session)
    # A conversation's turn (chat): its folder, the same on every turn, so that --resume finds the
    # CLI session (reference §8: same HOME and cwd); the CLI session it continues; the CLI's own
    # transcript is kept for the next turn; its own limits instead of the tier's; text as it is
    # generated (--include-partial-messages); ``tap`` sees every stored line as the hub does.
    cwd: Path | None = None
    resume: str | None = None
    keep_cli_session: bool = False
    tier_config: TierConfig | None = None
    partial_messages: bool = False
    tap: Callable[[int, list[ActivityRow]], None] | None = None


@dataclass
class SessionResult:
    pk: int
    report: SessionReport
    api_failure: bool
    attempts: int


DRY_RUN_DISALLOWED = ("Edit", "Write", "NotebookEdit")


def tools_for(cfg: TierConfig, dry_run: bool, mcp_tools: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """A run's ``--allowedTools`` and ``--disallowedTools``: the tier's own, or in a dry run the
    read-only rules and the editing tools removed; plus ``mcp_tools``, the CLI rules of the MCP
    tools the run may call (``engine/mcp_launch``)."""
    if not dry_run:
        return [*cfg.allowed_tools, *mcp_tools], cfg.disallowed_tools
    allowed = [rule.strip() for rule in READ_ONLY_TOOLS.split(",")]  # its rules hold no comma
    return [*allowed, *mcp_tools], list(dict.fromkeys([*DRY_RUN_DISALLOWED, *cfg.disallowed_tools]))


def mcp_for(settings: Settings, tier: int, dry_run: bool) -> tuple[McpLaunch | None, str | None]:
    """The run's MCP servers (None: none), or why they cannot be given: the session fails with it."""
    try:
        return plan_launch(settings, tier, dry_run), None
    except ConfigError as exc:
        return None, f"MCP servers: {exc}"


def tier_budget(settings: Settings, tier: int) -> Budget | None:
    """The tier's ``--max-budget-usd``; None without one (tier 0 costs nothing)."""
    amount = {1: settings.tier1_max_budget_usd, 2: settings.tier2_max_budget_usd,
              3: settings.tier3_max_budget_usd}.get(tier, 0.0)
    return Budget(amount, f"TIEROPS_TIER{tier}_MAX_BUDGET_USD") if amount > 0 else None


STOPPED_BY_OPERATOR = "stopped by an operator"
STOPPED_BY_SHUTDOWN = "the supervisor shut down while the session ran"
STORAGE_FINAL_WRITE = 5.0  # seconds to record "storage error" once storage has been given up on


class SessionHandle:
    """Lets the scheduler (and the Stop button) reach a running session's process."""

    def __init__(self) -> None:
        self.process: RunningProcess | None = None
        self.stopped = False
        self.stop_reason = STOPPED_BY_OPERATOR

    def stop(self, reason: str = STOPPED_BY_OPERATOR) -> None:
        """Kill the session's CLI; ``reason`` is what the session row will say ("interrupted"
        names who stopped it — an operator, or the supervisor shutting down)."""
        if not self.stopped:
            self.stop_reason = reason
        self.stopped = True
        if self.process is not None:
            self.process.stop()


async def run_tier_session(db: Database, settings: Settings, validator: OutputValidator, hub: Hub | None,
                           req: TierRequest, handle: SessionHandle | None = None,
                           on_start: Callable[[int, SessionHandle], None] | None = None,
                           halt: Halt | None = None) -> SessionResult:
    """1. create the session row; 2. spawn and stream; 3. recover output by resuming;
    4. finalize (route, status) and return the report. ``halt``: the cycle's stop flag; once a stop
    or a shutdown set it, no session starts (:class:`~app.supervisor.halt.StopRequested`, raised
    before the row exists)."""
    if halt is not None:
        halt.check()  # stop means stop: no new CLI once a stop of the chain or a shutdown is requested
    handle = handle or SessionHandle()
    if req.tier >= FIRST_MODEL_TIER and (paused := await model_tiers_paused(db, settings)) is not None:
        raise ModelTiersPaused(paused)  # before the row: nothing to record, the caller says why
    cfg = req.tier_config or settings.tier(req.tier)
    spec = req.spec or OutputSpec.default(validator, settings.output_mode)
    validator = spec.validator
    max_retries = spec.max_retries if spec.max_retries is not None else settings.output_max_retries
    budget = tier_budget(settings, req.tier)
    mcp, mcp_problem = mcp_for(settings, req.tier, req.dry_run)
    allowed_tools, disallowed_tools = tools_for(cfg, req.dry_run, mcp.allowed_tools if mcp else ())
    options = RecorderOptions.from_settings(settings, publish=_publisher(hub, req.tap), route_output=spec.routed,
                                            output_mode=spec.mode, budget=budget, secrets=mcp.secrets if mcp else ())
    redact = options.redact or db.redact  # the stream's redactor: what the CLI is given, the row keeps
    prompt = redact(req.prompt)
    rec = await SessionRecorder.begin(db, validator, options, tier=req.tier, model=cfg.model, prompt=prompt,
                                      trigger=req.trigger, parent_session_id=req.parent_pk, contract=spec,
                                      cwd=str(req.cwd) if req.cwd else None,
                                      node_id=node.id if (node := current_node(db)) is not None else None,
                                      dry_run=req.dry_run, max_budget_usd=budget.usd if budget else None)
    rec.log_context["chain"] = req.chain_id or rec.session_pk  # the chain's first session names it
    records: list[asyncio.Task[None]] = []

    def record(identity: ProcessIdentity) -> None:
        """Store the started CLI's identity (for the sweep of a later supervisor) without holding
        up its stream: a background write, awaited before the session is finalized."""
        records.append(spawn(processes.record_process(db, rec.session_pk, identity.pid, identity.pgid,
                                                      identity.start_time), f"session-{rec.session_pk}-process"))

    exit_code: int | None = None
    stderr_tail = ""
    override: tuple[str, str] | None = None
    outcome: AttemptOutcome | None = None
    rejected: CredentialsRejected | None = None  # the API refused the credentials the CLI was given
    env: dict[str, str] = {}
    home: Path | None = None
    cwd: Path | None = None

    def forget_cli_transcript() -> None:
        """The session is final (no resume follows): the CLI's verbatim copy goes."""
        if home is not None and not req.keep_cli_session:
            remove_session_files(home, str(cwd) if cwd else None, rec.session_id)

    try:
        state = settings.state_dir.resolve()
        cwd = req.cwd or state / "sessions" / str(rec.session_pk)
        home = state / "home"
        cwd.mkdir(parents=True, exist_ok=True)
        home.mkdir(parents=True, exist_ok=True)
        rec.cwd = str(cwd)
        if req.tier >= FIRST_MODEL_TIER:  # the extensions' skills, in the CLI's HOME (never fails a session)
            await asyncio.to_thread(sync_skills, home, settings.extension_dirs())
        await runbook_store.record_given(db, rec.session_pk, req.runbooks)
        env = child_env(home, settings.allowed_env())
        if req.tier == PROBE_TIER:
            env["PYTHONPATH"] = str(PACKAGE_ROOT)  # the probe runs this package, installed or not
            # `serve`'s address, for a checks file's ${TIEROPS_SERVE_URL} (app/probe/variables.py)
            env.update({name: os.environ[name] for name in SERVE_VARIABLES if name in os.environ})
        if mcp_problem is not None:
            raise CLIError(mcp_problem)
        if mcp is not None:
            env.update(mcp.env)  # the values of the config's ${VAR}s: never on the command line
            # 2.1.197 connects MCP servers in the background by default: a slow server is still
            # "pending" in the init line and its tools answer "still connecting" to the first turn
            # (seen with a Python SDK server on a loaded machine). Blocking makes the first turn
            # see every server connected or failed.
            env["MCP_CONNECTION_NONBLOCKING"] = "0"
        mcp_json = mcp.config_json(env) if mcp else None
        # Native mode hands the schema to the CLI (--json-schema, its StructuredOutput
        # tool); prompted mode puts it in the prompt and reads the JSON from the final text.
        prompted = spec.mode == "prompted"
        wire_schema = None if prompted or spec.mode == "conversation" else validator.wire_schema()
        first_prompt = f"{prompt}\n\n{format_section(spec.schema)}" if prompted else prompt
        system_text = redact(req.system_prompt)
        system_file = cwd / SYSTEM_PROMPT_FILE
        guard_json = None
        if settings.guard and req.tier >= FIRST_MODEL_TIER:
            policy = policy_for(settings, req.tier, dry_run=req.dry_run, allowed_tools=allowed_tools,
                                disallowed_tools=disallowed_tools, trigger=req.trigger, approved_by=req.approved_by)
            await guard_store.set_policy(db, rec.session_pk, policy.as_json())
            guard_json = hook_settings(database_arguments(settings.database_target, settings.state_dir),
                                       rec.session_pk, settings.guard_timeout)

        def launch_for(text: str, resume: str | None = None, budget_usd: float | None = None) -> Launch:
            """Every flag again on each run: ``--resume`` forgets ``--json-schema`` and
            ``--append-system-prompt`` (reference §8), so the system prompt's file is written
            again too. ``text`` (redacted by the caller) goes to stdin; the command line holds
            neither text."""
            _write_private(system_file, system_text)
            argv = build_argv(cfg.command, model=cfg.model, wire_schema=wire_schema,
                              system_prompt_file=str(system_file), allowed_tools=allowed_tools,
                              disallowed_tools=disallowed_tools, max_turns=cfg.max_turns,
                              add_dirs=settings.read_dirs(), resume=resume, max_budget_usd=budget_usd,
                              settings_json=guard_json, mcp_config=mcp_json, partial_messages=req.partial_messages)
            return Launch(argv, cwd, env, cfg.timeout, stdin=stdin_bytes(text))

        launch = launch_for(first_prompt, resume=req.resume, budget_usd=budget.usd if budget else None)
        await sessions.set_launch(db, rec.session_pk, cwd=str(cwd), chain_id=req.chain_id or rec.session_pk,
                                  argv=launch.argv, system_prompt=system_text)
        log.info("session %d started: tier %d (%s), trigger %s%s", rec.session_pk, req.tier, cfg.model, req.trigger,
                 f", parent session {req.parent_pk}" if req.parent_pk is not None else "",
                 extra={**rec.log_context, "model": cfg.model, "trigger": req.trigger, "parent": req.parent_pk})
        if hub:
            hub.notify(rec.session_pk, "session_started", tier=req.tier)
        if on_start:
            on_start(rec.session_pk, handle)

        async def sink(batch: list[bytes]) -> None:
            for line in batch:
                await rec.feed(line)
            await rec.flush()  # one commit per read: live pages see lines as they come
            if (refused := rec.credentials_rejected) is not None and handle.process is not None:
                # The CLI would retry a 401 for minutes (reference §6): stop it now.
                handle.process.abort(f"the API rejected the credentials (HTTP {refused.status} {refused.error})")

        proc_out = await _spawn(handle, launch, sink, settings, record, db, rec.session_pk)
        exit_code, stderr_tail = proc_out.exit_code, proc_out.stderr_tail
        rejected = rec.credentials_rejected
        outcome = await rec.end_attempt(exit_code)
        override = _override(proc_out, cfg.timeout, handle, rejected)
        retries = 0
        while (override is None and outcome.needs_recovery and rec.session_id
               and retries < max_retries and not handle.stopped):
            left: float | None = None
            if budget is not None:  # the CLI would start the resume's budget again from $0
                left = round(budget.usd - _spent(rec.outcomes), 6)  # "0.03" on the command line, not 0.0299999…
                if left <= 0:
                    override = (SessionStatus.COMPLETED, f"output recovery not started: the session spent "
                                f"{usd(budget.usd - left)} of its {usd(budget.usd)} budget ({budget.setting})")
                    break
            retries += 1
            rec.begin_attempt(AttemptKind.RESUME)
            log.info("session %d: output recovery, resume %d of %d", rec.session_pk, retries,
                     max_retries, extra={**rec.log_context, "attempt": rec.attempt})
            errors = outcome.validation.errors_as_dicts() if outcome.validation else []
            again = (recovery_section(errors, outcome.has_output) if prompted
                     else recovery_prompt(errors, outcome.has_output))
            resume = launch_for(redact(again), resume=rec.session_id, budget_usd=left)
            proc_out = await _spawn(handle, resume, sink, settings, record, db, rec.session_pk)
            exit_code, stderr_tail = proc_out.exit_code, proc_out.stderr_tail or stderr_tail
            rejected = rec.credentials_rejected
            outcome = await rec.end_attempt(exit_code)
            override = _override(proc_out, cfg.timeout, handle, rejected)
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
        forget_cli_transcript()
        raise
    except StorageUnavailable as exc:
        # Storage stayed broken past TIEROPS_STORAGE_RETRY_LIMIT: the runner killed the CLI when its
        # sink failed; record the truth if storage allows it now, else the next sweep marks the row.
        # Not logged here: the recorder logged giving up, and finalize logs the session's end.
        try:
            await asyncio.wait_for(rec.finalize(status=SessionStatus.FAILED, reason=str(exc), exit_code=exit_code,
                                                stderr_tail=stderr_tail or None), STORAGE_FINAL_WRITE)
        except (StorageUnavailable, TimeoutError):
            log.error("session %d: its final status could not be stored (%s); the next sweep marks it", rec.session_pk,
                      oneline(exc), extra={**rec.log_context, "status": SessionStatus.FAILED})
        forget_cli_transcript()  # no resume follows either way
        raise
    except Exception as exc:
        # A bug (ours, or storage failing): the session failed, and the operator sees why.
        log.exception("session %d: internal error", rec.session_pk, extra=rec.log_context)
        await rec.finalize(status=SessionStatus.FAILED, reason=f"internal error: {type(exc).__name__}: {exc}",
                           exit_code=exit_code, stderr_tail=stderr_tail or None)
        forget_cli_transcript()
        raise
    await _settle(records)
    report = await rec.finalize(status=override[0] if override else None, reason=override[1] if override else None,
                                exit_code=exit_code, stderr_tail=stderr_tail or None)
    forget_cli_transcript()  # after output recovery: no resume will follow
    if hub:
        hub.notify(rec.session_pk, "session_finished", status=report["status"])
    if rejected is not None:
        try:  # every later tier >= 1 would meet the same refusal: paused until the credentials change
            await pause_model_tiers(db, f"HTTP {rejected.status} {rejected.error}", env, home, rec.session_pk)
        except Exception:  # the session's own record stands; the next session meets the refusal again
            log.exception("session %d: the pause of the model tiers could not be recorded", rec.session_pk,
                          extra=rec.log_context)
    api_failure = bool(outcome and outcome.run.api_failure and override is None)
    return SessionResult(rec.session_pk, report, api_failure, report["attempts"])


def _publisher(hub: Hub | None, tap: Callable[[int, list[ActivityRow]], None] | None) -> Publisher | None:
    """Where the recorder publishes stored lines: the hub (live pages), and ``tap`` (a chat turn's
    answer stream) when given. A failing tap is logged, never the recorder's problem."""
    if tap is None:
        return hub.publish if hub else None

    def publish(pk: int, rows: list[ActivityRow]) -> None:
        if hub is not None:
            hub.publish(pk, rows)
        try:
            tap(pk, rows)
        except Exception:
            log.exception("session %d: the chat answer stream failed on a line", pk, extra={"session": pk})

    return publish


def _spent(outcomes: list[AttemptOutcome]) -> float:
    """Dollars the session's runs cost so far (each result line counts its own process)."""
    return sum(o.result.total_cost_usd or 0.0 for o in outcomes if o.result is not None)


def _write_private(path: Path, text: str) -> None:
    """``text`` in a new file at ``path`` readable by this user only (0600, whatever the umask),
    replacing what is there: in the CLI's cwd a model's tools may have changed the old file or put
    a link in its place, which is removed, never followed."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(text.encode("utf-8", "replace"))


async def _settle(records: list[asyncio.Task[None]]) -> None:
    """Wait for the process records still being written (a failure is logged by ``spawn``)."""
    if records:
        await asyncio.gather(*records, return_exceptions=True)
        records.clear()


async def _spawn(handle: SessionHandle, launch: Launch, sink: LineSink, settings: Settings,
                 on_start: Callable[[ProcessIdentity], None], db: Database, pk: int) -> ProcessOutcome:
    process = RunningProcess(launch)
    handle.process = process
    if handle.stopped:
        process.stop()
    outcome = await process.run(sink, settings.kill_grace, on_start)
    try:
        by = None if handle.stopped else await processes.stop_requested_by(db, pk)
    except Exception:  # the run's own outcome stands; storage trouble shows in the finalize
        log.exception("session %d: reading a stop request failed", pk, extra={"session": pk})
        by = None
    if by is not None:
        # Another process (the dashboard of a server) stopped this session by signalling
        # its CLI's process group; it recorded the request first, so the row tells the truth.
        handle.stop_reason, handle.stopped = f"{STOPPED_BY_OPERATOR} ({by})", True
        outcome.stopped = True
        log.warning("session %d: stopped from another process by %s", pk, by, extra={"session": pk})
    return outcome


def _override(proc: ProcessOutcome, timeout: float, handle: SessionHandle,
              rejected: CredentialsRejected | None = None) -> tuple[str, str] | None:
    if proc.stopped:
        return (SessionStatus.INTERRUPTED, handle.stop_reason)
    if rejected is not None:  # whether the CLI was stopped for it or gave up by itself
        return (SessionStatus.FAILED, rejected.reason())
    if proc.timed_out:
        return (SessionStatus.FAILED, f"timed out after {timeout:g} s; the process group was killed")
    return None
