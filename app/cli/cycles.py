"""The commands that run sessions: ``run`` (one chain now), ``supervise`` (the schedule without a
web server) and ``serve`` (the dashboard, the API and the schedule).

All three create the state directory and database when there is none (they are how a new
installation starts); all three log their cycles and sessions at info by default.

``serve`` and ``supervise`` with ``TIEROPS_REQUIRE_CHECKS`` (the container image sets it) refuse to
start without a checks file: their scheduled cycles would otherwise start at tier 1, a paid
language-model run. ``serve`` puts the address it listens on in its environment
(``TIEROPS_SERVE_URL``/``_HOST``/``_PORT``, ``app/probe/variables.py``), so a checks file that watches
TierOps itself follows ``--host``/``--port``.

``run`` exits 0 when the chain ran, 1 when a session of it failed, :data:`EXIT_INTERRUPTED` (3)
when none failed but one was interrupted (stopped by an operator, or by the supervisor shutting
down), 2 for what an operator must fix, 130 when this command itself was stopped by a signal.
"""

from __future__ import annotations

import logging
import os
import sys

import click

from app.cli.base import (
    echo,
    emit_json,
    fail,
    json_option,
    load_settings,
    load_validator,
    main,
    open_store,
    shown,
    state_options,
)
from app.cli.base import run_async as _run
from app.cli.schemas import read_schema_file
from app.config import Settings
from app.engine.contracts import ContractError, check_schema, resolve_spec
from app.engine.maintenance import MaintenanceConfigError, setting_windows
from app.engine.mcp_launch import check_settings as check_mcp_settings
from app.errors import ConfigError, TierOpsError
from app.notify.policy import quiet_hours
from app.notify.routes import load_routes
from app.notify.urls import notify_urls
from app.output.validate import OutputValidator
from app.probe.inventory import InventoryError, load_inventory
from app.probe.variables import serve_environment
from app.store.rows import ChainLink
from app.supervisor.chain import base_prompt
from app.supervisor.guards import tier0_problem
from app.vocab import MAX_TIER, MIN_TIER, SessionStatus, Trigger

log = logging.getLogger(__name__)


EXIT_INTERRUPTED = 3  # `run`: a session was interrupted (stopped by an operator or a shutdown), none failed


def _supervisor_parts(home: str | None, db: str | None, checks: str | None = None, *,
                      scheduled: str | None = None) -> tuple[Settings, OutputValidator]:
    """Settings and validator for a command that runs cycles; ``scheduled``: the command's name when
    it runs the schedule (``serve``, ``supervise``), which TIEROPS_REQUIRE_CHECKS applies to."""
    settings = load_settings(home=home, db=db, checks=checks)
    if scheduled and settings.require_checks and settings.checks is None:
        fail(f"TIEROPS_REQUIRE_CHECKS is set and there is no checks file: `{scheduled}` would start every scheduled "
             "cycle at tier 1, a paid language-model run. Mount a checks file and point TIEROPS_CHECKS (or --checks) "
             "at it, e.g. `-v ./checks.yaml:/etc/tierops/checks.yaml:ro -e TIEROPS_CHECKS=/etc/tierops/checks.yaml` "
             "(examples/checks-starter.yaml passes on any host); or set TIEROPS_REQUIRE_CHECKS=false to start at tier 1")
    if settings.checks is not None:  # refuse a broken checks file before anything starts
        try:
            load_inventory(settings.checks)
        except InventoryError as exc:
            echo(str(exc), err=True)
            fail(f"the checks file {settings.checks} has {len(exc.problems)} problem(s); "
                 "fix them (`tierops checks validate`) or unset TIEROPS_CHECKS")
    try:  # and a TIEROPS_MAINTENANCE that cannot be read: windows nobody could rely on
        setting_windows(settings)
    except MaintenanceConfigError as exc:
        fail(str(exc))
    try:  # and notification routes or quiet hours that cannot be read: messages would go astray
        load_routes(settings, notify_urls(settings))
        quiet_hours(settings.notify_quiet_hours)
    except (ConfigError, ValueError) as exc:
        fail(f"{exc}; fix it (`tierops doctor` checks the notification settings)")
    try:  # and MCP servers or tool patterns that cannot be read: every model session would fail
        check_mcp_settings(settings)
    except ConfigError as exc:
        fail(f"the MCP configuration cannot be used: {exc}")
    return settings, load_validator(settings.schema_file)


checks_option = click.option(
    "--checks", "checks", metavar="FILE", type=click.Path(dir_okay=False),
    help="The checks file (or $TIEROPS_CHECKS): tier 0 runs its checks, the tiers get it as their inventory.")


def _render_chain(chain: list[ChainLink]) -> str:
    lines = []
    for s in chain:
        cost = f"${s['cost_usd']:.4f}" if s["cost_usd"] is not None else "-"
        flags = " degraded" if s["degraded"] else ""
        flags += " DRY RUN" if s["dry_run"] else ""
        lines.append(f"tier {s['tier']} ({s['model']}) session {s['id']} [{shown(s['session_id'] or '-')}]: {s['status']}{flags}, "
                     f"source {s['source']}, attempts {s['attempts']}, {cost}")
        if s["status_reason"]:
            lines.append(f"  reason: {shown(s['status_reason'])}")
        if s["escalated_to"]:
            lines.append(f"  escalated to session {s['escalated_to']}: {shown(s['escalation_reason'] or '')}")
        if s["attention"]:
            lines.append(f"  NEEDS HUMAN ATTENTION: {shown(s['attention'])}")
        if s["escalation_gate"]:
            lines.append(f"  {shown(s['escalation_gate'])}")
    total = sum(s["cost_usd"] or 0 for s in chain)
    lines.append(f"chain: {len(chain)} session(s), ${total:.4f}")
    return "\n".join(lines)


