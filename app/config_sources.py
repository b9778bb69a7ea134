"""Where each setting's value comes from: the environment, ``.env``, a flag, or the default.

Why a module of its own: the settings class says what a setting is; this says which of the places
pydantic-settings reads gave it (the /config page, ``tierops doctor``), and which ``TIEROPS_*``
names are set but are no setting at all (a typo would otherwise be ignored without a word).
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from app.config import ENV_FILE, RENAMED, SCRIPT_VARIABLES, Settings

__all__ = ["SOURCE_COMMAND_LINE", "SOURCE_DEFAULT", "SOURCE_ENV", "SOURCE_FILE", "setting_sources", "unknown_settings"]

log = logging.getLogger(__name__)


def unknown_settings(environ: dict[str, str] | None = None, env_file: str | Path | None = ENV_FILE) -> list[str]:
    """One warning per ``TIEROPS_*`` name in the environment or ``.env`` that is not a setting.

    A typo (``TIEROPS_INTERVALS=60``) would otherwise be ignored without a word and the default
    used; the warning names the closest known setting.
    """
    known = {f"TIEROPS_{name.upper()}" for name in Settings.model_fields}
    names: dict[str, str] = {}
    for name in (os.environ if environ is None else environ):
        names.setdefault(name.upper(), "the environment")
    if env_file is not None:
        for name in _env_file_names(Path(env_file)):
            names.setdefault(name.upper(), str(env_file))
    warnings = []
    for name, where in sorted(names.items()):
        if not name.startswith("TIEROPS_") or name in known or name in SCRIPT_VARIABLES:
            continue
        if name in RENAMED:
            warnings.append(f"{name} (in {where}) was renamed {RENAMED[name]}; it is used as {RENAMED[name]}")
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else "; see `tierops doctor` and the README's settings"
        warnings.append(f"{name} (in {where}) is not a TierOps setting and is ignored{hint}")
    return warnings


def _env_file_names(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    names = []
    for line in text.splitlines():
        line = line.strip().removeprefix("export ").strip()
        if line and not line.startswith("#") and "=" in line:
            names.append(line.split("=", 1)[0].strip())
    return names


# Where a setting's effective value came from (the /config page), in the order
# pydantic-settings applies them: a command-line flag over the environment over ``.env`` over
# the default. A secret read from its ``*_FILE`` companion (TIEROPS_TOKEN_FILE) counts as "file".
SOURCE_DEFAULT = "default"
SOURCE_ENV = "env"
SOURCE_FILE = "file"
SOURCE_COMMAND_LINE = "command line"


def setting_sources(settings: Settings, environ: Mapping[str, str] | None = None,
                    env_file: str | Path | None = ENV_FILE, baseline: Settings | None = None) -> dict[str, str]:
    """The source of every setting of ``settings``: ``default``, ``env``, ``file`` or ``command line``.

    ``environ`` (default: this process's) and ``env_file`` say which ``TIEROPS_*`` names are set
    where (names compared case-insensitively, as pydantic-settings does; a renamed name counts as
    its new one). A setting whose value differs from ``baseline`` — the settings as the
    environment and ``.env`` alone give them (:func:`get_settings` without flags) — was given on
    the command line (``--home``, ``--db``, ``--checks``) or by the program that built
    ``settings``. Without a baseline nothing is reported as ``command line``.
    """
    env = {name.upper() for name in (os.environ if environ is None else environ)}
    in_file = {name.upper() for name in _env_file_names(Path(env_file))} if env_file is not None else set()
    old_names = {new: old for old, new in RENAMED.items()}
    sources: dict[str, str] = {}
    for name in Settings.model_fields:
        var = f"TIEROPS_{name.upper()}"
        if var in env or old_names.get(var, "") in env:
            source = SOURCE_ENV
        elif var in in_file:
            source = SOURCE_FILE
        else:
            source = SOURCE_DEFAULT
        if baseline is not None and getattr(settings, name) != getattr(baseline, name):
            source = SOURCE_COMMAND_LINE
        sources[name] = source
    for name, source in list(sources.items()):
        companion = f"{name}_file"  # token ← token_file, notify_urls ← notify_urls_file
        if source == SOURCE_DEFAULT and companion in sources and getattr(settings, companion) is not None:
            sources[name] = SOURCE_FILE
    return sources
