"""``tierops ingest``: store a recorded stream-json session and report what was routed.

The same recorder, validator and routing as a live session (``app/engine/ingest.py``); a stream
already stored is recognised and nothing changes. A progress bar on stderr when it is a terminal.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from pathlib import Path

import click

from app.cli.base import (
    echo,
    emit_json,
    json_option,
    load_settings,
    load_validator,
    main,
    open_store,
    shown,
    state_options,
)
from app.cli.base import fail as _fail
from app.cli.base import run_async as _run
from app.cli.progress import ProgressBar
from app.engine.ingest import ingest_path, spool_stdin
from app.engine.report import SessionReport

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
