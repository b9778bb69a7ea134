"""What every ``tierops`` command shares: the group, settings, the state options, errors, the loop.

Errors that are the operator's to fix (a bad flag, an invalid ``TIEROPS_*`` setting, a missing or
non-stream-json file, a bad schema, an unreadable or missing database, a full disk) print one
line starting with ``tierops: error:`` and exit 2, never a traceback; nothing already stored is
touched by a failed command. Unknown ``TIEROPS_*`` names are warned about once per command,
with the closest known setting.

Stored text is printed through :func:`echo` (and :func:`shown` for a field inside a line): a
terminal control sequence in an alert or a model's text (OSC 52, OSC 8, CSI, BEL) is shown as
escapes, never obeyed; ``--json`` (:func:`emit_json`) prints the text exactly, JSON-escaped.

The state directory is found the same way from any working directory (``app/paths.py``); a
command that only reads the database refuses to create an empty one: pointed at the wrong folder
it must say so, not make a fresh database and report "no sessions".
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click
from pydantic import ValidationError
from pydantic_settings import SettingsError

from app.config import Settings, get_settings
from app.config_sources import unknown_settings
from app.errors import InputError, TierOpsError
from app.logs import setup_logging
from app.redact import Redactor, install_log_redaction
from app.store.backends import open_database
from app.store.db import Database, describe_storage_error, is_transient
from app.store.pg import safe_url

if TYPE_CHECKING:
    from app.output.validate import OutputValidator

log = logging.getLogger(__name__)

EXIT_BAD_INPUT = 2
EXIT_STOPPED = 130  # 128 + SIGINT, as shells report a stopped command

F = TypeVar("F", bound=Callable[..., Any])


class CommandError(InputError):
    """An operator-facing error: printed as one line, exit code 2."""


def fail(message: str) -> NoReturn:
    echo(f"tierops: error: {shown(' '.join(message.splitlines()))}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def warn(message: str) -> None:
    echo(f"tierops: warning: {shown(' '.join(message.splitlines()))}", err=True)


def settings_problems(exc: ValidationError) -> str:
    """Each invalid setting under its environment name: ``TIEROPS_TIER1_TIMEOUT: … (got 'abc')``."""
    problems = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else ""
        name = f"TIEROPS_{field.upper()}" if field else "settings"
        message = err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        if isinstance(value, str) and "token" not in field:  # never echo a secret
            shown = value if len(value) <= 60 else value[:57] + "..."
            message += f" (got {shown!r})"
        problems.append(f"{name}: {message}")
    return "; ".join(problems)


def try_settings(**overrides: Any) -> Settings:
    """The settings, or :class:`CommandError` with every invalid one named (no traceback)."""
    try:
        return get_settings(**overrides)
    except ValidationError as exc:
        raise CommandError(settings_problems(exc)) from None
    except SettingsError as exc:
        # pydantic-settings could not even parse a value (e.g. a list setting that is not JSON)
        raise CommandError(f"settings: {exc}") from None


_warned = False


def load_settings(ctx: click.Context | None = None, *, home: str | None = None, db: str | None = None,
                  checks: str | None = None) -> Settings:
    """Settings from flags > environment > ``.env`` > defaults; exits 2 with one line if invalid."""
    global _warned
    if not _warned:  # once per process, even when a command loads settings twice
        _warned = True
        for message in unknown_settings():
            warn(message)
    if ctx is not None:
        home = home or ctx.params.get("home")
        db = db or ctx.params.get("db")
    try:
        return try_settings(home=home, db=db, checks=checks)
    except CommandError as exc:
        fail(str(exc))


def require_database(settings: Settings) -> None:
    """A command that only reads refuses to create an empty database: a wrong ``--home`` says so."""
    if not isinstance(settings.database_target, Path):
        return  # PostgreSQL: opening it says whether it can be reached
    path = settings.db_path
    if path.is_file():
        return
    where = f"TIEROPS_HOME={settings.state_dir}" if path.parent == settings.state_dir else f"TIEROPS_DB={path}"
    if path.exists():
        fail(f"{path} is not a database file ({where})")
    fail(f"no database at {path} ({where}): nothing has been stored there yet. Point --home (or "
         "TIEROPS_HOME) at the state directory you meant, or create this one with `tierops ingest`, "
         "`tierops run` or `tierops serve`")


def describe_state() -> str:
    """The database the command would use, for ``--help`` (never fails)."""
    try:
        settings = get_settings()
    except Exception:  # --help must work whatever the settings say
        return "unknown: the settings are invalid, see `tierops doctor`"
    if not isinstance(settings.database_target, Path):
        return f"PostgreSQL {safe_url(settings.database_target)}"
    state = "exists" if settings.db_path.is_file() else "not created yet"
    return f"{settings.db_path}, {state}"


class _StateOption(click.Option):
    """``--home``/``--db`` whose help says which database is in use right now."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        record = super().get_help_record(ctx)
        if record is None or self.name != "home":
            return record
        return record[0], f"{record[1]} [now: {describe_state()}]"


