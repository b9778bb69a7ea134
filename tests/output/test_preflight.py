"""Schema preflight: every rule trips on one schema and stays quiet on its fixed twin,
with exact paths and messages; the verdicts agree with the captures of the real CLI in
tests/fixtures/claude-code/2.1.197/schema-rules/ (made by scripts/capture-schema-rules.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from app.output.preflight import (
    CAPTURES_DIR,
    MAX_ARG_BYTES,
    RULES,
    WIRE_DROPPED_KEYS,
    PreflightProblem,
    canonical,
    preflight,
    preflight_file,
    sha256,
)
from app.output.validate import OutputValidator
from app.paths import DEFAULT_SCHEMA_PATH

REPO = Path(__file__).resolve().parents[2]
CAPTURES = REPO / CAPTURES_DIR
MAX = 65536
D7 = "http://json-schema.org/draft-07/schema#"

P = PreflightProblem


def obj(x: dict[str, Any], **root: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"x": x}, "required": ["x"], **root}


def check(schema: Any, max_bytes: int = MAX) -> list[PreflightProblem]:
    return preflight(schema, max_bytes=max_bytes)


# --------------------------------------------------------------------------- passes


def test_bundled_agent_response_schema_passes():
    schema = json.loads(DEFAULT_SCHEMA_PATH.read_text(encoding="utf-8"))
    assert schema["$schema"].endswith("2020-12/schema")  # root $schema/$id are not on the wire
    assert check(schema) == []
    assert preflight_file(DEFAULT_SCHEMA_PATH, MAX) == []


@pytest.mark.parametrize("schema", [
    obj({"type": "string"}),
    obj({"type": "string"}, **{"$schema": D7}),
    obj({"$ref": "#/$defs/s"}, **{"$defs": {"s": {"type": "string", "minLength": 1}}}),
    obj({"$ref": "#/definitions/s"}, definitions={"s": {"type": ["string", "null"]}}),
    {"type": "object", "properties": {"child": {"$ref": "#"}}},
    obj({"type": "string", "format": "uri"}) | {"properties": {"x": {"type": "string"}}},
    obj({"type": "string"}, **{"$defs": {"unused": {"type": "string", "format": "uri", "x-note": 1}}}),
    obj({"enum": [{"format": "uri", "nullable": True}]}),
    {"type": "object", "properties": {"format": {"type": "string"}, "$ref": {"type": "string"}}},
    obj({"type": "string", "pattern": "^[a\\-z]+(?<=a)\\/\\.\\x61\\u0062\\d*$"}),
    obj({"type": "string", "pattern": "^(?i:abc)$"}),
    obj({"type": "string"}, **{"if": {"required": ["x"]}, "then": {"required": ["x"]}, "not": {"required": ["y"]}}),
    obj({"type": "array", "items": {"type": "string"}, "contains": {"const": "a"}}),
    obj({"type": "string"}, dependencies={"x": ["x"]}, additionalProperties=False),
    obj({"type": "string", "$comment": "c", "examples": ["a"], "default": "a", "deprecated": False}),
    obj({"type": "string"}, **{"$id": "https://example.com/s.json"}),
])
def test_schemas_the_cli_takes_pass(schema):
    assert check(schema) == []


# --------------------------------------------------------------------------- the document


def test_non_object_documents():
    def msg(kind: str) -> str:
        return (f"the schema is a JSON {kind}, not an object; the CLI refuses it (\"--json-schema must be a JSON "
                'object"). Write an object schema with "type": "object" at the root')
    assert check([1, 2]) == [P("$", "root-not-json-object", msg("array"))]
    assert check(True) == [P("$", "root-not-json-object", msg("boolean"))]
    assert check("x") == [P("$", "root-not-json-object", msg("string"))]
    assert check(None) == [P("$", "root-not-json-object", msg("null"))]


def test_size_limit_counts_canonical_bytes():
    schema = obj({"type": "string", "description": "é" * 600})  # 2 bytes each in UTF-8
    size = len(canonical(schema).encode("utf-8"))
    assert 1024 < size < 2048
    assert check(schema, max_bytes=1024) == [P("$", "size-limit", f"the schema is {size} bytes as canonical JSON, "
                                               "over the limit of 1024 (TIEROPS_SCHEMA_MAX_BYTES): make it smaller "
                                               "(shorter descriptions, shared $defs)")]
    assert check(schema, max_bytes=size) == []


def test_size_over_the_kernels_argument_limit_even_when_the_setting_allows_it():
    big = {"type": "object", "properties": {f"f{i}": {"type": "string", "description": "d" * 100} for i in range(1300)}}
    size = len(canonical(big).encode("utf-8"))
    assert size > MAX_ARG_BYTES == 131071
    assert check(big, max_bytes=10**7) == [P("$", "size-exec-limit", f"the schema is {size} bytes as canonical JSON; "
                                             "it travels inline on the CLI's command line, where one argument may "
                                             "hold at most 131071 bytes: make it smaller")]
    assert check(big, max_bytes=MAX)[0].rule == "size-limit"  # the setting speaks first
    half = {"type": "object", "properties": dict(list(big["properties"].items())[:600])}
    assert check(half, max_bytes=10**7) == []


def test_nan_and_deep_nesting_are_problems_not_exceptions():
    assert check(obj({"type": "number", "maximum": float("nan")})) == [
        P("$", "not-json", "the schema holds NaN or Infinity, which are not JSON; use numbers")]
    deep: dict[str, Any] = {"type": "object"}
    node = deep
    for _ in range(5000):
        node["items"] = {"type": "array"}
        node = node["items"]
    assert check(deep) == [P("$", "nesting-too-deep", "the schema is nested too deeply to check; flatten it with "
                             "$defs and $ref")]


# --------------------------------------------------------------------------- dialect and meta-schemas


def test_dialects_other_than_2020_12_and_draft_07_are_refused():
    def msg(value: str) -> str:
        return (f'"$schema" is {value}: TierOps takes JSON Schema 2020-12 (the default when "$schema" is absent) '
                'and draft-07 only. Declare "https://json-schema.org/draft/2020-12/schema" or '
                '"http://json-schema.org/draft-07/schema#" and use that dialect\'s keywords')
    d4 = "http://json-schema.org/draft-04/schema#"
    assert check(obj({"type": "string"}, **{"$schema": d4})) == [P('$["$schema"]', "schema-dialect", msg(f'"{d4}"'))]
    assert check(obj({"type": "string"}, **{"$schema": 7})) == [P('$["$schema"]', "schema-dialect", msg("7"))]
    for ok in (D7, "https://json-schema.org/draft/2020-12/schema"):
        assert check(obj({"type": "string"}, **{"$schema": ok})) == []


def test_meta_schema_of_the_declared_dialect():
    assert check(obj({"type": "bogus"})) == [
        P("$.properties.x.type", "meta-schema",
          "not a valid 2020-12 schema: 'bogus' is not valid under any of the given schemas")]
    assert check(obj({"type": "bogus"}, **{"$schema": D7})) == [
        P("$.properties.x.type", "meta-schema",
          "not a valid draft-07 schema: 'bogus' is not valid under any of the given schemas")]
    # meta-schema problems count in $defs nobody uses, too (TierOps' own validator checks the whole document)
    assert [p.path for p in check(obj({"type": "string"}, **{"$defs": {"u": {"minLength": -1}}}))] == [
        '$["$defs"].u.minLength']


def test_the_cli_checks_draft_07_and_the_api_checks_2020_12():
    # declared draft-07: its own meta-schema first, then 2020-12 (the API) for the paths not yet reported
    schema = obj({"type": "array", "items": [{"type": "string"}], "additionalItems": 5}, **{"$schema": D7})
    assert [(p.path, p.rule) for p in check(schema)] == [("$.properties.x.additionalItems", "meta-schema"),
                                                         ("$.properties.x.items", "meta-schema-2020-12")]
    # valid 2020-12 (which ignores additionalItems), invalid draft-07: the CLI's Ajv refuses it
    schema = obj({"type": "array", "prefixItems": [{"type": "string"}], "additionalItems": 5})
    assert check(schema)[0] == P("$.properties.x.additionalItems", "meta-schema-draft-07",
                                 "not valid against the draft-07 meta-schema, which the CLI checks every schema "
                                 "against (it then silently drops the StructuredOutput tool): 5 is not of type "
                                 "'object', 'boolean'")
    # valid draft-07, invalid 2020-12: the Messages API refuses it
    tuple_ = {"type": "array", "items": [{"type": "string"}], "additionalItems": False, "minItems": 1}
    assert check(obj(tuple_, **{"$schema": D7})) == [
        P("$.properties.x.items", "meta-schema-2020-12",
          "not valid against the 2020-12 meta-schema, which the Messages API checks tool schemas against (it then "
          "refuses every request): [{'type': 'string'}] is not of type 'object', 'boolean'")]
    assert check(obj({"type": "array", "items": {"type": "string"}, "minItems": 1}, **{"$schema": D7})) == []


# --------------------------------------------------------------------------- the root


ROOT_TYPE = ('the root must declare "type": "object" (found {}): the model answers through a tool whose input is '
             "always a JSON object, and the Messages API refuses a tool schema without a root \"type\". Put other "
             "values under a property")


def test_root_must_be_typed_object():
    assert check({"type": "array", "items": {"type": "string"}}) == [
        P("$.type", "root-type-not-object", ROOT_TYPE.format('"type": "array"'))]
    assert check({"type": ["object", "null"]}) == [
        P("$.type", "root-type-not-object", ROOT_TYPE.format('"type": ["object", "null"]'))]
    assert check({"properties": {"x": {"type": "string"}}}) == [
        P("$", "root-type-not-object", ROOT_TYPE.format('no "type"'))]
    assert check({"type": "object"}) == []


def test_root_combinators():
    alternatives = [{"required": ["x"]}, {"required": ["y"]}]
    msg = ('"{}" at the root: the Messages API refuses tool schemas with oneOf, anyOf or allOf at the top level '
           '(HTTP 400 on every request). Move the alternatives under a property, or express them with '
           '"if"/"then"/"else" or "not" at the root')
    assert check({"type": "object", "oneOf": alternatives, "allOf": alternatives}) == [
        P("$.oneOf", "root-combinator", msg.format("oneOf")), P("$.allOf", "root-combinator", msg.format("allOf"))]
    assert check({"anyOf": alternatives}) == [P("$", "root-type-not-object", ROOT_TYPE.format('no "type"')),
                                              P("$.anyOf", "root-combinator", msg.format("anyOf"))]
    assert check(obj({"oneOf": [{"type": "string"}, {"type": "integer"}]})) == []  # fine below the root


# --------------------------------------------------------------------------- files


def test_preflight_file(tmp_path: Path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(obj({"type": "string"}), indent=4), encoding="utf-8")
    assert preflight_file(good, MAX) == []
    missing = tmp_path / "missing.json"
    assert preflight_file(missing, MAX) == [P("$", "file-unreadable", f"{missing}: no such file")]
    assert preflight_file(tmp_path, MAX) == [P("$", "file-unreadable", f"{tmp_path} is a directory, not a schema file")]
    broken = tmp_path / "broken.json"
    broken.write_text('{"type": "object",}', encoding="utf-8")
    assert preflight_file(broken, MAX) == [P("$", "not-json", f"{broken} is not valid JSON: Expecting property name "
                                            "enclosed in double quotes: line 1 column 19 (char 18)")]
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"description": "caf\xe9"}')
    assert preflight_file(latin, MAX) == [P("$", "not-json", f"{latin} is not UTF-8 text (byte 20); save it as "
                                           "UTF-8 JSON")]
    nan = tmp_path / "nan.json"
    nan.write_text('{"type": "object", "maximum": NaN}', encoding="utf-8")
    assert preflight_file(nan, MAX) == [P("$", "not-json", f"{nan} is not valid JSON: NaN is not a JSON value")]
    huge = tmp_path / "huge.json"
    huge.write_text(" " * (4 * 1024 + 1), encoding="utf-8")
    assert preflight_file(huge, 1024) == [P("$", "size-limit", f"{huge} is 4097 bytes; a schema may be at most 1024 "
                                           "bytes as canonical JSON (TIEROPS_SCHEMA_MAX_BYTES): make it smaller")]
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    assert preflight_file(deep, MAX) == [P("$", "nesting-too-deep", f"{deep} is nested too deeply to parse; flatten "
                                          "it with $defs")]
    array = tmp_path / "array.json"
    array.write_text("[1, 2]", encoding="utf-8")
    assert [p.rule for p in preflight_file(array, MAX)] == ["root-not-json-object"]


# --------------------------------------------------------------------------- canonical form, errors, wire


def test_canonical_and_sha256():
    schema = {"b": [1, {"é": "ü"}], "a": True}
    assert canonical(schema) == '{"a":true,"b":[1,{"é":"ü"}]}'
    assert sha256(schema) == hashlib.sha256('{"a":true,"b":[1,{"é":"ü"}]}'.encode()).hexdigest()
    assert sha256({"a": True, "b": [1, {"é": "ü"}]}) == sha256(schema)
    with pytest.raises(ValueError, match="not JSON compliant"):
        canonical({"x": float("inf")})


def test_the_wire_view_is_what_output_validator_sends():
    schema = json.loads(DEFAULT_SCHEMA_PATH.read_text(encoding="utf-8"))
    wire = json.loads(OutputValidator(schema).wire_schema())
    assert wire == {k: v for k, v in schema.items() if k not in WIRE_DROPPED_KEYS}


# --------------------------------------------------------------------------- agreement with the captures

# Every capture case → the rules preflight raises on its schema. Where the CLI accepted a schema and
# preflight still refuses it, the comment says why; where the CLI dropped the tool and preflight
# passes the schema, the root $schema TierOps leaves off the wire was the cause.
EXPECTED: dict[str, tuple[str, ...]] = {
    "additional-items-without-items-array": ("ignored-keyword-dropped-by-cli",),
    "additional-properties-false": (), "additional-properties-schema": (), "additional-properties-true": (),
    "agent-response-bundled": (),  # dropped for its root $schema, which is not on the wire
    "agent-response-wire": (), "baseline": (), "const": (), "contains": (), "content-media-type": (),
    "content-schema": (), "default": (), "dependencies": (),
    "dependent-required": ("newer-keyword-dropped-by-cli",), "dependent-schemas": ("newer-keyword-dropped-by-cli",),
    "discriminator": ("unknown-keyword-dropped-by-cli",), "dynamic-ref": ("newer-keyword-dropped-by-cli",),
    "empty-required": (), "enum": (), "examples": (),
    "exclusive-minimum-boolean": ("meta-schema",),
    **{f"format-{f}": ("format-dropped-by-cli",) for f in (
        "date-time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "json-pointer", "on-integer", "regex",
        "time", "unknown", "uri-reference", "uri", "uuid")},
    "format-in-enum-data": (), "format-in-unused-defs": (),
    "id-nested": (), "id-root-urn": (), "id-root": (), "if-then-else": (),
    "if-without-then-else": ("ignored-keyword-dropped-by-cli",),
    "items-array-closed": ("meta-schema",),  # a draft-07 tuple: not 2020-12 (TierOps' default, the API's check)
    "items-array": ("meta-schema",),
    "keyword-names-as-properties": (), "min-length": (), "not": (), "numeric-bounds": (),
    "min-contains": ("newer-keyword-dropped-by-cli",),
    "nullable-null": ("nullable-not-json-schema",),  # the CLI accepts null, TierOps' validator would not
    "nullable-without-type": ("nullable-not-json-schema",),
    "nullable": ("nullable-not-json-schema",),
    **{f"pattern-{c}": ("pattern-dropped-by-cli",) for c in (
        "backref-without-group", "backslash-z", "class-escape-range", "escaped-dash", "escaped-hash", "inline-flag",
        "invalid", "lone-brace", "lone-bracket", "properties-escaped-dash", "python-named-group", "quantifier-no-min",
        "quantified-boundary")},
    "pattern-code-escapes": (), "pattern-escaped-dash-in-class": (), "pattern-escaped-slash-dot": (),
    "pattern-lookahead": (), "pattern-lookbehind": (), "pattern-modifier-group": (), "pattern-properties": (),
    "pattern": (),
    "pattern-js-named-group": ("pattern-invalid-for-tierops",),  # Python re has no (?<name>…)
    "pattern-group-name-in-alternatives": ("pattern-invalid-for-tierops",),  # nor a name used twice
    "pattern-unicode-property": ("pattern-invalid-for-tierops",),  # Python re has no \p{…}
    "pattern-properties-matching-property": ("ignored-keyword-dropped-by-cli",),
    "prefix-items": ("newer-keyword-dropped-by-cli",), "property-names": (), "read-only-deprecated": (),
    "recursive-ref": ("meta-schema", "newer-keyword-dropped-by-cli"),
    "ref-anchor": ("newer-keyword-dropped-by-cli",), "ref-definitions": (), "ref-defs": (),
    "ref-external-url": ("ref-remote",),
    "ref-id-fragment": ("meta-schema", "ref-unresolvable"),  # a draft-07 anchor in a 2020-12 (default) schema
    "ref-missing-local": ("ref-unresolvable",), "ref-recursive": (), "ref-relative-file": ("ref-remote",),
    "ref-root": (), "ref-via-root-id-wire": ("ref-remote",),
    "ref-via-root-id": ("ref-root-id",),  # works only while the root $id is sent, and it is not
    "ref-with-siblings": (),
    "root-allof": ("root-combinator", "root-type-not-object"),  # the Messages API refuses these roots
    "root-anyof": ("root-combinator", "root-type-not-object"),
    "root-empty": ("root-type-not-object",), "root-no-type": ("root-type-not-object",),
    "root-oneof-typed": ("root-combinator",), "root-oneof": ("root-combinator", "root-type-not-object"),
    "root-type-list": ("root-type-not-object",),
    "root-json-array": ("root-not-json-object",), "root-json-true": ("root-not-json-object",),
    "root-type-array": ("root-type-not-object",), "root-type-string": ("root-type-not-object",),
    "schema-2019-09": ("schema-dialect",), "schema-draft-04": ("schema-dialect",), "schema-draft-06": ("schema-dialect",),
    "schema-2020-12": (),  # dropped for its root $schema, which is not on the wire
    "schema-draft-07": (), "schema-nested-2020-12": (),
    "then-without-if": ("ignored-keyword-dropped-by-cli",), "title-description": (),
    "type-bogus-in-unused-defs": ("meta-schema",),  # the CLI skips unused $defs; TierOps' validator does not
    "type-bogus": ("meta-schema", "root-type-not-object"),
    "type-list-union": (), "type-list": (),
    "unevaluated-properties": ("newer-keyword-dropped-by-cli",),
    "unknown-keyword-in-unused-defs": (), "unknown-keyword": ("unknown-keyword-dropped-by-cli",),
    # no schema object in the capture: generated (size) or not JSON
    "large-100k": (), "large-200k": (), "not-json": (),
}


def _captures() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(CAPTURES.glob("*.json"))
            if p.name != "summary.json"}


def test_every_capture_is_classified():
    assert sorted(_captures()) == sorted(EXPECTED)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_preflight_agrees_with_the_capture(case: str):
    capture = _captures()[case]
    verdict = capture["observed"]["verdict"]
    if "schema" in capture:
        schema = capture["schema"]
    elif case in ("root-json-array", "root-json-true"):
        schema = json.loads(capture["schema_text"])
    else:
        assert case in ("large-100k", "large-200k", "not-json")  # covered by the size and file tests
        return
    rules = tuple(sorted({p.rule for p in check(schema)}))
    assert rules == EXPECTED[case]
    if verdict != "accepted" and case not in ("schema-2020-12", "agent-response-bundled"):
        assert rules, f"the CLI did {verdict} on {case} but preflight passes it"


def test_every_rule_is_backed_by_existing_captures():
    captures = _captures()
    for rule in RULES.values():
        for case, verdict in rule.evidence:
            assert captures[case]["observed"]["verdict"] == verdict, (rule.id, case)
    raised = {r for rules in EXPECTED.values() for r in rules}
    tested_elsewhere = {"file-unreadable", "not-json", "nesting-too-deep", "size-limit", "size-exec-limit",
                        "meta-schema-draft-07", "meta-schema-2020-12"}
    assert raised | tested_elsewhere == set(RULES)
