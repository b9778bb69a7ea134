"""``tierops guard``: the PreToolUse hook the CLI runs before each guarded tool call, and ``guard check``.

Why a module of its own: the hook is a process of its own per tool call, started by the CLI with
the hook's JSON on stdin (reference §11a, fixtures ``o_pretooluse_hook_*``). The CLI lets a call
run when its hook crashes or outlives its timeout, so this command fails closed by itself: a
watchdog ends it with exit 2 (a deny, the reason on stderr) at ``--deadline``, and every error —
unreadable input, no database, a locked one, a bug — is exit 2 too. A deny it decided is the JSON
``permissionDecision: "deny"`` with the reason the model reads; a call it lets run gets no answer
at all, so the CLI's own permission rules still apply ("allow" would bypass them).

``tierops guard check "CMD" --tier N [--dry-run]`` prints the decision and the rule for a command
under the current settings, for operators writing policies; it records nothing and counts nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import click

from app.cli.base import echo, emit_json, fail, json_option, load_settings, main, state_options

log = logging.getLogger(__name__)

STDIN_MAX = 1024 * 1024  # bytes of hook input read; the CLI sends a few kilobytes
EXIT_DENY = 2  # the hook protocol: exit 2 blocks the call, stderr is the reason


def _deny_now(reason: str) -> None:
    """Exit 2 at once with ``reason`` (the CLI shows it to the model as the hook's error)."""
    try:
        os.write(2, f"TierOps guard denied this call: {reason}\n".encode("utf-8", "replace"))
    finally:
        os._exit(EXIT_DENY)


def _arm(deadline: float) -> None:
    def expired(_signum: int, _frame: FrameType | None) -> None:
        _deny_now(f"no decision within {deadline:g} s (TierOps storage busy or down); try again shortly")

    signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, deadline)


@main.group(invoke_without_command=True)
@click.option("--db", "db_path", metavar="PATH", help="The TierOps database the session is recorded in.")
@click.option("--db-url-file", "url_file", metavar="FILE", help="A file holding the PostgreSQL URL of that database.")
@click.option("--session", "session_pk", type=int, help="The session (its TierOps id) whose tool call this is.")
@click.option("--deadline", type=click.FloatRange(0.1, 120), default=5.0, show_default=True,
              help="Seconds to decide in; past them the call is denied.")
@click.pass_context
def guard(ctx: click.Context, db_path: str | None, url_file: str | None, session_pk: int | None,
          deadline: float) -> None:
    """The PreToolUse hook TierOps hands each session: reads the hook's JSON on stdin and denies
    what the session's policy refuses (exit 0 with a deny, or exit 2 when it cannot decide)."""
    if ctx.invoked_subcommand is not None:
        return
    if (db_path is None and url_file is None) or session_pk is None:
        fail("tierops guard needs --db (or --db-url-file) and --session (the CLI runs it as a hook); to try a command, use "
             "`tierops guard check \"CMD\" --tier N`")
    _arm(deadline)
    logging.disable(logging.WARNING)  # stdout is the CLI's to parse; stay quiet
    try:
        hook = _read_hook()
        target: str | Path = (Path(url_file).read_text(encoding="utf-8").strip() if url_file is not None
                              else Path(str(db_path)))
        answer = asyncio.run(_judge(target, session_pk, hook))
    except BaseException as exc:  # fail closed: whatever went wrong, the call does not run
        if isinstance(exc, SystemExit) and exc.code == 0:
            raise
        _deny_now(f"the guard could not decide ({type(exc).__name__}: {str(exc)[:300]})")
        return  # pragma: no cover - _deny_now exits
    signal.setitimer(signal.ITIMER_REAL, 0)
    if answer is not None:
        sys.stdout.write(json.dumps({"hookSpecificOutput": {
            "hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": answer}}))
        sys.stdout.flush()
    sys.exit(0)


def _read_hook() -> dict[str, Any]:
    data = sys.stdin.buffer.read(STDIN_MAX + 1)
    if len(data) > STDIN_MAX:
        raise ValueError(f"the hook input is over {STDIN_MAX} bytes")
    hook = json.loads(data)
    if not isinstance(hook, dict):
        raise ValueError("the hook input is not a JSON object")
    return hook


async def _judge(target: str | Path, session_pk: int, hook: dict[str, Any]) -> str | None:
    """The deny reason, or None to let the CLI's own rules decide."""
    from app.engine.guard import judge
    from app.store.backends import open_database

    if isinstance(target, Path) and not target.is_file():
        raise FileNotFoundError(f"no TierOps database at {target}")
    async with await open_database(target, readers=1) as db:
        decision = await judge(db, session_pk, hook)
    return None if decision.allow else f"{decision.reason} [TierOps guard: {decision.rule}]"


@guard.command("check")
@click.argument("command")
@click.option("--tier", type=click.IntRange(1, 3), required=True, help="The tier whose rules apply.")
@click.option("--dry-run", is_flag=True, help="Judge it as in a dry run.")
@click.option("--approved", is_flag=True, help="Judge it as in a session an operator approved (manual tiers).")
@click.option("--tool", default="Bash", show_default=True, help="The tool called: Bash, Edit, Write or mcp__SERVER__TOOL.")
@state_options
@json_option
def check(command: str, tier: int, dry_run: bool, approved: bool, tool: str, home: str | None, db: str | None,
          as_json: bool) -> None:
    """Print what the guard would decide for COMMAND in TIER under the current settings (records
    nothing; cooldowns are shown as they stand in the database, when there is one)."""
    from app.engine import cooldowns as cooldown_engine
    from app.engine.guard import decide, effect_lines
    from app.supervisor.guarding import policy_for
    from app.supervisor.session import tools_for

    settings = load_settings(home=home, db=db)
    dry = dry_run or settings.dry_run
    allowed, disallowed = tools_for(settings.tier(tier), dry)
    policy = policy_for(settings, tier, dry_run=dry, allowed_tools=allowed, disallowed_tools=disallowed,
                        trigger="check", approved_by="--approved" if approved else None)
    tool_input = {"command": command} if tool == "Bash" else {"file_path": command}
    decision = decide(policy, tool, tool_input)
    limits = cooldown_engine.parse_limits(settings.cooldowns)
    counted = [(kind, service, limits.get(cooldown_engine.kind_of(kind))) for kind, service in decision.counted]
    effects = effect_lines(command) if tool == "Bash" else []
    if as_json:
        emit_json({"decision": decision.word, "rule": decision.rule, "reason": decision.reason,
                   "mutating": decision.mutating,
                   "cooldowns": [{"kind": k, "service": s, "limit": lim.text if lim else None} for k, s, lim in counted],
                   "commands": [{"command": cmd.text, "remote_host": cmd.remote_host, "wrappers": list(cmd.wrappers),
                                 "mutating": eff.mutating, "kind": eff.kind, "service": eff.service, "why": eff.why}
                                for cmd, eff in effects]})
        return
    echo(f"{decision.word.upper()}  rule: {decision.rule}")
    echo(f"  {decision.reason}")
    for cmd, eff in effects:
        via = f" (via {', '.join(cmd.wrappers)})" if cmd.wrappers else ""
        host = f" on {cmd.remote_host}" if cmd.remote_host else ""
        echo(f"  - {cmd.text}{host}{via}: {'changes state' if eff.mutating else 'reads'}"
             f"{', ' + eff.kind if eff.kind else ''}{' ' + eff.service if eff.service else ''}")
    for kind, service, lim in counted:
        if lim is not None:
            echo(f"  counted against the cooldown {kind}:{lim.text} for {cooldown_engine.service_name(service)} "
                 "when it runs")
