"""The claude CLI's own session files under TierOps' CLI HOME: where they are, and removing them
once no resume can follow.

Why a module of its own: the CLI writes every session to
``HOME/.claude/projects/<cwd slug>/<session id>.jsonl`` (reference §8: ``--resume`` needs the same
HOME and cwd) with every tool output verbatim, secrets included, and never prunes it; the folder
sits in backups and in the Docker volume. TierOps keeps its own redacted copy of every line, so the
CLI's copy is needed only while a resume may follow (output recovery, inside one session; the next
turn of a chat conversation, for ``TIEROPS_CHAT_RESUME_DAYS``). The session removes it once it is
final (``supervisor/session.py``; a chat turn keeps it); ``tierops prune`` and the
server's daily prune remove whatever was left behind (a supervisor killed before it could), never
the files of a session still running or newer than the newest running one.

Where, read from the pinned CLI 2.1.197 and checked with it (``tests/realcli/test_prompt_channels.py``):
the slug is the absolute cwd with every character other than an ASCII letter or digit turned into
``-``; a slug longer than 200 characters is cut there and given ``-`` and a base-36 hash of the
cwd. Per CLI session id the CLI may also keep ``file-history/<id>/`` (copies of the files its Edit
and Write tools changed) and ``session-env/<id>/``; they go with the transcript. A
``CLAUDE_CONFIG_DIR`` in the CLI's environment would move all of this; TierOps never sets one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["SweepReport", "config_dir", "remove_session_files", "slug", "sweep"]

SLUG_MAX = 200
PROJECTS = "projects"
PER_SESSION = ("file-history", "session-env")  # <dir>/<CLI session id>
_NOT_ALNUM = re.compile(r"[^a-zA-Z0-9]")
_DIGITS36 = "0123456789abcdefghijklmnopqrstuvwxyz"


@dataclass
class SweepReport:
    removed: int = 0  # folders and files of the CLI removed (dry run: that would be)
    bytes: int = 0
    errors: list[str] = field(default_factory=list)


def config_dir(home: Path) -> Path:
    """The CLI's own folder under the HOME TierOps gives it."""
    return home / ".claude"


def slug(cwd: str) -> str:
    """The folder name the CLI gives a cwd under ``projects/``."""
    name = _NOT_ALNUM.sub("-", cwd)
    if len(name) <= SLUG_MAX:
        return name
    return f"{name[:SLUG_MAX]}-{_base36(abs(_string_hash(cwd)))}"


def _string_hash(text: str) -> int:
    """The CLI's hash of a string: ``h = h * 31 + code unit``, on UTF-16 code units, kept to a
    signed 32-bit integer at every step."""
    data = text.encode("utf-16-le", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (h * 31 + int.from_bytes(data[i:i + 2], "little")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _base36(n: int) -> str:
    out = ""
    while True:
        n, digit = divmod(n, 36)
        out = _DIGITS36[digit] + out
        if not n:
            return out


def _size(path: Path) -> int:
    if not path.is_dir() or path.is_symlink():
        with contextlib.suppress(OSError):
            return path.lstat().st_size
        return 0
    total = 0
    for dirpath, _dirs, files in os.walk(path):  # does not follow symlinks
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _newest(path: Path) -> float:
    """The latest modification time of ``path`` and of everything in it (0 when gone)."""
    try:
        newest = path.lstat().st_mtime
    except OSError:
        return 0.0
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirs, files in os.walk(path):
            for name in (*dirs, *files):
                with contextlib.suppress(OSError):
                    newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
    return newest


def _remove(path: Path, parent: Path, report: SweepReport, *, dry_run: bool = False) -> None:
    """Remove ``path``, an entry directly inside ``parent``: a folder with everything in it (never
    following a symlink), a file, or a link itself."""
    if path.parent != parent:
        report.errors.append(f"{path}: not directly inside {parent}; left alone")
        return
    size = _size(path)
    if not dry_run:
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            return
        except OSError as exc:
            report.errors.append(f"{path}: {exc.strerror or exc}")
            log.warning("cannot remove the claude CLI's %s: %s", path, exc)
            return
    report.removed += 1
    report.bytes += size


def remove_session_files(home: Path, cwd: str | None, session_id: str | None) -> SweepReport:
    """Remove what the CLI keeps of one session run in ``cwd`` as ``session_id`` (either may be
    None: a CLI that never started, or never said its id): the project folder of that cwd (each
    TierOps session has a cwd of its own) and any folder holding ``<session_id>.jsonl``, plus the
    session's ``file-history`` and ``session-env`` folders. Never raises for a file system error:
    what could not be removed is in ``errors`` (and logged), for prune to try again."""
    report = SweepReport()
    base = config_dir(home)
    projects = base / PROJECTS
    found: set[Path] = set()
    if cwd:
        folder = projects / slug(cwd)
        if folder.exists() or folder.is_symlink():
            found.add(folder)
    if session_id and "/" not in session_id and session_id not in (".", ".."):
        with contextlib.suppress(OSError):
            found.update(p.parent for p in projects.glob(f"*/{_glob_escape(session_id)}.jsonl"))
        for name in PER_SESSION:
            path = base / name / session_id
            if path.exists() or path.is_symlink():
                _remove(path, base / name, report)
    for folder in sorted(found):
        _remove(folder, projects, report)
    return report


def _glob_escape(text: str) -> str:
    """``text`` as a literal inside a glob pattern."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def sweep(home: Path, *, running_cwds: Iterable[str], running_ids: Iterable[str], before: float,
          dry_run: bool = False) -> SweepReport:
    """Remove every project folder and per-session folder of the CLI that no running session can
    resume (not the folder of a running session's cwd, not one holding a running CLI session id)
    and whose newest file is older than ``before`` (a Unix time: the start of the newest running
    session, or when the running sessions were read). ``dry_run``: count only."""
    report = SweepReport()
    base = config_dir(home)
    keep_slugs = {slug(c) for c in running_cwds}
    keep_ids = set(running_ids)
    projects = base / PROJECTS
    for folder in _entries(projects, report):
        if folder.name in keep_slugs or any((folder / f"{sid}.jsonl").exists() for sid in keep_ids):
            continue
        if _newest(folder) < before:
            _remove(folder, projects, report, dry_run=dry_run)
    for name in PER_SESSION:
        parent = base / name
        for path in _entries(parent, report):
            if path.name not in keep_ids and _newest(path) < before:
                _remove(path, parent, report, dry_run=dry_run)
    return report


def _entries(folder: Path, report: SweepReport) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        report.errors.append(f"{folder}: {exc.strerror or exc}")
        return []
