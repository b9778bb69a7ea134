"""The commands that read what the store holds: ``sessions``, ``events`` and ``memories``.

They only read: they refuse to create an empty database where none exists
(:func:`~app.cli.base.require_database`). ``ingest``, which writes, is ``app/cli/ingest.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

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
from app.store import findings
from app.store import memories as memory_store
from app.store import sessions as session_store
from app.store.db import Database
from app.store.rows import EventRow, MemoryRow, SessionListRow
from app.vocab import MAX_TIER, MIN_TIER, Level, SessionStatus, values

log = logging.getLogger(__name__)


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


