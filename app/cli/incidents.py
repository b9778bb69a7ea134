"""``tierops incidents``: list incidents, show one with its timeline, and act on one.

A group of its own because an incident is the one record an operator *changes* from the command
line: ``ack``, ``resolve`` and ``silence`` apply the same store actions as the API and the
dashboard (``app/store/incidents.py``), recorded as ``<unix user> via CLI``; ``--until`` is read
by the one parser they all share (:func:`app.store.incidents.parse_until`). Every command only
uses an existing database (:func:`~app.cli.base.require_database`): there is nothing to list or
act on in a new one. A missing incident or an action its state refuses is one error line, exit 2.
"""

from __future__ import annotations

import getpass
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

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
from app.cli.base import fail as _fail
from app.cli.base import run_async as _run
from app.cli.cooldowns import DETAIL_MAX, NAME_MAX, one_line
from app.clock import utcnow
from app.engine.alerts import URL_MAX
from app.store import alert_incidents
from app.store import cooldowns as action_store
from app.store import incidents as incident_store
from app.store.alert_incidents import AlertCounts, IncidentAlertRow
from app.store.cooldowns import ProposalRow
from app.store.db import Database
from app.store.incidents import NOTE_MAX, UNTIL_HELP, IncidentStateError, parse_until
from app.store.rows import IncidentRow, TimelineRow
from app.vocab import IncidentStatus, values

log = logging.getLogger(__name__)

T = TypeVar("T")

STATUSES = ("unresolved", *values(IncidentStatus), "all")
PROPOSALS_SHOWN = 500  # proposed actions `incidents show` lists, newest first


def _store_call(ctx: click.Context, home: str | None, db: str | None,
                fn: Callable[[Database], Awaitable[T]]) -> T:
    """``fn`` against the existing database (``--home``/``--db`` given here or on the group)."""
    parent = ctx.parent.params if ctx.parent is not None else {}
    settings = load_settings(home=home or parent.get("home"), db=db or parent.get("db"))
    require_database(settings)

    async def go() -> T:
        async with await open_store(settings) as store:
            return await fn(store)

    result: T = _run(go)
    return result


def _cli_actor() -> str:
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no LOGNAME/USER and no passwd entry (a bare container)
        user = "unknown user"
    return f"{user} via CLI"


def _when(value: str | None) -> str:
    return (value or "-")[:19].replace("T", " ")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, s = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {s:02d}s" if minutes else f"{seconds:.1f}s"


def _flags(i: IncidentRow, now: str) -> str:
    flags = ["flapping"] if i["flapping"] else []
    if i["silenced_until"] and i["silenced_until"] > now:
        flags.append(f"silenced until {_when(i['silenced_until'])}")
    return ", ".join(flags)


def format_list(rows: list[IncidentRow], now: str) -> str:
    head = f"{'ID':>5}  {'SEVERITY':<8}  {'STATUS':<12}  {'OCC':>4}  {'ESC':>3}  {'LAST SEEN':<19}  {'SERVICE':<12}  KEY"
    lines = [head]
    for i in rows:
        extra = "; ".join(x for x in (_flags(i, now), f"resolved after {_duration(i['duration_s'])}"
                                      if i["status"] == IncidentStatus.RESOLVED else "") if x)
        lines.append(f"{i['id']:>5}  {i['severity']:<8}  {i['status']:<12}  {i['occurrences']:>4}  "
                     f"{i['escalations']:>3}  {_when(i['last_seen_at']):<19}  {shown(i['service'] or '-'):<12}  {shown(i['key'])}"
                     + (f"  ({extra})" if extra else ""))
    return "\n".join(lines)


def format_proposals(proposals: list[ProposalRow]) -> list[str]:
    """``proposed actions:`` and one line each (newest first), with the proposing session."""
    if not proposals:
        return ["proposed actions: none"]
    lines = ["proposed actions (not taken; each awaits a human):"]
    for p in proposals:
        tier = f" (tier {p['tier']})" if p["tier"] is not None else ""
        dry = ", dry run" if p["dry_run"] else ""
        service = one_line(p["service"], NAME_MAX) if p["service"] else "(host-wide)"
        detail = f": {one_line(p['detail'], DETAIL_MAX)}" if p["detail"] else ""
        lines.append(f"  {_when(p['created_at'])}  session {p['session_pk']}{tier}{dry}  "
                     f"{one_line(p['kind'], NAME_MAX)} {service}{detail}")
    return lines


ALERTS_SHOWN = 200  # alerts of one incident `incidents show` prints (--json: up to 1000)
ALERT_TEXT_MAX = 300  # characters of one alert text (title, annotation, labels) on its line


