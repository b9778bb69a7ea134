"""Output contracts in the engine: which contract a run gets (``contracts.resolve_spec``) and
``revalidate`` over stored outputs, on a real SQLite file with real captures ingested."""

from __future__ import annotations

import pytest

from app.engine.contracts import ContractError, check_schema, resolve_spec
from app.engine.ingest import ingest_path
from app.engine.revalidate import revalidate
from app.output.spec import AGENT_RESPONSE_SHA256, schema_sha256
from app.store import schemas
from tests.helpers import fixture_stream

VERDICT = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}


async def test_inline_beats_named_beats_default(db, validator, settings):
    await schemas.create_schema(db, name="verdict", schema=VERDICT)
    default = await resolve_spec(db, validator, settings)
    assert (default.source, default.name, default.sha256, default.routed) == ("default", None, AGENT_RESPONSE_SHA256,
                                                                             True)
    named = await resolve_spec(db, validator, settings, name="verdict")
    assert (named.source, named.name, named.sha256, named.routed) == ("named", "verdict", schema_sha256(VERDICT),
                                                                     False)
    inline = await resolve_spec(db, validator, settings, inline={"type": "object"}, name="verdict")
    assert inline.source == "inline" and inline.schema == {"type": "object"}
    assert (await resolve_spec(db, validator, settings, mode="prompted", max_retries=0)).mode == "prompted"
    assert (await resolve_spec(db, validator, settings)).mode == settings.output_mode == "native"


async def test_the_agent_response_schema_under_another_name_is_still_routed(db, validator, settings):
    await schemas.create_schema(db, name="copy", schema=validator.schema)
    assert (await resolve_spec(db, validator, settings, name="copy")).routed is True


async def test_refusals_say_what_and_where(db, validator, settings):
    with pytest.raises(ContractError, match="no schema named 'nope'"):
        await resolve_spec(db, validator, settings, name="nope")
    with pytest.raises(ContractError) as info:
        await resolve_spec(db, validator, settings, inline={"type": "object", "properties": {"a": {"type": 5}}})
    assert any(p["path"].startswith("$.properties.a") for p in info.value.problems), info.value.problems
    with pytest.raises(ContractError):
        check_schema(["not", "an", "object"], settings)
    big = {"type": "object", "description": "x" * (settings.schema_max_bytes + 1)}
    with pytest.raises(ContractError) as info:
        check_schema(big, settings)
    assert info.value.problems and info.value.problems[0]["path"] == "$"


async def test_revalidate_reports_what_would_fail_now_and_changes_nothing(db, validator, settings):
    for scenario in ("c_structured", "d_invalid_structured", "d_text_only"):
        await ingest_path(db, fixture_stream(scenario), validator, settings)
    own = await revalidate(db, validator)
    assert own["schema"] == "each session's own" and own["checked"] == 2  # d_text_only gave no output
    assert own["now_failing"] == 1 and own["newly_failing"] == 0 and own["newly_passing"] == 0
    stricter = {**validator.schema, "required": [*validator.schema["required"], "incidents"]}
    report = await revalidate(db, validator, schema=stricter)
    assert report["now_failing"] == 2 and report["newly_failing"] == 1
    failing = {s["id"]: s for s in report["sessions"]}
    assert any(e["message"] == "'incidents' is a required property" for s in failing.values() for e in s["errors"])
    assert (await revalidate(db, validator, since="2999-01-01"))["checked"] == 0
    assert await revalidate(db, validator) == own  # nothing was changed by the checks
