"""``tierops db copy SRC DST``: move a whole TierOps database between SQLite and PostgreSQL.

Why a command of its own: a team that outgrows one box moves its history to PostgreSQL (and can
move it back). Each end is a ``sqlite:///PATH`` URL, a file path or a ``postgresql://`` URL; both
are opened as TierOps opens them (migrations run, so a SQLite file of an older version is brought
up to date first). A destination holding rows is refused unless ``--force`` (then everything in
it is replaced). The copy is one transaction on the destination, verified table by table: row
counts and a SHA-256 of the rows in key order, read back from both ends (``app/store/copy.py``).
Stop the servers using either database while it runs. URLs are shown without their password.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from app.cli.base import echo, emit_json, fail, json_option, main, run_async
from app.config import POSTGRES_SCHEMES
from app.store.backends import open_database
from app.store.copy import CopyRefused, CopyReport, copy_database
from app.store.db import Database, StoreError
from app.store.pg import safe_url

log = logging.getLogger(__name__)


def _target(text: str, *, source: bool) -> str | Path:
    if text.startswith(POSTGRES_SCHEMES):
        return text
    if text.startswith("sqlite:///"):
        path = Path("/" + text.removeprefix("sqlite:///").lstrip("/"))
    elif "://" in text:
        fail(f"{text.split('://', 1)[0]}://… is not a database TierOps opens: give a file path, sqlite:///PATH or "
             "postgresql://USER:PASSWORD@HOST:PORT/DATABASE")
    else:
        path = Path(text).expanduser().resolve()
    if source and not path.is_file():
        fail(f"no database at {path}: the source must exist")
    return path


def _shown(target: str | Path) -> str:
    return safe_url(target) if isinstance(target, str) else str(target)


@main.group()
def db() -> None:
    """The database as a whole: copy it between SQLite and PostgreSQL."""


@db.command("copy")
@click.argument("src", metavar="SRC")
@click.argument("dst", metavar="DST")
@click.option("--force", is_flag=True, help="Replace everything in a destination that holds rows.")
@json_option
def copy(src: str, dst: str, force: bool, as_json: bool) -> None:
    """Copy every row of SRC into DST and verify it (row counts, a checksum per table).

    SRC and DST: a file path or sqlite:///PATH (SQLite), or postgresql://USER:PASSWORD@HOST/DB.
    """
    source, destination = _target(src, source=True), _target(dst, source=False)
    if _shown(source) == _shown(destination):
        fail("SRC and DST are the same database")

    async def go() -> CopyReport:
        opened: list[Database] = []
        try:
            for target in (source, destination):
                opened.append(await open_database(target, readers=1))  # noqa: PERF401 (each closed if the next fails)
            return await copy_database(opened[0], opened[1], force=force,
                                       progress=None if as_json else lambda t, n: echo(f"  {t}: {n} rows"))
        except CopyRefused as exc:
            fail(str(exc))
        except StoreError as exc:
            fail(str(exc))
        finally:
            for store in opened:
                await store.close()

    report: CopyReport = run_async(go)
    if as_json:
        emit_json({"source": _shown(source), "destination": _shown(destination), "rows": report.rows,
                   "verified": report.verified,
                   "tables": [{"name": t.name, "rows": t.rows, "sha256": t.source_sha256, "verified": t.verified}
                              for t in report.tables]})
    else:
        bad = [t.name for t in report.tables if not t.verified]
        echo(f"copied {report.rows} rows in {len(report.tables)} tables from {_shown(source)} to "
             f"{_shown(destination)}: " + ("verified (row counts and a SHA-256 per table match)" if not bad
                                          else f"MISMATCH in {', '.join(bad)}"))
    if not report.verified:
        raise SystemExit(1)
