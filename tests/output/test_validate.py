from __future__ import annotations

import json

import pytest

from app.output.validate import OutputValidator, SchemaLoadError, json_path


def test_json_path_forms():
    assert json_path([]) == "$"
    assert json_path(["events", 0, "level"]) == "$.events[0].level"
    assert json_path(["weird key", 2]) == '$["weird key"][2]'


def test_every_error_is_collected_in_path_order(validator):
    doc = {"summary": 1, "events": [{"level": "bad"}, {"level": "info", "message": 2}],
           "escalation": {"needed": "no"}, "services_checked": [{"name": "x", "status": "up"}]}
    result = validator.validate(doc)
    assert not result.valid
    assert [e.path for e in result.errors] == [
        "$.escalation.needed", "$.events[0]", "$.events[0].level", "$.events[1].message",
        "$.services_checked[0].status", "$.summary"]
    assert "'message' is a required property" in result.errors[1].message


def test_draft7_schema_is_honoured():
    v = OutputValidator({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                         "properties": {"a": {"type": "integer"}}, "required": ["a"]})
    assert v.validate({"a": 1}).valid
    assert v.validate({"a": "x"}).errors[0].path == "$.a"


def test_invalid_schemas_are_refused_with_a_clear_message(tmp_path):
    with pytest.raises(SchemaLoadError, match=r"not a valid JSON Schema .* at \$.type"):
        OutputValidator({"type": "bogus"})
    with pytest.raises(SchemaLoadError, match="must be a JSON object"):
        OutputValidator([1, 2])  # type: ignore[arg-type]
    with pytest.raises(SchemaLoadError, match="schema file not found"):
        OutputValidator.from_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    with pytest.raises(SchemaLoadError, match="is not valid JSON"):
        OutputValidator.from_file(bad)


def test_wire_schema_drops_meta_keywords_only(validator):
    wire = json.loads(validator.wire_schema())
    assert "$schema" not in wire and "$id" not in wire
    assert wire["required"] == validator.schema["required"]
    assert '", "' not in validator.wire_schema() and '": ' not in validator.wire_schema()  # compact


def test_validation_of_any_value_never_raises_and_its_messages_are_storable(validator):
    deep: list = []
    for _ in range(5_000):
        deep = [deep]
    recursive = OutputValidator({"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
                                 "$ref": "#/$defs/n"})
    result = recursive.validate(deep)
    assert not result.valid and result.errors[0].path == "$" and "nested too deeply" in result.errors[0].message
    huge = validator.validate({"summary": "x", "events": "\ud83d" + "y" * 100_000, "escalation": {"needed": True},
                               "services_checked": []})
    assert not huge.valid
    for issue in huge.errors:
        issue.message.encode("utf-8")
        assert len(issue.message) <= 1_000


@pytest.mark.parametrize("text,msg", [('{"type": "object", "maximum": NaN}', "not valid JSON: NaN is not a JSON value"),
                                      ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply")])
def test_a_schema_file_that_is_not_plain_json_is_refused(tmp_path, text, msg):
    path = tmp_path / "schema.json"
    path.write_text(text)
    with pytest.raises(SchemaLoadError, match=msg):
        OutputValidator.from_file(path)
