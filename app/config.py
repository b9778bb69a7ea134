"""Settings: every knob has a ``TIEROPS_`` environment variable, a default and a description.

The README's settings table is checked against these fields by ``tests/test_docs.py``, so a
setting cannot be added without being documented.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, SecretStr, create_model, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.output.validate import DEFAULT_SCHEMA_PATH

PROMPTS_DIR = DEFAULT_SCHEMA_PATH.parents[1] / "prompts"
READ_ONLY_TOOLS = (
    "Read,Grep,Glob,Bash(systemctl status *),Bash(systemctl list-units *),Bash(systemctl --failed *),"
    "Bash(journalctl *),Bash(df *),Bash(free *),Bash(uptime),Bash(ss *),Bash(ps *),Bash(curl *),"
    "Bash(docker ps *),Bash(docker inspect *),Bash(docker logs *),Bash(openssl *),Bash(cat *),Bash(tail *)"
)


def _tier(n: int, model: str, allowed: str, disallowed: str, timeout: int, turns: int, prompt: str) -> dict:
    return {
        f"tier{n}_model": (str, Field(model, description=f"Model alias or id for tier {n}.")),
        f"tier{n}_allowed_tools": (str, Field(allowed, description=f"--allowedTools rules for tier {n}, comma separated.")),
        f"tier{n}_disallowed_tools": (str, Field(
            disallowed, description=f"--disallowedTools for tier {n}, comma separated (a bare name removes the tool).")),
        f"tier{n}_timeout": (int, Field(timeout, ge=1, description=f"Seconds before a tier {n} run is killed.")),
        f"tier{n}_max_turns": (int, Field(turns, ge=1, description=f"--max-turns for tier {n}.")),
        f"tier{n}_prompt_file": (Path, Field(PROMPTS_DIR / prompt, description=f"Prompt file (the -p text) of tier {n}.")),
    }


class _CoreSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TIEROPS_", env_file=".env", extra="ignore")

    db: Path = Field(Path("state/tierops.db"), description="SQLite database file (created with its folder).")
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
    # -- supervisor (issue #3) ---------------------------------------------------------------
    claude_bin: str = Field("claude", description="The Claude Code CLI: a path, or a name looked up on PATH.")
    state_dir: Path = Field(
        Path("state"),
        description="Per-session working directories (STATE_DIR/sessions/ID) and the CLI's HOME (STATE_DIR/home) "
        "live here; both must stay put for --resume to work.",
    )
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
    max_tier: int = Field(3, ge=1, le=3, description="Highest tier an escalation chain may reach.")
    interval: int = Field(3600, ge=10, description="Seconds between scheduled cycles (first cycle at start).")
    cron: str = Field("", description="Cron expression for cycles instead of TIEROPS_INTERVAL, e.g. '*/30 * * * *'.")
    output_max_retries: int = Field(
        2, ge=0, le=10,
        description="Resumes of the same session asking again for valid structured output before falling back "
        "to markers/handoff.json.",
    )
    memory_prompt_budget: int = Field(
        4000, ge=0, description="Characters of memories given to each tier in the appended system prompt."
    )
    chain_budget_usd: float = Field(
        0.0, ge=0, description="Stop escalating once a chain has cost this much (0 = no limit)."
    )
    kill_grace: float = Field(10.0, ge=0, description="Seconds between SIGTERM and SIGKILL when a session is stopped.")
    # -- dashboard and API (issue #4) --------------------------------------------------------
    token: SecretStr | None = Field(
        None, description="Bearer token for the API and the dashboard login. Required to bind to a non-loopback "
        "address.")
    token_file: Path | None = Field(
        None, description="File holding the token (instead of TIEROPS_TOKEN); a missing file is an error at start.")
    schedule: bool = Field(True, description="Run scheduled cycles inside `tierops serve` (false: only Run Now).")

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        if value.strip():
            from croniter import croniter

            if not croniter.is_valid(value.strip()):
                raise ValueError(f"not a valid cron expression: {value!r}")
        return value.strip()

    def tier(self, n: int) -> TierConfig:
        """The configuration of tier ``n`` (1..3)."""
        return TierConfig(
            tier=n,
            model=getattr(self, f"tier{n}_model"),
            allowed_tools=_split(getattr(self, f"tier{n}_allowed_tools")),
            disallowed_tools=_split(getattr(self, f"tier{n}_disallowed_tools")),
            timeout=getattr(self, f"tier{n}_timeout"),
            max_turns=getattr(self, f"tier{n}_max_turns"),
            prompt_file=getattr(self, f"tier{n}_prompt_file"),
        )

    def resolved_token(self) -> str | None:
        """The dashboard/API token from TIEROPS_TOKEN or TIEROPS_TOKEN_FILE (None: auth off)."""
        if self.token is not None and self.token.get_secret_value().strip():
            return self.token.get_secret_value().strip()
        if self.token_file is not None:
            try:
                value = self.token_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ValueError(f"TIEROPS_TOKEN_FILE {self.token_file}: {exc.strerror}") from None
            if not value:
                raise ValueError(f"TIEROPS_TOKEN_FILE {self.token_file} is empty")
            return value
        return None

    def read_dirs(self) -> list[str]:
        return _split(self.add_dirs)

    def allowed_env(self) -> list[str]:
        return _split(self.child_env_allow)


_TIERS = {
    **_tier(1, "haiku", READ_ONLY_TOOLS, "Edit,Write,NotebookEdit,WebFetch,WebSearch", 600, 30, "tier1-observe.md"),
    **_tier(2, "sonnet", "Read,Grep,Glob,Bash", "NotebookEdit,WebFetch,WebSearch", 900, 50, "tier2-investigate.md"),
    **_tier(3, "opus", "Read,Grep,Glob,Bash,Edit,Write", "WebSearch", 1800, 80, "tier3-remediate.md"),
}
# The per-tier settings (TIEROPS_TIER1_MODEL, ...) are declared once in _tier() above.
Settings = create_model("Settings", __base__=_CoreSettings, __module__=__name__, **_TIERS)
Settings.__doc__ = "Every TierOps setting; see the README's settings table."


class TierConfig(BaseModel):
    tier: int
    model: str
    allowed_tools: list[str]
    disallowed_tools: list[str]
    timeout: int
    max_turns: int
    prompt_file: Path


def _split(value: str) -> list[str]:
    return [part.strip() for part in _split_top_level(value) if part.strip()]


def _split_top_level(value: str) -> list[str]:
    """Split on commas outside parentheses: 'Bash(a, b),Read' → ['Bash(a, b)', 'Read']."""
    parts, depth, current = [], 0, []
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


def get_settings() -> Settings:
    return Settings()
