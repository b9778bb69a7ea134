"""Shared test fixtures: the real CLI captures, a real SQLite file, the bundled schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import Settings
from app.output.validate import OutputValidator
from app.store.db import Database

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "fixtures" / "claude-code" / "2.1.197"
SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()) if FIXTURES.is_dir() else []


def fixture_stream(name: str) -> Path:
    return FIXTURES / name / "stdout.jsonl"


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