def format_alert_parts(i: IncidentRow, alerts: list[IncidentAlertRow], counts: AlertCounts) -> list[str]:
    """An alert incident's name, sender, links, annotations and alerts: every text the sender's,
    so each is one line, cut, without control characters."""
    lines = [f"  name: {one_line(i['name'] or '-', NAME_MAX)}, sent by {i['alert_source'] or '-'}"]
    links = i["links"] if isinstance(i["links"], list) else []
    lines.append("  links:" if links else "  links: none")
    lines += [f"    {one_line(str(link.get('label')), NAME_MAX)}: {one_line(str(link.get('url')), URL_MAX)}"
              for link in links if isinstance(link, dict)]
    notes = i["annotations"] if isinstance(i["annotations"], dict) else {}
    lines.append("  annotations:" if notes else "  annotations: none")
    lines += [f"    {one_line(k, NAME_MAX)}: {one_line(str(v), ALERT_TEXT_MAX)}" for k, v in notes.items()]
    lines.append(f"alerts: {counts['firing']} firing, {counts['resolved']} resolved"
                 + (f" (the first {len(alerts)} listed; --json lists more)" if len(alerts) < counts['firing'] + counts['resolved']
                    else ""))
    for a in alerts:
        lines.append(f"  {a['status']:<8}  {a['severity']:<8}  {one_line(a['title'], ALERT_TEXT_MAX)}"
                     f"  (fingerprint {one_line(a['fingerprint'], NAME_MAX)})")
        if a["labels"]:
            labels = ", ".join(f"{k}={v}" for k, v in sorted(a["labels"].items()))
            lines.append(f"    labels: {one_line(labels, ALERT_TEXT_MAX)}")
        alert_links = [link for link in a["links"] or [] if isinstance(link, dict)]
        lines += [f"    {one_line(str(link.get('label')), NAME_MAX)}: {one_line(str(link.get('url')), URL_MAX)}"
                  for link in alert_links]
        shown = {"summary", "runbook_url"} if any(link.get("label") == "runbook" for link in alert_links) else {"summary"}
        lines += [f"    {one_line(k, NAME_MAX)}: {one_line(str(v), ALERT_TEXT_MAX)}"
                  for k, v in (a["annotations"] or {}).items() if k not in shown]
    return lines


def format_incident(i: IncidentRow, timeline: list[TimelineRow], now: str,
                    proposals: list[ProposalRow] | None = None,
                    alerts: tuple[list[IncidentAlertRow], AlertCounts] | None = None) -> str:
    lines = [f"incident {i['id']} ({shown(i['key'])}): {i['status']}, {i['severity']}"
             + (f" [{_flags(i, now)}]" if _flags(i, now) else ""),
             f"  title: {shown(i['title'])}",
             f"  service: {shown(i['service'] or '-')}, check: {shown(i['check_name'] or '-')}, origin: {i['origin']}",
             f"  opened {_when(i['opened_at'])}, last seen {_when(i['last_seen_at'])}, "
             f"{i['occurrences']} occurrence(s), {i['escalations']} escalation(s)"]
    if i["acknowledged_at"]:
        lines.append(f"  acknowledged {_when(i['acknowledged_at'])} by {shown(i['acknowledged_by'] or '-')}")
    if i["silenced_until"]:
        lines.append(f"  silenced until {_when(i['silenced_until'])} by {shown(i['silenced_by'] or '-')}")
    if i["resolved_at"]:
        lines.append(f"  resolved {_when(i['resolved_at'])} by {shown(i['resolved_by'] or '-')} "
                     f"after {_duration(i['duration_s'])}")
    if i["note"]:
        lines.append(f"  note: {shown(i['note'])}")
    if i["evidence"]:
        lines.append("  evidence: " + "\n            ".join(i["evidence"].splitlines() or [""]))
    if alerts is not None and i["origin"] == "alert":
        lines += format_alert_parts(i, *alerts)
    if proposals is not None:
        lines += format_proposals(proposals)
    lines.append("timeline:")
    for t in timeline:
        where = f"session {t['session_pk']}" + (f" (tier {t['tier']})" if t["tier"] is not None else "") \
            if t["session_pk"] is not None else "-"
        check = ""
        if t["check_name"]:
            latency = f" {t['latency_ms']:.0f} ms" if t["latency_ms"] is not None else ""
            check = f"  {shown(t['check_name'])} {t['check_status']}{latency}"
        who = f"  by {shown(t['actor'])}" if t["actor"] else ""
        detail = f": {shown(' '.join((t['detail'] or '').splitlines()))}" if t["detail"] else ""
        lines.append(f"  {_when(t['at'])}  {t['kind']:<12}  {where}{check}{who}{detail}")
    return "\n".join(lines)


@main.group(invoke_without_command=True)
@state_options
@json_option
@click.option("--status", type=click.Choice(STATUSES), default="unresolved", show_default=True,
              help="unresolved = open and acknowledged.")
