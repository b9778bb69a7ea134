"""Extension skills handed to the claude CLI: copied into its HOME before a session starts.

Why a module of its own: CLI 2.1.197 takes as skills the folders ``$HOME/.claude/skills/<folder>/``
whose ``SKILL.md`` has a front matter description, lists them by the folder's name in its init
line's ``skills`` and offers them to the model through its Skill tool (tests/realcli). TierOps runs
the CLI with ``HOME = <state>/home``, so :func:`sync_skills` copies each extension skill to
``<state>/home/.claude/skills/<extension>-<skill>/`` before every language-model session: copied,
never linked, so neither the CLI nor a model's tools reach into the extension's folder, and a
skill changes only whole, between sessions. What TierOps installed is remembered in
:data:`MANIFEST`; the skills of extensions no longer configured are removed, and a folder TierOps
did not install is never touched. A skill is copied whole or not at all: regular files only,
at most :data:`SKILL_FILES_MAX` files and :data:`SKILL_BYTES_MAX` bytes. Nothing here stops a
session: a problem is logged and the session starts with the skills that could be installed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.probe.extensions import Skill, discover

log = logging.getLogger(__name__)

__all__ = ["MANIFEST", "SkillSync", "skills_dir", "sync_skills"]

MANIFEST = ".tierops-extensions.json"  # in the skills folder: {"skills": {folder: sha256}}
LOCK = ".tierops-extensions.lock"
SKILL_FILES_MAX = 200
SKILL_BYTES_MAX = 4 * 1024 * 1024


@dataclass
class SkillSync:
    installed: list[str] = field(default_factory=list)  # every skill folder in place now
    copied: list[str] = field(default_factory=list)  # those copied by this call (new or changed)
    removed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def skills_dir(home: Path) -> Path:
    return home / ".claude" / "skills"


def sync_skills(home: Path, dirs: Sequence[Path]) -> SkillSync:
    """Make the CLI's skills folder hold exactly the usable skills of the extensions ``dirs``
    (among the folders TierOps installed). Never raises: problems are logged and returned."""
    out = SkillSync()
    target = skills_dir(home)
    wanted = {ext.skill_folder(s): s for ext in discover(dirs) if ext.usable for s in ext.skills}
    if not wanted and not (target / MANIFEST).exists():
        return out
    try:
        target.mkdir(parents=True, exist_ok=True)
        with _locked(target / LOCK):
            _sync(target, wanted, out)
    except OSError as exc:
        out.problems.append(f"the skills folder {target} cannot be written ({exc.strerror or exc})")
    for problem in out.problems:
        log.warning("extension skills: %s", problem)
    if out.copied or out.removed:
        log.info("extension skills: %d in place (%d copied, %d removed)", len(out.installed), len(out.copied),
                 len(out.removed))
    return out


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One process at a time (``serve`` and ``tierops run`` may start sessions on the same HOME)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _sync(target: Path, wanted: dict[str, Skill], out: SkillSync) -> None:
    try:
        known: dict[str, str] = json.loads((target / MANIFEST).read_text(encoding="utf-8")).get("skills", {})
    except (OSError, ValueError, AttributeError):
        known = {}
    kept: dict[str, str] = {}
    for folder in sorted(set(known) - set(wanted)):
        if _remove(target / folder):
            out.removed.append(folder)
    for folder, skill in sorted(wanted.items()):
        dest = target / folder
        if folder not in known and (dest.exists() or dest.is_symlink()):
            out.problems.append(f"{dest} exists and was not installed by TierOps: skill {folder} left out")
            continue
        try:
            files, why = _files(skill)
            digest = _digest(skill.path, files) if why is None else ""
            if why is None and (known.get(folder) != digest or not dest.is_dir()):
                _copy(skill.path, files, dest)
                out.copied.append(folder)
        except OSError as exc:
            why = f"cannot be copied ({exc.strerror or exc})"
        if why is not None:
            out.problems.append(f"skill {folder}: {why}; left out")
            if folder in known and _remove(dest):
                out.removed.append(folder)
            continue
        kept[folder] = digest
        out.installed.append(folder)
    text = json.dumps({"skills": kept}, indent=1, sort_keys=True)
    tmp = target / f"{MANIFEST}.{os.getpid()}"
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(target / MANIFEST)


def _files(skill: Skill) -> tuple[list[Path], str | None]:
    """The skill's regular files (relative), or why it cannot be copied."""
    files: list[Path] = []
    total = 0
    for here, dirs, names in os.walk(skill.path):
        dirs[:] = sorted(d for d in dirs if not (Path(here) / d).is_symlink())
        for name in sorted(names):
            path = Path(here) / name
            if path.is_symlink() or not path.is_file():
                continue  # links and special files are never copied
            files.append(path.relative_to(skill.path))
            total += path.stat().st_size
            if len(files) > SKILL_FILES_MAX or total > SKILL_BYTES_MAX:
                return [], f"more than {SKILL_FILES_MAX} files or {SKILL_BYTES_MAX // (1024 * 1024)} MiB"
    return files, None


def _digest(root: Path, files: list[Path]) -> str:
    h = hashlib.sha256()
    for rel in files:
        h.update(rel.as_posix().encode("utf-8", "surrogateescape") + b"\0")
        h.update(hashlib.sha256((root / rel).read_bytes()).digest())
    return h.hexdigest()


def _copy(root: Path, files: list[Path], dest: Path) -> None:
    """``files`` of ``root`` into ``dest``, replacing it whole (built beside it, then renamed)."""
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    _remove(tmp)
    tmp.mkdir(mode=0o755)
    for rel in files:
        path = tmp / rel
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write((root / rel).read_bytes())
    _remove(dest)
    tmp.rename(dest)


def _remove(path: Path) -> bool:
    """Remove a folder TierOps installed (a link in its place only unlinked); True when something went."""
    if path.is_symlink() or path.is_file():
        path.unlink()
        return True
    if path.is_dir():
        shutil.rmtree(path)
        return True
    return False
