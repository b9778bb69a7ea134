"""app/store/rows.py: row decoding and the WHERE builder every list query uses."""

from __future__ import annotations

import sqlite3

from app.store.rows import decode, dumps, where


def _row(**values):
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    cols = ", ".join(f"? AS {k}" for k in values)
    return conn.execute(f"SELECT {cols}", tuple(values.values())).fetchone()


def test_where_skips_none_and_empty_and_keeps_zero_and_false():
    assert where(status=None, service="") == ("", [])
    assert where(status="failed", tier=0, active=False) == (" WHERE status = ? AND tier = ? AND active = ?",
                                                            ["failed", 0, 0])
    assert where(e__level="info") == (" WHERE e.level = ?", ["info"])


def test_decode_turns_json_columns_and_flags_into_values():
    row = decode(_row(notes='["a"]', degraded=1, is_error=None, summary='["not json column"]'))
    assert row == {"notes": ["a"], "degraded": True, "is_error": None, "summary": '["not json column"]'}


def test_decode_keeps_undecodable_json_as_text():
    assert decode(_row(notes="{broken"))["notes"] == "{broken"


def test_dumps_is_compact_and_keeps_non_ascii():
    assert dumps({"a": ["é", 1]}) == '{"a":["é",1]}'