@click.option("--service", help="Only incidents of this service.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@click.pass_context
def incidents(ctx: click.Context, home: str | None, db: str | None, as_json: bool, status: str, service: str | None,
              limit: int) -> None:
    """List incidents, latest activity first (unresolved by default); or act on one (see the commands)."""
    if ctx.invoked_subcommand is not None:
        return
    rows = _store_call(ctx, home, db, lambda store: incident_store.list_incidents(
        store, status=None if status == "all" else status, service=service, limit=limit))
    if as_json:
        emit_json(rows)
    elif not rows:
        echo(f"no {'' if status == 'all' else status + ' '}incidents" + (f" for {service}" if service else ""))
    else:
        echo(format_list(rows, utcnow()))


@incidents.command()
@click.argument("incident_id", metavar="ID", type=click.IntRange(0, 2**63 - 1))
@state_options
@json_option
@click.pass_context
def show(ctx: click.Context, incident_id: int, home: str | None, db: str | None, as_json: bool) -> None:
    """One incident with the actions proposed for it and its timeline."""
    async def fetch(store: Database) -> tuple[IncidentRow | None, list[TimelineRow], list[ProposalRow],
                                              list[IncidentAlertRow], AlertCounts]:
        row = await incident_store.get_incident(store, incident_id)
        if row is None:
            return None, [], [], [], {"firing": 0, "resolved": 0}
        return (row, await incident_store.timeline(store, incident_id),
                await action_store.proposals(store, incident_id=incident_id, limit=PROPOSALS_SHOWN),
                await alert_incidents.incident_alerts(store, incident_id, limit=alert_incidents.ALERTS_READ_MAX if as_json else ALERTS_SHOWN),
                await alert_incidents.alert_counts(store, incident_id))

    row, timeline, proposals, alerts, counts = _store_call(ctx, home, db, fetch)
    if row is None:
        _fail(f"no incident {incident_id} (see `tierops incidents --status all`)")
    if as_json:
        emit_json({**row, "timeline": timeline, "proposals": proposals, "alerts": alerts, "alert_counts": counts})
    else:
        echo(format_incident(row, timeline, utcnow(), proposals, (alerts, counts)))


Action = Callable[[Database, str, str | None], Awaitable[IncidentRow]]  # (store, actor, note)


def _act(ctx: click.Context, incident_id: int, note: str | None, as_json: bool, done: str, call: Action) -> None:
    note = (note or "").strip() or None
    if note is not None and len(note) > NOTE_MAX:
        _fail(f"--note is too long ({len(note):,} characters; at most {NOTE_MAX:,})")
    actor = _cli_actor()

    async def apply(store: Database) -> IncidentRow | str:
        try:
            return await call(store, actor, note)
        except LookupError:
            return f"no incident {incident_id} (see `tierops incidents --status all`)"
        except IncidentStateError as exc:
            return str(exc)

    result = _store_call(ctx, ctx.params.get("home"), ctx.params.get("db"), apply)
    if isinstance(result, str):
        _fail(result)
    if as_json:
        emit_json(result)
    else:
        extra = f" until {_when(result['silenced_until'])} UTC" if done == "silenced" else ""
        echo(f"incident {incident_id} ({shown(result['key'])}) {done} by {actor}{extra}")


def _action_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--note", metavar="TEXT", help=f"Why (at most {NOTE_MAX} characters).")(fn)
    fn = json_option(fn)
    fn = state_options(fn)
    return click.argument("incident_id", metavar="ID", type=click.IntRange(0, 2**63 - 1))(fn)


@incidents.command()
@_action_options
@click.pass_context
def ack(ctx: click.Context, incident_id: int, home: str | None, db: str | None, as_json: bool,
        note: str | None) -> None:
    """Acknowledge an open incident: it stops re-escalating while it stays open."""
    _act(ctx, incident_id, note, as_json, "acknowledged",
         lambda store, actor, text: incident_store.acknowledge(store, incident_id, actor, text))


@incidents.command()
@_action_options
@click.pass_context
def resolve(ctx: click.Context, incident_id: int, home: str | None, db: str | None, as_json: bool,
            note: str | None) -> None:
    """Resolve an incident by hand (a check failing again opens a new one)."""
    _act(ctx, incident_id, note, as_json, "resolved",
         lambda store, actor, text: incident_store.resolve(store, incident_id, actor, text))


@incidents.command()
@_action_options
@click.option("--until", "until", required=True, metavar="WHEN",
              help=f"{UNTIL_HELP[0].upper()}{UNTIL_HELP[1:]}; at most 90 days.")
@click.pass_context
def silence(ctx: click.Context, incident_id: int, home: str | None, db: str | None, as_json: bool,
            note: str | None, until: str) -> None:
    """No escalation for this incident's key until WHEN, even if it reopens."""
    try:
        until_iso = parse_until(until)
    except ValueError as exc:
        _fail(f"--until: {exc}")
    _act(ctx, incident_id, note, as_json, "silenced",
         lambda store, actor, text: incident_store.silence(store, incident_id, until_iso, actor, text))
