"""Settings: the per-tier fields, their environment names, validation and the token file."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from app import config
from app.config import (
    PROMPTS_DIR,
    READ_ONLY_TOOLS,
    Settings,
    TierConfig,
    _split,
    get_settings,
)
from app.config_sources import unknown_settings
from app.errors import ConfigError, TierOpsError
from app.paths import BUNDLED_DIR, DEFAULT_SCHEMA_PATH, default_home
from app.vocab import MAX_TIER, MIN_TIER, MODEL_TIERS

TIER_DEFAULTS = {
    1: ("haiku", 600, 30, "tier1-observe.md"),
    2: ("sonnet", 900, 50, "tier2-investigate.md"),
    3: ("opus", 1800, 80, "tier3-remediate.md"),
}
TIER_FIELDS = ("model", "allowed_tools", "disallowed_tools", "timeout", "max_turns", "prompt_file")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No TIEROPS_* variable from the caller's shell, and no .env file in the working directory."""
    for name in list(os.environ):
        if name.startswith("TIEROPS_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_settings_is_a_plain_class_with_every_tier_field_declared() -> None:
    assert Settings.__module__ == "app.config" and Settings.__name__ == "Settings"
    for n in MODEL_TIERS:
        for field in TIER_FIELDS:
            assert f"tier{n}_{field}" in Settings.model_fields, (n, field)
    assert not hasattr(config, "_CoreSettings")


def test_tier0_is_the_probe_of_the_checks_file(tmp_path: Path) -> None:
    """Tier 0 runs this interpreter's ``-m app probe`` with the checks file, its own
    timeout, no tools; cycles start there only when a checks file is set."""
    assert Settings().first_tier == 1
    checks = tmp_path / "checks.yaml"
    s = Settings(checks=checks, probe_timeout=42)
    assert s.first_tier == 0 and s.checks == checks.absolute()
    cfg = s.tier(0)
    assert cfg.command == [sys.executable, "-m", "app", "probe", "--checks", str(checks.absolute())]
    assert (cfg.model, cfg.timeout, cfg.allowed_tools, cfg.max_turns) == ("tierops-probe", 42, [], 0)
    assert cfg.prompt_file == PROMPTS_DIR / "tier0-probe.md" and cfg.prompt_file.is_file()
    assert Settings().tier(0).command == [sys.executable, "-m", "app", "probe"]
    assert Settings(claude_bin="/opt/claude").tier(2).command == ["/opt/claude"]


@pytest.mark.parametrize("n", MODEL_TIERS)
def test_tier_defaults(n: int) -> None:
    model, timeout, turns, prompt = TIER_DEFAULTS[n]
    cfg = Settings().tier(n)
    assert isinstance(cfg, TierConfig)
    assert (cfg.tier, cfg.model, cfg.timeout, cfg.max_turns) == (n, model, timeout, turns)
    assert cfg.prompt_file == PROMPTS_DIR / prompt
    assert cfg.prompt_file.is_file()
    assert cfg.allowed_tools and all(cfg.allowed_tools) and cfg.disallowed_tools


def test_tier_tool_lists_split_outside_parentheses() -> None:
    settings = Settings()
    assert settings.tier(1).allowed_tools == _split(READ_ONLY_TOOLS)
    assert "Bash(systemctl status *)" in settings.tier(1).allowed_tools
    assert settings.tier(1).disallowed_tools == ["Edit", "Write", "NotebookEdit", "WebFetch", "WebSearch"]
    assert settings.tier(2).allowed_tools == ["Read", "Grep", "Glob", "Bash"]
    assert settings.tier(3).disallowed_tools == ["WebSearch"]
    assert _split(" Bash(a, b) ,, Read,") == ["Bash(a, b)", "Read"]


@pytest.mark.parametrize("n", [MIN_TIER - 1, MAX_TIER + 1])
def test_tier_out_of_range(n: int) -> None:
    with pytest.raises(ValueError, match=f"no tier {n}"):
        Settings().tier(n)


@pytest.mark.parametrize("n", MODEL_TIERS)
def test_tier_fields_come_from_their_environment_variables(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    monkeypatch.setenv(f"TIEROPS_TIER{n}_MODEL", f"model-{n}")
    monkeypatch.setenv(f"TIEROPS_TIER{n}_ALLOWED_TOOLS", "Read, Bash(ls -l, -a)")
    monkeypatch.setenv(f"TIEROPS_TIER{n}_DISALLOWED_TOOLS", "Edit")
    monkeypatch.setenv(f"TIEROPS_TIER{n}_TIMEOUT", str(100 + n))
    monkeypatch.setenv(f"TIEROPS_TIER{n}_MAX_TURNS", str(10 + n))
    monkeypatch.setenv(f"TIEROPS_TIER{n}_PROMPT_FILE", f"/etc/tierops/p{n}.md")
    settings = Settings()
    assert settings.tier(n) == TierConfig(
        tier=n, command=["claude"], model=f"model-{n}", allowed_tools=["Read", "Bash(ls -l, -a)"],
        disallowed_tools=["Edit"],
        timeout=100 + n, max_turns=10 + n, prompt_file=Path(f"/etc/tierops/p{n}.md"),
    )
    for other in MODEL_TIERS:  # the variables of one tier leave the others alone
        if other != n:
            assert settings.tier(other).model == TIER_DEFAULTS[other][0]


def test_tier2_timeout_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIEROPS_TIER2_TIMEOUT", "42")
    settings = Settings()
    assert settings.tier2_timeout == 42 and settings.tier(2).timeout == 42
    assert settings.tier(1).timeout == 600 and settings.tier(3).timeout == 1800


def test_env_file_in_the_working_directory_is_read(clean_env: Path) -> None:
    (clean_env / ".env").write_text("TIEROPS_TIER3_MODEL=opus-from-dotenv\nTIEROPS_UNKNOWN=ignored\n")
    assert Settings().tier(3).model == "opus-from-dotenv"


@pytest.mark.parametrize(("name", "value"), [
    ("TIEROPS_TIER2_TIMEOUT", "0"),
    ("TIEROPS_TIER1_TIMEOUT", "soon"),
    ("TIEROPS_TIER3_MAX_TURNS", "-1"),
    ("TIEROPS_MAX_TIER", str(MAX_TIER + 1)),
    ("TIEROPS_MAX_TIER", str(MIN_TIER - 1)),
    ("TIEROPS_MEMORY_REINFORCE", "1.5"),
    ("TIEROPS_INTERVAL", "5"),
    ("TIEROPS_CRON", "every tuesday"),
])
def test_invalid_values_are_refused(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=name.removeprefix("TIEROPS_").lower()):
        Settings()


def test_invalid_keyword_value_is_refused() -> None:
    with pytest.raises(ValidationError, match="tier1_max_turns"):
        Settings(tier1_max_turns=0)


def test_cron_is_stripped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIEROPS_CRON", "  */30 * * * *  ")
    assert Settings().cron == "*/30 * * * *"


def test_bundled_paths_come_from_app_paths() -> None:
    settings = Settings()
    assert settings.schema_file == DEFAULT_SCHEMA_PATH
    assert config.PROMPTS_DIR == PROMPTS_DIR and PROMPTS_DIR.is_dir()


def test_read_dirs_and_allowed_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().read_dirs() == ["/"]
    assert Settings().allowed_env() == []
    monkeypatch.setenv("TIEROPS_ADD_DIRS", "/srv, /var/log,")
    monkeypatch.setenv("TIEROPS_CHILD_ENV_ALLOW", "HTTP_PROXY,NO_PROXY")
    settings = Settings()
    assert settings.read_dirs() == ["/srv", "/var/log"]
    assert settings.allowed_env() == ["HTTP_PROXY", "NO_PROXY"]


# -- the dashboard token ---------------------------------------------------------------------


def test_no_token_means_auth_off() -> None:
    assert Settings().resolved_token() is None
    assert Settings(token=SecretStr("   ")).resolved_token() is None


def test_token_from_the_environment_is_stripped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIEROPS_TOKEN", "  s3cret-token \n")
    assert Settings().resolved_token() == "s3cret-token"


def test_token_file_is_read_and_stripped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file-token\n")
    monkeypatch.setenv("TIEROPS_TOKEN_FILE", str(token_file))
    assert Settings().resolved_token() == "from-file-token"


def test_token_wins_over_token_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file-token\n")
    settings = Settings(token=SecretStr("direct-token"), token_file=token_file)
    assert settings.resolved_token() == "direct-token"


def test_missing_token_file_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(ConfigError, match=f"TIEROPS_TOKEN_FILE {missing}: No such file"):
        Settings(token_file=missing).resolved_token()


def test_empty_token_file_is_a_config_error(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(" \n")
    with pytest.raises(ConfigError, match="is empty") as exc:
        Settings(token_file=token_file).resolved_token()
    assert isinstance(exc.value, TierOpsError)


def test_token_file_that_is_a_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="TIEROPS_TOKEN_FILE"):
        Settings(token_file=tmp_path).resolved_token()


def test_get_settings_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIEROPS_TIER1_MODEL", "from-env")
    assert config.get_settings().tier1_model == "from-env"


def test_config_does_not_import_the_output_package() -> None:
    source = Path(config.__file__).read_text()
    assert "app.output" not in source


# --- the state directory and unknown names -----------------------------------------------

@pytest.mark.parametrize("platform,environ,expected", [
    ("linux", {"HOME": "/home/ops"}, "/home/ops/.local/state/tierops"),
    ("linux", {"HOME": "/home/ops", "XDG_STATE_HOME": "/srv/state"}, "/srv/state/tierops"),
    ("linux", {"HOME": "/home/ops", "XDG_STATE_HOME": "relative/ignored"}, "/home/ops/.local/state/tierops"),
    ("freebsd14", {"HOME": "/home/ops"}, "/home/ops/.local/state/tierops"),
    ("darwin", {"HOME": "/Users/ops"}, "/Users/ops/Library/Application Support/tierops"),
    ("win32", {"HOME": "/c/ops", "LOCALAPPDATA": "/c/ops/AppData/Local"}, "/c/ops/AppData/Local/tierops"),
])
def test_default_home_follows_the_platform(platform: str, environ: dict[str, str], expected: str) -> None:
    assert default_home(environ, platform) == Path(expected)


def test_everything_lives_under_one_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TIEROPS_HOME", str(tmp_path / "h"))
    monkeypatch.chdir("/")
    s = Settings()
    assert s.state_dir == tmp_path / "h" and s.db_path == tmp_path / "h" / "tierops.db"
    monkeypatch.setenv("TIEROPS_DB", str(tmp_path / "elsewhere.db"))
    assert Settings().db_path == tmp_path / "elsewhere.db"


def test_a_relative_home_is_made_absolute_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    s = Settings(home=Path("rel"))
    monkeypatch.chdir("/")
    assert s.state_dir == tmp_path / "rel" and s.db_path == tmp_path / "rel" / "tierops.db"


def test_without_tierops_home_the_xdg_state_dir_is_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TIEROPS_HOME", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert Settings().state_dir == tmp_path / "xdg" / "tierops"


def test_the_renamed_state_dir_variable_still_works(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TIEROPS_HOME", raising=False)
    monkeypatch.setenv("TIEROPS_STATE_DIR", str(tmp_path / "old"))
    assert get_settings().state_dir == tmp_path / "old"
    assert get_settings(home=str(tmp_path / "flag")).state_dir == tmp_path / "flag"  # a flag wins
    assert unknown_settings({"TIEROPS_STATE_DIR": "x"}, None) == [
        "TIEROPS_STATE_DIR (in the environment) was renamed TIEROPS_HOME; it is used as TIEROPS_HOME"]


def test_unknown_names_get_the_closest_known_one(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("TIEROPS_TIER1_MODLE=haiku\n# TIEROPS_COMMENTED=1\nexport TIEROPS_SHEDULE=false\nOTHER=1\n")
    warnings = unknown_settings({"TIEROPS_INTERVALS": "5", "TIEROPS_TOKEN": "x", "PATH": "/bin",
                                 "TIEROPS_CLAUDE_DIR": "/opt", "TIEROPS_COMPLETELY_UNRELATED_THING": "1"}, env_file)
    assert warnings == [
        "TIEROPS_COMPLETELY_UNRELATED_THING (in the environment) is not a TierOps setting and is ignored; see `tierops doctor` and the "
        "README's settings",
        "TIEROPS_INTERVALS (in the environment) is not a TierOps setting and is ignored; did you mean TIEROPS_INTERVAL?",
        f"TIEROPS_SHEDULE (in {env_file}) is not a TierOps setting and is ignored; did you mean TIEROPS_SCHEDULE?",
        f"TIEROPS_TIER1_MODLE (in {env_file}) is not a TierOps setting and is ignored; did you mean "
        "TIEROPS_TIER1_MODEL?",
    ]
    assert unknown_settings({}, tmp_path / "missing.env") == []


def test_bundled_files_are_found_through_the_package() -> None:
    import importlib.resources

    assert Path(str(importlib.resources.files("app"))) / "bundled" == BUNDLED_DIR
    assert DEFAULT_SCHEMA_PATH.is_file() and (PROMPTS_DIR / "tier1-observe.md").is_file()
    # in a checkout app/bundled/ links to the top-level folders, which stay where they are
    repo = Path(__file__).resolve().parents[1]
    assert (PROMPTS_DIR / "tier1-observe.md").read_bytes() == (repo / "prompts" / "tier1-observe.md").read_bytes()
    assert DEFAULT_SCHEMA_PATH.read_bytes() == (repo / "schemas" / "agent-response.json").read_bytes()
