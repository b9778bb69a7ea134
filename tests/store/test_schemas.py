"""``app/store/schemas.py``: the named output schema registry, on a real SQLite file."""

from __future__ import annotations

import pytest

from app.output.spec import OutputSpec, canonical_json, schema_sha256
from app.output.validate import OutputValidator
from app.store import schemas, sessions

SCHEMA = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}


async def test_create_get_list_delete(db):
    row = await schemas.create_schema(db, name="health-v1", schema=SCHEMA, description="a yes/no answer")
    assert row["name"] == "health-v1" and row["body"] == SCHEMA and row["description"] == "a yes/no answer"
    assert row["sha256"] == schema_sha256(SCHEMA) and row["used_by"] == 0
    assert await schemas.get_schema(db, "health-v1") == row
    await schemas.create_schema(db, name="a-first", schema={"type": "object"})
    assert [r["name"] for r in await schemas.list_schemas(db)] == ["a-first", "health-v1"]
    assert await schemas.delete_schema(db, "health-v1") is True
    assert await schemas.delete_schema(db, "health-v1") is False
    assert await schemas.get_schema(db, "health-v1") is None


async def test_a_name_is_taken_once_and_the_schema_never_changes(db):
    await schemas.create_schema(db, name="x", schema=SCHEMA)
    with pytest.raises(schemas.SchemaExists, match="already exists; stored schemas never change"):
        await schemas.create_schema(db, name="x", schema={"type": "object"})
    assert (await schemas.get_schema(db, "x"))["body"] == SCHEMA


async def test_the_hash_is_of_canonical_json_whatever_the_key_order(db):
    a = await schemas.create_schema(db, name="a", schema={"type": "object", "properties": {"b": {}, "a": {}}})
    b = await schemas.create_schema(db, name="b", schema={"properties": {"a": {}, "b": {}}, "type": "object"})
    assert a["sha256"] == b["sha256"]
    assert canonical_json(a["body"]) == '{"properties":{"a":{},"b":{}},"type":"object"}'


async def test_sessions_keep_their_schema_after_the_name_is_deleted(db):
    row = await schemas.create_schema(db, name="keep", schema=SCHEMA)
    spec = OutputSpec(validator=OutputValidator(SCHEMA), source="named", name="keep")
    pk = await sessions.create_session(db, tier=1, trigger="manual", contract=spec)
    assert (await schemas.get_schema(db, "keep"))["used_by"] == 1
    await schemas.delete_schema(db, "keep")
    stored = await sessions.get_session(db, pk)
    assert (stored["schema_source"], stored["schema_name"], stored["schema_sha256"]) == (
        "named", "keep", row["sha256"])
    assert stored["output_schema"] == SCHEMA and stored["output_mode"] == "native"
