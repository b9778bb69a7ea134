"""``tierops schemas list|add|show|rm|check`` (the named output schema registry) and
``tierops revalidate`` (output contracts).

Stored schemas are immutable (a change is a new name) and every schema passes the same gate as
an inline one (:func:`app.engine.contracts.check_schema`: meta-schema, object root, local
``$ref``\\ s, size, and what the pinned CLI silently drops) before it is stored. ``check`` runs
that gate alone on a file and changes nothing; it needs no database.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import date
from pathlib import Path
from typing import Any

import click

from app.cli.base import (
    echo,
    emit_json,
    fail,
    json_option,
    load_settings,
    load_validator,
    main,
    open_store,
    require_database,
    run_async,
    shown,
    state_options,
)
from app.engine.contracts import ContractError, check_schema
from app.engine.revalidate import RevalidationReport
from app.engine.revalidate import revalidate as revalidate_outputs
from app.store import schemas as schema_store
from app.store.rows import SchemaRow
from app.web.limits import SCHEMA_NAME_PATTERN  # the API's rule, one definition

log = logging.getLogger(__name__)


def read_schema_file(path: str) -> Any:
    """The JSON in ``path`` (``-``: stdin), or one error line and exit 2."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        fail(f"schema file not found: {path}")
    except IsADirectoryError:
        fail(f"{path} is a directory, not a schema file")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read schema file {path}: {getattr(exc, 'strerror', None) or exc}")
    try:
        return json.loads(text)
    except RecursionError:
        fail(f"schema file {path} is nested too deeply to parse")
    except ValueError as exc:
        fail(f"schema file {path} is not valid JSON: {exc}")


@main.group()
def schemas() -> None:
    """The named output schemas a run can ask for (--schema-name, output_schema_name)."""


@schemas.command("list")
@state_options
@json_option
def list_(home: str | None, db: str | None, as_json: bool) -> None:
    """Every stored schema, by name."""
    settings = load_settings(home=home, db=db)
    require_database(settings)

    async def go() -> list[SchemaRow]:
        async with await open_store(settings) as store:
            return await schema_store.list_schemas(store)

    rows: list[SchemaRow] = run_async(go)
    if as_json:
        emit_json(rows)
    elif not rows:
        echo("no schemas stored")
    for row in [] if as_json else rows:
        desc = f"  {shown(row['description'])}" if row["description"] else ""
        echo(f"{row['name']}  sha256 {row['sha256'][:12]}  used by {row['used_by']} session(s)  "
             f"{row['created_at']}{desc}")


