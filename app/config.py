"""Settings: every knob has a ``TIEROPS_`` environment variable, a default and a description.

``docs/settings.md`` is generated from these fields (``scripts/settings-doc.py``) and
``tests/test_docs.py`` fails when it is stale, so a setting cannot be added without being documented.

Every field is written out (the per-tier ones too) so that type checkers, IDEs and readers see
the same class pydantic builds.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.errors import ConfigError
from app.paths import DB_NAME, DEFAULT_SCHEMA_PATH, PROMPTS_DIR, default_home
from app.vocab import FIRST_MODEL_TIER, MAX_TIER, MIN_TIER, PROBE_TIER

__all__ = ["ENV_FILE", "MODEL_NAME_MAX", "MODEL_NAME_PATTERN", "PROMPTS_DIR", "READ_ONLY_TOOLS", "RENAMED", "SCRIPT_VARIABLES", "Settings", "TierConfig",
           "get_settings"]

log = logging.getLogger(__name__)

ENV_FILE = ".env"
# Names that once were settings: still honoured, with a warning naming the new one.
RENAMED = {"TIEROPS_STATE_DIR": "TIEROPS_HOME"}
# TIEROPS_* names read by TierOps' scripts rather than by the settings: not warned about.
# scripts/install-claude.sh: where the CLI goes (TIEROPS_CLAUDE_DIR); `serve`'s address, which it sets
# for the checks file's ${TIEROPS_SERVE_URL} and friends (app/probe/variables.py); the tag the probe puts in
# each command check's environment (app/probe/reaper.py), seen by a `tierops` command run as a check.
SCRIPT_VARIABLES = frozenset({"TIEROPS_CLAUDE_DIR", "TIEROPS_SERVE_URL", "TIEROPS_SERVE_HOST", "TIEROPS_SERVE_PORT",
                              "TIEROPS_PROBE_CHECK"})

READ_ONLY_TOOLS = (
    "Read,Grep,Glob,Bash(systemctl status *),Bash(systemctl list-units *),Bash(systemctl --failed *),"
    "Bash(journalctl *),Bash(df *),Bash(free *),Bash(uptime),Bash(ss *),Bash(ps *),Bash(curl *),"
    "Bash(docker ps *),Bash(docker inspect *),Bash(docker logs *),Bash(openssl *),Bash(cat *),Bash(tail *)"
)


POSTGRES_SCHEMES = ("postgresql://", "postgres://")
PROBE_MODEL = "tierops-probe"  # the model name tier 0 sessions carry
# A tier's model name goes on the CLI's command line as one argument (--model NAME): 1..200
# characters, none of them whitespace (str.isspace) or a control character (category Cc). The
# pattern is the same rule for JSON Schema (the API's request bodies) and for Python's re.
MODEL_NAME_MAX = 200
MODEL_NAME_PATTERN = r"^[^\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$"


class TierConfig(BaseModel):
    tier: int
    command: list[str]  # the executable and its leading arguments: [claude] or the probe (tier 0)
    model: str
    allowed_tools: list[str]
    disallowed_tools: list[str]
    timeout: int
    max_turns: int
    prompt_file: Path


class Settings(BaseSettings):
    """Every TierOps setting; docs/settings.md lists them."""

    model_config = SettingsConfigDict(env_prefix="TIEROPS_", env_file=ENV_FILE, extra="ignore")

    # -- state ------------------------------------------------------------------------------
    home: Path | None = Field(
        None,
        description="State directory: the database, session folders (HOME/sessions/ID), the CLI's HOME "
        "(HOME/home) and the cycle lock. Default: $XDG_STATE_HOME/tierops, i.e. ~/.local/state/tierops "
        "(macOS: ~/Library/Application Support/tierops). Same from any working directory; also --home.",
    )
    db: Path | None = Field(
        None, description="SQLite database file, when it must live outside the state directory "
        "(default: HOME/tierops.db). Also --db.")
    database_url: SecretStr | None = Field(
        None, description="The store: unset or sqlite:///PATH for SQLite (the default, TIEROPS_DB), or "
        "postgresql://USER:PASSWORD@HOST:PORT/DATABASE for PostgreSQL (pip install 'tierops[postgres]'). Its "
        "password is never shown or logged.")
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Application log level: debug, info, warning or error. Also --log-level.")
    log_format: Literal["text", "json"] = Field(
        "text", description="Log line format: text, or json (one object per line with session and chain ids, "
        "for log shippers). Also --log-format.")
    access_log: bool = Field(True, description="Log every HTTP request of `tierops serve` (logger tierops.access).")
    retention_days: int = Field(
        30, ge=0, description="`tierops prune` and the server's daily prune delete finished sessions older than "
        "this many days, with their transcript and folder (events and memories are kept). 0 = never prune.")
    schema_file: Path = Field(
        DEFAULT_SCHEMA_PATH,
        description="JSON Schema every tier's structured output is validated against.",
    )
    handoff_file: str = Field(
        "handoff.json",
        description="Legacy escalation file, used only without valid structured output; relative paths are "
        "resolved against the session's working directory.",
    )
    memory_initial_confidence: float = Field(
        0.7, ge=0, le=1, description="Confidence of a newly learned memory."
    )
    memory_reinforce: float = Field(
        0.3, ge=0, le=1,
        description="When a memory is repeated, this share of the gap to 1.0 is added to its confidence.",
    )
    memory_half_life_days: float = Field(
        30.0, ge=0, description="A memory's confidence halves every this many days since it was last seen or "
        "reinforced (0 = no decay).")
    memory_floor: float = Field(
        0.3, ge=0, le=1, description="A memory whose decayed confidence falls below this is marked stale and no "
        "longer given to the tiers (still listed, and revived when seen again).")
    # -- supervisor --------------------------------------------------------------------------
    claude_bin: str = Field("claude", description="The Claude Code CLI: a path, or a name looked up on PATH.")
    child_env_allow: str = Field(
        "",
        description="Extra environment variable names passed to the CLI, comma separated. It always gets PATH, "
        "HOME (its own), LANG, TZ and every ANTHROPIC_* and CLAUDE_CODE_* variable.",
    )
    add_dirs: str = Field(
        "/",
        description="Directories the CLI may work in besides the session's own (--add-dir), comma separated. "
        "The CLI blocks even read-only commands (cat, tail, grep) outside these, whatever the allow rules say.",
    )
    max_tier: int = Field(
        MAX_TIER, ge=MIN_TIER, le=MAX_TIER, description="Highest tier an escalation chain may reach (0: the probe "
        "only, no language model ever runs)."
    )
    interval: int = Field(3600, ge=10, le=31_536_000,
                          description="Seconds between scheduled cycles (first cycle at start).")
    cron: str = Field("", description="Cron expression for cycles instead of TIEROPS_INTERVAL, e.g. '*/30 * * * *'.")
    storage_retry_limit: float = Field(
        180.0, ge=0,
        description="Seconds a session keeps retrying failed database writes (locked, disk full, I/O error) while it "
        "buffers its lines; past this it ends failed with 'storage error' and its CLI is killed.",
    )
    output_max_retries: int = Field(
        2, ge=0, le=10,
        description="Resumes of the same session asking again for valid structured output before falling back "
        "to markers/handoff.json.",
    )
    output_mode: Literal["native", "prompted"] = Field(
        "native", description="How output is enforced unless a run says otherwise: native (--json-schema, the CLI's "
        "StructuredOutput tool) or prompted (the schema in the prompt, JSON read from the final text).")
    schema_max_bytes: int = Field(
        65536, ge=1024, description="Largest output schema accepted (canonical JSON bytes); the schema travels on the "
        "CLI's command line and in every prompt of prompted mode.")
    memory_prompt_budget: int = Field(
        4000, ge=0, description="Characters of memories given to each tier in the appended system prompt."
    )
    chain_budget_usd: float = Field(
        0.0, ge=0, description="Stop escalating once a chain has cost this much (0 = no limit)."
    )
    kill_grace: float = Field(10.0, ge=0, description="Seconds between SIGTERM and SIGKILL when a session is stopped.")
    # -- probe and incidents -----------------------------------------------------------------
    checks: Path | None = Field(
        None, description="The checks file (YAML inventory, schemas/checks.json). When set, tier 0 (`tierops probe`, "
        "no language model, $0) starts every scheduled cycle on the file's interval, the language-model tiers run "
        "only when it escalates, and they are given the inventory. Also --checks.")
    require_checks: bool = Field(
        False, description="`serve` and `supervise` refuse to start without a checks file (TIEROPS_CHECKS or "
        "--checks), so no scheduled cycle starts at a paid language-model tier by default. The container image sets "
        "it to true.")
    escalate_after: int = Field(
        12, ge=0, description="An incident already escalated is escalated again once it has recurred this many more "
        "cycles (unless acknowledged or silenced); 0 = only when it opens or worsens.")
    flap_count: int = Field(
        3, ge=1, description="A check whose incidents open and resolve more than this many times within "
        "TIEROPS_FLAP_WINDOW is marked flapping and escalated once.")
    flap_window: int = Field(3600, ge=60, description="Seconds of the flapping window (TIEROPS_FLAP_COUNT).")
    probe_timeout: int = Field(
        660, ge=5, description="Seconds before a tier 0 run is killed: a safety net, since its checks run at once and "
        "each has its own timeout in the checks file (at most 10 minutes).")
    maintenance: str = Field(
        "", description="Maintenance windows, YAML or JSON: a list of {name, start: 'HH:MM', every, duration, "
        "timezone, services, checks} or {name, cron, duration, …}, added to the checks file's maintenance: "
        "section. Inside a window checks run and incidents are recorded, but nothing escalates and no message is "
        "sent. Checked at start (`tierops serve`, `run`, `supervise`, `doctor`).")
    # -- dashboard and API -------------------------------------------------------------------
    token: SecretStr | None = Field(
        None, description="Bearer token for the API and the dashboard login. Required to bind to a non-loopback "
        "address.")
    token_file: Path | None = Field(
        None, description="File holding the token (instead of TIEROPS_TOKEN); a missing file is an error at start.")
    schedule: bool = Field(True, description="Run scheduled cycles inside `tierops serve` (false: only Run Now).")
    # -- notifications, heartbeat, alerts in -------------------------------------------------
    notify_urls: SecretStr | None = Field(
        None, description="Apprise URLs to notify, space or comma separated, each optionally tagged for routes as "
        "TAG=URL or TAG1,TAG2=URL (needs `pip install 'tierops[notify]'`; the Docker image has it). Never shown or "
        "logged: they often hold credentials.")
    notify_urls_file: Path | None = Field(
        None, description="File holding the Apprise URLs (instead of TIEROPS_NOTIFY_URLS), one or more per line; "
        "lines starting with # are comments.")
    notify_routes: SecretStr | None = Field(
        None, description="Notification routes (YAML or JSON list): which messages go to which URLs, by severity, "
        "service, check and source (check, model, alert, monitor); first match wins, `continue: true` goes on. "
        "Targets are Apprise tags (`TAG=URL` in TIEROPS_NOTIFY_URLS), `all` or URLs. Unset: the checks file's "
        "`notify.routes`, else every message to every URL. A message no route matches goes to the URLs without a "
        "tag. Treated as a secret (it may hold URLs). See docs/notifications.md.")
    notify_min_severity: Literal["info", "warning", "critical"] = Field(
        "warning", description="Notifications below this severity are recorded, not sent.")
    notify_digest_after: int = Field(
        5, ge=1, description="More notifications than this within a minute are sent as one digest.")
    notify_quiet_hours: str = Field(
        "", description="UTC hours when only critical notifications are sent, e.g. '22-07' (empty: none).")
    public_url: str = Field(
        "", description="The dashboard's address as people reach it (e.g. https://tierops.example.com), for the "
        "links in notifications.")
    heartbeat_url: SecretStr | None = Field(
        None, description="Dead-man heartbeat (healthchecks.io convention): GET URL/start at cycle start, URL after "
        "a completed cycle, URL/fail after a failed one. Never shown or logged.")
    unhealthy_after: int = Field(
        3, ge=1, description="/healthz answers 503, and one critical \"monitor unhealthy\" notification goes out, "
        "when this many cycles in a row failed.")
    webhook_token: SecretStr | None = Field(
        None, description="Token for POST/PUT /api/v1/alerts only (bearer, ?token= or the HTTP Basic password), for "
        "alert senders that should not hold the API token.")
    alert_queue_max: int = Field(
        20, ge=1, description="Alert investigations waiting for a free cycle. An incident opening beyond this is "
        "still recorded and told; a queued run of its service absorbs it, else it needs attention.")
    alert_body_max_bytes: int = Field(
        32 * 1024 * 1024, ge=1024 * 1024, description="Largest body POST/PUT /api/v1/alerts reads, in bytes (413 "
        "beyond, refused while reading); the rest of the API keeps its 1 MiB.")
    alert_max_alerts: int = Field(
        10_000, ge=1, description="Alerts read from one payload; the rest are counted on the incident as not listed.")
    alert_default_severity: Literal["info", "warning", "critical"] = Field(
        "warning", description="The severity of an alert whose severity is missing or a word TierOps does not know "
        "(Grafana-managed rules carry none by default).")
    alert_grouping: Literal["group", "fingerprint"] = Field(
        "group", description="group: the alerts of one Alertmanager/Grafana notification group (same receiver and "
        "groupKey) share one incident; fingerprint: every alert is its own incident. Payloads without a groupKey "
        "are always one incident per alert.")
    # -- guards on action --------------------------------------------------------------------
    tier1_approval: Literal["auto", "manual"] = Field(
        "auto", description="auto: an escalation to tier 1 starts at once; manual: it waits for an operator's "
        "approval.")
    tier2_approval: Literal["auto", "manual"] = Field(
        "auto", description="auto or manual approval of escalations to tier 2.")
    tier3_approval: Literal["auto", "manual"] = Field(
        "manual", description="auto or manual approval of escalations to tier 3 (full remediation).")
    approval_timeout: int = Field(
        3600, ge=60, description="Seconds a pending approval waits; then it expires and the session needs attention.")
    dry_run: bool = Field(
        False, description="Every tier runs with read-only tools and is told to only say what it would do.")
    tier1_max_budget_usd: float = Field(0.0, ge=0, description="--max-budget-usd for tier 1 (0 = none).")
    tier2_max_budget_usd: float = Field(0.0, ge=0, description="--max-budget-usd for tier 2 (0 = none).")
    tier3_max_budget_usd: float = Field(0.0, ge=0, description="--max-budget-usd for tier 3 (0 = none).")
    daily_budget_usd: float = Field(
        0.0, ge=0, description="When the language-model tiers have cost this much today (UTC), they are skipped "
        "(tier 0 keeps running) and the session needs attention (0 = no limit).")
    cooldowns: str = Field(
        "restart:2/4h,redeploy:1/24h", description="Limits per action kind and service, comma separated: "
        "KIND:COUNT/WINDOW (window in s, m, h or d; empty: no limits). An escalation proposing an action over its limit needs "
        "attention instead of running.")
    guard: bool = Field(
        True, description="Hand every language-model session a PreToolUse hook (`tierops guard`) that decides each "
        "Bash, editing and MCP tool call before it runs: dry run, tool rules, cooldowns, approvals. Fails closed.")
    guard_timeout: float = Field(
        5.0, gt=0, le=60, description="Seconds the guard may take to decide one tool call; past them it denies. The "
        "hook's own timeout given to the CLI is this plus 5 s (a hook the CLI times out lets the call run).")
    evidence_policy: Literal["flag", "hold", "off"] = Field(
        "flag", description="What a model tier's findings that do not cite tool output it really got do: `flag` "
        "(check every citation against the session's tool calls, store each finding as verified, unsupported or "
        "uncited, and go on), `hold` (the same, and an escalation resting on no verified warning or critical "
        "finding or escalation citation does not start the next tier: the session needs attention) or `off` "
        "(not checked).")

    # -- extensions: runbooks, repo extensions, MCP servers -----------------------------------
    runbooks: Path | None = Field(
        None, description="A folder of runbooks (markdown with front matter naming the services, checks and alert "
        "names they cover), given to the tier investigating a matching incident.")
    runbook_budget: int = Field(
        12000, ge=500, le=200_000, description="Characters of runbook text one session's system prompt may hold; "
        "beyond it runbooks are cut with a visible mark.")
    runbook_fetch_timeout: float = Field(
        5.0, gt=0, le=60, description="Seconds to fetch an alert's runbook_url (or a checks entry's runbook URL); "
        "a runbook that cannot be fetched in time is linked instead.")
    runbook_fetch_max_bytes: int = Field(
        262144, ge=1024, le=4_194_304, description="Bytes read of a fetched runbook; the rest is cut.")
    extensions: str = Field(
        "", description="Extension folders, comma separated (typically mounted git checkouts of infrastructure "
        "repos), each with any of checks/*.yaml, runbooks/, skills/ and mcp.json. What they bring is data: it "
        "cannot override the baseline MCP servers, the tiers' tool rules, the guard or the output contract.")
    mcp_config: Path | None = Field(
        None, description="The baseline MCP servers: a JSON file in Claude Code's format ({\"mcpServers\": {...}}). "
        "Secrets come from the environment (${VAR}) or from files (a server env entry NAME_FILE: /path is passed as NAME), "
        "never from the file itself.")
    mcp_read_only_tools: str = Field(
        "", description="MCP tools that only read, comma separated, as mcp__SERVER__TOOL or mcp__SERVER__* patterns. "
        "Tier 1 and dry runs get only these.")
    tier2_mcp_tools: str = Field(
        "mcp__*", description="MCP tools tier 2 may call, comma separated patterns (empty: none).")
    tier3_mcp_tools: str = Field(
        "mcp__*", description="MCP tools tier 3 may call, comma separated patterns (empty: none).")

    # -- several nodes on one store ----------------------------------------------------------------
    lease_seconds: float = Field(
        15.0, ge=2, le=600, description="Seconds a node's leadership lasts without renewal (renewed every third of it). "
        "Of the `tierops serve` processes sharing one database, the leader runs the schedule, approvals, notifications "
        "and pruning; when it dies another takes over within this, and marks its running sessions interrupted.")
    node_labels: str = Field(
        "", description="Labels of this node, comma separated (e.g. dc-1,ssh-to-prod): work pinned with "
        "TIEROPS_RUNS_ON runs only on a node with every label it names.")
    max_concurrent: int = Field(
        1, ge=1, le=64, description="Cycles this node runs at once (alerts, Run Now, approvals, queued runs); beyond it "
        "alerts queue. Above 1 the scheduled cycle runs beside them. Tiers that may act (2 and 3) never run at once on "
        "the same service, on any node.")
    runs_on: str = Field(
        "", description="Pin work to labelled nodes, comma separated TARGET=LABEL: TARGET is tier1..tier3 or "
        "service:NAME (e.g. tier3=ssh-to-prod,service:billing-db=dc-2). A tier, or a tier working on that service, "
        "starts only on a node whose TIEROPS_NODE_LABELS has the label; elsewhere it waits in the run queue.")

    # -- chat (Ask TierOps) and the models the upstream offers ---------------------------------
    chat_token: SecretStr | None = Field(
        None, description="A bearer token for chat clients only (Open WebUI, the openai and ollama clients): valid "
        "on /v1/chat/completions, /v1/models, /api/chat, /api/generate and /api/tags, refused everywhere else. "
        "TIEROPS_TOKEN works there too. Without either, the chat endpoints refuse every request.")
    chat_max: int = Field(
        2, ge=1, le=64, description="Chat sessions that may run at once (429 with Retry-After beyond). Chat never "
        "takes the cycle lock and never delays a scheduled cycle.")
    chat_timeout: int = Field(
        300, ge=10, description="Seconds before one chat turn's CLI run is killed.")
    chat_max_turns: int = Field(
        20, ge=1, description="--max-turns for one chat turn.")
    chat_resume_days: int = Field(
        7, ge=0, description="Days a conversation's claude CLI session is kept for --resume after its last turn (the "
        "CLI's own copy holds tool output verbatim); after that, or with 0, the next turn starts a fresh CLI session "
        "given the conversation so far as a transcript.")
    models_cache_ttl: int = Field(
        600, ge=0, description="Seconds the list of models the upstream offers (GET /api/v1/models) is kept before it "
        "is asked again (0: every request asks).")
    models_timeout: float = Field(
        5.0, gt=0, le=60, description="Seconds to wait for the upstream's models list.")

    # -- tier 1: observe ---------------------------------------------------------------------
    tier1_model: str = Field("haiku", description="Model alias or id for tier 1.")
    tier1_allowed_tools: str = Field(
        READ_ONLY_TOOLS, description="--allowedTools rules for tier 1, comma separated.")
    tier1_disallowed_tools: str = Field(
        "Edit,Write,NotebookEdit,WebFetch,WebSearch",
        description="--disallowedTools for tier 1, comma separated (a bare name removes the tool).")
    tier1_timeout: int = Field(600, ge=1, description="Seconds before a tier 1 run is killed.")
    tier1_max_turns: int = Field(30, ge=1, description="--max-turns for tier 1.")
    tier1_prompt_file: Path = Field(
        PROMPTS_DIR / "tier1-observe.md", description="Prompt file (the -p text) of tier 1.")
    # -- tier 2: investigate -----------------------------------------------------------------
    tier2_model: str = Field("sonnet", description="Model alias or id for tier 2.")
    tier2_allowed_tools: str = Field(
        "Read,Grep,Glob,Bash", description="--allowedTools rules for tier 2, comma separated.")
    tier2_disallowed_tools: str = Field(
        "NotebookEdit,WebFetch,WebSearch",
        description="--disallowedTools for tier 2, comma separated (a bare name removes the tool).")
    tier2_timeout: int = Field(900, ge=1, description="Seconds before a tier 2 run is killed.")
    tier2_max_turns: int = Field(50, ge=1, description="--max-turns for tier 2.")
    tier2_prompt_file: Path = Field(
        PROMPTS_DIR / "tier2-investigate.md", description="Prompt file (the -p text) of tier 2.")
    # -- tier 3: remediate -------------------------------------------------------------------
    tier3_model: str = Field("opus", description="Model alias or id for tier 3.")
    tier3_allowed_tools: str = Field(
        "Read,Grep,Glob,Bash,Edit,Write", description="--allowedTools rules for tier 3, comma separated.")
    tier3_disallowed_tools: str = Field(
        "WebSearch",
        description="--disallowedTools for tier 3, comma separated (a bare name removes the tool).")
    tier3_timeout: int = Field(1800, ge=1, description="Seconds before a tier 3 run is killed.")
    tier3_max_turns: int = Field(80, ge=1, description="--max-turns for tier 3.")
    tier3_prompt_file: Path = Field(
        PROMPTS_DIR / "tier3-remediate.md", description="Prompt file (the -p text) of tier 3.")

    def model_post_init(self, context: Any, /) -> None:
        # Absolute from the start: a later chdir (the CLI runs in a session folder) changes nothing.
        self.home = (self.home or default_home()).expanduser().absolute()
        self.db = (self.db.expanduser().absolute() if self.db is not None else self.home / DB_NAME)
        if self.checks is not None:
            self.checks = self.checks.expanduser().absolute()

    @property
    def first_tier(self) -> int:
        """Where cycles start: tier 0 (the probe) when a checks file is set, else 1."""
        return PROBE_TIER if self.checks is not None else FIRST_MODEL_TIER

    @property
    def state_dir(self) -> Path:
        """The state directory (``TIEROPS_HOME``), resolved."""
        if self.home is None:  # pragma: no cover - set in model_post_init
            raise ConfigError("settings used before they were resolved")
        return self.home

    @property
    def db_path(self) -> Path:
        """The SQLite database file, resolved (``sqlite:///PATH`` in TIEROPS_DATABASE_URL names it too)."""
        url = self.database_url.get_secret_value() if self.database_url else ""
        if url.startswith("sqlite:///"):
            return Path("/" + url.removeprefix("sqlite:///").lstrip("/"))
        if self.db is None:  # pragma: no cover - set in model_post_init
            raise ConfigError("settings used before they were resolved")
        return self.db

    @property
    def database_target(self) -> str | Path:
        """What the store opens: the PostgreSQL URL, or the SQLite file."""
        url = self.database_url.get_secret_value() if self.database_url else ""
        return url if url.startswith(POSTGRES_SCHEMES) else self.db_path

    @field_validator("database_url")
    @classmethod
    def _valid_database_url(cls, value: SecretStr | None) -> SecretStr | None:
        url = value.get_secret_value().strip() if value is not None else ""
        if not url:
            return None
        if url.startswith(POSTGRES_SCHEMES) or (url.startswith("sqlite:///") and len(url) > len("sqlite:///")):
            return SecretStr(url)
        shown = url.split("://", 1)[0] + "://…" if "://" in url else "(no scheme)"
        raise ValueError(f"{shown} is not a database URL TierOps opens: use sqlite:///ABSOLUTE/PATH or "
                         "postgresql://USER:PASSWORD@HOST:PORT/DATABASE")

    @field_validator("runs_on")
    @classmethod
    def _valid_runs_on(cls, value: str) -> str:
        from app.placement import parse_runs_on

        parse_runs_on(value)  # raises ValueError naming the bad entry
        return value

    @field_validator("tier1_model", "tier2_model", "tier3_model")
    @classmethod
    def _valid_model(cls, value: str) -> str:
        if not value or len(value) > MODEL_NAME_MAX or re.fullmatch(MODEL_NAME_PATTERN, value) is None:
            raise ValueError(f"a model name is 1 to {MODEL_NAME_MAX} characters without whitespace or control "
                             "characters (an alias such as sonnet, or an id such as claude-sonnet-4-5)")
        return value

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        if value.strip():
            from croniter import croniter

            if not croniter.is_valid(value.strip()):
                raise ValueError(f"not a valid cron expression: {value!r}")
        return value.strip()

    def tier(self, n: int) -> TierConfig:
        """The configuration of tier ``n`` (``MIN_TIER``..``MAX_TIER``)."""
        command = [self.claude_bin]
        match n:
            case 0:
                # The probe: this interpreter running this package, so it needs no
                # `tierops` on the CLI's PATH. Without a checks file it reports that as its failure.
                command = [sys.executable, "-m", "app", "probe"]
                if self.checks is not None:
                    command += ["--checks", str(self.checks)]
                for folder in self.extension_dirs():  # their checks join the file's (app/probe/extensions.py)
                    command += ["--extension", str(folder.absolute())]
                model, allowed, disallowed = PROBE_MODEL, "", ""
                timeout, max_turns, prompt_file = self.probe_timeout, 0, PROMPTS_DIR / "tier0-probe.md"
            case 1:
                model, allowed, disallowed = self.tier1_model, self.tier1_allowed_tools, self.tier1_disallowed_tools
                timeout, max_turns, prompt_file = self.tier1_timeout, self.tier1_max_turns, self.tier1_prompt_file
            case 2:
                model, allowed, disallowed = self.tier2_model, self.tier2_allowed_tools, self.tier2_disallowed_tools
                timeout, max_turns, prompt_file = self.tier2_timeout, self.tier2_max_turns, self.tier2_prompt_file
            case 3:
                model, allowed, disallowed = self.tier3_model, self.tier3_allowed_tools, self.tier3_disallowed_tools
                timeout, max_turns, prompt_file = self.tier3_timeout, self.tier3_max_turns, self.tier3_prompt_file
            case _:
                raise ValueError(f"no tier {n}: tiers are {MIN_TIER}..{MAX_TIER}")
        return TierConfig(
            tier=n,
            command=command,
            model=model,
            allowed_tools=_split(allowed),
            disallowed_tools=_split(disallowed),
            timeout=timeout,
            max_turns=max_turns,
            prompt_file=prompt_file,
        )

    def resolved_token(self) -> str | None:
        """The dashboard/API token from TIEROPS_TOKEN or TIEROPS_TOKEN_FILE (None: auth off).

        Raises :class:`ConfigError` when TIEROPS_TOKEN_FILE is set but unreadable or empty.
        """
        if self.token is not None and self.token.get_secret_value().strip():
            return self.token.get_secret_value().strip()
        if self.token_file is not None:
            try:
                value = self.token_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(f"TIEROPS_TOKEN_FILE {self.token_file}: {exc.strerror}") from None
            if not value:
                raise ConfigError(f"TIEROPS_TOKEN_FILE {self.token_file} is empty")
            return value
        return None

    def read_dirs(self) -> list[str]:
        return _split(self.add_dirs)

    def allowed_env(self) -> list[str]:
        return _split(self.child_env_allow)

    def extension_dirs(self) -> list[Path]:
        return [Path(part).expanduser() for part in _split(self.extensions)]


def _split(value: str) -> list[str]:
    return [part.strip() for part in _split_top_level(value) if part.strip()]


def _split_top_level(value: str) -> list[str]:
    """Split on commas outside parentheses: 'Bash(a, b),Read' → ['Bash(a, b)', 'Read']."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in value:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def get_settings(**overrides: Any) -> Settings:
    """The settings from the environment and ``.env``, with ``overrides`` (command-line flags) on top.

    A renamed setting (:data:`RENAMED`) still set under its old name is used under the new one.
    """
    for old, new in RENAMED.items():
        field = new.removeprefix("TIEROPS_").lower()
        if old in os.environ and new not in os.environ and overrides.get(field) is None:
            overrides[field] = os.environ[old]
    return Settings(**{k: v for k, v in overrides.items() if v is not None})