def state_options(fn: F) -> F:
    """``--home`` and ``--db`` on a command; ``load_settings(ctx)`` picks them up."""
    fn = click.option("--db", "db", metavar="PATH", cls=_StateOption,
                      help="SQLite file, when not HOME/tierops.db (or $TIEROPS_DB).")(fn)
    fn = click.option("--home", "home", metavar="DIR", cls=_StateOption,
                      help="State directory (or $TIEROPS_HOME; default ~/.local/state/tierops).")(fn)
    return fn


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


def run_async(fn: Callable[[], Awaitable[Any]], *, stoppable: bool = False) -> Any:
    """Run ``fn`` on a fresh event loop. Every :class:`TierOpsError` is one error line, exit 2.

    ``stoppable``: SIGTERM and SIGINT cancel the command's task through the loop's own signal
    handlers (``loop.add_signal_handler``), so running sessions are finalized ``interrupted`` and
    their process groups killed. Installed on the loop, the handlers also work when the shell
    started us with SIGINT ignored (a background job of a non-interactive shell).
    """
    async def main() -> Any:
        if stoppable:
            loop = asyncio.get_running_loop()
            if (task := asyncio.current_task()) is not None:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, task.cancel)
        return await fn()

    try:
        return asyncio.run(main())
    except TierOpsError as exc:
        fail(str(exc))
    except Exception as exc:
        if not is_transient(exc):  # a bug: its traceback is the useful output
            raise
        fail(f"storage error: {describe_storage_error(exc)}")  # disk full, I/O error, locked
    except (asyncio.CancelledError, KeyboardInterrupt):
        click.echo("stopped", err=True)
        sys.exit(EXIT_STOPPED)


async def open_store(settings: Settings) -> Database:
    return await open_database(settings.database_target)


