"""The ``tierops`` command line.

Every command opens the store (migrations first), does one thing and closes it. Errors that are
the operator's to fix (a bad flag, an invalid ``TIEROPS_*`` setting, a missing or non-stream-json
file, a bad schema, an unreadable database, a full disk) print one line starting with
``tierops: error:`` and exit 2, never a traceback; nothing already stored is touched by a failed
command.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn

import click
from pydantic import ValidationError
from pydantic_settings import SettingsError

from app.config import Settings
from app.engine.ingest import describe_storage_error, ingest_path, spool_stdin
from app.engine.report import SessionReport
from app.errors import InputError, TierOpsError
from app.output.validate import OutputValidator, SchemaLoadError
from app.redact import Redactor, install_log_redaction
from app.store import findings
from app.store import memories as memory_store
from app.store import sessions as session_store
from app.store.db import Database, is_transient
from app.store.rows import ChainLink, EventRow, MemoryRow, SessionListRow
from app.vocab import MAX_TIER, MIN_TIER, Level, SessionStatus, Trigger, values

EXIT_BAD_INPUT = 2
EXIT_STOPPED = 130  # 128 + SIGINT, as shells report a stopped command


class CommandError(InputError):
    """An operator-facing error: printed as one line, exit code 2."""


def _fail(message: str) -> NoReturn:
    click.echo(f"tierops: error: {' '.join(message.splitlines())}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def settings_problems(exc: ValidationError) -> str:
    """Each invalid setting under its environment name: ``TIEROPS_TIER1_TIMEOUT: … (got 'abc')``."""
    problems = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else ""
        name = f"TIEROPS_{field.upper()}" if field else "settings"
        message = err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        if isinstance(value, str) and "token" not in field:  # never echo a secret
            shown = value if len(value) <= 60 else value[:57] + "..."
            message += f" (got {shown!r})"
        problems.append(f"{name}: {message}")
    return "; ".join(problems)


def _settings(db: str | None) -> Settings:
    try:
        settings = Settings()
    except ValidationError as exc:
        _fail(settings_problems(exc))
    except SettingsError as exc:
        _fail(f"settings: {exc}")
    if db:
        settings.db = Path(db)
    return settings


def _run(fn: Callable[[], Awaitable[Any]], *, stoppable: bool = False) -> Any:
    """Run ``fn`` on a fresh event loop. Every :class:`TierOpsError` is one error line, exit 2.

    ``stoppable``: SIGTERM and SIGINT cancel the command's task through the loop's own signal
    handlers (``loop.add_signal_handler``), so running sessions are finalized ``interrupted`` and
    their process groups killed. Installed on the loop, the handlers also work when the shell
    started us with SIGINT ignored (a background job of a non-interactive shell).
    """
    async def main() -> Any:
        if stoppable:
            loop = asyncio.get_running_loop()
            if (task := asyncio.current_task()) is not None:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, task.cancel)
        return await fn()

    try:
        return asyncio.run(main())
    except TierOpsError as exc:
        _fail(str(exc))
    except Exception as exc:
        if not is_transient(exc):  # a bug: its traceback is the useful output
            raise
        _fail(f"storage error: {describe_storage_error(exc)}")  # disk full, I/O error, locked
    except (asyncio.CancelledError, KeyboardInterrupt):
        click.echo("stopped", err=True)
        sys.exit(EXIT_STOPPED)


def _emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


db_option = click.option("--db", "db", metavar="PATH", help="SQLite file (default: $TIEROPS_DB or ./state/tierops.db).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


class _Main(click.Group):
    """click's usage errors (a bad flag or value) as one ``tierops: error:`` line and exit 2, like
    every other error, instead of click's usage block."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        kwargs.setdefault("prog_name", "tierops")  # also under python -m app.cli
        try:
            rv = super().main(*args, **kwargs)
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            _fail(exc.format_message() + hint)
        except click.ClickException as exc:
            _fail(exc.format_message())
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tierops")
def main() -> None:
    """TierOps: tiered Claude Code health checks — ingest, store, route, escalate."""
    # Nothing secret in any log line (issue #9 §5), whichever command logs.
    install_log_redaction(Redactor.from_environment())


@main.command()
@click.argument("file", metavar="FILE.jsonl")
@db_option
@click.option("--schema", "schema", metavar="FILE", help="JSON Schema for structured_output (default: the bundled one).")
@click.option("--tier", type=click.IntRange(1, 9), help="Tier to record the session under.")
@json_option
def ingest(file: str, db: str | None, schema: str | None, tier: int | None, as_json: bool) -> None:
    """Ingest a recorded stream-json session (FILE.jsonl, or - for stdin) and report what was routed."""
    settings = _settings(db)
    validator = _load_validator(schema or settings.schema_file)
    path = Path(file)
    spooled = None
    if file == "-":
        spooled = path = spool_stdin()
    elif not path.exists():
        _fail(f"stream file not found: {file}")

    async def go() -> tuple[SessionReport, bool]:
        async with await Database.open(settings.db) as store:
            return await ingest_path(store, path, validator, settings, tier=tier,
                                     shown="stdin" if spooled is not None else None)

    try:
        report, stored_now = _run(go)
    finally:
        if spooled is not None:
            spooled.unlink(missing_ok=True)
    report["already_stored"] = not stored_now
    if as_json:
        _emit_json(report)
    else:
        click.echo(format_report(report))


