"""``tierops ingest``: a recorded stream file (or stdin) into the store, idempotently.

Idempotency: a stream is identified by the CLI's ``session_id`` (first line that has one) and by
the SHA-256 of its bytes. The common case — a session not stored yet — is one pass: lines are
stored and the file hashed as it is read. Only when the ``session_id`` is already stored (or the
stream has none near its start) is the file hashed first, to tell "the same stream again"
(nothing changes) from "a different stream with a known id" (refused: a resumed run's stream is
not merged by ingest). stdin is spooled to a temporary file first, so memory stays flat.

Speed (bench/ingest.py): the file is read, hashed, framed and screened for secrets one 1 MiB read
ahead, in a thread of its own, while the previous read's lines are parsed and stored in order in
the event loop's thread (SHA-256 and the RE2 search release the GIL; measurements in
ARCHITECTURE.md, "Recording a session").

A file that is not stream-json at all is refused before anything is stored
(:func:`check_stream_json`); the test is deliberately lenient: one JSON object with a string
``type`` among the first lines is enough, and every line of an accepted file is stored (garbage
lines raw). A storage fault while storing is one :class:`IngestError` naming it; running the same
command again replaces the partial session.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from app.config import Settings
from app.engine.recorder import RecorderOptions, SessionRecorder
from app.engine.report import SessionReport, build_report
from app.errors import InputError
from app.output.spec import OutputSpec
from app.output.validate import OutputValidator
from app.store import sessions
from app.store.db import Database, describe_storage_error, is_transient
from app.stream.parser import parse_line
from app.stream.reader import CHUNK, LineFramer, iter_lines
from app.vocab import SessionStatus, Trigger

log = logging.getLogger(__name__)

PEEK_LINES = 100  # how far to look for a session_id before ingesting without one
SNIFF_LINES = 100  # non-empty lines looked at for one stream-json object
SNIFF_LINE_MAX = 1024 * 1024  # a longer line is judged by its start
SNIFF_BYTES = 16 * 1024 * 1024  # read at most this much to decide


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


def _stream_object(line: bytes) -> bool:
    """A JSON object with a string ``type`` (or the array of them ``--output-format json --verbose`` prints)."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return False
    items = value if isinstance(value, list) else [value]
    return any(isinstance(item, dict) and isinstance(item.get("type"), str) for item in items)


def _first_lines(f: BinaryIO) -> Iterator[tuple[bytes, bool]]:
    """(line, complete) for the lines of ``f``, reading at most ``SNIFF_BYTES``. A line longer than
    ``SNIFF_LINE_MAX`` is given as its start with ``complete`` False (the rest is skipped)."""
    buf = bytearray()
    skipping = False  # inside an over-long line already given
    read = 0
    while read < SNIFF_BYTES:
        chunk = f.read(64 * 1024)
        if not chunk:
            if buf:
                yield bytes(buf), True
            return
        read += len(chunk)
        start = 0
        while (newline := chunk.find(b"\n", start)) >= 0:
            if not skipping:
                buf += chunk[start:newline]
                yield bytes(buf), True
                buf.clear()
            skipping = False
            start = newline + 1
        if not skipping:
            buf += chunk[start:]
            if len(buf) > SNIFF_LINE_MAX:
                yield bytes(buf[:SNIFF_LINE_MAX]), False
                buf.clear()
                skipping = True
    if buf:
        yield bytes(buf), False


def check_stream_json(path: Path, shown: str | None = None) -> None:
    """Raise :class:`IngestError` unless one of the first ``SNIFF_LINES`` non-empty lines is a
    stream-json object. An over-long line (``SNIFF_LINE_MAX``) that starts like JSON counts (a
    real stream's lines can be tens of MiB); at most ``SNIFF_BYTES`` are read."""
    shown = shown or str(path)
    looked = 0
    first: bytes | None = None
    with path.open("rb") as f:
        for line, complete in _first_lines(f):
            stripped = line.strip()
            if not stripped:
                continue
            looked += 1
            first = first if first is not None else stripped[:40]
            if _stream_object(stripped) if complete else stripped[:1] in (b"{", b"["):
                return
            if looked >= SNIFF_LINES:
                break
    if first is None:
        raise IngestError(f"{shown} is empty: nothing to ingest (a stream-json file has one JSON object per line)")
    raise IngestError(
        f"{shown} is not a Claude Code stream-json file: none of its first {looked} non-empty line(s) is a JSON "
        f"object with a \"type\" (it starts {first!r}); give the stdout of "
        "`claude -p --output-format stream-json --verbose`. Nothing was stored.")


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


