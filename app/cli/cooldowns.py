"""``tierops cooldowns``: the cooldown limits, what each service has used and the newest actions
(issue #13).

The same report as ``GET /api/v1/cooldowns`` and the overview's Cooldowns section
(:func:`app.engine.cooldowns.report`), so an operator can see from a shell why an escalation was
refused or when a restart is allowed again. It only reads: no database, nothing to show (one error
line, exit 2), and a ``TIEROPS_COOLDOWNS`` that cannot be parsed is one error line naming the bad
part.
"""

from __future__ import annotations

import click

from app.cli.base import (
    emit_json,
    json_option,
    load_settings,
    main,
    open_store,
    require_database,
    state_options,
)
from app.cli.base import run_async as _run
from app.engine import cooldowns as cooldown_engine
from app.engine.cooldowns import CooldownReport


@main.command()
@state_options
@json_option
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True,
              help="How many of the newest recorded actions to list.")
def cooldowns(home: str | None, db: str | None, as_json: bool, limit: int) -> None:
    """Cooldown limits, active windows and recent actions (restarts, redeploys, changes)."""
    settings = load_settings(home=home, db=db)
    require_database(settings)

    async def go() -> CooldownReport:
        limits = cooldown_engine.parse_limits(settings.cooldowns)  # CooldownError: one line, exit 2
        async with await open_store(settings) as store:
            return await cooldown_engine.report(store, limits, recent=limit)

    report: CooldownReport = _run(go)
    if as_json:
        emit_json(report)
        return
    limits = ", ".join(f"{lim['kind']} {lim['count']}/{lim['window']}" for lim in report["limits"])
    click.echo(f"limits per service: {limits or 'none (TIEROPS_COOLDOWNS is empty)'}")
    if not report["active"]:
        click.echo("no action is in cooldown")
    for w in report["active"]:
        nxt = f"next allowed at {w['next_allowed_at']}" if w["next_allowed_at"] else f"{w['remaining']} more allowed"
        click.echo(f"  {w['kind']:<10} {cooldown_engine.service_name(w['service']):<24} "
                   f"{w['used']} of {w['limit']} in {w['window']} used, {nxt}")
    if report["recent"]:
        click.echo("recent actions:")
    for a in report["recent"]:
        note = f" — {a['note']}" if a["note"] else ""
        click.echo(f"  {a['created_at']}  session {a['session_pk']}  {a['action']} "
                   f"{cooldown_engine.service_name(a['service'] or None)}: {a['outcome']}{note}")
