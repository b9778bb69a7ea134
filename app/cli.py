"""The ``tierops`` command line.

Every command opens the store (migrations first), does one thing and closes it. Errors that are
the operator's to fix (missing file, bad schema, unreadable database) print one line starting
with ``tierops: error:`` and exit 2; nothing already stored is touched by a failed command.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import click

from app.config import Settings
from app.ingest import IngestError, ingest_path, spool_stdin
from app.output.validate import OutputValidator, SchemaLoadError
from app.store import queries
from app.store.db import Database, StoreError

EXIT_BAD_INPUT = 2


class CommandError(Exception):
    """An operator-facing error: printed as one line, exit code 2."""


def _fail(message: str) -> None:
    click.echo(f"tierops: error: {message}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def _settings(db: str | None) -> Settings:
    settings = Settings()
    if db:
        settings.db = Path(db)
    return settings


def _run(fn: Callable[[], Awaitable[Any]]) -> Any:
    try:
        return asyncio.run(fn())
    except (CommandError, IngestError, SchemaLoadError, StoreError) as exc:
        _fail(str(exc))


def _emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


db_option = click.option("--db", "db", metavar="PATH", help="SQLite file (default: $TIEROPS_DB or ./state/tierops.db).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tierops")
def main() -> None:
    """TierOps: tiered Claude Code health checks — ingest, store, route, escalate."""


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

    async def go() -> tuple[dict, bool]:
        async with await Database.open(settings.db) as store:
            return await ingest_path(store, path, validator, settings, tier=tier)

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
        raise  # unreachable


def format_report(r: dict) -> str:
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
    for err in v["errors"][:10]:
        lines.append(f"    {err['path']}: {err['message']}")
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
    for note in r.get("notes") or []:
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def _list_command(fetch: Callable[[Database], Awaitable[list[dict]]], db: str | None, as_json: bool,
                  render: Callable[[dict], str], empty: str) -> None:
    settings = _settings(db)

    async def go() -> list[dict]:
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
@click.option("--status", type=click.Choice(["running", "completed", "failed", "interrupted"]))
@click.option("--tier", type=int)
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
def sessions(db: str | None, as_json: bool, status: str | None, tier: int | None, limit: int) -> None:
    """List stored sessions, newest first."""
    def render(s: dict) -> str:
        cost = f"${s['cost_usd']:.4f}" if s["cost_usd"] is not None else "-"
        flags = " degraded" if s["degraded"] else ""
        parent = f" parent={s['parent_session_id']}" if s["parent_session_id"] else ""
        return (f"{s['id']:>5}  {s['started_at']}  tier {s['tier'] or '-'}  {s['status']:<11}{flags}  "
                f"source={s['source'] or '-'}  {cost}  {s['session_id'] or '-'}{parent}")

    _list_command(lambda store: queries.list_sessions(store, status=status, tier=tier, limit=limit),
                  db, as_json, render, "no sessions stored")


@main.command()
@db_option
@json_option
@click.option("--level", type=click.Choice(["info", "warning", "critical"]))
@click.option("--service")
@click.option("--session", type=int, help="Our session id (the 'id' column of `tierops sessions`).")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
def events(db: str | None, as_json: bool, level: str | None, service: str | None, session: int | None,
           limit: int) -> None:
    """List routed events, newest first."""
    def render(e: dict) -> str:
        svc = f"[{e['service']}] " if e["service"] else ""
        return f"{e['id']:>5}  {e['created_at']}  session {e['session_pk']}  {e['level']:<8} {svc}{e['message']}"

    _list_command(lambda store: queries.list_events(store, level=level, service=service, session=session,
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
    def render(m: dict) -> str:
        svc = f"{m['service']}:" if m["service"] else ""
        state = "" if m["active"] else " (inactive)"
        return f"{m['id']:>5}  {m['confidence']:.2f}  x{m['times_seen']}  {svc}{m['category']} = {m['value']}{state}"

    _list_command(lambda store: queries.list_memories(store, service=service, category=category, active=active,
                                                      limit=limit),
                  db, as_json, render, "no memories stored")


if __name__ == "__main__":  # pragma: no cover
    main()
