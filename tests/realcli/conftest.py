"""Fixtures for end-to-end tests that run the REAL ``claude`` CLI (2.1.197) against
the fake Messages API in ``tests/fakes/fake_anthropic.py``.

- ``claude_bin`` (session): path of the installed CLI; installs it with
  ``scripts/install-claude.sh`` when missing and FAILS (never skips) when that fails.
- ``fake_api``: a started :class:`FakeAnthropic`, stopped after the test.
- ``claude_env``: a minimal environment for the child process (tmp HOME, fake API,
  no telemetry / updater / side calls, ``CLAUDE_CODE_MAX_RETRIES=1``).
- ``claude_cwd``: an empty working directory for the child (``--resume`` needs the same one).
- ``run_claude``: ``run_claude(args, cwd=None, env=None, timeout=30) -> ClaudeRun``.

Every test collected under tests/realcli gets the ``realcli`` marker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # make `tests.fakes` importable however pytest is invoked
    sys.path.append(str(REPO_ROOT))

from tests.fakes.fake_anthropic import FakeAnthropic  # noqa: E402

CLAUDE_VERSION = "2.1.197"
INSTALL_SCRIPT = REPO_ROOT / "scripts" / "install-claude.sh"
_HERE = Path(__file__).resolve().parent


def claude_install_dir() -> Path:
    """Same rule as scripts/install-claude.sh."""
    env_dir = os.environ.get("TIEROPS_CLAUDE_DIR")
    if env_dir:
        return Path(env_dir)
    return Path.home() / ".cache" / "tierops" / f"claude-code-{CLAUDE_VERSION}"


def _version_ok(binary: Path) -> bool:
    if not binary.exists():
        return False
    try:
        out = subprocess.run(
            [str(binary), "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return False
    return out == CLAUDE_VERSION or out.startswith(CLAUDE_VERSION + " ")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.realcli)


@pytest.fixture(scope="session")
def claude_bin() -> str:
    """Path of the real claude binary; installs it when missing. Fails (not skips) on error."""
    binary = claude_install_dir() / "node_modules" / ".bin" / "claude"
    if _version_ok(binary):
        return str(binary)
    try:
        proc = subprocess.run(
            ["bash", str(INSTALL_SCRIPT)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=1200,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.fail(f"could not run {INSTALL_SCRIPT}: {exc!r}", pytrace=False)
    if proc.returncode != 0:
        pytest.fail(
            f"the real claude CLI {CLAUDE_VERSION} is required for tests/realcli and "
            f"{INSTALL_SCRIPT} failed (exit {proc.returncode}).\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}",
            pytrace=False,
        )
    lines = proc.stdout.strip().splitlines()
    installed = Path(lines[-1]) if lines else binary
    if not _version_ok(installed):
        pytest.fail(
            f"{INSTALL_SCRIPT} succeeded but {installed} --version does not report {CLAUDE_VERSION}",
            pytrace=False,
        )
    return str(installed)


@pytest.fixture
def fake_api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake
    assert not fake.errors, f"fake Anthropic API handler errors: {fake.errors}"


@pytest.fixture
def claude_env(fake_api: FakeAnthropic, tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": fake_api.url,
        "ANTHROPIC_API_KEY": "sk-test-dummy",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "1",
    }


@pytest.fixture
def claude_cwd(tmp_path: Path) -> Path:
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    return cwd


@dataclass
class ClaudeRun:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    duration: float

    @property
    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    @property
    def result(self) -> dict[str, Any] | None:
        results = [m for m in self.lines if m.get("type") == "result"]
        return results[-1] if results else None

    @property
    def session_id(self) -> str | None:
        return next((m["session_id"] for m in self.lines if m.get("session_id")), None)

    def of_type(self, type_: str, subtype: str | None = None) -> list[dict[str, Any]]:
        return [
            m
            for m in self.lines
            if m.get("type") == type_ and (subtype is None or m.get("subtype") == subtype)
        ]

    def explain(self) -> str:
        return f"exit {self.returncode} after {self.duration:.1f}s\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"


@pytest.fixture
def run_claude(claude_bin: str, claude_env: dict[str, str], claude_cwd: Path):
    """``run_claude(args, cwd=None, env=None, timeout=30)``: run ``claude <args>`` with
    stdin=/dev/null, the fixture env and cwd (overridable), and return a :class:`ClaudeRun`."""

    def run(
        args: Sequence[str],
        *,
        cwd: Path | str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 30,
    ) -> ClaudeRun:
        argv = [claude_bin, *args]
        start = time.monotonic()
        proc = subprocess.run(
            argv,
            cwd=str(cwd or claude_cwd),
            env=env if env is not None else claude_env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return ClaudeRun(argv, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)

    return run
