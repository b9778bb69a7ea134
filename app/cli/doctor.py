"""``tierops doctor``: is this installation able to run? One line per check, exit 1 if any fails.

The checks themselves are in :mod:`app.cli.doctor_checks` (and ``--online``'s in
:mod:`app.cli.doctor_online`); this module decides which run, in which order, and how a failure
counts: with a checks file a missing CLI or credential only stops the language-model tiers, so
it is a warning there. The doctor changes nothing.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import asdict

import click

from app.cli.base import echo, emit_json, json_option, main, state_options, warn
from app.cli.doctor_checks import (
    Check,
    check_checks_file,
    check_cli,
    check_clock,
    check_credentials,
    check_database,
    check_disk,
    check_maintenance,
    check_model_tiers,
    check_notifications,
    check_prompts,
    check_schema,
    check_settings,
    check_state_dir,
)
from app.cli.doctor_extensions import check_extensions
from app.cli.doctor_mcp import check_mcp
from app.cli.doctor_online import check_online

log = logging.getLogger(__name__)


def _probe_only(check: Check) -> Check:
    """With a checks file, a missing CLI or credential stops the language-model tiers only: tier 0
    still monitors, so it is a warning, not a failure."""
    if check.status != "fail":
        return check
    return Check(check.name, "warn", check.detail + "; tier 0 (the checks file) still runs, escalations cannot")


def run_checks(home: str | None, db: str | None, checks_file: str | None = None, *,
               online: bool = False) -> list[Check]:
    settings_check, settings = check_settings(home, db, checks_file)
    checks = [settings_check]
    if settings is None:
        return checks
    db_check, newest = check_database(settings)
    cli, credentials = check_cli(settings), check_credentials(settings)
    tiers = check_model_tiers(settings, cli_found=cli.status != "fail", credentials_found=credentials.status == "ok")
    if settings.checks is not None:
        cli, credentials = _probe_only(cli), _probe_only(credentials)
    proven = [_probe_only(check_online(settings)) if settings.checks is not None else check_online(settings)] \
        if online else []
    checks += [check_state_dir(settings), db_check, check_schema(settings), check_prompts(settings),
               cli, credentials, *proven, check_checks_file(settings), *check_extensions(settings), tiers,
               check_mcp(settings),
               check_maintenance(settings),
               check_notifications(settings), check_disk(settings), check_clock(newest)]
    return checks


@main.command()
@state_options
@json_option
@click.option("--checks", "checks_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="The checks file `serve --checks FILE` will run (or $TIEROPS_CHECKS): validated, and judged.")
@click.option("--online", is_flag=True, default=False,
              help="Also prove the credentials with one request to the API (count_tokens: nothing billed).")
def doctor(home: str | None, db: str | None, as_json: bool, checks_file: str | None, online: bool) -> None:
    """Check the CLI, credentials, state directory, database, schema, prompts, checks file, extensions
    and runbooks, the model tiers an incident can reach, MCP servers, maintenance windows, disk and clock.

    One line per check (ok / warn / fail / skip); exit 1 if any fails. Changes nothing (--online
    sends one request that runs no model).
    """
    checks = run_checks(home, db, checks_file, online=online)
    if as_json:
        emit_json([asdict(c) for c in checks])
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            echo(f"{c.status:<4}  {c.name:<{width}}  {' '.join(c.detail.splitlines())}")
    failed = [c.name for c in checks if c.status == "fail"]
    if failed and not as_json:
        warn(f"{len(failed)} check(s) failed: {', '.join(failed)}")
    sys.exit(1 if failed else 0)


__all__ = ["doctor", "run_checks"]
