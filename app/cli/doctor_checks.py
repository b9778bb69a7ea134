"""What ``tierops doctor`` looks at, one function per check, each returning one :class:`Check`.

Why: the failures an operator meets first are not in TierOps' code but around it — the CLI is
missing or too old, no credentials, a state directory on a read-only or full disk, a database
from a newer TierOps, a prompt file that moved, a clock that went backwards. Each check says
what it looked at and, when it fails, what to do. None changes anything: no check creates the
state directory or the database, applies migrations or prints a secret (only the *names* of the
credentials it found). The one check that goes online is in :mod:`app.cli.doctor_online`.

Statuses: ``ok``; ``warn`` (works, but look); ``fail`` (TierOps cannot do its job: exit 1);
``skip`` (nothing to check).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from app.cli.base import CommandError, try_settings
from app.config import ENV_FILE, Settings
from app.config_sources import unknown_settings
from app.engine.maintenance import MaintenanceConfigError, setting_windows
from app.errors import ConfigError, TierOpsError
from app.notify.policy import quiet_hours
from app.notify.routes import load_routes
from app.notify.urls import NOT_INSTALLED, NOTIFY_SETTING_HINT, apprise_available, notify_urls
from app.output.validate import OutputValidator, SchemaLoadError
from app.probe.inventory import InventoryError, load_inventory
from app.store.inspect import inspect_database
from app.store.pg import inspect_postgres
from app.supervisor.credentials import current_fingerprint, read_pause_readonly
from app.supervisor.launch import CLINotFound, child_env, resolve_binary
from app.units import human_bytes, human_interval
from app.vocab import FIRST_MODEL_TIER

log = logging.getLogger(__name__)

Status = Literal["ok", "warn", "fail", "skip"]

# What TierOps puts on the CLI's command line (app/supervisor/launch.py build_argv); a CLI whose
# --help lacks one of them cannot run a session the way TierOps launches it. --max-turns is used
# too but 2.1.197 hides it from --help (tests/realcli/test_doctor_real.py), so it is not probed.
REQUIRED_FLAGS = (
    "--print", "--output-format", "--verbose", "--json-schema", "--model", "--resume", "--add-dir",
    "--append-system-prompt", "--allowedTools", "--disallowedTools",
)
TESTED_CLI_VERSION = "2.1.197"  # the captures in tests/fixtures and the reference were made with it
# Credentials the CLI reads from its environment (passed through by app/supervisor/launch.py).
CREDENTIAL_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
CLOUD_VARS = ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX")
DISK_FAIL_BYTES = 100 * 1024 * 1024
DISK_WARN_BYTES = 1024 * 1024 * 1024
CLOCK_SKEW_S = 300  # stored timestamps this far in the future mean the clock went back
PROBE_TIMEOUT_S = 20
PROBLEMS_SHOWN = 10  # FILE:LINE problems of a checks file listed on its line


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str


def check_settings(home: str | None, db: str | None, checks: str | None = None) -> tuple[Check, Settings | None]:
    try:
        settings = try_settings(home=home, db=db, checks=checks)
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
    if not isinstance(settings.database_target, Path):
        return _check_postgres(settings.database_target), None
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


def _check_postgres(url: str) -> Check:
    info = inspect_postgres(url)
    if info.error is not None:
        return Check("database", "fail", f"PostgreSQL {info.url}: {info.error}; check TIEROPS_DATABASE_URL, the "
                                         "server and the network")
    if info.unknown:
        return Check("database", "fail", f"PostgreSQL {info.url}: written by a newer TierOps (migrations "
                                         f"{', '.join(info.unknown)}); upgrade TierOps")
    if not info.applied:
        return Check("database", "warn", f"PostgreSQL {info.url} (server {info.version}): reachable, empty; the "
                                         "first `tierops serve` or `run` creates the tables")
    migrations = (f"migrations current ({len(info.applied)})" if not info.pending
                  else f"{len(info.pending)} migration(s) pending, applied at the next start")
    return Check("database", "ok" if not info.pending else "warn",
                 f"PostgreSQL {info.url} (server {info.version}): {migrations}, {info.sessions} sessions")


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
    """The inventory, judged as ``serve --checks FILE`` will run it: validated like
    `tierops checks validate` (every ``FILE:LINE`` problem), and where scheduled cycles start."""
    schedule = (f"on TIEROPS_CRON {settings.cron!r}" if settings.cron
                else f"every {human_interval(settings.interval)} (TIEROPS_INTERVAL)")
    if settings.checks is None:
        if settings.require_checks:
            return Check("checks file", "fail", "none, and TIEROPS_REQUIRE_CHECKS is set: `serve` and `supervise` "
                                                "refuse to start; mount a checks file and set TIEROPS_CHECKS (or "
                                                "--checks FILE), e.g. examples/checks-starter.yaml")
        return Check("checks file", "skip", f"none (TIEROPS_CHECKS or --checks): scheduled cycles start at tier 1, a "
                                            f"billed language-model run {schedule}, with no inventory; a checks file "
                                            "starts them at tier 0 ($0), see examples/checks.yaml")
    try:
        inv = load_inventory(settings.checks)
    except InventoryError as exc:
        shown = [str(exc).splitlines()[i] for i in range(min(len(exc.problems), PROBLEMS_SHOWN))]
        more = f"; and {len(exc.problems) - PROBLEMS_SHOWN} more" if len(exc.problems) > PROBLEMS_SHOWN else ""
        return Check("checks file", "fail", f"{len(exc.problems)} problem(s): {'; '.join(shown)}{more}; "
                                            "see `tierops checks validate`")
    if not settings.cron:
        interval = inv.interval_s or settings.interval
        source = "the file's interval" if inv.interval_s else "TIEROPS_INTERVAL"
        schedule = f"every {human_interval(interval)} ({source})"
    every = f", every {inv.interval_s:g} s" if inv.interval_s else f", every TIEROPS_INTERVAL={settings.interval} s"
    return Check("checks file", "ok", f"{settings.checks}: {len(inv.checks)} check(s), {len(inv.hosts)} host(s){every}; "
                                      f"scheduled cycles start at tier 0 (the probe, no language model, $0) {schedule}")


def check_model_tiers(settings: Settings, cli_found: bool, credentials_found: bool) -> Check:
    """Which language-model tiers a failing check (or, without a checks file, a cycle) can reach:
    the claude CLI, credentials, ``TIEROPS_MAX_TIER``, and a pause after rejected credentials
    (read from the database, read-only)."""
    who = "an incident" if settings.checks is not None else "a cycle"
    if settings.max_tier < FIRST_MODEL_TIER:
        return Check("model tiers", "ok", "none by design (TIEROPS_MAX_TIER=0): tier 0 alone; a failing check flags "
                                          "a person (needs attention)")
    tiers = f"tiers {FIRST_MODEL_TIER} to {settings.max_tier}" if settings.max_tier > FIRST_MODEL_TIER else "tier 1"
    blockers: list[str] = []
    notes: list[str] = []
    if not cli_found:
        blockers.append(f"no claude CLI ({settings.claude_bin!r})")
    if not credentials_found:
        blockers.append("no credentials")
    # the pause as recorded (SQLite read here without writing; on PostgreSQL it is enforced, not shown)
    pause = read_pause_readonly(settings.db_path) if isinstance(settings.database_target, Path) else None
    if pause is not None and pause.fingerprint == current_fingerprint(settings):
        blockers.append(pause.text())
    elif pause is not None:
        notes.append(f"a pause recorded at {pause.since} (the API rejected other credentials) lifts at the next "
                     "cycle: the credentials changed since")
    manual = [n for n in range(FIRST_MODEL_TIER, settings.max_tier + 1)
              if getattr(settings, f"tier{n}_approval", "auto") == "manual"]
    if manual:
        which = " and ".join(map(str, manual))
        notes.append(f"tier {which} waits for an operator's approval" if len(manual) == 1
                     else f"tiers {which} wait for an operator's approval")
    if settings.daily_budget_usd > 0:
        notes.append(f"at most ${settings.daily_budget_usd:.2f} a day (TIEROPS_DAILY_BUDGET_USD)")
    tail = f"; {'; '.join(notes)}" if notes else ""
    if blockers:
        instead = ("tier 0 still runs and a new incident flags a person instead" if settings.checks is not None
                   else "cycles cannot run")
        return Check("model tiers", "warn" if settings.checks is not None else "fail",
                     f"{who} can reach none of {tiers}: {'; '.join(blockers)}; {instead}{tail}")
    return Check("model tiers", "ok", f"{who} can escalate to {tiers} (claude CLI found, credentials set, "
                                      f"TIEROPS_MAX_TIER={settings.max_tier}){tail}")


def check_maintenance(settings: Settings) -> Check:
    """TIEROPS_MAINTENANCE reads as a list of windows (the checks file's own section is checked with
    the file)."""
    try:
        found = setting_windows(settings)
    except MaintenanceConfigError as exc:
        return Check("maintenance", "fail", f"{exc}; fix the variable (environment or {ENV_FILE})")
    if not found:
        return Check("maintenance", "skip", "no windows in TIEROPS_MAINTENANCE (ad-hoc ones: `tierops maintenance add`)")
    return Check("maintenance", "ok", f"{len(found)} window(s) in TIEROPS_MAINTENANCE: "
                                      + ", ".join(w.name for w in found[:10]) + (" …" if len(found) > 10 else ""))


def check_notifications(settings: Settings) -> Check:
    """The Apprise URLs, the quiet hours and the routes read, and every tag a route sends to is
    carried by a URL (names and counts only: URLs are secrets)."""
    try:
        urls = notify_urls(settings)
        quiet_hours(settings.notify_quiet_hours)
        table = load_routes(settings, urls)
    except (ConfigError, ValueError) as exc:
        return Check("notifications", "fail", f"{exc}; fix the setting (environment or {ENV_FILE})")
    if not table.targets:
        return Check("notifications", "skip", f"no URL: messages are recorded, not sent ({NOTIFY_SETTING_HINT})")
    detail = (f"{len(table.targets)} URL(s), {settings.notify_min_severity} and above; routes: "
              + (", ".join(r.name for r in table.routes) + f" (from {table.origin})" if table.routes else "none (every "
                 "message to every URL)"))
    if not apprise_available():
        return Check("notifications", "fail", f"{detail}; {NOT_INSTALLED}")
    if missing := table.unknown_tags():
        return Check("notifications", "warn", f"{detail}; no URL carries the tag(s) {', '.join(missing)}: those "
                                              "routes send nowhere (tag a URL as TAG=URL in TIEROPS_NOTIFY_URLS)")
    return Check("notifications", "ok", detail + " (`tierops notify test` sends a test message)")


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


__all__ = [
    "CREDENTIAL_VARS",
    "REQUIRED_FLAGS",
    "TESTED_CLI_VERSION",
    "Check",
    "Status",
    "check_checks_file",
    "check_cli",
    "check_clock",
    "check_credentials",
    "check_database",
    "check_disk",
    "check_maintenance",
    "check_model_tiers",
    "check_notifications",
    "check_prompts",
    "check_schema",
    "check_settings",
    "check_state_dir",
]