def _load_validator(path: str | Path) -> OutputValidator:
    try:
        return OutputValidator.from_file(path)
    except SchemaLoadError as exc:
        _fail(str(exc))


def format_report(r: SessionReport) -> str:
    lines = []
    head = f"session {r['id']} (CLI {r['session_id'] or 'unknown'})"
    if r["tier"]:
        head += f" tier {r['tier']}"
    head += f": {r['status']}"
    if r["degraded"]:
        head += " (degraded)"
    if r.get("already_stored"):
        head += " — already stored, nothing changed"
    lines.append(head)
    if r["status_reason"]:
        lines.append(f"  reason: {r['status_reason']}")
    v = r["validation"]
    vtext = "valid" if v["valid"] else ("n/a" if v["valid"] is None else f"invalid ({len(v['errors'])} errors)")
    lines.append(f"  source: {r['source']}, structured output {vtext}, attempts {r['attempts']}")
    lines.extend(f"    {err['path']}: {err['message']}" for err in v["errors"][:10])
    cost = f"${r['cost_usd']:.4f}" if r["cost_usd"] is not None else "n/a"
    lines.append(f"  cost {cost}, turns {r['num_turns'] if r['num_turns'] is not None else 'n/a'}, "
                 f"activity lines {r['activity_count']}")
    if r["summary"]:
        lines.append(f"  summary: {r['summary']}")
    levels = Counter(e["level"] for e in r["events"])
    lines.append(f"  events: {len(r['events'])}" + (f" ({', '.join(f'{k} {n}' for k, n in sorted(levels.items()))})"
                                                      if levels else ""))
    for e in r["events"][:20]:
        svc = f"[{e['service']}] " if e["service"] else ""
        orig = f" (level was {e['original_level']!r})" if e["original_level"] else ""
        lines.append(f"    {e['level']:8} {svc}{e['message']}{orig}")
    lines.append(f"  memories: {len(r['memories'])}")
    for m in r["memories"][:20]:
        svc = f"{m['service']}:" if m["service"] else ""
        lines.append(f"    {svc}{m['category']} = {m['value']} (confidence {m['confidence']:.2f})")
    if r["services_checked"]:
        lines.append("  services: " + ", ".join(f"{c['name']} {c['status']}" for c in r["services_checked"]))
    esc = r["escalation"]
    if esc is None:
        lines.append("  escalation: no decision")
    elif esc["needed"]:
        lines.append(f"  escalation: NEEDED — {esc['reason'] or 'no reason given'}")
        if esc["failed_checks"]:
            lines.append("    failed checks: " + ", ".join(esc["failed_checks"]))
    else:
        lines.append("  escalation: not needed")
    lines.extend(f"  note: {note}" for note in r.get("notes") or [])
    return "\n".join(lines)


def _list_command(fetch: Callable[[Database], Awaitable[list[Any]]], db: str | None, as_json: bool,
                  render: Callable[[Any], str], empty: str) -> None:
    settings = _settings(db)

    async def go() -> list[Any]:
        async with await Database.open(settings.db) as store:
            return await fetch(store)

    rows = _run(go)
    if as_json:
        _emit_json(rows)
    elif not rows:
        click.echo(empty)
    else:
        for row in rows:
            click.echo(render(row))


@main.command()
@db_option
@json_option
@click.option("--status", type=click.Choice(values(SessionStatus)))
@click.option("--tier", type=click.IntRange(MIN_TIER, MAX_TIER))
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
def sessions(db: str | None, as_json: bool, status: str | None, tier: int | None, limit: int) -> None:
    """List stored sessions, newest first."""
    def render(s: SessionListRow) -> str:
        cost = f"${s['cost_usd']:.4f}" if s["cost_usd"] is not None else "-"
        flags = " degraded" if s["degraded"] else ""
        parent = f" parent={s['parent_session_id']}" if s["parent_session_id"] else ""
        return (f"{s['id']:>5}  {s['started_at']}  tier {s['tier'] or '-'}  {s['status']:<11}{flags}  "
                f"source={s['source'] or '-'}  {cost}  {s['session_id'] or '-'}{parent}")

    _list_command(lambda store: session_store.list_sessions(store, status=status, tier=tier, limit=limit),
                  db, as_json, render, "no sessions stored")


