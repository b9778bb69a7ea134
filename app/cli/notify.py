"""``tierops notify test`` and ``tierops notify preview``: do the notifications reach whom they
should, before an incident needs them.

Why commands: a mistyped Apprise URL, a revoked chat token or a route that sends warnings to the
pager is otherwise found out the day a real incident is (or is not) delivered.

* ``test [--route NAME]`` sends one test message to every URL (of ``TIEROPS_NOTIFY_URLS`` or
  ``TIEROPS_NOTIFY_URLS_FILE``, and the URLs routes name), or to the URLs of one route, and prints
  one line per URL: its scheme and host only (URLs hold tokens and passwords) and ``ok`` or the
  error. Exit 0 when every URL accepted it, 1 when one did not, 2 when there is nothing to test.
  Nothing is stored: it needs no database.
* ``preview [--last N] [--json]`` shows, for the last N incidents, which messages the settings in
  force would send where (routes and URLs), or why not, beside what was really recorded. Nothing
  is sent or stored; it reads an existing database.
"""

from __future__ import annotations

import logging
import sys

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
from app.notify.preview import IncidentPreview
from app.notify.sender import Notifier
from app.notify.trial import send_test

log = logging.getLogger(__name__)

EXIT_FAILED = 1


@main.group()
def notify() -> None:
    """Notifications: check the Apprise URLs (TIEROPS_NOTIFY_URLS)."""


@notify.command("test")
@click.option("--route", metavar="NAME", help="Only the URLs of this route (TIEROPS_NOTIFY_ROUTES, the checks "
              "file's notify.routes, or 'default').")
def notify_test(route: str | None) -> None:
    """Send a test message to every configured URL (or one route's); one line per URL (scheme and
    host only) with ok or the error. Exit 1 if one failed, 2 if none is configured, the route is
    unknown or Apprise is missing."""
    settings = load_settings()
    results = _run(lambda: send_test(settings, route))
    for result in results:
        echo(f"{result.shown}: {'ok' if result.error is None else 'failed: ' + result.error}")
    failed = sum(1 for r in results if r.error is not None)
    if failed:
        echo(f"tierops: {failed} of {len(results)} notification URL(s) failed", err=True)
        sys.exit(EXIT_FAILED)


@notify.command("preview")
@click.option("--last", type=click.IntRange(1, 200), default=10, show_default=True,
              help="How many incidents (newest activity first).")
@state_options
@json_option
@click.pass_context
def notify_preview(ctx: click.Context, last: int, as_json: bool, home: str | None, db: str | None) -> None:
    """Which messages the settings in force would send where, for the last incidents (routes,
    URLs as scheme and host, or why not), beside what was really recorded. Sends nothing."""
    settings = load_settings(ctx)
    require_database(settings)

    async def go() -> tuple[list[IncidentPreview], list[dict[str, object]]]:
        async with await open_store(settings) as store:
            notifier = Notifier(store, settings)
            return await notifier.preview(last), notifier.routes_view()

    previews, routes = _run(go)
    if as_json:
        emit_json({"routes": routes, "incidents": [
            {"incident": {k: p.incident[k] for k in ("id", "key", "service", "severity", "status")},
             "messages": [{"kind": m.kind, "title": m.title, "sent": m.sent, "routes": list(m.routes),
                           "urls": list(m.urls), "why": m.why, "follows": m.follows} for m in p.lines],
             "recorded": [{"kind": r["kind"], "title": r["title"], "status": r["status"], "routes": r["routes"],
                           "why": r["why"]} for r in p.recorded]} for p in previews]})
        return
    echo("routes: " + "; ".join(f"{shown(r['name'])} ({shown(r['match'])}) → "
                                f"{', '.join(map(shown, r['urls'])) or 'no URL'}" for r in routes))
    if not previews:
        echo("no incidents yet: nothing to preview")
    for p in previews:
        inc = p.incident
        echo(f"\nincident #{inc['id']} {shown(inc['key'])} ({shown(inc['service'] or '-')}, {inc['severity']}, "
             f"{inc['status']})")
        for m in p.lines:
            where = (f"→ {', '.join(map(shown, m.routes))}: {', '.join(map(shown, m.urls))}" if m.sent
                     else f"✕ not sent: {shown(m.why)}")
            echo(f"  {m.kind:<20} {shown(m.title)}\n  {'':<20} {where}{' (follows the opening)' if m.follows else ''}")
        if p.recorded:
            echo("  recorded: " + "; ".join(f"{r['kind']} {r['status']}" for r in p.recorded))
