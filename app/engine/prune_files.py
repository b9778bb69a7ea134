"""What a prune removes from the file system: session folders, and the files the claude CLI left
behind.

Why a module of its own: these are the only deletions outside the database, and they are guarded
on their own terms. A session folder goes only when it is a plain folder directly inside
``TIEROPS_HOME/sessions/`` (never a symlink, never anything outside it; an ingested session's
recorded ``cwd`` is never touched). The claude CLI's own transcripts under
``TIEROPS_HOME/home/.claude`` (:mod:`app.engine.cli_transcripts`) are swept by every prune,
retention off included, but never those of a running session (its cwd, its CLI session id) nor any
newer than the newest running session or than the moment the running ones were read, nor those of
a conversation a next chat turn may resume (``TIEROPS_CHAT_RESUME_DAYS``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

from app.clock import parse_stamp, shift, utcnow
from app.config import Settings
from app.engine import cli_transcripts
from app.store import chats, retention
from app.store.db import Database

log = logging.getLogger(__name__)


class FolderReport(TypedDict):
    removed: int       # session folders deleted (dry run: that would be)
    bytes: int         # their size
    missing: int       # pruned sessions that had no folder (ingested ones never have one)
    errors: list[str]  # folders left in place, and why


class TranscriptReport(TypedDict):
    removed: int       # folders and files the claude CLI left under TIEROPS_HOME/home/.claude (dry run: would go)
    bytes: int
    errors: list[str]  # left in place, and why


def tree_bytes(folder: Path) -> int:
    """The bytes of the files under ``folder``, symlinks not followed."""
    total = 0
    for dirpath, _dirs, files in os.walk(folder):  # does not follow symlinks
        for name in files:
            with contextlib.suppress(OSError):  # gone meanwhile
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def remove_folders(root: Path, ids: Sequence[int], report: FolderReport, *, dry_run: bool) -> None:
    """Delete ``root/<id>`` for each id; only plain folders directly inside ``root``."""
    try:
        real_root = root.resolve(strict=True)
    except OSError:  # no sessions/ folder at all (only ingested sessions so far)
        report["missing"] += len(ids)
        return
    for pk in ids:
        folder = root / str(int(pk))
        if not folder.exists() and not folder.is_symlink():
            report["missing"] += 1
            continue
        if folder.is_symlink() or not folder.is_dir() or folder.resolve().parent != real_root:
            report["errors"].append(f"{folder}: not a plain folder inside {root}; left alone")
            continue
        size = tree_bytes(folder)
        if not dry_run:
            try:
                shutil.rmtree(folder)
            except OSError as exc:
                report["errors"].append(f"{folder}: {exc.strerror or exc}")
                log.warning("prune: cannot remove %s: %s", folder, exc)
                continue
        report["removed"] += 1
        report["bytes"] += size


async def sweep_cli_files(db: Database, settings: Settings, *, dry_run: bool) -> TranscriptReport:
    """Remove the claude CLI's files no running session can resume (``cli_transcripts.sweep``)."""
    looked = time.time()  # before the rows are read: a session started after this is newer
    running = await retention.running_clis(db)
    state = settings.state_dir.resolve()
    cwds = [cwd for r in running for cwd in (r.cwd, str(state / "sessions" / str(r.id))) if cwd]
    if settings.chat_resume_days > 0:  # conversations a next turn still resumes keep their CLI session
        since = shift(utcnow(), -settings.chat_resume_days * 86400)
        cwds += await chats.resumable_cwds(db, since)
    newest = max((parse_stamp(r.started_at).timestamp() for r in running), default=looked)
    swept = await asyncio.to_thread(cli_transcripts.sweep, state / "home", running_cwds=cwds,
                                    running_ids=[r.session_id for r in running if r.session_id],
                                    before=min(looked, newest), dry_run=dry_run)
    for error in swept.errors:
        log.warning("prune: the claude CLI's file not removed: %s", error)
    return {"removed": swept.removed, "bytes": swept.bytes, "errors": swept.errors}
