"""``tierops checks validate|list`` (the checks file) and the hidden ``tierops probe`` (tier 0).

``probe`` is what the supervisor starts for tier 0 in place of ``claude``: it takes the claude
CLI's whole command line, so click must not parse it (no help option either: an appended system
prompt starting with ``-h`` would print help). :mod:`app.probe.executor` picks ``--checks`` out of
it and ignores the rest. ``checks validate`` reports every problem of a checks file as
``FILE:LINE: message`` and exits 2; it needs no database. Both take the checks of
``TIEROPS_EXTENSIONS`` too (``app/probe/extensions.py``): an extension's broken checks file fails
``validate`` with that file's name and line; ``list`` shows every check's origin.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from app.cli.base import CommandError, echo, emit_json, fail, json_option, main, try_settings
from app.probe import executor
from app.probe.extensions import Merged, load_merged
from app.probe.inventory import InventoryError
from app.probe.targets import format_duration, redact_text

log = logging.getLogger(__name__)


@main.command("probe", hidden=True, add_help_option=False,
              context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def probe(args: tuple[str, ...]) -> None:
    """Tier 0: run the checks of --checks FILE (or $TIEROPS_CHECKS) and print stream-json like the
    claude CLI; every claude flag is accepted and ignored."""
    if list(args) in (["--help"], ["-h"]):  # an operator asking, not a claude command line
        echo("Usage: tierops probe --checks FILE [claude flags...]\n\n"
             "Tier 0: run the checks of FILE (or $TIEROPS_CHECKS) and print them as the claude CLI's "
             "stream-json. Try `tierops checks validate FILE` and `tierops checks list FILE`.")
        return
    sys.exit(executor.main(list(args)))


@main.group()
def checks() -> None:
    """The checks file of tier 0 (the probe): TIEROPS_CHECKS, schemas/checks.json."""


def _checks_file(file: str | None) -> tuple[Path, list[Path]]:
    """The checks file (FILE, else TIEROPS_CHECKS) and the extension folders (TIEROPS_EXTENSIONS)."""
    try:
        settings = try_settings()
    except CommandError as exc:
        fail(str(exc))
    if file:
        return Path(file), settings.extension_dirs()
    if settings.checks is None:
        fail("no checks file: pass FILE or set TIEROPS_CHECKS")
    return settings.checks, settings.extension_dirs()


def _load(path: Path, extensions: list[Path]) -> Merged:
    """The merged inventory, or every problem of the checks file as ``FILE:LINE: message`` on
    stderr and exit 2 (an extension's are reported and its checks left out)."""
    try:
        merged = load_merged(path, extensions)
    except InventoryError as exc:
        echo(str(exc), err=True)
        sys.exit(2)
    for problem in merged.problems():
        echo(f"warning: {problem}", err=True)
    return merged


@checks.command()
@click.argument("file", metavar="FILE", required=False)
@json_option
def validate(file: str | None, as_json: bool) -> None:
    """Check FILE (default $TIEROPS_CHECKS): exit 0, or 2 with one FILE:LINE: message per problem."""
    path, extensions = _checks_file(file)
    try:
        merged = load_merged(path, extensions)
    except InventoryError as exc:
        if as_json:
            emit_json({"ok": False, "file": str(path),
                       "problems": [{"file": str(path), "line": p.line, "message": p.message} for p in exc.problems]})
        echo(str(exc), err=True)
        sys.exit(2)
    broken = [e for e in merged.extensions if not e.usable]
    if merged.errors or broken:
        if as_json:
            emit_json({"ok": False, "file": str(path), "problems": [
                *({"file": str(err.path), "line": p.line, "message": p.message} for err in merged.errors
                  for p in err.problems),
                *({"file": str(e.path), "line": None, "message": p} for e in broken for p in e.problems)]})
        for err in merged.errors:
            echo(str(err), err=True)
        for e in broken:
            echo("\n".join(f"{e.path}: {p}" for p in e.problems), err=True)
        sys.exit(2)
    inv = merged.inventory
    if inv is None:  # pragma: no cover - a checks file always gives one
        fail(f"{path}: no inventory")
    interval = format_duration(inv.interval_s) if inv.interval_s is not None else None
    if as_json:
        emit_json({"ok": True, "file": str(path), "checks": len(inv.checks), "hosts": len(inv.hosts),
                   "interval_s": inv.interval_s, "problems": [],
                   "extensions": {name: {"checks": n, "hosts": h} for name, (n, h) in merged.counts.items()}})
        return
    windows = f", {len(inv.maintenance)} maintenance window(s)" if inv.maintenance else ""
    added = "".join(f", {n} from extension {name}" for name, (n, _) in merged.counts.items() if n)
    echo(f"{path}: {len(inv.checks)} checks{added}, {len(inv.hosts)} hosts, "
         + (f"interval {interval}" if interval else "no interval (the supervisor's schedule applies)")
         + windows)
    for problem in merged.problems():  # an extension that brings nothing, a skill left out: not errors here
        echo(f"warning: {problem}", err=True)


@checks.command("list")
@click.argument("file", metavar="FILE", required=False)
@json_option
def list_(file: str | None, as_json: bool) -> None:
    """The checks of FILE (default $TIEROPS_CHECKS) and of TIEROPS_EXTENSIONS: name, service, kind,
    target, severity, timeout and where each is written."""
    merged = _load(*_checks_file(file))
    checks = merged.inventory.checks if merged.inventory is not None else ()
    rows = [{"name": c.name, "service": c.service, "kind": c.kind, "target": c.shown_target,
             "severity": c.severity.value, "timeout_s": c.timeout_s, "line": c.line, "origin": c.origin,
             "extension": c.extension, "file": str(c.file) if c.file else None,
             "runbook": _clip(redact_text(c.runbook), 200) if c.runbook else None} for c in checks]
    if as_json:
        emit_json(rows)
        return
    table = [("NAME", "SERVICE", "KIND", "TARGET", "SEVERITY", "TIMEOUT", "ORIGIN")]
    table += [(c.name, c.service, c.kind, _clip(c.shown_target, 60), c.severity.value, format_duration(c.timeout_s),
               c.origin) for c in checks]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
