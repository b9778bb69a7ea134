"""The commands that put streams into the store and read what it holds.

``ingest`` stores a recorded stream (with a progress bar on a terminal); ``sessions``,
``events`` and ``memories`` list rows. The listing commands only read: they refuse to create an
empty database where none exists (:func:`~app.cli.base.require_database`).
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import click

from app.cli.base import (
    echo,
    emit_json,
    json_option,
    load_settings,
    load_validator,
    main,
    open_store,
    require_database,
    shown,
    state_options,
)
from app.cli.base import fail as _fail
from app.cli.base import run_async as _run
from app.cli.progress import ProgressBar
from app.engine.ingest import ingest_path, spool_stdin
from app.engine.report import SessionReport
from app.store import findings
from app.store import memories as memory_store
from app.store import sessions as session_store
from app.store.db import Database
from app.store.rows import EventRow, MemoryRow, SessionListRow
from app.vocab import MAX_TIER, MIN_TIER, Level, SessionStatus, values

log = logging.getLogger(__name__)


@main.command()
@click.argument("file", metavar="FILE.jsonl")
@state_options
@click.option("--schema", "schema", metavar="FILE", help="JSON Schema for structured_output (default: the bundled one).")
@click.option("--tier", type=click.IntRange(1, 9), help="Tier to record the session under.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr (default: when stderr is a terminal and without --json).")
@json_option
def ingest(file: str, home: str | None, db: str | None, schema: str | None, tier: int | None,
           progress: bool | None, as_json: bool) -> None:
    """Ingest a recorded stream-json session (FILE.jsonl, or - for stdin) and report what was routed.

    Creates the database in the state directory if there is none yet.
    """
    settings = load_settings(home=home, db=db)
    validator = load_validator(schema or settings.schema_file)
    path = Path(file)
    spooled = None
    if file == "-":
        spooled = path = spool_stdin()
    elif not path.exists():
        _fail(f"stream file not found: {file}")

    show = progress if progress is not None else (not as_json and sys.stderr.isatty())
    bar = ProgressBar(path.stat().st_size if path.is_file() else 0) if show else None

    async def go() -> tuple[SessionReport, bool]:
        async with await open_store(settings) as store:
            return await ingest_path(store, path, validator, settings, tier=tier,
                                     shown="stdin" if spooled is not None else None,
                                     progress=bar.update if bar is not None else None)

    try:
        report, stored_now = _run(go)
    finally:
        if bar is not None:
            bar.close()
        if spooled is not None:
            spooled.unlink(missing_ok=True)
    report["already_stored"] = not stored_now
    if as_json:
        emit_json(report)
    else:
        echo(format_report(report))


def format_report(r: SessionReport) -> str:
    lines = []
    head = f"session {r['id']} (CLI {shown(r['session_id'] or 'unknown')})"
    if r["tier"] is not None:
        head += f" tier {r['tier']}"
    head += f": {r['status']}"
    if r["degraded"]:
        head += " (degraded)"
    if r.get("already_stored"):
        head += " — already stored, nothing changed"
    lines.append(head)
    if r["status_reason"]:
        lines.append(f"  reason: {shown(r['status_reason'])}")
    v = r["validation"]
    vtext = "valid" if v["valid"] else ("n/a" if v["valid"] is None else f"invalid ({len(v['errors'])} errors)")
    lines.append(f"  source: {r['source']}, structured output {vtext}, attempts {r['attempts']}")
    lines.extend(f"    {shown(err['path'])}: {shown(err['message'])}" for err in v["errors"][:10])
    cost = f"${r['cost_usd']:.4f}" if r["cost_usd"] is not None else "n/a"
    lines.append(f"  cost {cost}, turns {r['num_turns'] if r['num_turns'] is not None else 'n/a'}, "
                 f"activity lines {r['activity_count']}")
    if r["summary"]:
        lines.append(f"  summary: {shown(r['summary'])}")
    levels = Counter(e["level"] for e in r["events"])
    lines.append(f"  events: {len(r['events'])}" + (f" ({', '.join(f'{k} {n}' for k, n in sorted(levels.items()))})"
                                                      if levels else ""))
    for e in r["events"][:20]:
        svc = f"[{shown(e['service'])}] " if e["service"] else ""
        orig = f" (level was {shown(repr(e['original_level']))})" if e["original_level"] else ""
        lines.append(f"    {e['level']:8} {svc}{shown(e['message'])}{orig}")
    lines.append(f"  memories: {len(r['memories'])}")
    for m in r["memories"][:20]:
        svc = f"{shown(m['service'])}:" if m["service"] else ""
        lines.append(f"    {svc}{shown(m['category'])} = {shown(m['value'])} (confidence {m['confidence']:.2f})")
    if r["services_checked"]:
        lines.append("  services: " + ", ".join(f"{shown(c['name'])} {c['status']}" for c in r["services_checked"]))
    esc = r["escalation"]
    if esc is None:
        lines.append("  escalation: no decision")
    elif esc["needed"]:
        lines.append(f"  escalation: NEEDED — {shown(esc['reason'] or 'no reason given')}")
        if esc["failed_checks"]:
            lines.append("    failed checks: " + ", ".join(map(shown, esc["failed_checks"])))
    else:
        lines.append("  escalation: not needed")
    lines.extend(f"  note: {shown(note)}" for note in r.get("notes") or [])
    return "\n".join(lines)


def _list_command(fetch: Callable[[Database], Awaitable[list[Any]]], state: tuple[str | None, str | None],
                  as_json: bool, render: Callable[[Any], str], empty: str) -> None:
    settings = load_settings(home=state[0], db=state[1])
    require_database(settings)

    async def go() -> list[Any]:
        async with await open_store(settings) as store:
            return await fetch(store)

    rows = _run(go)
    if as_json:
        emit_json(rows)
    elif not rows:
        echo(empty)
    else:
        for row in rows:
            echo(render(row))


@main.command()
@state_options
@json_option
@click.option("--status", type=click.Choice(values(SessionStatus)))
@click.option("--tier", type=click.IntRange(MIN_TIER, MAX_TIER))
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
def sessions(home: str | None, db: str | None, as_json: bool, status: str | None, tier: int | None, limit: int) -> None:
    """List stored sessions, newest first."""
    def render(s: SessionListRow) -> str:
        cost = f"${s['cost_usd']:.4f}" if s["cost_usd"] is not None else "-"
        flags = " degraded" if s["degraded"] else ""
        parent = f" parent={s['parent_session_id']}" if s["parent_session_id"] else ""
        return (f"{s['id']:>5}  {s['started_at']}  tier {s['tier'] if s['tier'] is not None else '-'}  {s['status']:<11}{flags}  "
                f"source={s['source'] or '-'}  {cost}  {shown(s['session_id'] or '-')}{parent}")

    _list_command(lambda store: session_store.list_sessions(store, status=status, tier=tier, limit=limit),
                  (home, db), as_json, render, "no sessions stored")


@main.command()
@state_options
@json_option
@click.option("--level", type=click.Choice(values(Level)))
@click.option("--service")
@click.option("--session", type=int, help="Our session id (the 'id' column of `tierops sessions`).")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
def events(home: str | None, db: str | None, as_json: bool, level: str | None, service: str | None, session: int | None,
           limit: int) -> None:
    """List routed events, newest first."""
    def render(e: EventRow) -> str:
        svc = f"[{shown(e['service'])}] " if e["service"] else ""
        # an event outlives its session: retention prunes the session, not the event
        owner = f"session {e['session_pk']}" if e["session_pk"] is not None else "session pruned"
        return f"{e['id']:>5}  {e['created_at']}  {owner}  {e['level']:<8} {svc}{shown(e['message'])}"

    _list_command(lambda store: findings.list_events(store, level=level, service=service, session=session,
                                                    limit=limit),
                  (home, db), as_json, render, "no events stored")


@main.command()
@state_options
@json_option
@click.option("--service")
@click.option("--category")
@click.option("--active/--inactive", default=None, help="Only active (or only deactivated) memories.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=200, show_default=True)
def memories(home: str | None, db: str | None, as_json: bool, service: str | None, category: str | None, active: bool | None,
             limit: int) -> None:
    """List what the agent remembers, most recently updated first."""
    def render(m: MemoryRow) -> str:
        svc = f"{shown(m['service'])}:" if m["service"] else ""
        state = "" if m["active"] else " (inactive)"
        return (f"{m['id']:>5}  {m['confidence']:.2f}  x{m['times_seen']}  {svc}{shown(m['category'])} = "
                f"{shown(m['value'])}{state}")

    _list_command(lambda store: memory_store.list_memories(store, service=service, category=category, active=active,
                                                      limit=limit),
                  (home, db), as_json, render, "no memories stored")


