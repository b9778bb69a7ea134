"""``tierops ingest``: a recorded stream file (or stdin) into the store, idempotently.

Idempotency: a stream is identified by the CLI's ``session_id`` (first line that has one) and by
the SHA-256 of its bytes. The common case — a session not stored yet — is one pass: lines are
stored and the file hashed as it is read. Only when the ``session_id`` is already stored (or the
stream has none near its start) is the file hashed first, to tell "the same stream again"
(nothing changes) from "a different stream with a known id" (refused: a resumed run's stream is
not merged by ingest; the supervisor records resume attempts as attempts of one session).
stdin is spooled to a temporary file first, so memory stays flat for any size.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from app.config import Settings
from app.engine.recorder import RecorderOptions, SessionRecorder
from app.engine.report import SessionReport, build_report
from app.errors import InputError
from app.output.validate import OutputValidator
from app.store import sessions
from app.store.db import Database
from app.stream.parser import parse_line
from app.stream.reader import iter_lines
from app.vocab import SessionStatus, Trigger

log = logging.getLogger(__name__)

PEEK_LINES = 100  # how far to look for a session_id before ingesting without one


class IngestError(InputError):
    """Bad input for ingest; the message says what and what to do."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for _ in iter_lines(f, digest):
            pass
    return digest.hexdigest()


def _peek_session_id(path: Path) -> str | None:
    with path.open("rb") as f:
        for n, line in enumerate(iter_lines(f)):
            if n >= PEEK_LINES:
                break
            if b"session_id" in line and (parsed := parse_line(line)) is not None and parsed.session_id:
                return parsed.session_id
    return None


def spool_stdin() -> Path:
    with tempfile.NamedTemporaryFile(prefix="tierops-stdin-", suffix=".jsonl", delete=False) as tmp:
        shutil.copyfileobj(sys.stdin.buffer, tmp, 1024 * 1024)
    return Path(tmp.name)


async def _existing(db: Database, path: Path, session_id: str | None) -> sessions.StoredStream | None:
    """The stored session this exact stream already produced, if any (raises on a conflict)."""
    if session_id:
        found = await sessions.find_by_cli_session_id(db, session_id)
        if found is None:
            return None
        if found.stream_sha256 is not None and found.stream_sha256 != _sha256(path):
            raise IngestError(
                f"session {session_id} is already stored (id {found.id}) from a different stream;"
                " a resumed run's stream is not merged by ingest. Use another --db to keep both."
            )
        return found
    return await sessions.find_anonymous_stream(db, _sha256(path))


async def ingest_path(db: Database, path: Path, validator: OutputValidator, settings: Settings,
                      tier: int | None = None) -> tuple[SessionReport, bool]:
    """Returns (report, stored_now). ``stored_now`` is False when the stream was already stored."""
    try:
        existing = await _existing(db, path, _peek_session_id(path))
    except FileNotFoundError:
        raise IngestError(f"stream file not found: {path}") from None
    except IsADirectoryError:
        raise IngestError(f"{path} is a directory; give the stdout.jsonl file of a session") from None
    except OSError as exc:
        raise IngestError(f"cannot read {path}: {exc.strerror}") from None

    if existing is not None:
        if not (existing.status == SessionStatus.RUNNING and existing.trigger == Trigger.INGEST):
            return await build_report(db, existing.id), False
        # An earlier ingest of this stream was killed half-way: replace its partial rows.
        log.info("replacing session %d: an earlier ingest of %s stopped half-way", existing.id, path)
        await sessions.delete_session(db, existing.id)

    rec = await SessionRecorder.begin(db, validator, RecorderOptions.from_settings(settings), tier=tier,
                                      trigger=Trigger.INGEST)
    digest = hashlib.sha256()
    try:
        with path.open("rb") as f:
            for line in iter_lines(f, digest):
                await rec.feed(line)
    except OSError as exc:
        await rec.finalize(status=SessionStatus.FAILED, reason=f"ingest aborted: cannot read {path}: {exc.strerror}")
        raise IngestError(f"cannot read {path}: {exc.strerror}") from None
    await sessions.set_stream_sha256(db, rec.session_pk, digest.hexdigest())
    return await rec.finalize(), True
