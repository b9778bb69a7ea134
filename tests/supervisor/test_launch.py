"""app/supervisor/launch.py: the command line (no prompt on it, variadic lists closed, a resume
repeating every flag), the child's environment, tier 0 told apart, the binary lookup."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from app import errors
from app.config import Settings
from app.supervisor.launch import (
    INSTALL_HINT,
    CLIError,
    CLINotFound,
    Launch,
    build_argv,
    child_env,
    is_probe,
    resolve_binary,
    tier0_env,
)
from tests.fakes import claude_control as cc
from tests.fakes.fake_claude import parse_argv, usage_error

VARIADIC = ("--allowedTools", "--disallowedTools")


SCHEMA = '{"type":"object"}'


SYSTEM_FILE = "/state/sessions/7/.tierops-system-prompt.md"


def _argv(*, allowed=("Read", "Bash(git *)"), disallowed=("Edit",), max_turns: int | None = 7,
          resume: str | None = None) -> list[str]:
    return build_argv("claude", model="haiku", wire_schema=SCHEMA, system_prompt_file=SYSTEM_FILE,
                      allowed_tools=list(allowed), disallowed_tools=list(disallowed), max_turns=max_turns,
                      resume=resume)


def _assert_safe_shape(argv: list[str]) -> None:
    """No prompt argument (the CLI reads it from stdin); every variadic list is one token followed
    by an option or the end."""
    assert argv[1] == "-p" and argv[2].startswith("--")
    for i, tok in enumerate(argv):
        if tok in VARIADIC:
            assert i + 1 < len(argv) and not argv[i + 1].startswith("-"), argv
            assert i + 2 == len(argv) or argv[i + 2].startswith("--"), f"{tok} list not closed: {argv}"
    parsed = parse_argv(argv[1:])  # the fake's commander-like parser: what the CLI would see
    assert parsed["positionals"] == []
    assert parsed["unknown_options"] == []
    assert usage_error(parsed, "stdin-prompt") is None  # the prompt came on stdin
    assert usage_error(parsed, "devnull") is not None  # and only there


@pytest.mark.parametrize("allowed,disallowed,max_turns,resume", list(itertools.product(
    [(), ("Read",), ("Read", "Bash(systemctl status *)")], [(), ("Edit", "Write")], [None, 5],
    [None, "6f1c1a47-3f0e-4d55-9a51-2b7f3b1c9e10"])))
def test_build_argv_no_prompt_and_variadic_lists_closed(allowed, disallowed, max_turns, resume):
    argv = _argv(allowed=allowed, disallowed=disallowed, max_turns=max_turns, resume=resume)
    _assert_safe_shape(argv)
    parsed = parse_argv(argv[1:])
    assert parsed["model"] == "haiku" and parsed["output_format"] == "stream-json" and parsed["verbose"]
    assert parsed["json_schema"] == SCHEMA and parsed["append_system_prompt_file"] == SYSTEM_FILE
    assert "append_system_prompt" not in parsed  # never the text itself
    if allowed:
        assert argv[argv.index("--allowedTools") + 1] == ",".join(allowed)  # one token, rules intact
    else:
        assert "--allowedTools" not in argv
    if disallowed:
        assert argv[argv.index("--disallowedTools") + 1] == ",".join(disallowed)
    else:
        assert "--disallowedTools" not in argv
    assert ("--max-turns" in argv) == bool(max_turns)
    assert parsed.get("resume") == resume


def test_build_argv_default_tier_rules_with_spaces_stay_one_token(settings):
    for tier in (1, 2, 3):
        cfg = settings.tier(tier)  # the shipped defaults: rules like "Bash(systemctl status *)"
        argv = build_argv("claude", model=cfg.model, wire_schema=SCHEMA, system_prompt_file=SYSTEM_FILE,
                          allowed_tools=cfg.allowed_tools, disallowed_tools=cfg.disallowed_tools,
                          max_turns=cfg.max_turns)
        assert argv[argv.index("--allowedTools") + 1] == ",".join(cfg.allowed_tools)
        _assert_safe_shape(argv)
    assert "Bash(systemctl status *)" in settings.tier(1).allowed_tools


def test_build_argv_resume_repeats_schema_and_system_prompt():
    sid = cc.new_session_id()
    first = _argv()
    again = _argv(resume=sid)
    assert again[again.index("--resume") + 1] == sid
    for flag in ("--json-schema", "--append-system-prompt-file", "--model", "--allowedTools", "--disallowedTools",
                 "--max-turns", "--verbose", "--output-format"):
        assert flag in again
        if flag not in ("--verbose",):
            assert again[again.index(flag) + 1] == first[first.index(flag) + 1]
    _assert_safe_shape(again)


def test_child_env_keeps_only_the_allowed_names():
    source = {
        "PATH": "/usr/local/bin:/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "Europe/Paris",
        "HOME": "/root", "USER": "root", "ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
        "CLAUDE_CODE_MAX_RETRIES": "1", "AWS_SECRET_ACCESS_KEY": "nope", "GITHUB_TOKEN": "nope",
        "PYTHONPATH": "/x", "LC_CTYPE": "C", "HTTPS_PROXY": "http://proxy:3128", "MY_ANTHROPIC_KEY": "nope",
        "claude_code_lower": "nope",
    }
    env = child_env(Path("/state/home"), ["HTTPS_PROXY", "NOT_SET"], source)
    assert env == {
        "PATH": "/usr/local/bin:/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "Europe/Paris",
        "ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "CLAUDE_CODE_MAX_RETRIES": "1",
        "HTTPS_PROXY": "http://proxy:3128", "HOME": "/state/home",
    }
    # HOME is always ours, even when allow-listed; PATH falls back to the default search path.
    assert child_env(Path("/h"), ["HOME"], {"HOME": "/root"}) == {"HOME": "/h", "PATH": os.defpath}


def test_tier0_is_told_apart_and_gets_the_probe_environment(tmp_path):
    probe = Settings(checks=tmp_path / "checks.yaml", home=tmp_path / "state").tier(0)
    argv = [*probe.command, "-p", "--model", probe.model, "--output-format", "stream-json", "--verbose"]
    assert is_probe(argv) and not is_probe(["claude", "-p", "--model", "haiku", "--append-system-prompt-file",
                                            "tierops-probe"])
    (tmp_path / "checks.yaml").write_text("checks: [{name: x, command: 'true', env: [X_PASSWORD]}]\n")
    home = tmp_path / "state" / "home"
    home.mkdir(parents=True)
    launch = Launch(argv, tmp_path, {**child_env(home, []), "ANTHROPIC_API_KEY": "sk-test", "PYTHONPATH": "/x"},
                    timeout=5)
    env = tier0_env(launch)
    assert "ANTHROPIC_API_KEY" not in env and env["PYTHONPATH"] == "/x"
    assert env["HOME"] == str(tmp_path / "state" / "probe-home")
    assert "X_PASSWORD" not in env  # named, but not in this process's environment


def test_resolve_binary_errors_say_how_to_install(tmp_path):
    not_exec = tmp_path / "claude"
    not_exec.write_text("#!/bin/sh\n")
    for binary, path in ((str(tmp_path / "missing"), None), (str(not_exec), None),
                         ("claude-does-not-exist-here", str(tmp_path))):
        with pytest.raises(CLINotFound) as info:
            resolve_binary(binary, path)
        assert repr(binary) in str(info.value) and INSTALL_HINT in str(info.value)
    not_exec.chmod(0o755)
    assert resolve_binary("claude", str(tmp_path)) == str(not_exec)


def test_cli_errors_are_tierops_errors():
    assert CLIError is errors.CLIError
    assert issubclass(CLINotFound, errors.TierOpsError)
