"""Where TierOps' files live: the bundled schema and prompts, and the state directory.

Why a module of its own: settings, the validator, the doctor and the tests all need these paths,
and they sit at the bottom of the import line.

* **Bundled files**: the top-level ``prompts/`` and ``schemas/`` folders ship inside
  the wheel as ``app/bundled/``. In a source checkout ``app/bundled/prompts`` and
  ``app/bundled/schemas`` are relative symlinks to the top-level folders; the wheel build copies
  the files. Either way they are found with :mod:`importlib.resources`, never by a path relative
  to the source tree, so a non-editable install (``pip install .``, the Docker image, pipx) finds
  them too.
* **The state directory** (``TIEROPS_HOME``): the database, the session folders, the CLI's HOME
  and the cycle lock. Found the same way from any working directory: ``TIEROPS_HOME`` (or
  ``--home``), else the platform's state directory — ``$XDG_STATE_HOME/tierops`` (default
  ``~/.local/state/tierops``) on Linux and other Unixes, ``~/Library/Application Support/tierops``
  on macOS, ``%LOCALAPPDATA%\\tierops`` on Windows. Never a folder relative to the working
  directory: a command run from another folder would silently make a new, empty database.
"""

from __future__ import annotations

import logging
import os
import sys
from importlib.resources import files
from pathlib import Path

__all__ = [
    "BUNDLED_DIR",
    "CHECKS_SCHEMA_PATH",
    "DB_NAME",
    "DEFAULT_SCHEMA_PATH",
    "PACKAGE_ROOT",
    "PROMPTS_DIR",
    "default_home",
]

log = logging.getLogger(__name__)


def _bundled_dir() -> Path:
    root = files("app") / "bundled"
    # A wheel is always installed unpacked, so the traversable is a real folder; a zipped install
    # (zipapp, zipimport) cannot hand the CLI a schema or prompt path and is not supported.
    if not isinstance(root, Path):  # pragma: no cover - only under zipimport
        raise RuntimeError(f"TierOps must be installed unpacked; its bundled files are in {root}")
    return root


BUNDLED_DIR = _bundled_dir()
DEFAULT_SCHEMA_PATH = BUNDLED_DIR / "schemas" / "agent-response.json"
CHECKS_SCHEMA_PATH = BUNDLED_DIR / "schemas" / "checks.json"  # the checks file's JSON Schema
PROMPTS_DIR = BUNDLED_DIR / "prompts"
# The folder holding the ``app`` package (site-packages, or the checkout): PYTHONPATH of the probe.
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
DB_NAME = "tierops.db"


def default_home(environ: dict[str, str] | None = None, platform: str | None = None) -> Path:
    """The platform's state directory for TierOps (used when ``TIEROPS_HOME`` is not set)."""
    env = os.environ if environ is None else environ
    plat = sys.platform if platform is None else platform
    home = Path(env.get("HOME") or Path.home())
    if plat == "darwin":
        return home / "Library" / "Application Support" / "tierops"
    if plat.startswith("win"):
        local = env.get("LOCALAPPDATA")
        return (Path(local) if local else home / "AppData" / "Local") / "tierops"
    state = env.get("XDG_STATE_HOME", "")
    # The XDG spec: a relative XDG_STATE_HOME is invalid and must be ignored.
    base = Path(state) if state and Path(state).is_absolute() else home / ".local" / "state"
    return base / "tierops"
