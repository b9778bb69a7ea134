"""The subschemas the CLI compiles: each construct that makes it drop the StructuredOutput tool
trips its rule, with exact paths and messages, and ECMAScript patterns compile as the CLI's do."""

from __future__ import annotations

import pytest

from app.output.schema_walk import js_regex_error
from tests.output.test_preflight import D7, P, check, obj

# --------------------------------------------------------------------------- constructs the CLI drops


def test_format_is_dropped_by_the_cli():
    schema = {"type": "object", "properties": {"url": {"type": "string", "format": "uri"},
                                               "my-date": {"$ref": "#/$defs/d"}},
              "$defs": {"d": {"type": "string", "format": "date"}}}
    msg = ('"format": "{}": the CLI knows no formats and silently drops the StructuredOutput tool for any schema '
           'using one; remove "format" (use "pattern" if the shape matters)')
    assert check(schema) == [P("$.properties.url.format", "format-dropped-by-cli", msg.format("uri")),
                             P('$["$defs"].d.format', "format-dropped-by-cli", msg.format("date"))]


def test_newer_keywords_are_dropped_by_the_cli():
    assert check(obj({"type": "array", "prefixItems": [{"type": "string"}]})) == [
        P("$.properties.x.prefixItems", "newer-keyword-dropped-by-cli",
          '"prefixItems" is a 2019-09/2020-12 keyword; the CLI compiles schemas as draft-07, does not know it and '
          'silently drops the StructuredOutput tool: describe the items with one "items" schema instead (tuples are '
          "written differently in draft-07 and 2020-12)")]
    assert check(obj({"type": "string"}, dependentRequired={"x": ["x"]})) == [
        P("$.dependentRequired", "newer-keyword-dropped-by-cli",
          '"dependentRequired" is a 2019-09/2020-12 keyword; the CLI compiles schemas as draft-07, does not know it '
          'and silently drops the StructuredOutput tool: use "dependencies" with an array of property names instead')]
    assert check(obj({"type": "string"}, dependencies={"x": ["x"]})) == []


def test_unknown_keywords_are_dropped_by_the_cli():
    assert check(obj({"type": "string", "x-tierops": 1})) == [
        P('$.properties.x["x-tierops"]', "unknown-keyword-dropped-by-cli",
          '"x-tierops" is not a keyword the CLI knows; its validator runs in strict mode and silently drops the '
          'StructuredOutput tool for an unknown keyword. Remove it (notes go in "description" or "$comment")')]
    assert check(obj({"type": "string", "$comment": "x-tierops: 1"})) == []


def test_keywords_without_effect_are_dropped_by_the_cli():
    tail = "; the CLI's strict validator refuses that and silently drops the StructuredOutput tool."
    assert check(obj({"type": "string"}, **{"if": {"required": ["x"]}})) == [
        P("$.if", "ignored-keyword-dropped-by-cli",
          f'"if" without "then" or "else" has no effect{tail} Add "then"/"else" or remove "if"')]
    assert check(obj({"type": "string"}, **{"else": {"required": ["x"]}})) == [
        P("$.else", "ignored-keyword-dropped-by-cli", f'"else" without "if" has no effect{tail} Add "if" or remove "else"')]
    assert check(obj({"type": "array", "items": {"type": "string"}, "additionalItems": False})) == [
        P("$.properties.x.additionalItems", "ignored-keyword-dropped-by-cli",
          f'"additionalItems" without an array "items" has no effect{tail} Remove it')]
    assert check({"type": "object", "properties": {"xa": {}}, "patternProperties": {"^x": {}}}) == [
        P('$.patternProperties["^x"]', "ignored-keyword-dropped-by-cli",
          f'the pattern "^x" also matches "xa", a name under "properties"{tail} Narrow the pattern or drop the property '
          'from "properties"')]
    assert check({"type": "object", "properties": {"ya": {}}, "patternProperties": {"^x": {}}}) == []


def test_nullable_is_refused():
    assert check(obj({"type": "string", "nullable": True})) == [
        P("$.properties.x.nullable", "nullable-not-json-schema",
          '"nullable" is OpenAPI, not JSON Schema: the CLI honours it (it accepts null) while TierOps\' validator '
          'ignores it (it refuses null), and without "type" the CLI drops the StructuredOutput tool. Write '
          '"type": ["<type>", "null"] instead')]
    assert check(obj({"type": ["string", "null"]})) == []


def test_patterns_must_compile_for_the_cli_and_for_tierops():
    assert check(obj({"type": "string", "pattern": "^a\\-b$"})) == [
        P("$.properties.x.pattern", "pattern-dropped-by-cli",
          '"^a\\\\-b$" is not a valid ECMAScript regular expression with the "u" flag, which is how the CLI compiles '
          'it (Invalid character escape); the CLI silently drops the StructuredOutput tool. Rewrite it')]
    assert check({"type": "object", "patternProperties": {"^x\\_": {}}})[0].path == '$.patternProperties["^x\\\\_"]'
    assert check(obj({"type": "string", "pattern": "^\\p{L}+$"})) == [
        P("$.properties.x.pattern", "pattern-invalid-for-tierops",
          "TierOps' validator (Python re) cannot compile \"^\\\\p{L}+$\" (bad escape \\p at position 1); write it in "
          "the syntax Python and ECMAScript share (no \\p{…}, no (?<name>…))")]
    assert check(obj({"type": "string", "pattern": "^a-b$"})) == []


