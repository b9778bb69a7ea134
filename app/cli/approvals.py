"""``tierops approvals``: escalations waiting for an operator — list, show, approve, reject.

A group of its own because approving is the one decision that *runs* something: ``approve`` marks
the approval approved and runs the rest of its chain in this process, from the approved tier with
the escalating session as parent, printing the chain like ``tierops run`` (it takes the cycle lock
like any cycle: refused at once, and the approval left pending, while another cycle runs, here or
in a server). ``reject`` records the decision and flags the escalating session as needing
attention. Decisions are recorded as ``<unix user> via CLI``. Every command uses an existing
database only; a missing approval or a decision its state refuses is one error line, exit 2.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

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
    require_database,
    shown,
    state_options,
)
from app.cli.base import run_async as _run
from app.cli.incidents import _cli_actor
from app.clock import utcnow
from app.config import Settings
from app.errors import TierOpsError
from app.store import approvals as approval_store
from app.store.approvals import ApprovalRow, ApprovalStateError
from app.store.db import Database
from app.store.incidents import NOTE_MAX
from app.store.rows import ChainLink
from app.vocab import ApprovalStatus, SessionStatus, values

log = logging.getLogger(__name__)

T = TypeVar("T")

STATUSES = (*values(ApprovalStatus), "all")
ID = click.IntRange(0, 2**63 - 1)


def _settings(ctx: click.Context, home: str | None, db: str | None) -> Settings:
    parent = ctx.parent.params if ctx.parent is not None else {}
    settings = load_settings(home=home or parent.get("home"), db=db or parent.get("db"))
    require_database(settings)
    return settings


def _store_call(settings: Settings, fn: Callable[[Database], Awaitable[T]], *, stoppable: bool = False) -> T:
    async def go() -> T:
        async with await open_store(settings) as store:
            return await fn(store)

    result: T = _run(go, stoppable=stoppable)
    return result


def _when(value: str | None) -> str:
    return (value or "-")[:19].replace("T", " ")


def _note(note: str | None) -> str | None:
    note = (note or "").strip() or None
    if note is not None and len(note) > NOTE_MAX:
        fail(f"--note is too long ({len(note):,} characters; at most {NOTE_MAX:,})")
    return note


def format_list(rows: list[ApprovalRow], now: str) -> str:
    lines = [f"{'ID':>5}  {'STATUS':<8}  {'TIER':>4}  {'SESSION':>7}  {'REQUESTED':<19}  DECIDED / EXPIRES"]
    for a in rows:
        if a["status"] == ApprovalStatus.PENDING:
            late = " (past its time: expires at the next check)" if a["expires_at"] <= now else ""
            when = f"expires {_when(a['expires_at'])}{late}"
        else:
            by = f" by {shown(a['decided_by'])}" if a["decided_by"] else ""
            child = f" -> session {a['child_session_pk']}" if a["child_session_pk"] is not None else ""
            when = f"{_when(a['decided_at'])}{by}{child}"
        session = str(a["session_pk"]) if a["session_pk"] is not None else "-"
        lines.append(f"{a['id']:>5}  {a['status']:<8}  {a['tier']:>4}  {session:>7}  {_when(a['created_at']):<19}  {when}")
    return "\n".join(lines)


def format_approval(a: ApprovalRow) -> str:
    lines = [f"approval {a['id']}: {a['status']}, run tier {a['tier']} after session {a['session_pk'] or '-'}"
             f" (chain {a['chain_id'] or '-'})",
             f"  requested {_when(a['created_at'])}, expires {_when(a['expires_at'])}"]
    if a["decided_at"]:
        lines.append(f"  {a['status']} {_when(a['decided_at'])}" + (f" by {shown(a['decided_by'])}" if a["decided_by"] else "")
                     + (f": {shown(a['note'])}" if a["note"] else ""))
    if a["child_session_pk"] is not None:
        lines.append(f"  started session {a['child_session_pk']}")
    lines.append("handoff:")
    lines += [f"  {line}" for line in a["handoff"].splitlines()]
    return "\n".join(lines)


@main.group(invoke_without_command=True)
@state_options
@json_option
@click.option("--status", type=click.Choice(STATUSES), default="pending", show_default=True)
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@click.pass_context
def approvals(ctx: click.Context, home: str | None, db: str | None, as_json: bool, status: str, limit: int) -> None:
    """List approvals (pending by default, oldest first); or decide one (see the commands)."""
    if ctx.invoked_subcommand is not None:
        return
    settings = _settings(ctx, home, db)
    rows = _store_call(settings, lambda store: approval_store.list_approvals(
        store, status=None if status == "all" else status, limit=limit))
    if as_json:
        emit_json(rows)
    elif not rows:
        echo(f"no {'' if status == 'all' else status + ' '}approvals")
    else:
        echo(format_list(rows, utcnow()))


@approvals.command()
@click.argument("approval_id", metavar="ID", type=ID)
@state_options
@json_option
@click.pass_context
def show(ctx: click.Context, approval_id: int, home: str | None, db: str | None, as_json: bool) -> None:
    """One approval with the handoff its tier would be given."""
    row = _store_call(_settings(ctx, home, db), lambda store: approval_store.get_approval(store, approval_id))
    if row is None:
        fail(f"no approval {approval_id} (see `tierops approvals --status all`)")
    if as_json:
        emit_json(row)
    else:
        echo(format_approval(row))


@approvals.command()
@click.argument("approval_id", metavar="ID", type=ID)
@state_options
@json_option
@click.option("--note", metavar="TEXT", help=f"Why (at most {NOTE_MAX} characters).")
@click.pass_context
def approve(ctx: click.Context, approval_id: int, home: str | None, db: str | None, as_json: bool,
            note: str | None) -> None:
    """Approve, then run the rest of the chain now from the approved tier and print it."""
    # Only approving runs sessions: listing and rejecting do not load the supervisor.
    from app.cli.cycles import _render_chain
    from app.supervisor.chain import base_prompt
    from app.supervisor.scheduler import Supervisor

    note = _note(note)
    settings = _settings(ctx, home, db)
    validator = load_validator(settings.schema_file)
    actor = _cli_actor()

    async def go(store: Database) -> list[ChainLink]:
        row = await approval_store.get_approval(store, approval_id)
        if row is None:
            raise LookupError(f"no approval {approval_id} (see `tierops approvals --status all`)")
        base_prompt(settings, row["tier"], None)  # a prompt file that cannot be read: said before approving
        return await Supervisor(store, settings, validator).run_approved(approval_id, actor, note)

    chain = _store_call(settings, _errors_as_lines(go), stoppable=True)
    if as_json:
        emit_json(chain)
    else:
        echo(f"approval {approval_id} approved by {actor}")
        echo(_render_chain(chain))
    if any(s["status"] == SessionStatus.FAILED for s in chain):
        sys.exit(1)


@approvals.command()
@click.argument("approval_id", metavar="ID", type=ID)
@state_options
@json_option
@click.option("--note", metavar="TEXT", help=f"Why (at most {NOTE_MAX} characters).")
@click.pass_context
def reject(ctx: click.Context, approval_id: int, home: str | None, db: str | None, as_json: bool,
           note: str | None) -> None:
    """Reject: the escalation does not run and its session is flagged as needing attention."""
    note = _note(note)
    actor = _cli_actor()
    row = _store_call(_settings(ctx, home, db), _errors_as_lines(
        lambda store: approval_store.decide(store, approval_id, "rejected", actor, note)))
    if as_json:
        emit_json(row)
    else:
        echo(f"approval {approval_id} (tier {row['tier']} after session {row['session_pk'] or '-'}) "
             f"rejected by {actor}")


def _errors_as_lines(fn: Callable[[Database], Awaitable[T]]) -> Callable[[Database], Awaitable[T]]:
    """A missing approval or a decision its state refuses as one error line (exit 2)."""
    async def call(store: Database) -> T:
        try:
            return await fn(store)
        except LookupError as exc:
            message = str(exc).strip("'")
            if "see `tierops" not in message:
                message += " (see `tierops approvals --status all`)"
            raise _Refused(message) from None
        except ApprovalStateError as exc:
            raise _Refused(str(exc)) from None

    return call


class _Refused(TierOpsError):
    """Printed by ``run_async`` as one ``tierops: error:`` line, exit 2."""
