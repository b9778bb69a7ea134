"""The store's SQL, as PostgreSQL reads it: one translation of the SQLite statements the store writes.

Why a translation instead of two sets of statements: the store's ~300 statements are SQLite's, and
nearly all of them mean the same in PostgreSQL once a few spellings change. Rewriting each for two
dialects would double every statement and let them drift; this module changes only spellings,
outside string literals, quoted identifiers and comments:

* parameters: ``?`` → ``%s``, ``:name`` → ``%(name)s`` (psycopg's), every ``%`` → ``%%`` (literals
  too: psycopg reads the whole statement);
* ``ifnull`` → ``coalesce``, ``instr`` → ``strpos``, the scalar ``max(a, b)``/``min(a, b)`` →
  ``greatest``/``least`` (one argument: the aggregate, unchanged), ``sum(a = b)`` → ``sum(CASE WHEN
  a = b THEN 1 ELSE 0 END)``, ``LIKE`` → ``ILIKE`` (SQLite's
  LIKE ignores ASCII case), ``group_concat`` → ``string_agg``, ``CAST(… AS REAL)`` → double;
* ``INSERT OR IGNORE`` → ``INSERT … ON CONFLICT DO NOTHING``; ``IS ?``/``IS NOT ?`` → ``IS [NOT]
  DISTINCT FROM``; ``json_group_array(x)`` → ``json_agg(x)::text`` (``'[]'`` when empty, as SQLite);
* the ``strftime('%Y-%m-%dT%H:%M:%fZ','now')`` timestamp → the same text from ``now()``.

Anything SQLite-only beyond these (``PRAGMA``, ``json_each``, ``typeof``) is written per dialect
where it is used (``Database.dialect``). Migrations' DDL: :func:`ddl` (``INTEGER PRIMARY KEY`` →
an identity column, ``INTEGER`` → ``BIGINT``, ``REAL`` → ``DOUBLE PRECISION``). Translations are
cached by statement text.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable

log = logging.getLogger(__name__)

__all__ = ["NOW_TEXT_PG", "ddl", "translate"]

SQLITE_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ','now')"
NOW_TEXT_PG = "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

_WORDS = {"ifnull": "coalesce", "instr": "strpos", "group_concat": "string_agg"}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _segments(sql: str) -> list[tuple[bool, str]]:
    """``sql`` cut into (is_code, text): code, or a literal, a quoted identifier or a comment."""
    out: list[tuple[bool, str]] = []
    i, start, n = 0, 0, len(sql)
    while i < n:
        ch = sql[i]
        end = -1
        if ch in ("'", '"'):
            end = i + 1
            while end < n:
                if sql[end] == ch:
                    if end + 1 < n and sql[end + 1] == ch:
                        end += 2
                        continue
                    break
                end += 1
            end = min(end + 1, n)
        elif ch == "-" and sql.startswith("--", i):
            nl = sql.find("\n", i)
            end = n if nl < 0 else nl
        if end < 0:
            i += 1
            continue
        if i > start:
            out.append((True, sql[start:i]))
        out.append((False, sql[i:end]))
        i = start = end
    if start < n:
        out.append((True, sql[start:]))
    return out


def _params(code: str) -> str:
    out = []
    i, n = 0, len(code)
    while i < n:
        ch = code[i]
        if ch == "?":
            out.append("%s")
        elif ch == "%":
            out.append("%%")
        elif ch == ":" and i + 1 < n and code[i + 1] == ":":
            out.append("::")
            i += 2
            continue
        elif ch == ":" and (m := _IDENT.match(code, i + 1)) and (i == 0 or code[i - 1] != ":"):
            out.append(f"%({m.group(0)})s")
            i = m.end()
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


_CONDITION = re.compile(r"(!=|<>|<=|>=|=|<|>|\bIS\b|\bAND\b|\bOR\b|\bNOT\b|\bI?LIKE\b|\bIN\b)", re.IGNORECASE)


def _top_level(inner: str) -> str:
    """``inner`` with every parenthesised part blanked (what is at its top level)."""
    out, depth = [], 0
    for c in inner:
        depth += c == "("
        out.append(c if depth == 0 else " ")
        depth -= c == ")" and depth > 0
    return "".join(out)


def _aggregates(sql: str) -> str:
    """``max(a, b)`` → ``greatest(a, b)`` (min → least): SQLite's scalar forms. ``sum(a = b)`` (and
    max, min of a condition) → ``sum(CASE WHEN a = b THEN 1 ELSE 0 END)``: SQLite counts a true
    condition as 1, PostgreSQL sums no boolean."""
    out, i = [], 0
    pattern = re.compile(r"\b(max|min|sum)\s*\(", re.IGNORECASE)
    while (m := pattern.search(sql, i)) is not None:
        depth, j, commas = 1, m.end(), 0
        while j < len(sql) and depth:
            c = sql[j]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            elif c == "," and depth == 1:
                commas += 1
            j += 1
        out.append(sql[i:m.start()])
        name, inner = m.group(1).lower(), sql[m.end():j - 1]
        if commas and name in ("max", "min"):
            out.append("greatest(" if name == "max" else "least(")
            i = m.end()
        elif not commas and _CONDITION.search(_top_level(inner)):
            out.append(f"{name}(CASE WHEN {_aggregates(inner)} THEN 1 ELSE 0 END)")
            i = j
        else:
            out.append(sql[m.start():m.end()])
            i = m.end()
    out.append(sql[i:])
    return "".join(out)


def _json_text(sql: str) -> str:
    """``json_group_array(x)`` → ``json_agg(x)::text`` (SQLite's gives JSON text; so does this), and
    ``json_each(x)`` → the elements of the JSON array ``x`` as a ``value`` column of integers (the
    store passes id lists that way: one parameter, whatever their number)."""
    makers: tuple[tuple[str, Callable[[str, int], str]], ...] = (("\0JSONAGG\0(", lambda arg, n: f"coalesce(json_agg({arg})::text, '[]')"),
                         ("\0JSONEACH\0(", lambda arg, n: f"(SELECT je{n}.value::bigint AS value FROM "  # noqa: S608
                                                           f"json_array_elements_text(({arg})::json) AS je{n}(value))"
                                                           f" AS je{n}"))
    for marker, make in makers:
        n = 0
        while (start := sql.find(marker)) >= 0:
            depth, j = 1, start + len(marker)
            while j < len(sql) and depth:
                depth += {"(": 1, ")": -1}.get(sql[j], 0)
                j += 1
            n += 1
            sql = f"{sql[:start]}{make(sql[start + len(marker):j - 1], n)}{sql[j:]}"
    return sql


@functools.lru_cache(maxsize=4096)
def translate(sql: str) -> str:
    """One SQLite statement (or script) as PostgreSQL reads it, with psycopg's parameters."""
    sql = sql.replace(SQLITE_NOW, "\0NOW\0")
    ignore = re.search(r"\bINSERT\s+OR\s+IGNORE\s+INTO\b", sql, re.IGNORECASE) is not None
    parts = []
    for is_code, text in _segments(sql):
        if not is_code:
            parts.append(text.replace("%", "%%"))  # psycopg reads every % of a statement with parameters
            continue
        text = re.sub(r"\bINSERT\s+OR\s+IGNORE\s+INTO\b", "INSERT INTO", text, flags=re.IGNORECASE)
        text = re.sub(r"\b(ifnull|instr|group_concat)\s*\(", lambda m: _WORDS[m.group(1).lower()] + "(", text,
                      flags=re.IGNORECASE)
        text = re.sub(r"(?<!I)\bLIKE\b", "ILIKE", text)
        text = re.sub(r"\bAS\s+REAL\b", "AS DOUBLE PRECISION", text, flags=re.IGNORECASE)
        # SQLite's IS compares any two values; PostgreSQL's takes only NULL, TRUE, FALSE after it
        text = re.sub(r"\bIS\s+NOT\s+\?", "IS DISTINCT FROM ?", text, flags=re.IGNORECASE)
        text = re.sub(r"\bIS\s+\?", "IS NOT DISTINCT FROM ?", text, flags=re.IGNORECASE)
        text = re.sub(r"\bWHEN\s+\?\s+THEN\b", "WHEN ? <> 0 THEN", text, flags=re.IGNORECASE)  # a flag: 0/1
        # SQLite's ``x IN t`` (a table or CTE name) is PostgreSQL's ``x IN (SELECT * FROM t)``
        text = re.sub(r"\bIN\s+([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*\()",
                      lambda m: m.group(0) if m.group(1).upper() in ("SELECT", "NULL") else
                      f"IN (SELECT * FROM {m.group(1)})", text)  # noqa: S608 (a name already in the SQL)
        text = re.sub(r"\bjson_group_array\s*\(", "\0JSONAGG\0(", text, flags=re.IGNORECASE)
        text = re.sub(r"\bjson_each\s*\(", "\0JSONEACH\0(", text, flags=re.IGNORECASE)
        parts.append(_params(text))
    out = _json_text(_aggregates("".join(parts))).replace("\0NOW\0", NOW_TEXT_PG)
    if ignore:
        body = out.rstrip().rstrip(";")
        returning = re.search(r"\bRETURNING\b", body, re.IGNORECASE)
        out = (f"{body[:returning.start()]}ON CONFLICT DO NOTHING {body[returning.start():]}" if returning
               else f"{body} ON CONFLICT DO NOTHING")
    return out


@functools.lru_cache(maxsize=256)
def ddl(script: str) -> str:
    """A migration's script for PostgreSQL (types and the timestamp default), then :func:`translate`."""
    parts = []
    for is_code, text in _segments(script):
        if is_code:
            text = re.sub(r"\bINTEGER\s+PRIMARY\s+KEY\b", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", text,
                          flags=re.IGNORECASE)
            text = re.sub(r"\bINTEGER\b(?!\s+GENERATED)", "BIGINT", text)
            text = re.sub(r"\bREAL\b", "DOUBLE PRECISION", text)
            text = re.sub(r"\bBLOB\b", "BYTEA", text)
        parts.append(text)
    return translate("".join(parts)).replace("%%", "%")