Progress = Callable[[int, int], None]
"""Called as ``progress(bytes_read, lines_stored)`` while a stream is ingested."""

PROGRESS_EVERY = 2000  # lines between progress calls: cheap enough to vanish in the ingest time


async def ingest_path(db: Database, path: Path, validator: OutputValidator, settings: Settings,
                      tier: int | None = None, *, shown: str | None = None,
                      progress: Progress | None = None) -> tuple[SessionReport, bool]:
    """Returns (report, stored_now). ``stored_now`` is False when the stream was already stored.
    ``shown`` names the input in messages (``stdin`` for a spooled standard input). ``progress``
    is called every :data:`PROGRESS_EVERY` lines and once at the end."""
    shown = shown or str(path)
    try:
        check_stream_json(path, shown)
        session_id = _peek_session_id(path)
    except FileNotFoundError:
        raise IngestError(f"stream file not found: {shown}") from None
    except IsADirectoryError:
        raise IngestError(f"{shown} is a directory; give the stdout.jsonl file of a session") from None
    except OSError as exc:
        raise IngestError(f"cannot read {shown}: {exc.strerror}") from None
    try:
        return await _ingest(db, path, shown, session_id, validator, settings, tier, progress)
    except Exception as exc:  # reading errors are handled inside: a fault here is the store's
        if not is_transient(exc):
            raise
        log.info("ingest of %s stopped by a storage error: %s", shown, exc)  # the caller reports it
        raise IngestError(f"storage error while ingesting {shown}: {describe_storage_error(exc)}") from None


async def _ingest(db: Database, path: Path, shown: str, session_id: str | None, validator: OutputValidator,
                  settings: Settings, tier: int | None, progress: Progress | None) -> tuple[SessionReport, bool]:
    try:
        existing = await _existing(db, path, session_id)
    except OSError as exc:  # hashing the file
        raise IngestError(f"cannot read {shown}: {exc.strerror}") from None

    if existing is not None:
        if not (existing.status == SessionStatus.RUNNING and existing.trigger == Trigger.INGEST):
            return await build_report(db, existing.id), False
        # An earlier ingest of this stream was killed half-way: replace its partial rows.
        log.info("replacing session %d: an earlier ingest of %s stopped half-way", existing.id, shown)
        await sessions.delete_session(db, existing.id)

    spec = OutputSpec(validator=validator, source="default")
    if not spec.routed:  # --schema FILE with another schema
        spec = OutputSpec(validator=validator, source="inline")
    # The contract the stream is judged against (--schema FILE, or the bundled one)
    rec = await SessionRecorder.begin(db, validator, RecorderOptions.from_settings(settings, route_output=spec.routed),
                                      tier=tier, trigger=Trigger.INGEST, contract=spec)
    digest = hashlib.sha256()
    read_error: OSError | None = None
    count = 0
    loop = asyncio.get_running_loop()
    with path.open("rb") as f, ThreadPoolExecutor(1, thread_name_prefix="ingest-read") as reader:
        framer = LineFramer()
        read = 0

        def prepare() -> tuple[list[bytes], set[int], bool, int]:
            """The next read, hashed, framed and screened for secrets (in the reader thread: see
            the module notes). Returns (lines, flagged lines, end of file, bytes read so far)."""
            nonlocal read
            chunk = f.read(CHUNK)
            if not chunk:
                lines = framer.finish()
                return lines, rec.screen_batch(lines), True, read
            read += len(chunk)
            digest.update(chunk)
            lines = framer.feed(chunk)
            return lines, rec.screen_batch(lines), False, read

        next_progress = PROGRESS_EVERY
        pending = loop.run_in_executor(reader, prepare)
        while True:
            try:
                lines, screened, eof, done = await pending
            except OSError as exc:  # the file, not the store
                read_error = exc
                break
            if not eof:  # read the next chunk while this one is stored
                pending = loop.run_in_executor(reader, prepare)
            count += await rec.feed_batch(lines, screened)
            if progress is not None and (eof or count >= next_progress):
                progress(done, count)
                next_progress = (count // PROGRESS_EVERY + 1) * PROGRESS_EVERY
            if eof:
                break
    if read_error is not None:
        await rec.finalize(status=SessionStatus.FAILED,
                           reason=f"ingest aborted: cannot read {shown}: {read_error.strerror}")
        raise IngestError(f"cannot read {shown}: {read_error.strerror}")
    await sessions.set_stream_sha256(db, rec.session_pk, digest.hexdigest())
    return await rec.finalize(), True
