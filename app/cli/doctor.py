"""``tierops doctor``: is this installation able to run? One line per check, exit 1 if any fails.

Why: the failures an operator meets first are not in TierOps' code but around it — the CLI is
missing or too old, no credentials, a state directory on a read-only or full disk, a database
from a newer TierOps, a prompt file that moved, a clock that went backwards. Each check says
what it looked at and, when it fails, what to do. The doctor changes nothing: it never creates
the state directory or the database, never applies migrations, never prints a secret (only the
*names* of the credentials it found).

Statuses: ``ok``; ``warn`` (works, but look); ``fail`` (TierOps cannot do its job: exit 1);
``skip`` (nothing to check).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import click

from app.cli.base import CommandError, emit_json, json_option, main, state_options, try_settings, warn
from app.config import ENV_FILE, Settings, unknown_settings
from app.errors import TierOpsError
from app.output.validate import OutputValidator, SchemaLoadError
from app.probe.inventory import InventoryError, load_inventory
from app.store.inspect import inspect_database
from app.supervisor.runner import CLINotFound, child_env, resolve_binary
from app.units import human_bytes

Status = Literal["ok", "warn", "fail", "skip"]

# What TierOps puts on the CLI's command line (app/supervisor/runner.py build_argv); a CLI whose
# --help lacks one of them cannot run a session the way TierOps launches it. --max-turns is used
# too but 2.1.197 hides it from --help (tests/realcli/test_doctor_real.py), so it is not probed.
REQUIRED_FLAGS = (
    "--print", "--output-format", "--verbose", "--json-schema", "--model", "--resume", "--add-dir",
    "--append-system-prompt", "--allowedTools", "--disallowedTools",
)
TESTED_CLI_VERSION = "2.1.197"  # the captures in tests/fixtures and the reference were made with it
# Credentials the CLI reads from its environment (passed through by app/supervisor/runner.py).
CREDENTIAL_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
CLOUD_VARS = ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX")
DISK_FAIL_BYTES = 100 * 1024 * 1024
DISK_WARN_BYTES = 1024 * 1024 * 1024
CLOCK_SKEW_S = 300  # stored timestamps this far in the future mean the clock went back
PROBE_TIMEOUT_S = 20


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str


def check_settings(home: str | None, db: str | None) -> tuple[Check, Settings | None]:
    try:
        settings = try_settings(home=home, db=db)
    except CommandError as exc:
        return Check("settings", "fail", f"{exc}; fix the variable (environment or {ENV_FILE})"), None
    try:
        token = settings.resolved_token()
    except TierOpsError as exc:
        return Check("settings", "fail", str(exc)), settings
    unknown = unknown_settings()
    if unknown:
        return Check("settings", "warn", "; ".join(unknown)), settings
    auth = "token set (TIEROPS_TOKEN or TIEROPS_TOKEN_FILE)" if token else "no dashboard token (loopback only)"
    return Check("settings", "ok", f"valid; {auth}"), settings


def check_state_dir(settings: Settings) -> Check:
    home = settings.state_dir
    if home.is_dir():
        if not os.access(home, os.W_OK | os.X_OK):
            return Check("state dir", "fail", f"{home} is not writable by uid {os.getuid()}; fix its owner or "
                                              "point TIEROPS_HOME elsewhere")
        return Check("state dir", "ok", f"{home}")
    if home.exists():
        return Check("state dir", "fail", f"{home} exists and is not a directory")
    parent = next((p for p in home.parents if p.exists()), None)
    if parent is None or not os.access(parent, os.W_OK | os.X_OK):
        return Check("state dir", "fail", f"{home} does not exist and cannot be created under {parent}")
    return Check("state dir", "warn", f"{home} does not exist yet; the first `tierops serve`, `run` or `ingest` "
                                      "creates it")


def check_database(settings: Settings) -> tuple[Check, str | None]:
    info = inspect_database(settings.db_path)
    if not info.exists:
        return Check("database", "warn", f"{info.path}: none yet (created by the first `tierops serve`, "
                                         "`run` or `ingest`)"), None
    if info.error is not None:
        return Check("database", "fail", f"{info.path}: {info.error}; restore a backup (`tierops backup`) "
                                         "or move the file away"), None
    if info.unknown:
        return Check("database", "fail", f"{info.path}: written by a newer TierOps (migrations "
                                         f"{', '.join(info.unknown)}); upgrade TierOps"), info.newest_timestamp
    if not info.writable:
        return Check("database", "fail", f"{info.path}: not writable ({info.write_error})"), info.newest_timestamp
    migrations = (f"migrations current ({len(info.applied)})" if not info.pending
                  else f"{len(info.pending)} migration(s) pending ({', '.join(info.pending)}), applied at the next "
                       "start")
    detail = (f"{info.path}: writable, {migrations}, {human_bytes(info.size_bytes)}, {info.sessions} sessions, "
              f"journal {info.journal_mode}")
    return Check("database", "ok" if not info.pending else "warn", detail), info.newest_timestamp


def check_schema(settings: Settings) -> Check:
    try:
        OutputValidator.from_file(settings.schema_file)
    except SchemaLoadError as exc:
        return Check("schema", "fail", str(exc))
    return Check("schema", "ok", f"{settings.schema_file}")


def check_prompts(settings: Settings) -> Check:
    problems, found = [], []
    for n in range(1, settings.max_tier + 1):
        path = settings.tier(n).prompt_file
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"tier {n} {path}: {getattr(exc, 'strerror', None) or exc}")
            continue
        if not text.strip():
            problems.append(f"tier {n} {path}: empty")
        else:
            found.append(f"tier {n}")
    if problems:
        return Check("prompts", "fail", "; ".join(problems) + "; fix TIEROPS_TIER<N>_PROMPT_FILE")
    return Check("prompts", "ok", f"{', '.join(found)} in {settings.tier(1).prompt_file.parent}")


def _probe(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    with tempfile.TemporaryDirectory(prefix="tierops-doctor-") as cwd:
        # argv is [the configured CLI binary, --version|--help]: the operator's own setting
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=env, cwd=cwd,
                              timeout=PROBE_TIMEOUT_S, check=False)
    return done.returncode, done.stdout.decode("utf-8", "replace") + done.stderr.decode("utf-8", "replace")


def check_cli(settings: Settings) -> Check:
    try:
        binary = resolve_binary(settings.claude_bin, os.environ.get("PATH"))
    except CLINotFound:
        return Check("claude CLI", "fail", f"{settings.claude_bin!r} not found (TIEROPS_CLAUDE_BIN); install it: "
                                           f"npm install -g @anthropic-ai/claude-code@{TESTED_CLI_VERSION}")
    # Its own HOME when the state directory has one; else a throwaway one: the doctor creates nothing.
    cli_home = settings.state_dir / "home"
    with tempfile.TemporaryDirectory(prefix="tierops-doctor-home-") as spare:
        env = child_env(cli_home if cli_home.is_dir() else Path(spare), settings.allowed_env())
        try:
            code, version_out = _probe([binary, "--version"], env)
            help_code, help_out = _probe([binary, "--help"], env)
        except subprocess.TimeoutExpired:
            return Check("claude CLI", "fail", f"{binary} did not answer --version/--help within {PROBE_TIMEOUT_S} s")
        except OSError as exc:
            return Check("claude CLI", "fail", f"{binary}: cannot run it: {exc.strerror}")
    version = version_out.strip().splitlines()[0] if version_out.strip() else "unknown version"
    if code != 0 or help_code != 0:
        return Check("claude CLI", "fail", f"{binary} --version/--help exited {code}/{help_code}: {version[:200]}")
    missing = [flag for flag in REQUIRED_FLAGS if flag not in help_out]
    if missing:
        return Check("claude CLI", "fail", f"{binary} {version}: lacks {', '.join(missing)}; install "
                                           f"@anthropic-ai/claude-code@{TESTED_CLI_VERSION}")
    status: Status = "ok" if version.startswith(TESTED_CLI_VERSION) else "warn"
    note = "" if status == "ok" else f" (TierOps is tested with {TESTED_CLI_VERSION})"
    return Check("claude CLI", status, f"{binary} {version}{note}, all {len(REQUIRED_FLAGS)} flags present")


def check_credentials(settings: Settings) -> Check:
    found = [name for name in CREDENTIAL_VARS if os.environ.get(name, "").strip()]
    cloud = [name for name in CLOUD_VARS if os.environ.get(name, "").strip() not in ("", "0", "false")]
    stored = settings.state_dir / "home" / ".claude" / ".credentials.json"
    if found or cloud:
        return Check("credentials", "ok", "from the environment: " + ", ".join(found + cloud) + " (values not shown)")
    if stored.is_file():
        return Check("credentials", "ok", f"stored by `claude login` in {stored.parent} (not shown)")
    return Check("credentials", "fail", "none: set ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN) in the server's "
                                        "environment; TierOps passes it to the CLI and never stores it")


def check_checks_file(settings: Settings) -> Check:
    """The inventory (issue #12): loads and validates like `tierops checks validate`."""
    if settings.checks is None:
        return Check("checks file", "skip", "none (TIEROPS_CHECKS): cycles start at tier 1, a language model, "
                                            "with no inventory; see examples/checks.yaml")
    try:
        inv = load_inventory(settings.checks)
    except InventoryError as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        return Check("checks file", "fail", f"{len(exc.problems)} problem(s) in {settings.checks}, first: {first}; "
                                            "see `tierops checks validate`")
    every = f", every {inv.interval_s:g} s" if inv.interval_s else f", every TIEROPS_INTERVAL={settings.interval} s"
    return Check("checks file", "ok", f"{settings.checks}: {len(inv.checks)} check(s), {len(inv.hosts)} host(s){every}")


def _probe_only(check: Check) -> Check:
    """With a checks file, a missing CLI or credential stops the language-model tiers only: tier 0
    still monitors (issue #12), so it is a warning, not a failure."""
    if check.status != "fail":
        return check
    return Check(check.name, "warn", check.detail + "; tier 0 (the checks file) still runs, escalations cannot")


def check_disk(settings: Settings) -> Check:
    where = next((p for p in (settings.state_dir, *settings.state_dir.parents) if p.exists()), Path("/"))
    usage = shutil.disk_usage(where)
    detail = f"{human_bytes(usage.free)} free of {human_bytes(usage.total)} at {where}"
    if usage.free < DISK_FAIL_BYTES:
        return Check("disk", "fail", detail + "; free space or move TIEROPS_HOME (sessions stop recording when full)")
    if usage.free < DISK_WARN_BYTES:
        return Check("disk", "warn", detail + "; `tierops prune` frees old sessions")
    return Check("disk", "ok", detail)


def check_clock(newest: str | None, now: Callable[[], float] = time.time) -> Check:
    current = datetime.fromtimestamp(now(), UTC)
    tz = time.strftime("%Z") or "UTC"
    if current.year < 2024:
        return Check("clock", "fail", f"the system clock says {current:%Y-%m-%d}; set it (NTP) — schedules, "
                                      "retention and timestamps depend on it")
    if newest:
        try:
            stored = datetime.fromisoformat(newest.replace("Z", "+00:00"))
        except ValueError:
            stored = None
        if stored is not None and stored.tzinfo is not None and (stored - current).total_seconds() > CLOCK_SKEW_S:
            return Check("clock", "fail", f"the database holds a time ({newest}) after now ({current:%Y-%m-%dT%H:%M:%SZ}): "
                                          "the clock went backwards; fix it (NTP) before running cycles")
    return Check("clock", "ok", f"{current:%Y-%m-%dT%H:%M:%SZ} (local zone {tz})")


def run_checks(home: str | None, db: str | None) -> list[Check]:
    settings_check, settings = check_settings(home, db)
    checks = [settings_check]
    if settings is None:
        return checks
    db_check, newest = check_database(settings)
    cli, credentials = check_cli(settings), check_credentials(settings)
    if settings.checks is not None:
        cli, credentials = _probe_only(cli), _probe_only(credentials)
    checks += [check_state_dir(settings), db_check, check_schema(settings), check_prompts(settings),
               cli, credentials, check_checks_file(settings), check_disk(settings), check_clock(newest)]
    return checks


@main.command()
@state_options
@json_option
def doctor(home: str | None, db: str | None, as_json: bool) -> None:
    """Check the CLI, credentials, state directory, database, schema, prompts, checks file, disk and clock.

    One line per check (ok / warn / fail / skip); exit 1 if any fails. Changes nothing.
    """
    checks = run_checks(home, db)
    if as_json:
        emit_json([asdict(c) for c in checks])
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            click.echo(f"{c.status:<4}  {c.name:<{width}}  {' '.join(c.detail.splitlines())}")
    failed = [c.name for c in checks if c.status == "fail"]
    if failed and not as_json:
        warn(f"{len(failed)} check(s) failed: {', '.join(failed)}")
    sys.exit(1 if failed else 0)


__all__ = ["REQUIRED_FLAGS", "Check", "check_clock", "doctor", "run_checks"]