@schemas.command()
@click.argument("file", metavar="FILE")
@click.option("--name", "name", required=True, help="The name runs will use (letters, digits, . _ -).")
@click.option("--description", help="What the schema is for.")
@state_options
@json_option
def add(file: str, name: str, description: str | None, home: str | None, db: str | None, as_json: bool) -> None:
    """Check FILE (a JSON Schema) and store it under --name; refused if the name exists."""
    if not re.match(SCHEMA_NAME_PATTERN, name):
        fail(f"--name {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
    settings = load_settings(home=home, db=db)
    schema = read_schema_file(file)
    try:
        check_schema(schema, settings, what=file)
    except ContractError as exc:
        fail(str(exc))

    async def go() -> SchemaRow:
        async with await open_store(settings) as store:
            return await schema_store.create_schema(store, name=name, schema=schema, description=description)

    row: SchemaRow = run_async(go)
    if as_json:
        emit_json(row)
    else:
        echo(f"stored schema {row['name']} (sha256 {row['sha256']})")


@schemas.command()
@click.argument("name")
@state_options
def show(name: str, home: str | None, db: str | None) -> None:
    """Print the stored schema NAME as JSON (its description and hash on stderr)."""
    settings = load_settings(home=home, db=db)
    require_database(settings)

    async def go() -> SchemaRow | None:
        async with await open_store(settings) as store:
            return await schema_store.get_schema(store, name)

    row: SchemaRow | None = run_async(go)
    if row is None:
        fail(f"no schema named {name!r}; see `tierops schemas list`")
    echo(f"# {row['name']}: sha256 {row['sha256']}, used by {row['used_by']} session(s)"
         + (f" — {shown(row['description'])}" if row["description"] else ""), err=True)
    emit_json(row["body"])


@schemas.command()
@click.argument("name")
@state_options
def rm(name: str, home: str | None, db: str | None) -> None:
    """Forget the name NAME (sessions that ran with it keep their copy of the schema)."""
    settings = load_settings(home=home, db=db)
    require_database(settings)

    async def go() -> bool:
        async with await open_store(settings) as store:
            return await schema_store.delete_schema(store, name)

    if not run_async(go):
        fail(f"no schema named {name!r}; see `tierops schemas list`")
    echo(f"removed schema {name}")


@schemas.command()
@click.argument("file", metavar="FILE")
@json_option
def check(file: str, as_json: bool) -> None:
    """Run the preflight on FILE alone: exit 0 if a run could use it, else 2 with each problem."""
    settings = load_settings()
    schema = read_schema_file(file)
    try:
        check_schema(schema, settings, what=file)
    except ContractError as exc:
        if as_json:
            emit_json({"ok": False, "problems": exc.problems or [{"path": "$", "rule": "schema", "message": str(exc)}]})
            sys.exit(2)
        for problem in exc.problems or [{"path": "$", "rule": "schema", "message": str(exc)}]:
            echo(f"{file}: {problem['path']}: {problem['message']} [{problem['rule']}]", err=True)
        sys.exit(2)
    if as_json:
        emit_json({"ok": True, "problems": []})
    else:
        echo(f"{file}: ok")


@main.command()
@click.option("--schema-name", metavar="NAME", help="Check against this stored schema.")
@click.option("--schema", "schema_file", metavar="FILE", help="Check against this schema file.")
@click.option("--since", metavar="DATE", help="Only sessions started at or after DATE (e.g. 2026-11-01).")
@state_options
@json_option
def revalidate(schema_name: str | None, schema_file: str | None, since: str | None, home: str | None,
               db: str | None, as_json: bool) -> None:
    """Re-check stored outputs against a schema (default: each session's own) and report which
    would fail now. Changes nothing."""
    if schema_name and schema_file:
        fail("give --schema-name or --schema, not both")
    if since is not None:
        try:
            date.fromisoformat(since[:10])
        except ValueError:
            fail(f"--since {since!r}: give a date like 2026-11-01 (or a full ISO time)")
    settings = load_settings(home=home, db=db)
    require_database(settings)
    inline = read_schema_file(schema_file) if schema_file else None
    default = load_validator(settings.schema_file)

    async def go() -> RevalidationReport:
        async with await open_store(settings) as store:
            schema = inline
            if schema_name:
                row = await schema_store.get_schema(store, schema_name)
                if row is None:
                    fail(f"no schema named {schema_name!r}; see `tierops schemas list`")
                schema = row["body"]
            if schema is not None:
                check_schema(schema, settings, what=schema_file or f"schema {schema_name!r}")
            return await revalidate_outputs(store, default, schema=schema, since=since)

    report: RevalidationReport = run_async(go)
    if as_json:
        emit_json(report)
        return
    echo(f"checked {report['checked']} stored output(s) against {report['schema']} schema: "
         f"{report['now_failing']} fail now ({report['newly_failing']} passed when recorded), "
         f"{report['newly_passing']} failed then and pass now")
    for s in report["sessions"]:
        first = s["errors"][0] if s["errors"] else None
        why = f"{shown(first['path'])}: {shown(first['message'])}" if first else "valid now"
        more = f" (+{len(s['errors']) - 1} more)" if len(s["errors"]) > 1 else ""
        echo(f"  session {s['id']} ({s['started_at']}): was {_verdict(s['was_valid'])}, now "
             f"{_verdict(s['now_valid'])} — {why}{more}")


def _verdict(valid: bool | None) -> str:
    return "n/a" if valid is None else ("valid" if valid else "invalid")
