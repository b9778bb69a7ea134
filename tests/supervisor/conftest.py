"""Fixtures of the supervisor tests: a clean TIEROPS_* environment and settings pointed at the fake CLI.

Everything is real: a SQLite file (the ``db`` fixture of tests/conftest.py, same path as the
settings built here), the fake ``claude`` (tests/fakes/fake_claude.py) run as a subprocess, and
the supervisor code itself. Nothing of ours is mocked. Plain helpers live in helpers.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from app.config import Settings
from tests.fakes.claude_control import FakeClaude

# Tier settings that keep argv readable; the defaults' rules (with spaces) are checked separately.
FAST = {
    "kill_grace": 1,
    "tier1_timeout": 20, "tier2_timeout": 20, "tier3_timeout": 20,
    "tier1_allowed_tools": "Read,Bash(df *)", "tier1_disallowed_tools": "Edit,Write",
    "tier2_allowed_tools": "Read,Bash", "tier2_disallowed_tools": "WebFetch",
    "tier3_allowed_tools": "Read,Bash,Edit", "tier3_disallowed_tools": "WebSearch",
    # Escalations to tier 3 wait for an approval by default; these tests are about
    # other things (tests/supervisor/test_approvals.py sets it to manual).
    "tier3_approval": "auto",
}


@pytest.fixture(autouse=True)
def _clean_tierops_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings read TIEROPS_* from the environment: keep the caller's out of these tests."""
    for key in list(os.environ):
        if key.startswith("TIEROPS_"):
            monkeypatch.delenv(key)


@pytest.fixture
def make_settings(tmp_path: Path) -> Callable[..., Settings]:
    """``make_settings(fake, **overrides)``: Settings whose db is the ``db`` fixture's file."""

    def make(fake: FakeClaude | str | Path | None, **overrides) -> Settings:
        if isinstance(fake, FakeClaude):
            binary = str(fake.path)
        else:
            binary = str(fake) if fake is not None else "claude"
        values = {"claude_bin": binary, "home": tmp_path / "state", "db": tmp_path / "tierops.db", **FAST}
        values.update(overrides)
        return Settings(**values)

    return make
