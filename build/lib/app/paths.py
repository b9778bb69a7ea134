"""Where the bundled files live: the default output schema and the tier prompts.

Why a module of its own: settings, the validator and the tests all need these paths, and they
sit at the bottom of the import line. The files are the top-level ``schemas/`` and ``prompts/``
folders of the repository (issue #10 will also ship them inside the wheel).
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SCHEMA_PATH = REPO_ROOT / "schemas" / "agent-response.json"
PROMPTS_DIR = REPO_ROOT / "prompts"
