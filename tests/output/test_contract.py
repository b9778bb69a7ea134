"""The pydantic models and schemas/agent-response.json accept and reject the same documents."""

from __future__ import annotations

import copy
import json

import pytest
from pydantic import ValidationError

from app.output.contract import AgentResponse
from tests.helpers import FIXTURES

BASE = {"summary": "ok", "events": [], "escalation": {"needed": False}, "services_checked": []}


def _fixture_outputs() -> list:
    """Every structured_output and StructuredOutput tool input in the real captures."""
    docs = []
    for path in sorted(FIXTURES.glob("*/stdout.jsonl")):
        for line in path.read_text().splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            for msg in obj if isinstance(obj, list) else [obj]:
                if not isinstance(msg, dict):
                    continue
                if "structured_output" in msg:
                    docs.append(msg["structured_output"])
                docs.extend(block["input"] for block in (msg.get("message") or {}).get("content") or []
                            if isinstance(block, dict) and block.get("name") == "StructuredOutput")
    return docs


def _variant(**changes) -> dict:
    doc = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        target = doc
        *parents, last = dotted.split("__")
        for p in parents:
            target = target[int(p)] if p.isdigit() else target[p]
        if value is ...:
            del target[last]
        else:
            target[last] = value
    return doc


HAND = [
    BASE,
    _variant(memories=[{"key": "nginx:restarts", "value": "2 this week"}]),
    _variant(events=[{"level": "info", "service": None, "message": "x"}]),
    _variant(events=[{"level": "warning", "message": "x", "extra": 1}]),
    _variant(escalation={"needed": True, "reason": "r", "context": None, "failed_checks": ["a"]}),
    _variant(services_checked=[{"name": "db", "status": "unreachable", "detail": None}]),
    # bad ones
    _variant(summary=...),
    _variant(events=...),
    _variant(escalation=...),
    _variant(services_checked=...),
    _variant(summary=3),
    _variant(events=[{"level": "warn", "message": "x"}]),
    _variant(events=[{"level": "info"}]),
    _variant(events=[{"level": "info", "message": ""}]),
    _variant(events=[{"level": "info", "message": "x", "service": 5}]),
    _variant(escalation={"needed": "true"}),
    _variant(escalation={"needed": 1}),
    _variant(escalation={}),
    _variant(escalation={"needed": False, "failed_checks": "disk"}),
    _variant(escalation={"needed": False, "failed_checks": [1]}),
    _variant(services_checked=[{"name": "db", "status": "ok"}]),
    _variant(services_checked=[{"status": "healthy"}]),
    _variant(services_checked=[{"name": "", "status": "healthy"}]),
    _variant(memories=[{"key": "k"}]),
    _variant(memories=[{"key": "", "value": "v"}]),
    _variant(memories="none"),
    [],
    "text",
    None,
]


@pytest.mark.parametrize("doc", _fixture_outputs() + HAND)
def test_model_and_schema_agree(doc, validator):
    schema_ok = validator.validate(doc).valid
    try:
        AgentResponse.model_validate(doc)
        model_ok = True
    except ValidationError:
        model_ok = False
    assert schema_ok == model_ok, json.dumps(doc)


def test_fixtures_contain_both_valid_and_invalid_outputs(validator):
    verdicts = {validator.validate(d).valid for d in _fixture_outputs()}
    assert verdicts == {True, False}


def test_schema_declares_draft_and_version():
    from app.output.validate import DEFAULT_SCHEMA_PATH
    schema = json.loads(DEFAULT_SCHEMA_PATH.read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].endswith(":1")
    assert set(schema["required"]) == {"summary", "events", "escalation", "services_checked"}
