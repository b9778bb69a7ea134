"""Settings: every knob has a ``TIEROPS_`` environment variable, a default and a description.

The README's settings table is checked against these fields by ``tests/test_docs.py``, so a
setting cannot be added without being documented.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.output.validate import DEFAULT_SCHEMA_PATH


class Settings(BaseSettings):
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


def get_settings() -> Settings:
    return Settings()