@main.command()
@state_options
@json_option
@click.option("--tier", type=click.IntRange(MIN_TIER, MAX_TIER), default=None,
              help="Tier to start the chain at: 0 (the probe) with a checks file, else 1 by default.")
@checks_option
@click.option("--prompt", "prompt", help="Extra operator request appended to the tier prompt.")
@click.option("--schema", "schema_file", metavar="FILE",
              help="A JSON Schema the first session's output must follow (wins over --schema-name).")
@click.option("--schema-name", metavar="NAME", help="A stored schema (`tierops schemas list`) for the first session.")
@click.option("--output-mode", type=click.Choice(("native", "prompted")), default=None,
              help="native: --json-schema and the CLI's StructuredOutput tool; prompted: the schema in the "
                   "prompt, JSON read from the final text (default: $TIEROPS_OUTPUT_MODE).")
@click.option("--max-retries", type=click.IntRange(0, 10), default=None,
              help="Resumes asking again for valid output (default: $TIEROPS_OUTPUT_MAX_RETRIES).")
@click.option("--dry-run", is_flag=True, default=False,
              help="Every tier of the chain runs with read-only tools and only reports what it would do "
                   "(always with $TIEROPS_DRY_RUN).")
def run(home: str | None, db: str | None, as_json: bool, tier: int | None, checks: str | None, prompt: str | None,
        schema_file: str | None, schema_name: str | None, output_mode: str | None, max_retries: int | None,
        dry_run: bool) -> None:
    """Run one escalation chain now and print it. Refused at once while another cycle runs."""
    from app.supervisor.scheduler import Supervisor

    settings, validator = _supervisor_parts(home, db, checks)
    tier = settings.first_tier if tier is None else tier
    if tier > settings.max_tier:
        fail(f"--tier {tier} is above TIEROPS_MAX_TIER={settings.max_tier}")
    if (problem := tier0_problem(settings, tier, custom_contract=bool(schema_file or schema_name or output_mode))):
        fail(problem)
    try:  # a prompt file that cannot be read is a setting to fix, said before anything is created
        base_prompt(settings, tier, None)
    except TierOpsError as exc:
        fail(str(exc))

    inline = read_schema_file(schema_file) if schema_file else None
    if inline is not None:  # the preflight refuses it before anything is created
        try:
            check_schema(inline, settings, what=str(schema_file))
        except ContractError as exc:
            fail(str(exc))

    async def go() -> list[ChainLink]:
        async with await open_store(settings) as store:
            spec = await resolve_spec(store, validator, settings, inline=inline, name=schema_name,
                                      mode="prompted" if output_mode == "prompted" else
                                      "native" if output_mode == "native" else None, max_retries=max_retries)
            sup = Supervisor(store, settings, validator)
            await sup.start()  # the sender: the cycle's notifications go out before the command exits
            try:
                return await sup.run_cycle(tier=tier, prompt=prompt, trigger=Trigger.MANUAL, spec=spec,
                                           dry_run=dry_run)
            finally:
                await sup.shutdown()

    chain = _run(go, stoppable=True)
    if as_json:
        emit_json(chain)
    else:
        echo(_render_chain(chain))
    if any(s["status"] == SessionStatus.FAILED for s in chain):
        sys.exit(1)
    if any(s["status"] == SessionStatus.INTERRUPTED for s in chain):
        sys.exit(EXIT_INTERRUPTED)


@main.command()
@state_options
@checks_option
@click.option("--once", is_flag=True, help="Run one scheduled cycle and exit.")
def supervise(home: str | None, db: str | None, checks: str | None, once: bool) -> None:
    """Run cycles every TIEROPS_INTERVAL seconds (or on TIEROPS_CRON, or the checks file's
    interval, starting at tier 0), first one at start."""
    from app.supervisor.scheduler import Supervisor

    settings, validator = _supervisor_parts(home, db, checks, scheduled="supervise")

    async def go() -> None:
        async with await open_store(settings) as store:
            sup = Supervisor(store, settings, validator)
            recovered = await sup.recover_interrupted()
            if recovered:
                echo(f"marked {recovered} session(s) left running by a stopped supervisor as interrupted")
            await sup.start()  # the notification sender, stopped by shutdown()
            try:
                await sup.run_forever(cycles=1 if once else None)
            finally:
                await sup.shutdown()
            if sup.last_chain:
                echo(_render_chain(sup.last_chain))

    _run(go, stoppable=True)


@main.command()
@state_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (non-loopback needs a token).")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True)
@checks_option
def serve(home: str | None, db: str | None, host: str, port: int, checks: str | None) -> None:
    """Serve the dashboard and REST API, and run the scheduled cycles (unless TIEROPS_SCHEDULE=false)."""
    from app.web.app import serve as serve_app

    settings, _ = _supervisor_parts(home, db, checks, scheduled="serve")
    # The probe child and this process's own reads of the checks file see where we listen.
    os.environ.update(serve_environment(host, port))
    try:
        serve_app(settings, host, port)
    except TierOpsError as exc:
        fail(str(exc))
