"""The pydantic models of the agent-response contract cannot drift from
``schemas/agent-response.json``.

Two checks, each able to fail on its own:

* **structure** — ``AgentResponse.model_json_schema()`` and the schema file are both walked and
  brought to one normal form (``$ref`` resolved, ``anyOf`` of plain types and ``type`` lists
  merged into one set of types, so ``str | None`` equals ``["string", "null"]``; titles,
  descriptions, defaults and ``$schema``/``$id`` dropped; every other keyword kept verbatim).
  Property names, required lists, enums, types, nullability, constraints and nested objects must
  then be equal; the differences are listed by path. The comparison is shown to catch a field,
  enum value, constraint or nullability added to either side alone.
* **behaviour** — documents are validated by both (the schema through ``OutputValidator``, as
  production does): the structured outputs of the real captures, hand-built ones, and mutations
  generated from the schema itself (each property removed, nulled, given every wrong JSON type,
  an enum value outside the list, a string below ``minLength``, an extra key), each with the
  verdict the schema implies. ``tests/output/test_contract.py`` covers hand-picked cases too.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from app.output.contract import AgentResponse, Escalation
from app.output.validate import OutputValidator
from app.paths import DEFAULT_SCHEMA_PATH

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "claude-code" / "2.1.197"
IGNORED = {"title", "description", "default", "$schema", "$id", "$defs", "examples"}


def _load_schema() -> dict[str, Any]:
    return json.loads(DEFAULT_SCHEMA_PATH.read_text(encoding="utf-8"))


# --- the normal form ------------------------------------------------------------------------------

def normalize(node: Any, root: dict[str, Any]) -> Any:
    """One JSON Schema node in the normal form described in the module docstring."""
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/$defs/"), ref
        target = root["$defs"][ref.removeprefix("#/$defs/")]
        return normalize({**target, **{k: v for k, v in node.items() if k != "$ref"}}, root)
    out: dict[str, Any] = {}
    types: set[str] = set()
    if "type" in node:
        types |= set(node["type"] if isinstance(node["type"], list) else [node["type"]])
    for alt in node.get("anyOf", []):
        alt_norm = normalize(alt, root)
        alt_types = alt_norm.pop("type", [])
        if alt_norm == {} or alt_types == ["null"]:  # a plain type, or null: merge into the type set
            types |= set(alt_types)
        else:
            # The non-null alternative carries its keywords (enum, items …) up; two such are a real anyOf.
            assert not any(k in out for k in alt_norm), f"anyOf with several rich alternatives: {node}"
            out.update(alt_norm)
            types |= set(alt_types)
    if types:
        out["type"] = sorted(types)
    for key, value in node.items():
        if key in IGNORED or key in ("type", "anyOf", "$ref"):
            continue
        if key == "properties":
            out[key] = {name: normalize(sub, root) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = normalize(value, root)
        elif key in ("required", "enum"):
            out[key] = sorted(value, key=json.dumps)
        else:
            out[key] = value
    return out


def schema_form() -> dict[str, Any]:
    schema = _load_schema()
    return normalize(schema, schema)


def model_form(model: type[BaseModel] = AgentResponse) -> dict[str, Any]:
    schema = model.model_json_schema()
    return normalize(schema, schema)


def differences(a: Any, b: Any, path: str = "$") -> list[str]:
    """Every place where the two normal forms differ (a: the schema file, b: the models)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in sorted(set(a) | set(b)):
            if key not in b:
                out.append(f"{path}.{key}: only in the schema file ({json.dumps(a[key])})")
            elif key not in a:
                out.append(f"{path}.{key}: only in the models ({json.dumps(b[key])})")
            else:
                out += differences(a[key], b[key], f"{path}.{key}")
        return out
    if a != b:
        return [f"{path}: schema file {json.dumps(a)} != models {json.dumps(b)}"]
    return []


# --- structure ------------------------------------------------------------------------------------

def test_models_and_schema_file_have_the_same_structure():
    diff = differences(schema_form(), model_form())
    assert diff == [], "the models drifted from schemas/agent-response.json:\n" + "\n".join(diff)


def test_the_normal_form_keeps_what_matters():
    form = schema_form()
    assert form["required"] == ["escalation", "events", "services_checked", "summary"]
    events = form["properties"]["events"]["items"]
    assert events["properties"]["service"]["type"] == ["null", "string"]
    assert events["properties"]["level"] == {"enum": ["critical", "info", "warning"], "type": ["string"]}
    assert events["properties"]["message"] == {"minLength": 1, "type": ["string"]}
    assert model_form()["properties"]["events"]["items"] == events


def _schema_drift(change) -> list[str]:
    schema = _load_schema()
    change(schema)
    return differences(normalize(schema, schema), model_form())


