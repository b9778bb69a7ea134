"""Shared test fixtures: the real CLI captures, a real SQLite file, the bundled schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import Settings
from app.output.validate import OutputValidator
from app.store.db import Database
from tests.fakes.claude_control import FIXTURES


def pytest_configure(config: pytest.Config) -> None:
    if not FIXTURES.is_dir():  # one clear message instead of dozens of failing tests
        raise pytest.UsageError(
            f"the real CLI captures are missing: {FIXTURES} does not exist. They are part of the "
            "repository (tests/fixtures/); restore them with git, or refresh them with scripts/sync-fixtures.sh.")


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test touches the operator's state directory (~/.local/state/tierops) or a stray .env:
    TIEROPS_HOME points at a fresh folder (tests that need their own pass --home or set it)."""
    monkeypatch.setenv("TIEROPS_HOME", str(tmp_path_factory.mktemp("tierops-home")))
    for name in ("TIEROPS_DB", "TIEROPS_STATE_DIR", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def validator() -> OutputValidator:
    return OutputValidator.from_file()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(db=tmp_path / "tierops.db")


@pytest.fixture
async def db(settings: Settings):
    store = await Database.open(settings.db)
    try:
        yield store
    finally:
        await store.close()
