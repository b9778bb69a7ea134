"""A session's guard: its policy from the settings, and the ``--settings`` JSON handing the CLI the hook.

Why a module of its own: the policy is decided once, when the session starts, from the tier's
settings and how the session came to run (approved, started by an operator), and stored with the
session; the hook command then needs nothing from the environment, which the CLI passes to hooks
stripped (``child_env``). The hook goes through ``--settings`` inline, never a file in the session's
folder or HOME that a tier (or an extension) could change (reference §11a). Its ``timeout`` is the
guard's own deadline plus a margin: a hook the CLI times out lets the call run, so the guard must
always answer first, and denies when it cannot decide in time (``app/cli/guard.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import sys
from pathlib import Path

from app.config import Settings
from app.engine.guard import MATCHER, GuardPolicy
from app.engine.mcp_policy import setting_for
from app.paths import PACKAGE_ROOT
from app.vocab import Trigger

log = logging.getLogger(__name__)

HOOK_MARGIN_S = 5  # the CLI's hook timeout is the guard's deadline plus this


def mcp_patterns(settings: Settings, tier: int, dry_run: bool) -> tuple[str, ...]:
    """The MCP tools a run may call: the read-only ones for tier 1 and dry runs, else the tier's."""
    setting = setting_for(tier, dry_run)
    text = str(getattr(settings, setting)) if setting else ""
    return tuple(p.strip() for p in text.split(",") if p.strip())


def policy_for(settings: Settings, tier: int, *, dry_run: bool, allowed_tools: list[str],
               disallowed_tools: list[str], trigger: str, approved_by: str | None = None) -> GuardPolicy:
    """The policy of a session of ``tier``: ``approved_by`` names an approval that let it run; a
    run an operator started (Run Now, ``tierops run``) is theirs to approve."""
    manual = {1: settings.tier1_approval, 2: settings.tier2_approval, 3: settings.tier3_approval}.get(tier) == "manual"
    if approved_by is None and trigger == Trigger.MANUAL:
        approved_by = "an operator (Run Now or tierops run)"
    return GuardPolicy(tier=tier, dry_run=dry_run, allowed_tools=tuple(allowed_tools),
                       disallowed_tools=tuple(disallowed_tools), mcp_tools=mcp_patterns(settings, tier, dry_run),
                       cooldowns=settings.cooldowns, approval_required=manual, approved_by=approved_by)


DATABASE_URL_FILE = ".database-url"  # in the state directory, 0600: the hook's PostgreSQL URL


def database_arguments(target: str | Path, state_dir: Path) -> list[str]:
    """How the hook finds the store: ``--db PATH`` (SQLite), or ``--db-url-file FILE`` holding the
    PostgreSQL URL, written 0600 in the state directory: a URL with a password is never on a
    command line (``ps`` shows those) nor in the CLI's environment."""
    if isinstance(target, Path):
        return ["--db", str(target)]
    path = state_dir / DATABASE_URL_FILE
    try:
        current = path.read_text(encoding="utf-8")
    except OSError:
        current = None
    if current != target:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(target)
    return ["--db-url-file", str(path)]


def hook_command(db_args: list[str], session_pk: int, deadline: float) -> str:
    """The shell command the CLI runs before each guarded tool call: this interpreter running this
    package (installed or not), so it needs nothing on the CLI's PATH or in its environment."""
    return (f"PYTHONPATH={shlex.quote(str(PACKAGE_ROOT))} "
            + shlex.join([sys.executable, "-m", "app", "guard", *db_args, "--session", str(session_pk),
                          "--deadline", f"{deadline:g}"]))


def hook_settings(db_args: list[str], session_pk: int, deadline: float) -> str:
    """``--settings`` JSON: one PreToolUse hook over the guarded tools."""
    hook = {"type": "command", "command": hook_command(db_args, session_pk, deadline),
            "timeout": int(deadline + HOOK_MARGIN_S)}
    return json.dumps({"hooks": {"PreToolUse": [{"matcher": MATCHER, "hooks": [hook]}]}}, separators=(",", ":"))