@pytest.mark.parametrize(("change", "expected"), [
    (lambda s: s["properties"]["events"]["items"]["properties"].update(ticket={"type": "string"}),
     "$.properties.events.items.properties.ticket: only in the schema file"),
    (lambda s: s["properties"]["escalation"]["required"].append("reason"),
     "$.properties.escalation.required: schema file"),
    (lambda s: s["properties"]["services_checked"]["items"]["properties"]["status"]["enum"].append("unknown"),
     "$.properties.services_checked.items.properties.status.enum"),
    (lambda s: s["properties"]["events"]["items"]["properties"]["service"].update(type="string"),
     "$.properties.events.items.properties.service.type"),
    (lambda s: s["properties"]["memories"]["items"]["properties"]["key"].update(maxLength=80),
     "$.properties.memories.items.properties.key.maxLength: only in the schema file"),
    (lambda s: s["properties"]["escalation"].update(additionalProperties=False),
     "$.properties.escalation.additionalProperties: only in the schema file"),
    (lambda s: s["properties"]["escalation"]["properties"]["failed_checks"]["items"].update(type="integer"),
     "$.properties.escalation.properties.failed_checks.items.type"),
    (lambda s: s["required"].remove("services_checked"), "$.required"),
    (lambda s: s["properties"]["actions"]["items"]["properties"]["result"]["enum"].append("skipped"),
     "$.properties.actions.items.properties.result.enum"),
    (lambda s: s["properties"]["actions"]["items"]["required"].append("service"),
     "$.properties.actions.items.required"),
])
def test_a_change_to_the_schema_file_alone_is_caught(change, expected):
    diff = _schema_drift(change)
    assert any(d.startswith(expected) for d in diff), diff


def test_a_change_to_the_models_alone_is_caught():
    class Drifted(AgentResponse):
        runbook: str

    assert "$.properties.runbook: only in the models" in " ".join(differences(schema_form(), model_form(Drifted)))
    assert any(d.startswith("$.required") for d in differences(schema_form(), model_form(Drifted)))

    class Esc(Escalation):
        severity: int = 0

    class NestedDrift(AgentResponse):
        escalation: Esc

    diff = differences(schema_form(), model_form(NestedDrift))
    assert diff == ['$.properties.escalation.properties.severity: only in the models ({"type": ["integer"]})'], diff

    class Loose(AgentResponse):
        summary: str | None  # type: ignore[assignment]

    assert differences(schema_form(), model_form(Loose)) == [
        '$.properties.summary.type: schema file ["string"] != models ["null", "string"]']


# --- behaviour ------------------------------------------------------------------------------------

def _capture_outputs() -> list[Any]:
    """Every structured_output and StructuredOutput tool input in the real captures."""
    docs: list[Any] = []
    for path in sorted(FIXTURES.glob("*/stdout.jsonl")):
        for raw in path.read_text(encoding="utf-8").splitlines():
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            for msg in obj if isinstance(obj, list) else [obj]:
                if not isinstance(msg, dict):
                    continue
                if "structured_output" in msg:
                    docs.append(msg["structured_output"])
                content = (msg.get("message") or {}).get("content")
                docs.extend(b["input"] for b in content or [] if isinstance(b, dict) and b.get("name") == "StructuredOutput")
    return docs


def _model_accepts(doc: Any) -> bool:
    try:
        AgentResponse.model_validate(doc)
    except ValidationError:
        return False
    return True


def test_capture_outputs_agree(validator: OutputValidator):
    docs = _capture_outputs()
    assert len(docs) >= 10
    verdicts = [(validator.validate(d).valid, _model_accepts(d)) for d in docs]
    assert all(s == m for s, m in verdicts), verdicts
    assert {s for s, _ in verdicts} == {True, False}  # both kinds are in the captures


FULL = {
    "summary": "Disk on web-1 at 91%.",
    "events": [{"level": "warning", "service": "web-1", "message": "/var 91% used", "key": "check:disk_web1",
                "evidence": [{"quote": "/dev/sda1 91% /var", "tool_use_id": "toolu_01"}]}],
    "memories": [{"key": "web-1:disk", "value": "grows ~1%/day"}],
    "escalation": {"needed": True, "reason": "disk", "context": "/var 91%", "failed_checks": ["disk_web1"],
                   "evidence": [{"quote": "91%", "tool_use_id": None}]},
    "services_checked": [{"name": "web-1-disk", "status": "degraded", "detail": "/var 91%", "check": "disk_web1",
                          "service": "web-1", "latency_ms": 12.5, "evidence": [{"quote": "91%", "tool_use_id": "x"}]}],
    "actions": [{"kind": "cleanup", "service": "web-1", "result": "done", "detail": "journalctl --vacuum-size=500M",
                 "evidence": [{"quote": "journalctl --vacuum-size=500M", "tool_use_id": "toolu_02"}]}],
}
MINIMAL = {"summary": "", "events": [], "escalation": {"needed": False}, "services_checked": []}
SAMPLES: list[Any] = [12345, 1.5, "text", True, None, [], {}]


