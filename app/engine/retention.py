"""Retention: which sessions ``tierops prune`` and the server's daily prune delete, in what
batches, the space given back, and the report of what went.

Why: every session keeps its whole transcript forever otherwise, and a long-running installation's
database and ``sessions/`` folder only grow. What it deliberately does: a finished session older
than the cutoff (``TIEROPS_RETENTION_DAYS``, ``--keep-days``; 0 = never) goes, but sessions linked
by chain, parent or escalation go together or not at all (:func:`plan`), never a ``running`` one;
events and memories are kept, without their session. Deleting happens in short write
transactions whose line budget adapts to how long each took (:class:`_Pace`), with pauses that let
the server's own writes in; free pages then go back to the file system in small incremental-vacuum
steps. Folders and the claude CLI's leftovers: :mod:`app.engine.prune_files`; the SQL:
:mod:`app.store.retention`; the rules in full: ARCHITECTURE.md, "Retention".
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypedDict

from app.config import Settings
from app.engine.prune_files import FolderReport, TranscriptReport, remove_folders, sweep_cli_files
from app.store import retention
from app.store.db import Database, is_transient
from app.store.retention import PruneCounts, RetentionRow, SpaceInfo
from app.units import human_bytes

log = logging.getLogger(__name__)

__all__ = [
    "BATCH_LINES",
    "BATCH_SESSIONS",
    "PruneReport",
    "Unit",
    "cutoff_for",
    "describe",
    "plan",
    "prune",
    "prune_daily",
    "summary_line",
]

BATCH_SESSIONS = 50      # sessions per delete transaction
BATCH_LINES = 200        # stored lines in the first delete transaction (the bulk of what a delete touches)
MIN_LINES, MAX_LINES = 10, 20_000  # the range the line budget adapts in
TARGET_WRITE = 0.05      # seconds a delete transaction should hold the write lock
VACUUM_PAGES = 128       # pages per incremental-vacuum step: 2 MiB at 16 KiB pages, 5-30 ms measured
PAUSE = 0.02             # seconds between write transactions: lets another process's writer in
START_DELAY = 60.0       # the server's first prune, seconds after start (read at call time)
INTERVAL = 24 * 3600.0   # then once a day


class DeletedRows(TypedDict):
    activity: int
    output_attempts: int
    check_results: int
    cooldowns: int
    maintenance_windows: int  # ad-hoc windows that ended before the cutoff (no session of their own)


class KeptRows(TypedDict):
    events: int        # raised by pruned sessions: kept, now without a session
    memories: int      # taught or reinforced by pruned sessions: kept, without that provenance
    old_sessions: int  # older than the cutoff yet kept: running, or chained to a running or newer session


class SpaceReport(TypedDict):
    auto_vacuum: str          # the file's mode: incremental | none | full
    page_size: int
    free_pages: int           # free pages after deleting, before any vacuum
    pages_reclaimed: int      # given back to the file system
    bytes_reclaimed: int
    file_bytes_before: int    # the database file, before the prune (its -wal is reused, never shrunk)
    file_bytes_after: int
    vacuum: str | None        # what ran: incremental | full | None
    note: str | None


class PruneReport(TypedDict):
    dry_run: bool
    keep_days: int            # 0: retention is off, nothing was looked at
    cutoff: str | None        # sessions whose last moment is before this went
    sessions: int             # sessions deleted (dry run: that would be)
    chains: int               # of which chains (sets of linked sessions) of two or more
    session_ids: list[int]
    deleted: DeletedRows
    kept: KeptRows
    folders: FolderReport
    transcripts: TranscriptReport  # the claude CLI's own copies left behind (removed whatever keep_days)
    skipped: int              # sets that stopped being prunable while the prune ran, kept
    space: SpaceReport | None
    seconds: float


@dataclass
class Unit:
    """Sessions linked to each other (a chain, or one standalone session): pruned whole or not at all."""

    ids: list[int] = field(default_factory=list)
    lines: int = 0           # stored lines, as the sessions count them (batch sizing)
    newest: str = ""         # the latest last moment of a member
    running: bool = False


def cutoff_for(days: int, now: datetime | None = None) -> str:
    """``now`` minus ``days``, in the stored timestamp format (``2026-11-23T09:14:03.512Z``)."""
    now = now or datetime.now(UTC)
    try:
        when = now - timedelta(days=days)
    except OverflowError:  # a retention of millions of days: nothing is that old
        when = datetime.min.replace(tzinfo=UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def plan(rows: Iterable[RetentionRow], cutoff: str) -> tuple[list[Unit], int]:
    """The prunable units, oldest first, and how many sessions older than the cutoff are kept
    because their unit is not prunable (a running member, or a member newer than the cutoff)."""
    rows = list(rows)
    root: dict[int, int] = {r.id: r.id for r in rows}

    def find(x: int) -> int:
        while root[x] != x:
            root[x] = root[root[x]]
            x = root[x]
        return x

    for r in rows:
        for other in (r.chain_id, r.parent_session_id, r.escalated_to):
            if other is not None and other in root:
                a, b = find(r.id), find(other)
                if a != b:
                    root[max(a, b)] = min(a, b)
    units: dict[int, Unit] = {}
    for r in rows:  # oldest id first, so each unit's ids are sorted
        unit = units.setdefault(find(r.id), Unit())
        unit.ids.append(r.id)
        unit.lines += r.line_count
        unit.newest = max(unit.newest, r.last_at)
        unit.running = unit.running or r.running
    prunable = [u for u in units.values() if not u.running and u.newest < cutoff]
    old = {r.id for r in rows if r.last_at < cutoff}
    kept_old = sum(1 for u in units.values() if u.running or u.newest >= cutoff for i in u.ids if i in old)
    return sorted(prunable, key=lambda u: u.ids[0]), kept_old


class _Pace:
    """The line budget of one delete transaction, halved after a write that took much longer than
    :data:`TARGET_WRITE` and doubled after one that used its budget in much less."""

    def __init__(self) -> None:
        self.lines = max(MIN_LINES, min(MAX_LINES, BATCH_LINES))

    def took(self, seconds: float, lines: int) -> None:
        if seconds > TARGET_WRITE * 1.5:
            self.lines = max(MIN_LINES, self.lines // 2)
        elif seconds < TARGET_WRITE / 2 and lines >= self.lines // 2:
            self.lines = min(MAX_LINES, self.lines * 2)


def _next_batch(units: Sequence[Unit], start: int, budget: int) -> list[Unit]:
    """Units from ``start`` for one delete transaction: at least one, then as many as fit into
    :data:`BATCH_SESSIONS` sessions and ``budget`` lines."""
    batch = [units[start]]
    sessions, lines = len(units[start].ids), units[start].lines
    for unit in units[start + 1:]:
        if sessions + len(unit.ids) > BATCH_SESSIONS or lines + unit.lines > budget:
            break
        batch.append(unit)
        sessions += len(unit.ids)
        lines += unit.lines
    return batch


# -- the prune ---------------------------------------------------------------------------------

def _empty_report(days: int, cutoff: str | None, dry_run: bool) -> PruneReport:
    return {
        "dry_run": dry_run, "keep_days": days, "cutoff": cutoff, "sessions": 0, "chains": 0, "session_ids": [],
        "deleted": {"activity": 0, "output_attempts": 0, "check_results": 0, "cooldowns": 0,
                    "maintenance_windows": 0},
        "kept": {"events": 0, "memories": 0, "old_sessions": 0},
        "folders": {"removed": 0, "bytes": 0, "missing": 0, "errors": []},
        "transcripts": {"removed": 0, "bytes": 0, "errors": []},
        "skipped": 0, "space": None, "seconds": 0.0,
    }


def _add(report: PruneReport, ids: Sequence[int], counts: PruneCounts) -> None:
    report["sessions"] += counts["sessions"]
    report["chains"] += 1 if counts["sessions"] > 1 else 0
    report["session_ids"].extend(ids)
    for key in ("activity", "output_attempts", "check_results", "cooldowns"):
        report["deleted"][key] += counts[key]
    report["kept"]["events"] += counts["events"]
    report["kept"]["memories"] += counts["memories"]


async def prune(db: Database, settings: Settings, *, keep_days: int | None = None, dry_run: bool = False,
                vacuum: bool = False, now: datetime | None = None) -> PruneReport:
    """Delete finished sessions older than ``keep_days`` (default ``settings.retention_days``; 0 =
    nothing) with everything that belongs only to them, then give the space back.

    ``dry_run``: count what would go and change nothing. ``vacuum``: end with a full VACUUM
    (blocking; with the server stopped) instead of incremental steps.
    """
    started = time.monotonic()
    days = settings.retention_days if keep_days is None else keep_days
    transcripts = await sweep_cli_files(db, settings, dry_run=dry_run)
    if days <= 0:
        report = _empty_report(0, None, dry_run)
        report["transcripts"] = transcripts
        report["seconds"] = round(time.monotonic() - started, 3)
        return report
    cutoff = cutoff_for(days, now)
    report = _empty_report(days, cutoff, dry_run)
    report["transcripts"] = transcripts
    if not dry_run:  # pages still in the WAL are in the file's size only after a checkpoint
        await retention.checkpoint(db)
    before = await retention.space_info(db)
    units, report["kept"]["old_sessions"] = plan(await retention.retention_rows(db), cutoff)
    root = settings.state_dir / "sessions"

    if dry_run:
        ids = [i for u in units for i in u.ids]
        if ids:
            counts = await retention.count_rows(db, ids)
            _add(report, ids, counts)
            report["chains"] = sum(1 for u in units if len(u.ids) > 1)
            await asyncio.to_thread(remove_folders, root, ids, report["folders"], dry_run=True)
        report["deleted"]["maintenance_windows"] = await retention.delete_maintenance_windows(db, cutoff, dry_run=True)
        report["space"] = _space(before, before, before, None, dry_run=True, will_vacuum=vacuum)
    else:
        pace, done = _Pace(), 0
        while done < len(units):
            batch = _next_batch(units, done, pace.lines)
            done += len(batch)
            deleted = await _delete_batch(db, batch, cutoff, report, pace)
            if deleted:
                # an id taken again by a session started meanwhile (ids of the newest sessions are
                # reused once deleted) keeps its folder: it is the new session's
                taken = await retention.existing_sessions(db, deleted)
                gone = [i for i in deleted if i not in taken]
                await asyncio.to_thread(remove_folders, root, gone, report["folders"], dry_run=False)
            await asyncio.sleep(PAUSE)
        report["deleted"]["maintenance_windows"] = await retention.delete_maintenance_windows(db, cutoff)
        report["space"] = await _reclaim(db, before, full=vacuum)
    report["seconds"] = round(time.monotonic() - started, 3)
    return report


async def _delete_batch(db: Database, batch: list[Unit], cutoff: str, report: PruneReport,
                        pace: _Pace) -> list[int]:
    """Delete one batch (a big transcript first in chunks); returns the ids that went."""
    chunked = 0
    if len(batch) == 1 and batch[0].lines > pace.lines:
        while True:
            limit = pace.lines
            started = time.monotonic()
            n = await retention.delete_activity(db, batch[0].ids, cutoff, limit)
            if n is None:  # a new session points at it now: keep it (what went of its transcript, went)
                report["skipped"] += 1
                report["deleted"]["activity"] += chunked
                return []
            pace.took(time.monotonic() - started, n)
            chunked += n
            if n < limit:
                break
            await asyncio.sleep(PAUSE)
    started = time.monotonic()
    done = await retention.delete_sessions(db, [u.ids for u in batch], cutoff)
    pace.took(time.monotonic() - started, max(sum(u.lines for u in batch) - chunked, 0))
    report["deleted"]["activity"] += chunked
    report["skipped"] += len(batch) - len(done)
    ids: list[int] = []
    for unit_ids, counts in done:
        if counts["sessions"]:  # 0: another prune (the server's, or a second command) took them first
            _add(report, unit_ids, counts)
            ids.extend(unit_ids)
    return ids


async def _reclaim(db: Database, before: SpaceInfo, *, full: bool) -> SpaceReport:
    after_delete = await retention.space_info(db)
    ran: str | None = None
    if full:
        await retention.full_vacuum(db)
        ran = "full"
    elif after_delete.auto_vacuum == "incremental" and after_delete.free_pages:
        ran = "incremental"
        while await retention.incremental_vacuum(db, VACUUM_PAGES) > 0:
            await asyncio.sleep(PAUSE)
        await retention.checkpoint(db)
    final = await retention.space_info(db)
    return _space(before, after_delete, final, ran, dry_run=False, will_vacuum=full)


def _space(before: SpaceInfo, after_delete: SpaceInfo, final: SpaceInfo, ran: str | None, *, dry_run: bool,
           will_vacuum: bool) -> SpaceReport:
    reclaimed = max(after_delete.page_count - final.page_count, 0)
    note = None
    mode = after_delete.auto_vacuum
    if dry_run:
        note = ("a full VACUUM would rebuild the file afterwards (blocking)" if will_vacuum
                else "incremental vacuum would return the freed pages afterwards" if mode == "incremental"
                else _NONE_NOTE if mode == "none" else None)
    elif ran is None and mode == "none":
        note = _NONE_NOTE
    elif ran == "full":
        note = "full VACUUM done; the file now uses incremental auto-vacuum"
    return {
        "auto_vacuum": final.auto_vacuum, "page_size": final.page_size, "free_pages": after_delete.free_pages,
        "pages_reclaimed": reclaimed, "bytes_reclaimed": reclaimed * final.page_size,
        "file_bytes_before": before.file_bytes, "file_bytes_after": final.file_bytes, "vacuum": ran, "note": note,
    }


_NONE_NOTE = ("this database was created before incremental auto-vacuum: its free pages are reused "
              "by new rows, but the file does not shrink. To shrink it, stop the server and run "
              "`tierops prune --vacuum` (a full VACUUM: blocks every write while it runs and needs free disk "
              "space about the size of the database; later prunes then give space back by themselves)")


# -- what the report says ----------------------------------------------------------------------

def _n(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _memories(count: int) -> str:
    return "1 memory" if count == 1 else f"{count} memories"


def _transcripts(r: PruneReport) -> str:
    t = r["transcripts"]
    verb = "would remove" if r["dry_run"] else "removed"
    return f"{verb} {_n(t['removed'], 'file')} the claude CLI left behind ({human_bytes(t['bytes'])})"


def summary_line(r: PruneReport) -> str:
    """One line: what went and what was kept (the server logs this)."""
    if not r["keep_days"]:
        text = "retention is off (TIEROPS_RETENTION_DAYS=0): nothing pruned"
        return f"{text}; {_transcripts(r)}" if r["transcripts"]["removed"] else text
    verb = "would prune" if r["dry_run"] else "pruned"
    d, k, f = r["deleted"], r["kept"], r["folders"]
    text = (f"{verb} {_n(r['sessions'], 'session')} ({_n(r['chains'], 'chain')}) last active before "
            f"{r['cutoff']}: {_n(d['activity'], 'activity line')}, {_n(d['output_attempts'], 'output attempt')}, "
            f"{_n(d['check_results'], 'check result')}, {_n(d['cooldowns'], 'cooldown')}, "
            f"{_n(f['removed'], 'session folder')} ({human_bytes(f['bytes'])}); "
            f"kept {_n(k['events'], 'event')} and {_memories(k['memories'])}")
    if d["maintenance_windows"]:
        text += f"; {_n(d['maintenance_windows'], 'ended maintenance window')}"
    if r["transcripts"]["removed"]:
        text += f"; {_transcripts(r)}"
    if r["space"] and r["space"]["vacuum"]:
        text += f"; {human_bytes(r['space']['bytes_reclaimed'])} returned to the file system"
    return text


def describe(r: PruneReport) -> list[str]:
    """The report for a person, a few lines."""
    if not r["keep_days"]:
        off = ["retention is off (TIEROPS_RETENTION_DAYS=0, or --keep-days 0): nothing pruned"]
        extra = [f"  {_transcripts(r)}"] if r["transcripts"]["removed"] else []
        return off + extra + [f"  file not removed: {e}" for e in r["transcripts"]["errors"]]
    verb = "would prune" if r["dry_run"] else "pruned"
    d, k, f = r["deleted"], r["kept"], r["folders"]
    lines = [f"{verb} {_n(r['sessions'], 'session')} ({_n(r['chains'], 'chain')}) last active before "
             f"{r['cutoff']} (older than {_n(r['keep_days'], 'day')})"]
    if r["sessions"]:
        lines.append(f"  {'would delete' if r['dry_run'] else 'deleted'}: {_n(d['activity'], 'activity line')}, "
                     f"{_n(d['output_attempts'], 'output attempt')}, {_n(d['check_results'], 'check result')}, "
                     f"{_n(d['cooldowns'], 'cooldown')}, {_n(f['removed'], 'session folder')} "
                     f"({human_bytes(f['bytes'])})")
        lines.append(f"  kept: {_n(k['events'], 'event')} and {_memories(k['memories'])} of these sessions (now "
                     "without their session)")
    if d["maintenance_windows"]:
        lines.append(f"  {'would delete' if r['dry_run'] else 'deleted'} "
                     f"{_n(d['maintenance_windows'], 'maintenance window')} that ended before the cutoff")
    if k["old_sessions"]:
        lines.append(f"  kept {_n(k['old_sessions'], 'older session')}: running, or in a chain with a running or "
                     "newer session")
    if r["skipped"]:
        lines.append(f"  kept {_n(r['skipped'], 'chain')} that changed while pruning")
    lines.extend(f"  folder not removed: {e}" for e in f["errors"])
    if r["transcripts"]["removed"]:
        lines.append(f"  {_transcripts(r)}")
    lines.extend(f"  file not removed: {e}" for e in r["transcripts"]["errors"])
    s = r["space"]
    if s is not None:
        if s["vacuum"]:
            lines.append(f"  space: {_n(s['pages_reclaimed'], 'page')} ({human_bytes(s['bytes_reclaimed'])}) returned to the "
                         f"file system ({s['vacuum']} vacuum); database {human_bytes(s['file_bytes_before'])} -> "
                         f"{human_bytes(s['file_bytes_after'])}")
        elif s["free_pages"]:
            lines.append(f"  space: {_n(s['free_pages'], 'free page')} ({human_bytes(s['free_pages'] * s['page_size'])}) "
                         "inside the database")
        if s["note"]:
            lines.append(f"  note: {s['note']}")
    lines.append(f"  took {r['seconds']:.2f} s")
    return lines


# -- the server's daily prune ------------------------------------------------------------------

async def prune_daily(db: Database, settings: Settings, *, start_delay: float | None = None,
                      interval: float | None = None, leading: Callable[[], bool] | None = None) -> None:
    """Prune :data:`START_DELAY` seconds after the server starts, then every :data:`INTERVAL`.

    Never raises (a failed prune is logged and tried again the next day); returns only when
    cancelled (the server's shutdown).
    """
    await asyncio.sleep(START_DELAY if start_delay is None else start_delay)
    while True:
        if leading is not None and not leading():  # several nodes: the leader prunes
            await asyncio.sleep(60)
            continue
        try:
            report = await prune(db, settings)
        except Exception as exc:
            if is_transient(exc):  # locked by a long writer, a full disk: one line, tomorrow again
                log.warning("daily prune stopped by a storage error: %s: %s", type(exc).__name__, exc)
            else:
                log.exception("daily prune failed")
        else:
            log.info("daily prune: %s", summary_line(report))
            for error in report["folders"]["errors"]:
                log.warning("daily prune: folder not removed: %s", error)
        await asyncio.sleep(INTERVAL if interval is None else interval)