# Stored text (alerts, a model's findings, a sender's links) reaches an operator's terminal only
# through these: a C0 or C1 control or DEL would be obeyed, not shown (OSC 52 writes the clipboard,
# OSC 8 disguises a link, CSI moves the cursor or clears the screen, BEL rings, CR overwrites the
# line). Each is written as a visible escape instead (``\\x1b``, ``\\r``).
_TERMINAL_ESCAPES: dict[int, str] = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_TERMINAL_ESCAPES.update({0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"})
_LAYOUT_ESCAPES = {c: e for c, e in _TERMINAL_ESCAPES.items() if c not in (0x0A, 0x09)}
_JSON_RAW_CONTROLS = {c: f"\\u{c:04x}" for c in (0x7F, *range(0x80, 0xA0), 0x2028, 0x2029)}


def shown(value: object) -> str:
    """Stored text inside a line of output: every control character escaped, newline and tab too,
    so it can neither drive the terminal nor start a line of its own."""
    return str(value).translate(_TERMINAL_ESCAPES)


def terminal_text(text: str) -> str:
    """Output about to be printed: controls escaped except newline and tab, which the layout itself
    uses (fields printed inline go through :func:`shown` first)."""
    return text.translate(_LAYOUT_ESCAPES)


def echo(text: str = "", *, err: bool = False) -> None:
    """The one way a command prints text that holds stored data (:func:`terminal_text`)."""
    click.echo(terminal_text(text), err=err)


def emit_json(value: Any) -> None:
    """``--json``: JSON escapes C0 controls itself; DEL, C1 controls and U+2028/2029, which it may
    leave raw, are written as ``\\u`` escapes too (the same strings, valid JSON)."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str).translate(_JSON_RAW_CONTROLS))


def load_validator(path: str | Path) -> OutputValidator:
    # Imported here: only the commands that validate output pay for the JSON Schema machinery.
    from app.output.validate import OutputValidator, SchemaLoadError

    try:
        return OutputValidator.from_file(path)
    except SchemaLoadError as exc:
        fail(str(exc))


# Where each command lives. A command's module is imported when that command runs (or for
# --help), so `tierops incidents` does not load the engine, the validator and the web stack: every
# command starts in about half the time. tests/cli/test_base.py checks this table against the
# commands the modules register.
COMMAND_MODULES: dict[str, str] = {
    "approvals": "app.cli.approvals", "backup": "app.cli.ops", "checks": "app.cli.checks",
    "cooldowns": "app.cli.cooldowns", "db": "app.cli.db", "doctor": "app.cli.doctor", "events": "app.cli.records", "guard": "app.cli.guard",
    "incidents": "app.cli.incidents", "ingest": "app.cli.ingest", "maintenance": "app.cli.maintenance",
    "memories": "app.cli.records", "notify": "app.cli.notify", "probe": "app.cli.checks",
    "prune": "app.cli.ops", "revalidate": "app.cli.schemas", "run": "app.cli.cycles",
    "schemas": "app.cli.schemas", "serve": "app.cli.cycles", "sessions": "app.cli.records",
    "supervise": "app.cli.cycles",
}


class TierOpsGroup(click.Group):
    """click's usage errors (a bad flag or value) as one ``tierops: error:`` line and exit 2, like
    every other error, instead of click's usage block; commands loaded from
    :data:`COMMAND_MODULES` when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(COMMAND_MODULES))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            importlib.import_module(COMMAND_MODULES[cmd_name])  # registers itself on `main`
        return super().get_command(ctx, cmd_name)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        kwargs.setdefault("prog_name", "tierops")  # also under python -m app
        try:
            rv = super().main(*args, **kwargs)
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            fail(exc.format_message() + hint)
        except click.ClickException as exc:
            fail(exc.format_message())
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


LOG_LEVELS = ("debug", "info", "warning", "error")
LONG_RUNNING = frozenset({"serve", "supervise", "run", "prune", "backup"})


@click.group(cls=TierOpsGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tierops")
@click.option("--log-level", type=click.Choice(LOG_LEVELS), default=None,
              help="Application log level (or $TIEROPS_LOG_LEVEL; default info).")
@click.option("--log-format", type=click.Choice(("text", "json")), default=None,
              help="text, or json lines with session and chain ids (or $TIEROPS_LOG_FORMAT).")
@click.pass_context
def main(ctx: click.Context, log_level: str | None, log_format: str | None) -> None:
    """TierOps: tiered Claude Code health checks — ingest, store, route, escalate.

    State (the database, session folders, the CLI's HOME, the cycle lock) lives in one
    directory: --home or $TIEROPS_HOME, else ~/.local/state/tierops. `tierops doctor` checks it.
    """
    # Nothing secret in any log line, whichever command logs.
    install_log_redaction(Redactor.from_environment())
    # Invalid TIEROPS_LOG_* values are reported by the command's own settings load (one line,
    # exit 2); here they fall back to the defaults so that --help always works.
    # The long-running commands log their cycles and sessions at info; the one-shot ones only
    # say something when it is worth a warning, unless asked.
    default = "info" if ctx.invoked_subcommand in LONG_RUNNING else "warning"
    setup_logging(level=log_level, fmt=log_format, default_level=default)
