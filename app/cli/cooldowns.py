"""``tierops cooldowns``: the cooldown limits, what each service has used, the newest actions and,
apart, the newest proposed actions with whether the limits would allow each now.

The same report as ``GET /api/v1/cooldowns`` and the overview's Cooldowns section
(:func:`app.engine.cooldowns.report`), so an operator can see from a shell why an escalation was
refused or when a restart is allowed again. It only reads: no database, nothing to show (one error
line, exit 2), and a ``TIEROPS_COOLDOWNS`` that cannot be parsed is one error line naming the bad
part.
"""

from __future__ import annotations

import logging

import click

from app.cli.base import (
    echo,
    emit_json,
    json_option,
    load_settings,
    main,
    open_store,
    require_database,
    shown,
    state_options,
)
from app.cli.base import run_async as _run
from app.engine import cooldowns as cooldown_engine
from app.engine.cooldowns import CooldownReport

log = logging.getLogger(__name__)

NAME_MAX = 120  # characters of a model-written kind or service on one line
DETAIL_MAX = 300  # characters of a proposal's detail on one line (--json has all of it)


def one_line(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters (model text may hold newlines and control
    characters that would forge lines of their own)."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


@main.command()
@state_options
@json_option
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True,
              help="How many of the newest recorded actions, and of the newest proposed ones, to list.")
def cooldowns(home: str | None, db: str | None, as_json: bool, limit: int) -> None:
    """Cooldown limits, active windows, recent actions (restarts, redeploys, changes) and proposed ones."""
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
    echo(f"limits per service: {limits or 'none (TIEROPS_COOLDOWNS is empty)'}")
    if not report["active"]:
        echo("no action is in cooldown")
    for w in report["active"]:
        nxt = f"next allowed at {w['next_allowed_at']}" if w["next_allowed_at"] else f"{w['remaining']} more allowed"
        echo(f"  {shown(w['kind']):<10} {shown(cooldown_engine.service_name(w['service'])):<24} "
             f"{w['used']} of {w['limit']} in {w['window']} used, {nxt}")
    if report["recent"]:
        echo("recent actions:")
    for a in report["recent"]:
        note = f" — {shown(a['note'])}" if a["note"] else ""
        echo(f"  {a['created_at']}  session {a['session_pk']}  {shown(a['action'])} "
             f"{shown(cooldown_engine.service_name(a['service'] or None))}: {a['outcome']}{note}")
    if report["proposals"]:
        echo("proposed actions (not taken, never counted; the limits now):")
    for p in report["proposals"]:
        incident = f"  incident {p['incident_id']}" if p["incident_id"] is not None else ""
        dry = " (dry run)" if p["dry_run"] else ""
        detail = f" — {one_line(p['detail'], DETAIL_MAX)}" if p["detail"] else ""
        echo(f"  {p['created_at']}  session {p['session_pk']}{dry}{incident}  {one_line(p['kind'], NAME_MAX)} "
             f"{one_line(cooldown_engine.service_name(p['service']), NAME_MAX)}: proposed, "
             f"{cooldown_engine.judgement(p)}{detail}")

