"""The README documents every setting, and the Quick start stays two commands that CI runs."""

from __future__ import annotations

import re

from app.config import Settings
from tests.fakes.claude_control import REPO as ROOT

README = (ROOT / "README.md").read_text()


def test_every_setting_is_in_the_readme_table():
    documented = set(re.findall(r"^\| `(TIEROPS_[A-Z0-9_]+)` \|", README, re.M))
    expected = {f"TIEROPS_{name.upper()}" for name in Settings.model_fields}
    assert documented == expected


def test_every_setting_has_a_description():
    for name, field in Settings.model_fields.items():
        assert field.description, name


def test_quick_start_is_two_commands_and_ci_runs_the_second():
    block = README.split("## Quick start", 1)[1].split("```", 2)[1]
    commands = [line for line in block.splitlines()[1:] if line.strip()]
    assert len(commands) == 2
    assert commands[1].strip() in (ROOT / ".ci" / "run").read_text() or "scripts/test.sh" in commands[1]
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
