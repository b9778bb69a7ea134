"""The vocabulary (app/vocab.py) and everything that spells it out again must agree.

Shipped migrations are never edited, so their ``CHECK (x IN (...))`` lists are compared with the
enums here instead: a new status must come with a migration, and this test says so.
"""

from __future__ import annotations

import re

import pytest

from app.output import contract
from app.vocab import MODEL_TIERS, TIERS, Level, ServiceStatus, SessionStatus, Source, values


def _check_list(table_sql: str, column: str) -> tuple[str, ...]:
    match = re.search(rf"\b{column}\b[^,]*?CHECK \({column} IN \(([^)]*)\)\)", table_sql, re.S)
    assert match, f"no CHECK on {column}"
    return tuple(part.strip().strip("'") for part in match.group(1).split(","))


async def _table_sql(db, table: str) -> str:
    return await db.fetchval("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))


@pytest.mark.parametrize("table, column, enum", [
    ("sessions", "status", SessionStatus),
    ("sessions", "source", Source),
    ("events", "level", Level),
])
async def test_migration_checks_match_the_enums(db, table, column, enum):
    assert set(_check_list(await _table_sql(db, table), column)) == set(values(enum))


def test_the_agent_contract_uses_the_same_words():
    assert set(contract.Level.__args__) == set(values(Level))
    assert set(contract.ServiceStatus.__args__) == set(values(ServiceStatus))


def test_the_output_schema_uses_the_same_words():
    import json

    from app.paths import DEFAULT_SCHEMA_PATH

    schema = json.loads(DEFAULT_SCHEMA_PATH.read_text())
    text = json.dumps(schema)
    for word in (*values(Level), *values(ServiceStatus)):
        assert f'"{word}"' in text


def test_members_are_their_strings():
    assert SessionStatus.RUNNING == "running" and f"{SessionStatus.FAILED}" == "failed"
    assert TIERS == (0, 1, 2, 3) and MODEL_TIERS == (1, 2, 3)