def _json_types(value: Any) -> set[str]:
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    if isinstance(value, float):
        return {"number"} | ({"integer"} if value.is_integer() else set())
    if isinstance(value, str):
        return {"string"}
    return {"array"} if isinstance(value, list) else {"object"}


def _mutations(form: dict[str, Any], doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[str, Any, bool]]:
    """(label, document, valid according to the schema) for each mutation of FULL at ``path``."""
    out: list[tuple[str, Any, bool]] = []

    def put(label: str, value: Any, valid: bool, *, delete: bool = False, at: tuple[Any, ...]) -> None:
        new = copy.deepcopy(FULL)
        target = new
        for part in at[:-1]:
            target = target[part]
        if delete:
            del target[at[-1]]
        else:
            target[at[-1]] = value
        out.append((f"{label} at {'.'.join(map(str, at))}", new, valid))

    if "properties" in form:
        required = set(form.get("required", []))
        for name, sub in form["properties"].items():
            at = (*path, name)
            put("removed", None, name not in required, delete=True, at=at)
            types = set(sub.get("type", []))
            for sample in SAMPLES:
                if sample == doc.get(name):
                    continue
                fits = bool(_json_types(sample) & types)
                if fits and (sample in ([], {}) or "enum" in sub or "minLength" in sub):
                    continue  # a value of the right type: checked by the cases below
                put(f"set to {json.dumps(sample)}", sample, fits, at=at)
            if "enum" in sub:
                for allowed in sub["enum"]:
                    put(f"enum {allowed}", allowed, True, at=at)
                put("enum bogus", "bogus-value", False, at=at)
            if "minLength" in sub:
                put("too short", "x" * (sub["minLength"] - 1), False, at=at)
                put("just long enough", "x" * sub["minLength"], True, at=at)
            if "maxLength" in sub:
                put("too long", "x" * (sub["maxLength"] + 1), False, at=at)
                put("just short enough", "x" * sub["maxLength"], True, at=at)
            if name in doc:
                out += _mutations(sub, doc[name], at)
        put("extra key", "anything", form.get("additionalProperties", True) is not False, at=(*path, "zz_extra"))
    elif "items" in form and isinstance(doc, list) and doc:
        items = form["items"]
        if "properties" in items:
            out += _mutations(items, doc[0], (*path, 0))
        else:  # scalar items (failed_checks): every JSON type the items do not allow
            for sample in SAMPLES:
                if not _json_types(sample) & set(items.get("type", [])):
                    put(f"item set to {json.dumps(sample)}", sample, False, at=(*path, 0))
    return out


MUTATIONS = _mutations(schema_form(), FULL)


def test_mutations_cover_the_schema():
    labels = [label for label, _, _ in MUTATIONS]
    assert len(MUTATIONS) > 100
    for needle in ("removed at escalation.needed", "set to null at events.0.service", "enum bogus at events.0.level",
                   "too short at memories.0.key", "extra key at services_checked.0.zz_extra",
                   "enum bogus at actions.0.result", "too short at actions.0.kind", "removed at actions.0.result",
                   'set to "text" at escalation.failed_checks', "item set to 12345 at escalation.failed_checks.0"):
        assert any(label.startswith(needle) for label in labels), needle
    assert {valid for _, _, valid in MUTATIONS} == {True, False}


@pytest.mark.parametrize(("label", "doc", "valid"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_schema_and_models_give_the_verdict_the_schema_implies(label, doc, valid, validator: OutputValidator):
    assert validator.validate(doc).valid is valid, label
    assert _model_accepts(doc) is valid, label


@pytest.mark.parametrize("doc", [FULL, MINIMAL, {**MINIMAL, "memories": []},
                                 {**FULL, "escalation": {"needed": False, "reason": None, "context": None,
                                                         "failed_checks": []}}])
def test_hand_built_valid_documents(doc, validator: OutputValidator):
    assert validator.validate(doc).valid
    assert _model_accepts(doc)


@pytest.mark.parametrize("doc", [
    None, [], "report", 0,
    {**FULL, "summary": None},
    {**FULL, "escalation": {"needed": "false"}},  # no coercion on either side
    {**FULL, "events": [{"level": "info", "message": 5}]},
    {**FULL, "services_checked": [{"name": "db", "status": "Healthy"}]},
    {**FULL, "memories": [{"key": "k", "value": ""}]},
])
def test_hand_built_invalid_documents(doc, validator: OutputValidator):
    assert not validator.validate(doc).valid
    assert not _model_accepts(doc)