@main.command()
@db_option
@json_option
@click.option("--level", type=click.Choice(values(Level)))
@click.option("--service")
@click.option("--session", type=int, help="Our session id (the 'id' column of `tierops sessions`).")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
def events(db: str | None, as_json: bool, level: str | None, service: str | None, session: int | None,
           limit: int) -> None:
    """List routed events, newest first."""
    def render(e: EventRow) -> str:
        svc = f"[{e['service']}] " if e["service"] else ""
        return f"{e['id']:>5}  {e['created_at']}  session {e['session_pk']}  {e['level']:<8} {svc}{e['message']}"

    _list_command(lambda store: findings.list_events(store, level=level, service=service, session=session,
                                                    limit=limit),
                  db, as_json, render, "no events stored")


@main.command()
@db_option
@json_option
@click.option("--service")
@click.option("--category")
@click.option("--active/--inactive", default=None, help="Only active (or only deactivated) memories.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=200, show_default=True)
def memories(db: str | None, as_json: bool, service: str | None, category: str | None, active: bool | None,
             limit: int) -> None:
    """List what the agent remembers, most recently updated first."""
    def render(m: MemoryRow) -> str:
        svc = f"{m['service']}:" if m["service"] else ""
        state = "" if m["active"] else " (inactive)"
        return f"{m['id']:>5}  {m['confidence']:.2f}  x{m['times_seen']}  {svc}{m['category']} = {m['value']}{state}"

    _list_command(lambda store: memory_store.list_memories(store, service=service, category=category, active=active,
                                                      limit=limit),
                  db, as_json, render, "no memories stored")


def _supervisor_parts(db: str | None) -> tuple[Settings, OutputValidator]:
    settings = _settings(db)
    return settings, _load_validator(settings.schema_file)


def _render_chain(chain: list[ChainLink]) -> str:
    lines = []
    for s in chain:
        cost = f"${s['cost_usd']:.4f}" if s["cost_usd"] is not None else "-"
        flags = " degraded" if s["degraded"] else ""
        lines.append(f"tier {s['tier']} ({s['model']}) session {s['id']} [{s['session_id'] or '-'}]: {s['status']}{flags}, "
                     f"source {s['source']}, attempts {s['attempts']}, {cost}")
        if s["status_reason"]:
            lines.append(f"  reason: {s['status_reason']}")
        if s["escalated_to"]:
            lines.append(f"  escalated to session {s['escalated_to']}: {s['escalation_reason'] or ''}")
        if s["attention"]:
            lines.append(f"  NEEDS HUMAN ATTENTION: {s['attention']}")
    total = sum(s["cost_usd"] or 0 for s in chain)
    lines.append(f"chain: {len(chain)} session(s), ${total:.4f}")
    return "\n".join(lines)


@main.command()
@db_option
@json_option
@click.option("--tier", type=click.IntRange(MIN_TIER, MAX_TIER), default=MIN_TIER, show_default=True,
              help="Tier to start the chain at.")
@click.option("--prompt", "prompt", help="Extra operator request appended to the tier prompt.")
def run(db: str | None, as_json: bool, tier: int, prompt: str | None) -> None:
    """Run one escalation chain now and print it. Refused at once while another cycle runs."""
    from app.supervisor.scheduler import Supervisor

    settings, validator = _supervisor_parts(db)
    if tier > settings.max_tier:
        _fail(f"--tier {tier} is above TIEROPS_MAX_TIER={settings.max_tier}")

    async def go() -> list[ChainLink]:
        async with await Database.open(settings.db) as store:
            return await Supervisor(store, settings, validator).run_cycle(tier=tier, prompt=prompt,
                                                                          trigger=Trigger.MANUAL)

    chain = _run(go, stoppable=True)
    if as_json:
        _emit_json(chain)
    else:
        click.echo(_render_chain(chain))
    if any(s["status"] == SessionStatus.FAILED for s in chain):
        sys.exit(1)


@main.command()
@db_option
@click.option("--once", is_flag=True, help="Run one scheduled cycle and exit.")
def supervise(db: str | None, once: bool) -> None:
    """Run cycles every TIEROPS_INTERVAL seconds (or on TIEROPS_CRON), first one at start."""
    import logging

    from app.supervisor.scheduler import Supervisor

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings, validator = _supervisor_parts(db)

    async def go() -> None:
        async with await Database.open(settings.db) as store:
            sup = Supervisor(store, settings, validator)
            recovered = await sup.recover_interrupted()
            if recovered:
                click.echo(f"marked {recovered} session(s) left running by a stopped supervisor as interrupted")
            try:
                await sup.run_forever(cycles=1 if once else None)
            finally:
                await sup.shutdown()
            if sup.last_chain:
                click.echo(_render_chain(sup.last_chain))

    _run(go, stoppable=True)


@main.command()
@db_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (non-loopback needs a token).")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True)
def serve(db: str | None, host: str, port: int) -> None:
    """Serve the dashboard and REST API, and run the scheduled cycles (unless TIEROPS_SCHEDULE=false)."""
    from app.web.app import serve as serve_app

    settings, _ = _supervisor_parts(db)
    try:
        serve_app(settings, host, port)
    except TierOpsError as exc:
        _fail(str(exc))



if __name__ == "__main__":  # pragma: no cover
    main()
