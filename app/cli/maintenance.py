"""``tierops maintenance``: list the maintenance windows, add an ad-hoc one, end one early.

A group of its own because a window is something an operator sets *before* working on a service,
usually from the shell they work in: ``add`` and ``end`` apply the same store rules as the API and
the dashboard (``app/store/maintenance.py``: an end in the past, longer than 90 days, empty
patterns are refused), recorded as ``<unix user> via CLI`` like ``tierops incidents ack``. The
listing shows what ``GET /api/v1/maintenance`` shows: configured windows (``TIEROPS_MAINTENANCE``
and the checks file) with their current or next occurrence, and the active and upcoming ad-hoc
ones. Every command uses an existing database (:func:`~app.cli.base.require_database`); a broken
``TIEROPS_MAINTENANCE``, a missing window or an end its state refuses is one error line, exit 2.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click

from app.cli.base import (
    echo,
    emit_json,
    fail,
    json_option,
    load_settings,
    main,
    open_store,
    require_database,
    run_async,
    shown,
    state_options,
)
from app.cli.incidents import _cli_actor
from app.config import Settings
from app.engine import maintenance as engine
from app.engine.maintenance import MaintenanceReport, WindowView
from app.store import maintenance as store
from app.store.db import Database
from app.store.maintenance import MaintenanceRow, MaintenanceStateError, WindowInputError
from app.units import span

log = logging.getLogger(__name__)

T = TypeVar("T")


def _settings(ctx: click.Context) -> Settings:
    """Settings with ``--home``/``--db`` given on this command or on the group."""
    params = {**(ctx.parent.params if ctx.parent is not None else {}), **{k: v for k, v in ctx.params.items() if v}}
    settings = load_settings(home=params.get("home"), db=params.get("db"))
    require_database(settings)
    return settings


def _with_store(settings: Settings, fn: Callable[[Database], Awaitable[T]]) -> T:
    async def go() -> T:
        async with await open_store(settings) as db:
            return await fn(db)

    result: T = run_async(go)
    return result


def _when(value: str | None) -> str:
    return (value or "-")[:16].replace("T", " ")


def _matchers(services: list[str] | None, checks: list[str] | None) -> str:
    return (f"services {', '.join(map(shown, services))}" if services else "every service") + "; " + (
        f"checks {', '.join(map(shown, checks))}" if checks else "every check")


def format_windows(report: MaintenanceReport) -> str:
    """The listing: one line per window (times in UTC), then the problems."""
    rows: list[WindowView] = report["windows"]
    if not rows:
        lines = ["no maintenance windows (TIEROPS_MAINTENANCE, the checks file's maintenance: section, or "
                 "`tierops maintenance add`)"]
    else:
        lines = [f"{'STATE':<9}  {'ID':>4}  {'FROM (UTC)':<16}  {'UNTIL (UTC)':<16}  {'SOURCE':<11}  NAME"]
        for w in rows:
            state = {"scheduled": "next", "never": "never"}.get(w["state"], w["state"])
            ident = str(w["id"]) if w["id"] is not None else "-"
            lines.append(f"{state:<9}  {ident:>4}  {_when(w['starts_at']):<16}  {_when(w['ends_at']):<16}  "
                         f"{w['source']:<11}  {shown(w['name'])}")
            detail = [_matchers(w["services"], w["checks"])]
            detail.append(shown(w["schedule"]) if w["schedule"] else
                          f"{span(w['duration_s'])}, added by {shown(w['created_by'] or '-')}")
            if w["reason"] and w["source"] != engine.SOURCE_AD_HOC:
                detail.append(shown(w["reason"]))
            lines.append(f"{'':<9}  {'':>4}  " + "; ".join(detail))
    lines += [f"problem: {shown(p)}" for p in report["problems"]]
    return "\n".join(lines)


def _describe(row: MaintenanceRow) -> str:
    reason = f" ({shown(row['reason'])})" if row["reason"] else ""
    return (f"maintenance window #{row['id']}{reason}: {_when(row['starts_at'])} to {_when(row['ends_at'])} UTC, "
            f"{_matchers(row['services'], row['checks'])}")


@main.group(invoke_without_command=True)
@state_options
@json_option
@click.pass_context
def maintenance(ctx: click.Context, home: str | None, db: str | None, as_json: bool) -> None:
    """Maintenance windows: inside one, incidents are recorded but nothing escalates and no message is
    sent. Without a command: list them (see the commands to add or end one)."""
    if ctx.invoked_subcommand is None:
        _list(ctx, as_json)


def _list(ctx: click.Context, as_json: bool) -> None:
    settings = _settings(ctx)
    try:  # a broken setting is an error here, not a line among the problems
        engine.setting_windows(settings)
    except engine.MaintenanceConfigError as exc:
        fail(str(exc))
    report: MaintenanceReport = _with_store(settings, lambda db: engine.report(db, settings))
    if as_json:
        emit_json(report)
    else:
        echo(format_windows(report))


@maintenance.command("list")
@state_options
@json_option
@click.pass_context
def list_(ctx: click.Context, home: str | None, db: str | None, as_json: bool) -> None:
    """Every window: active first, then upcoming ad-hoc ones, then configured schedules (times in UTC)."""
    _list(ctx, as_json or bool(ctx.parent and ctx.parent.params.get("as_json")))


@maintenance.command()
@state_options
@json_option
@click.option("--duration", metavar="SPAN", help=f"How long: {store.DURATION_HELP}; at most {store.MAX_DAYS} days.")
@click.option("--ends-at", metavar="ISO", help="When it ends, instead of --duration: " + store.TIME_HELP + ".")
@click.option("--starts-at", metavar="ISO", help="When it starts (default now): " + store.TIME_HELP + ".")
@click.option("--service", "services", multiple=True, metavar="PATTERN",
              help="A service it covers (* and ? as wildcards); repeat for more. None: every service.")
@click.option("--check", "checks", multiple=True, metavar="PATTERN",
              help="A check it covers (* and ? as wildcards); repeat for more. None: every check.")
@click.option("--reason", required=True, metavar="TEXT", help=f"Why (at most {store.REASON_MAX} characters).")
@click.pass_context
def add(ctx: click.Context, home: str | None, db: str | None, as_json: bool, duration: str | None,
        ends_at: str | None, starts_at: str | None, services: tuple[str, ...], checks: tuple[str, ...],
        reason: str) -> None:
    """Add an ad-hoc maintenance window, e.g. --duration 2h --service api --reason 'db upgrade'."""
    options = {"duration": "--duration", "ends_at": "--ends-at", "starts_at": "--starts-at", "services": "--service",
               "checks": "--check", "reason": "--reason"}
    if not reason.strip():
        fail("--reason must say why (it is shown with the window and on the incidents it holds)")
    try:
        planned = store.plan(duration=duration, ends_at=ends_at, starts_at=starts_at)
    except WindowInputError as exc:
        fail(f"{options.get(exc.field, exc.field)}: {exc}")
    settings = _settings(ctx)
    actor = _cli_actor()

    async def create(store_db: Database) -> MaintenanceRow | str:
        try:
            return await store.create_window(store_db, starts_at=planned[0], ends_at=planned[1], reason=reason,
                                             created_by=actor, services=list(services) or None,
                                             checks=list(checks) or None)
        except WindowInputError as exc:
            return f"{options.get(exc.field, exc.field)}: {exc}"

    row = _with_store(settings, create)
    if isinstance(row, str):
        fail(row)
    if as_json:
        emit_json(row)
    else:
        echo(f"added {_describe(row)}, by {shown(row['created_by'])}")


@maintenance.command()
@click.argument("window_id", metavar="ID", type=click.IntRange(0, 2**63 - 1))
@state_options
@json_option
@click.pass_context
def end(ctx: click.Context, window_id: int, home: str | None, db: str | None, as_json: bool) -> None:
    """End ad-hoc window ID now (an upcoming one never starts)."""
    settings = _settings(ctx)
    actor = _cli_actor()

    async def cancel(store_db: Database) -> MaintenanceRow | str:
        try:
            return await store.cancel_window(store_db, window_id, actor)
        except LookupError:
            return f"no maintenance window {window_id} (see `tierops maintenance`)"
        except MaintenanceStateError as exc:
            return str(exc)

    row = _with_store(settings, cancel)
    if isinstance(row, str):
        fail(row)
    if as_json:
        emit_json(row)
    else:
        echo(f"ended {_describe(row)}, by {shown(row['cancelled_by'])}")
