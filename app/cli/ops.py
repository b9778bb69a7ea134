"""The commands that keep an installation healthy: ``prune`` and ``backup``.

Why here and not in ``records``: neither stores nor lists sessions; both look after the state
directory as a whole. Both refuse to create a database where there is none
(:func:`~app.cli.base.require_database`): pruning or copying an empty file would only hide a
wrong ``--home``.

* ``prune`` deletes finished sessions older than the retention (``TIEROPS_RETENTION_DAYS`` or
  ``--keep-days``) with their transcripts, attempts and folders, keeps events and memories, and
  gives the space back; the rules are in ``app/engine/retention.py``. The server runs the same
  prune once a day.
* ``backup`` copies the live database with SQLite's online backup API
  (``app/store/backup.py``), safe while the server writes.
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import asdict
from pathlib import Path

import click

from app.cli.base import (
    echo,
    emit_json,
    fail,
    json_option,
    load_settings,
    main,
    open_store,
    require_database,
    run_async,
    state_options,
)
from app.engine.retention import PruneReport, describe
from app.engine.retention import prune as prune_sessions
from app.store.backup import BackupResult, backup_database
from app.store.pg import safe_url
from app.units import human_bytes

log = logging.getLogger(__name__)

RESTORE = ("to restore: stop the server, replace {db} with the backup, delete {db}-wal and {db}-shm if they "
           "exist, start the server (migrations run at start)")


@main.command()
@state_options
@click.option("--keep-days", type=click.IntRange(min=0), metavar="N",
              help="Delete finished sessions last active more than N days ago "
                   "(default: $TIEROPS_RETENTION_DAYS, 30; 0 deletes nothing).")
@click.option("--dry-run", is_flag=True, help="Only report what would be deleted; change nothing.")
@click.option("--vacuum", is_flag=True,
              help="Then rebuild the database file with a full VACUUM, which blocks every write while it runs: "
                   "stop the server first. Needed once to shrink a database created before incremental "
                   "auto-vacuum (the report says so).")
@json_option
def prune(home: str | None, db: str | None, keep_days: int | None, dry_run: bool, vacuum: bool,
          as_json: bool) -> None:
    """Delete finished sessions older than the retention, with their transcripts and folders.

    A session goes when it is not running and its end is older than N days; an escalation chain
    goes whole, once every session in it qualifies. Its stored stream lines, output attempts,
    check results, cooldowns and its folder HOME/sessions/ID go with it; its events and memories
    are kept. Then free space is returned to the file system in small steps, so a running
    server's writes are never held up for long. The server prunes like this once a day.
    """
    settings = load_settings(home=home, db=db)
    require_database(settings)

    async def go() -> PruneReport:
        async with await open_store(settings) as store:
            return await prune_sessions(store, settings, keep_days=keep_days, dry_run=dry_run, vacuum=vacuum)

    report: PruneReport = run_async(go)
    if as_json:
        emit_json(report)
    else:
        for line in describe(report):
            echo(line)


@main.command()
@click.argument("file", metavar="FILE")
@state_options
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@json_option
def backup(file: str, home: str | None, db: str | None, force: bool, as_json: bool) -> None:
    """Copy the live database to FILE: a consistent snapshot, safe while the server writes.

    Uses SQLite's online backup API (never a plain file copy, which can catch pages mid-write and
    misses the -wal file), checks the copy with PRAGMA integrity_check and only then gives it the
    name FILE. Refuses to replace an existing FILE without --force.

    To restore: stop the server, replace HOME/tierops.db with the backup, delete tierops.db-wal
    and tierops.db-shm if they exist, start the server (migrations run at start).
    """
    settings = load_settings(home=home, db=db)
    if not isinstance(settings.database_target, Path):
        fail("the database is PostgreSQL: back it up with its own tool, a consistent snapshot while the servers "
             f"write: pg_dump --format=custom --file {shlex.quote(file)} '{safe_url(settings.database_target)}' "
             "(the password from PGPASSWORD or ~/.pgpass); restore with pg_restore --clean --dbname URL FILE, "
             "servers stopped")
    require_database(settings)

    async def go() -> BackupResult:
        return await backup_database(settings.db_path, Path(file), overwrite=force)

    result: BackupResult = run_async(go)
    if as_json:
        emit_json({**asdict(result), "path": str(result.path), "source": str(result.source)})
        return
    sessions = f", {result.sessions} sessions" if result.sessions is not None else ""
    echo(f"backed up {result.source} to {result.path}: {human_bytes(result.bytes)} ({result.pages} pages of "
         f"{result.page_size} bytes){sessions}, integrity {result.integrity}, {result.seconds:.2f} s")
    echo(RESTORE.format(db=result.source))