@pytest.mark.parametrize(("pattern", "error"), [
    # outcomes checked against the CLI (captures pattern-*) and, for the rest, node's V8; the
    # messages are regress's
    ("^a\\-b$", "Invalid character escape"),
    ("^a\\#$", "Invalid character escape"),
    ("^(?P<n>a)$", "Invalid group modifier"),
    ("(?i)^a$", "Invalid group modifier"),
    ("(", "Unbalanced parenthesis"),
    ("a)", "Unbalanced parenthesis"),
    ("^a{$", "Invalid quantifier"),
    ("^a]$", "Invalid atom character"),
    ("^a{,3}$", "Invalid quantifier"),
    ("^a\\1$", "Invalid character escape"),
    ("^[\\d-z]+$", "Invalid character range"),
    ("[z-a]", "Range values reversed, start char code is greater than end char code."),
    ("a**", "Invalid atom character"),
    ("^*", "Quantifier not allowed here"),
    ("(?=a)*", "Quantifier not allowed here"),
    ("\\k<n>", "Backreference to invalid named capture group: n"),
    ("(?<n>a)(?<n>b)", "Duplicate capture group name"),
    ("a{2,1}", "Invalid quantifier"),
    ("\\u{110000}", "Invalid unicode escape"),
    ("\\c1", "Invalid character escape"),
    ("[a", "Unbalanced bracket"),
    ("a\\", "Incomplete escape"),
    # regress takes a quantified \b; the CLI does not (capture pattern-quantified-boundary)
    ("^a\\b+$", "Quantifier not allowed here (after \\b or \\B)"),
    ("\\B{2}", "Quantifier not allowed here (after \\b or \\B)"),
    ("^[\\b]+\\\\b+\\b$", None),
    ("^(?<n>a)\\k<n>[^]\\p{Script=Greek}\\u{1F600}\\cA\\0(?:x){2,}?$", None),
    ("^(?i:a)(?-i:b)(?m-s:c)$", None),
    ("(?<=a)(?<!b)(?=c)(?!d)[\\b\\-\\d\\]]", None),
    ("\\ud83d\\ude00|[\\ud83d\\ude00-\\u{1F64F}]", None),
    # lone surrogates (a JSON "\\ud83d" escape decoded): the code point, as in the CLI's UTF-16 string
    ("a\ud800+[\udc00-\udfff]", None),
    ("[\udbff-\ud800]", "Range values reversed, start char code is greater than end char code."),
    ("\\\ud800", "Invalid character escape"),
])
def test_ecmascript_regex_syntax(pattern, error):
    assert js_regex_error(pattern) == error


def test_refs_resolve_inside_the_document_only():
    assert check(obj({"$ref": "https://example.com/svc.json"})) == [
        P('$.properties.x["$ref"]', "ref-remote",
          '"$ref": "https://example.com/svc.json" points outside this schema; TierOps never fetches schemas and the '
          "CLI silently drops the StructuredOutput tool for a $ref it cannot resolve. Copy the target under "
          '"$defs" and refer to it as "#/$defs/<name>"')]
    assert [p.rule for p in check(obj({"$ref": "svc.json#/x"}))] == ["ref-remote"]
    assert check(obj({"$ref": "#/$defs/missing"})) == [
        P('$.properties.x["$ref"]', "ref-unresolvable",
          '"$ref": "#/$defs/missing" points at nothing in this schema; the CLI silently drops the StructuredOutput '
          'tool for a $ref it cannot resolve. Point it at an existing "#/$defs/<name>"')]
    assert check(obj({"$ref": "#/required"})) == [
        P('$.properties.x["$ref"]', "ref-unresolvable",
          '"$ref": "#/required" points at an array, not at a schema; the CLI silently drops the StructuredOutput '
          'tool for it. Point it at a schema such as "#/$defs/<name>"')]


def test_refs_through_the_root_id_do_not_survive_the_wire():
    schema = obj({"$ref": "https://example.com/s.json#/$defs/s"},
                 **{"$id": "https://example.com/s.json", "$defs": {"s": {"type": "string"}}})
    assert check(schema) == [
        P('$.properties.x["$ref"]', "ref-root-id",
          '"$ref": "https://example.com/s.json#/$defs/s" resolves only through the root "$id", which TierOps leaves '
          "out of the schema it gives the CLI (the CLI then silently drops the StructuredOutput tool); write it as "
          '"#/$defs/s"')]
    schema["properties"]["x"]["$ref"] = "#/$defs/s"
    assert check(schema) == []


def test_refs_into_embedded_resources_and_draft_07_anchors():
    embedded = obj({"$ref": "https://example.com/e.json#/$defs/i"},
                   **{"$defs": {"e": {"$id": "https://example.com/e.json", "$defs": {"i": {"type": "string"}}}}})
    assert check(embedded) == []
    anchored = obj({"$ref": "#svc"}, definitions={"svc": {"$id": "#svc", "type": "string"}}, **{"$schema": D7})
    assert [p.rule for p in check(anchored)] == ["meta-schema-2020-12"]  # "$id": "#svc" is not 2020-12


def test_only_subschemas_reached_from_the_root_are_walked():
    # Ajv compiles what the root reaches (captures format-in-unused-defs, unknown-keyword-in-unused-defs)
    schema = obj({"$ref": "#/$defs/used"}, **{"$defs": {"used": {"type": "string", "format": "email"},
                                                        "unused": {"type": "string", "format": "uri"}}})
    assert [p.path for p in check(schema)] == ['$["$defs"].used.format']
    looped = {"type": "object", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a", "format": "x"}},
              "properties": {"x": {"$ref": "#/$defs/a"}}}
    assert [p.path for p in check(looped)] == ['$["$defs"].b.format']
