#!/usr/bin/env python3
"""Capture what the pinned Claude Code CLI does with each kind of ``--json-schema``.

Why: the CLI compiles the schema given to ``--json-schema`` before it offers the model the
``StructuredOutput`` tool, and when it cannot compile it, it silently leaves the tool out (the run
then "succeeds" without structured output, reference §5.5). Which schemas it cannot compile is not
documented, so TierOps' preflight (``app/output/preflight.py``) refuses them from what this script
observed. Each probe runs the REAL CLI once against the fake Messages API
(``tests/fakes/fake_anthropic.py``, loopback only) with one schema, scripts one ``StructuredOutput``
call with a valid instance, and records:

- whether the first API request offered ``StructuredOutput`` and with which ``input_schema``
  (``input_schema_verbatim``: byte-for-byte our schema; otherwise the rewritten schema is kept),
- whether the CLI accepted the scripted instance (``structured_output`` in the result line), or the
  tool error it sent back to the model,
- the exit code and stderr (trimmed; temporary paths and the fake's port replaced), and
- a verdict: ``accepted`` (tool offered with our schema verbatim, instance accepted),
  ``accepted-rewritten`` (same, but the CLI changed the schema), ``instance-refused`` (tool
  offered, the scripted instance refused: a tool input is always a JSON object, so a non-object
  root can never pass), ``tool-dropped`` (exit 0, no tool: the silent failure), ``rejected`` (the
  CLI exits with an error before calling the API) or ``exec-refused`` (the kernel refuses to start
  it: the argument is too long).

What the fake cannot show: the real Messages API also checks each tool's ``input_schema``
(``type`` required at the root, no root ``oneOf``/``anyOf``/``allOf``, valid against the 2020-12
meta-schema). Cases the CLI forwards verbatim may still fail there; preflight.py says which.

Output: ``tests/fixtures/claude-code/<version>/schema-rules/<case>.json`` per case plus
``summary.json`` (case → verdict). The files hold no timestamps or durations, so a re-run against
the same CLI rewrites them byte-for-byte. ``tests/realcli/test_schema_rules.py`` re-runs every case
and fails when the CLI behaves differently from the captures.

After a CLI upgrade (say to X.Y.Z)::

    # 1. pin X.Y.Z in scripts/install-claude.sh, tests/realcli/conftest.py, CLAUDE_VERSION below and
    #    CLI_VERSION in app/output/preflight.py; install it
    scripts/install-claude.sh
    # 2. what changed against the old captures (exit 1 and a CHANGED line per case if anything did)
    .venv/bin/python scripts/capture-schema-rules.py --check --out tests/fixtures/claude-code/2.1.197/schema-rules
    # 3. write the new captures (into tests/fixtures/claude-code/X.Y.Z/schema-rules/)
    .venv/bin/python scripts/capture-schema-rules.py
    # 4. revisit every rule in app/output/preflight.py whose evidence names a changed case, then
    .venv/bin/pytest tests/output/test_preflight.py tests/realcli/test_schema_rules.py

Options: ``--claude BIN`` (default: the binary scripts/install-claude.sh installs),
``--out DIR`` (default: the fixture folder of the version ``BIN --version`` reports),
``--only CASE`` (repeatable), ``--jobs N`` (parallel CLIs, default 2), ``--list``.

Mind: ``scripts/sync-fixtures.sh`` mirrors ``tests/fixtures/claude-code`` from the shared captures
with ``rsync --delete``; run this script again after a sync if those do not carry schema-rules/.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.fakes.fake_anthropic import FakeAnthropic, structured  # noqa: E402

CLAUDE_VERSION = "2.1.197"  # the pin of scripts/install-claude.sh
STRUCTURED_OUTPUT = "StructuredOutput"
STDERR_MAX = 1000
PROBE_TIMEOUT = 60.0



@dataclass(frozen=True)
class Case:
    """One probe: the schema given to ``--json-schema`` and an instance valid against it."""

    name: str
    construct: str  # what the case probes, in words
    schema: Any = None  # a JSON value; None when ``raw`` or ``generator`` is used
    instance: Any = field(default_factory=lambda: {"x": "a"})
    raw: str | None = None  # the --json-schema text itself, when it is not JSON of ``schema``
    generator: str | None = None  # name of a function in GENERATORS (very large schemas)

    def build_schema(self) -> Any:
        if self.generator is not None:
            return GENERATORS[self.generator]()
        return self.schema

    def schema_text(self) -> str:
        """The exact --json-schema argument (compact JSON, as TierOps sends it)."""
        if self.raw is not None:
            return self.raw
        return json.dumps(self.build_schema(), separators=(",", ":"), ensure_ascii=False)


def _obj(x: Mapping[str, Any], **root: Any) -> dict[str, Any]:
    """``{"type":"object","properties":{"x": <x>},"required":["x"], **root}``."""
    return {"type": "object", "properties": {"x": dict(x)}, "required": ["x"], **root}


def _large(target: int) -> dict[str, Any]:
    """A plain, valid object schema whose compact JSON is just over ``target`` bytes."""
    props: dict[str, Any] = {}
    i = 0
    schema: dict[str, Any] = {"type": "object", "properties": props}
    while True:
        props[f"field_{i:05d}"] = {"type": "string", "description": "padding " * 8}
        i += 1
        if i % 50 == 0 and len(json.dumps(schema, separators=(",", ":"))) > target:
            return schema


GENERATORS: dict[str, Callable[[], Any]] = {
    "large_100k": lambda: _large(100_000),
    "large_200k": lambda: _large(200_000),
}

_NODE = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
    "required": ["name"],
}
_AGENT_RESPONSE_INSTANCE = {
    "summary": "All services healthy.",
    "events": [],
    "escalation": {"needed": False},
    "services_checked": [{"name": "nginx", "status": "healthy"}],
}


def _agent_response(*, wire: bool) -> Any:
    schema = json.loads((REPO_ROOT / "schemas" / "agent-response.json").read_text(encoding="utf-8"))
    if wire:  # what app/output/validate.py's OutputValidator.wire_schema sends
        schema = {k: v for k, v in schema.items() if k not in ("$schema", "$id")}
    return schema


def _fmt(name: str, fmt: str, value: str) -> Case:
    return Case(name, f'"format": "{fmt}" on a string property', _obj({"type": "string", "format": fmt}), {"x": value})


CASES: dict[str, Case] = {
    c.name: c
    for c in [
        # -- baselines
        Case("baseline", "a plain object schema", _obj({"type": "string"})),
        Case("agent-response-bundled", "schemas/agent-response.json as shipped ($schema 2020-12, $id urn:)",
             _agent_response(wire=False), _AGENT_RESPONSE_INSTANCE),
        Case("agent-response-wire", "schemas/agent-response.json without root $schema/$id (TierOps' wire copy)",
             _agent_response(wire=True), _AGENT_RESPONSE_INSTANCE),
        # -- format
        _fmt("format-uri", "uri", "https://example.com/x"),
        _fmt("format-uri-reference", "uri-reference", "/x"),
        _fmt("format-email", "email", "ops@example.com"),
        _fmt("format-date-time", "date-time", "2026-01-01T00:00:00Z"),
        _fmt("format-date", "date", "2026-01-01"),
        _fmt("format-time", "time", "12:00:00Z"),
        _fmt("format-duration", "duration", "P1D"),
        _fmt("format-uuid", "uuid", "1b4e28ba-2fa1-11d2-883f-0016d3cca427"),
        _fmt("format-ipv4", "ipv4", "10.0.0.1"),
        _fmt("format-ipv6", "ipv6", "::1"),
        _fmt("format-hostname", "hostname", "db1.example.com"),
        _fmt("format-regex", "regex", "^a+$"),
        _fmt("format-json-pointer", "json-pointer", "/a/b"),
        _fmt("format-unknown", "tierops-made-up", "anything"),
        Case("format-on-integer", '"format": "int32" on an integer property',
             _obj({"type": "integer", "format": "int32"}), {"x": 1}),
        # -- $ref
        Case("ref-defs", '$ref to "#/$defs/svc"',
             _obj({"$ref": "#/$defs/svc"}, **{"$defs": {"svc": {"type": "string"}}})),
        Case("ref-definitions", '$ref to "#/definitions/svc"',
             _obj({"$ref": "#/definitions/svc"}, definitions={"svc": {"type": "string"}})),
        Case("ref-missing-local", '$ref to "#/$defs/missing" (nothing there)', _obj({"$ref": "#/$defs/missing"})),
        Case("ref-external-url", "$ref to an https URL", _obj({"$ref": "https://example.com/schemas/svc.json"})),
        Case("ref-relative-file", '$ref to "svc.json" (a relative file)', _obj({"$ref": "svc.json"})),
        Case("ref-recursive", "recursive $ref (a tree of #/$defs/node)",
             _obj({"$ref": "#/$defs/node"}, **{"$defs": {"node": _NODE}}),
             {"x": {"name": "a", "children": [{"name": "b"}]}}),
        Case("ref-root", '$ref to "#" (the whole schema, recursively)',
             {"type": "object", "properties": {"child": {"$ref": "#"}}}, {"child": {}}),
        Case("ref-with-siblings", "$ref with a sibling keyword (minLength)",
             _obj({"$ref": "#/$defs/svc", "minLength": 1}, **{"$defs": {"svc": {"type": "string"}}})),
        Case("ref-via-root-id", "$ref to the root $id's absolute URI (works only while $id is sent)",
             _obj({"$ref": "https://example.com/s.json#/$defs/svc"},
                  **{"$id": "https://example.com/s.json", "$defs": {"svc": {"type": "string"}}})),
        Case("ref-via-root-id-wire", "the same without the root $id (what TierOps sends: $id is not on the wire)",
             _obj({"$ref": "https://example.com/s.json#/$defs/svc"}, **{"$defs": {"svc": {"type": "string"}}})),
        Case("ref-anchor", '$ref to "#svc" declared with $anchor',
             _obj({"$ref": "#svc"}, **{"$defs": {"svc": {"$anchor": "svc", "type": "string"}}})),
        Case("ref-id-fragment", '$ref to "#svc" declared with a draft-07 "$id": "#svc"',
             _obj({"$ref": "#svc"}, definitions={"svc": {"$id": "#svc", "type": "string"}})),
        Case("dynamic-ref", "$dynamicRef / $dynamicAnchor (2020-12)",
             _obj({"$dynamicRef": "#svc"}, **{"$defs": {"svc": {"$dynamicAnchor": "svc", "type": "string"}}})),
        # -- root shapes
        Case("root-oneof", "oneOf at the root, no type",
             {"oneOf": [_obj({"type": "string"}), {"type": "object", "properties": {"y": {"type": "integer"}},
                                                    "required": ["y"]}]}),
        Case("root-anyof", "anyOf at the root, no type",
             {"anyOf": [_obj({"type": "string"}), {"type": "object", "required": ["y"]}]}),
        Case("root-allof", "allOf at the root, no type", {"allOf": [_obj({"type": "string"})]}),
        Case("root-oneof-typed", '"type": "object" with oneOf at the root',
             {"type": "object", "oneOf": [{"required": ["x"]}, {"required": ["y"]}]}),
        Case("root-no-type", "properties at the root without a type", {"properties": {"x": {"type": "string"}}}),
        Case("root-empty", "the empty schema {}", {}),
        # a tool input is always a JSON object: the scripted instance is one here too
        Case("root-type-array", '"type": "array" at the root', {"type": "array", "items": {"type": "string"}}),
        Case("root-type-string", '"type": "string" at the root', {"type": "string"}),
        Case("root-type-list", '"type": ["object", "null"] at the root',
             {"type": ["object", "null"], "properties": {"x": {"type": "string"}}}),
        Case("root-json-array", "a JSON array instead of an object", None, raw="[1,2]"),
        Case("root-json-true", "the boolean schema true", None, raw="true"),
        Case("not-json", "text that is not JSON (a file path)", None, raw="schemas/agent-response.json"),
        Case("type-bogus", '"type": "bogus" (not a JSON Schema type)', {"type": "bogus"}),
        Case("type-bogus-in-unused-defs", '"type": "bogus" inside a $defs entry nothing refers to',
             _obj({"type": "string"}, **{"$defs": {"u": {"type": "bogus"}}})),
        # -- keywords
        Case("type-list", '"type": ["string", "null"] on a property', _obj({"type": ["string", "null"]})),
        Case("const", "const", _obj({"const": "a"})),
        Case("enum", "enum", _obj({"enum": ["a", "b"]})),
        Case("pattern", "pattern", _obj({"type": "string", "pattern": "^[a-z]+$"})),
        Case("pattern-lookahead", "pattern with a look-ahead (ECMA-262 regex)",
             _obj({"type": "string", "pattern": "^(?!b)[a-z]+$"})),
        Case("pattern-escaped-dash", r'pattern "^a\-b$" (an identity escape, invalid in a JS "u" regex)',
             _obj({"type": "string", "pattern": "^a\\-b$"}), {"x": "a-b"}),
        Case("pattern-escaped-dash-in-class", r'pattern "^[a\-z]+$" (escaped dash inside a class)',
             _obj({"type": "string", "pattern": "^[a\\-z]+$"}), {"x": "a"}),
        Case("pattern-python-named-group", 'pattern "^(?P<n>a)$" (Python-only named group)',
             _obj({"type": "string", "pattern": "^(?P<n>a)$"})),
        Case("pattern-js-named-group", 'pattern "^(?<n>a)$" (ECMA-262 named group)',
             _obj({"type": "string", "pattern": "^(?<n>a)$"})),
        Case("pattern-invalid", 'pattern "(" (invalid everywhere)', _obj({"type": "string", "pattern": "("})),
        Case("pattern-backslash-z", r'pattern "^a\Z" (Python-only anchor)', _obj({"type": "string", "pattern": "^a\\Z"})),
        Case("pattern-inline-flag", 'pattern "(?i)^a$" (inline flag)', _obj({"type": "string", "pattern": "(?i)^a$"})),
        Case("pattern-unicode-property", r'pattern "^\p{L}+$" (Unicode property escape)',
             _obj({"type": "string", "pattern": "^\\p{L}+$"})),
        Case("pattern-escaped-slash-dot", r'pattern "^a\/b\.c$" (escaped syntax characters)',
             _obj({"type": "string", "pattern": "^a\\/b\\.c$"}), {"x": "a/b.c"}),
        Case("pattern-properties-escaped-dash", r'a patternProperties key "^x\-"',
             {"type": "object", "patternProperties": {"^x\\-": {"type": "string"}}}, {"x-1": "a"}),
        Case("pattern-lone-brace", 'pattern "^a{$" (a lone "{")', _obj({"type": "string", "pattern": "^a{$"})),
        Case("pattern-lone-bracket", 'pattern "^a]$" (a lone "]")', _obj({"type": "string", "pattern": "^a]$"})),
        Case("pattern-quantifier-no-min", 'pattern "^a{,3}$"', _obj({"type": "string", "pattern": "^a{,3}$"})),
        Case("pattern-backref-without-group", r'pattern "^a\1$" (a back-reference to no group)',
             _obj({"type": "string", "pattern": "^a\\1$"})),
        Case("pattern-class-escape-range", r'pattern "^[\d-z]+$" (a range from a class escape)',
             _obj({"type": "string", "pattern": "^[\\d-z]+$"})),
        Case("pattern-lookbehind", 'pattern "(?<=a)b" (look-behind)', _obj({"type": "string", "pattern": "(?<=a)b"}),
             {"x": "ab"}),
        Case("pattern-modifier-group", 'pattern "^(?i:a)$" (modifier group)', _obj({"type": "string", "pattern": "^(?i:a)$"})),
        Case("pattern-escaped-hash", r'pattern "^\#a$" (identity escape of "#")',
             _obj({"type": "string", "pattern": "^\\#a$"}), {"x": "#a"}),
        Case("pattern-quantified-boundary", r'pattern "^a\b+$" (a quantified word-boundary assertion)',
             _obj({"type": "string", "pattern": "^a\\b+$"})),
        Case("pattern-group-name-in-alternatives", 'pattern "^(?:(?<y>a)|(?<y>b))$" (a group name in two alternatives)',
             _obj({"type": "string", "pattern": "^(?:(?<y>a)|(?<y>b))$"})),
        Case("pattern-code-escapes", r'pattern "^\x61\u0062[\t\n]?\d*\w*\s*$" (hex, unicode, control, class escapes)',
             _obj({"type": "string", "pattern": "^\\x61\\u0062[\\t\\n]?\\d*\\w*\\s*$"}), {"x": "ab"}),
        Case("pattern-properties-matching-property", "a patternProperties pattern that matches a name in properties",
             {"type": "object", "properties": {"xa": {"type": "string"}}, "patternProperties": {"^x": {"type": "string"}}},
             {"xa": "a"}),
        Case("pattern-properties", "patternProperties",
             {"type": "object", "patternProperties": {"^x": {"type": "string"}}}),
        Case("additional-properties-false", "additionalProperties: false", _obj({"type": "string"}, additionalProperties=False)),
        Case("additional-properties-true", "additionalProperties: true", _obj({"type": "string"}, additionalProperties=True)),
        Case("additional-properties-schema", "additionalProperties: a schema",
             _obj({"type": "string"}, additionalProperties={"type": "string"})),
        Case("if-then-else", "if / then / else",
             _obj({"type": "string"}, **{"if": {"required": ["x"]}, "then": {"required": ["x"]},
                                         "else": {"required": []}})),
        Case("if-without-then-else", '"if" without "then" or "else"', _obj({"type": "string"}, **{"if": {"required": ["x"]}})),
        Case("then-without-if", '"then" without "if"', _obj({"type": "string"}, then={"required": ["x"]})),
        Case("additional-items-without-items-array", '"additionalItems" next to a schema-valued "items"',
             _obj({"type": "array", "items": {"type": "string"}, "additionalItems": False}), {"x": ["a"]}),
        Case("dependent-required", "dependentRequired (2019-09+)",
             _obj({"type": "string"}, dependentRequired={"x": ["x"]})),
        Case("dependent-schemas", "dependentSchemas (2019-09+)",
             _obj({"type": "string"}, dependentSchemas={"x": {"required": ["x"]}})),
        Case("dependencies", "dependencies (draft-07)", _obj({"type": "string"}, dependencies={"x": ["x"]})),
        Case("unevaluated-properties", "unevaluatedProperties (2019-09+)",
             _obj({"type": "string"}, unevaluatedProperties=False)),
        Case("prefix-items", "prefixItems (2020-12)",
             _obj({"type": "array", "prefixItems": [{"type": "string"}]}), {"x": ["a"]}),
        Case("items-array", "items as an array (draft-07 tuple)",
             _obj({"type": "array", "items": [{"type": "string"}]}), {"x": ["a"]}),
        Case("items-array-closed", "items as an array with additionalItems false and minItems",
             _obj({"type": "array", "items": [{"type": "string"}], "additionalItems": False, "minItems": 1}),
             {"x": ["a"]}),
        Case("contains", "contains", _obj({"type": "array", "contains": {"type": "string"}}), {"x": ["a"]}),
        Case("min-contains", "contains with minContains (2019-09+)",
             _obj({"type": "array", "contains": {"type": "string"}, "minContains": 1}), {"x": ["a"]}),
        Case("content-schema", "contentSchema (2019-09+)",
             _obj({"type": "string", "contentMediaType": "application/json", "contentSchema": {"type": "object"}})),
        Case("recursive-ref", "$recursiveRef / $recursiveAnchor (2019-09)",
             {"$recursiveAnchor": True, "type": "object", "properties": {"x": {"$recursiveRef": "#"}}}, {"x": {}}),
        Case("exclusive-minimum-boolean", '"exclusiveMinimum": true (draft-04 style)',
             _obj({"type": "number", "minimum": 0, "exclusiveMinimum": True}), {"x": 1}),
        Case("min-length", "minLength / maxLength", _obj({"type": "string", "minLength": 1, "maxLength": 10})),
        Case("numeric-bounds", "minimum / exclusiveMaximum / multipleOf",
             _obj({"type": "number", "minimum": 0, "exclusiveMaximum": 10, "multipleOf": 0.5}), {"x": 1.5}),
        Case("property-names", "propertyNames", _obj({"type": "string"}, propertyNames={"pattern": "^[a-z]+$"})),
        Case("not", "not", _obj({"not": {"type": "integer"}})),
        Case("id-root", '"$id" at the root (an https URI)', _obj({"type": "string"}, **{"$id": "https://example.com/s.json"})),
        Case("id-root-urn", '"$id" at the root (a urn:)', _obj({"type": "string"}, **{"$id": "urn:tierops:schema:x:1"})),
        Case("id-nested", '"$id" on a property', _obj({"$id": "https://example.com/x.json", "type": "string"})),
        Case("nullable", '"nullable": true (OpenAPI)', _obj({"type": "string", "nullable": True})),
        Case("nullable-null", '"nullable": true (OpenAPI), the instance null', _obj({"type": "string", "nullable": True}),
             {"x": None}),
        Case("nullable-without-type", '"nullable": true without "type"', _obj({"nullable": True})),
        Case("type-list-union", '"type": ["string", "integer"] on a property', _obj({"type": ["string", "integer"]})),
        Case("keyword-names-as-properties", 'properties named "format", "$ref" and "nullable"',
             {"type": "object", "properties": {"format": {"type": "string"}, "$ref": {"type": "string"},
                                               "nullable": {"type": "string"}}},
             {"format": "a", "$ref": "b", "nullable": "c"}),
        Case("format-in-unused-defs", '"format": "uri" inside a $defs entry nothing refers to',
             _obj({"type": "string"}, **{"$defs": {"u": {"type": "string", "format": "uri"}}})),
        Case("unknown-keyword-in-unused-defs", "an unknown keyword inside a $defs entry nothing refers to",
             _obj({"type": "string"}, **{"$defs": {"u": {"type": "string", "x-tierops": 1}}})),
        Case("format-in-enum-data", 'an enum value that is an object with a "format" key (data, not schema)',
             _obj({"enum": [{"format": "uri"}]}), {"x": {"format": "uri"}}),
        Case("examples", "examples", _obj({"type": "string", "examples": ["a"]})),
        Case("default", "default", _obj({"type": "string", "default": "a"})),
        Case("title-description", "title / description / $comment",
             _obj({"type": "string", "title": "X", "description": "an x", "$comment": "c"})),
        Case("read-only-deprecated", "readOnly / writeOnly / deprecated",
             _obj({"type": "string", "readOnly": True, "writeOnly": False, "deprecated": False})),
        Case("content-media-type", "contentMediaType / contentEncoding",
             _obj({"type": "string", "contentMediaType": "application/json", "contentEncoding": "base64"})),
        Case("unknown-keyword", 'an unknown keyword ("x-tierops")', _obj({"type": "string", "x-tierops": 1})),
        Case("discriminator", "discriminator (OpenAPI)",
             _obj({"type": "object", "discriminator": {"propertyName": "k"}}), {"x": {"k": "a"}}),
        Case("empty-required", '"required": [] ', {"type": "object", "properties": {}, "required": []}, {}),
        # -- $schema
        Case("schema-draft-07", "$schema draft-07", _obj({"type": "string"}, **{"$schema": "http://json-schema.org/draft-07/schema#"})),
        Case("schema-2020-12", "$schema 2020-12",
             _obj({"type": "string"}, **{"$schema": "https://json-schema.org/draft/2020-12/schema"})),
        Case("schema-2019-09", "$schema 2019-09",
             _obj({"type": "string"}, **{"$schema": "https://json-schema.org/draft/2019-09/schema"})),
        Case("schema-draft-06", "$schema draft-06", _obj({"type": "string"}, **{"$schema": "http://json-schema.org/draft-06/schema#"})),
        Case("schema-draft-04", "$schema draft-04", _obj({"type": "string"}, **{"$schema": "http://json-schema.org/draft-04/schema#"})),
        Case("schema-nested-2020-12", "$schema 2020-12 on a property (not at the root)",
             _obj({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "string"})),
        # -- size
        Case("large-100k", "a valid schema of just over 100 kB", generator="large_100k", instance={}),
        Case("large-200k", "a valid schema of just over 200 kB", generator="large_200k", instance={}),
    ]
}


# --------------------------------------------------------------------------- running


def claude_binary() -> Path:
    """Where scripts/install-claude.sh puts the pinned CLI."""
    env_dir = os.environ.get("TIEROPS_CLAUDE_DIR")
    base = Path(env_dir) if env_dir else Path.home() / ".cache" / "tierops" / f"claude-code-{CLAUDE_VERSION}"
    return base / "node_modules" / ".bin" / "claude"


def claude_version(binary: Path | str) -> str:
    out = subprocess.run([str(binary), "--version"], stdin=subprocess.DEVNULL,  # noqa: S603 - the CLI under test
                         capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    return out.split()[0]


def fixture_dir(version: str = CLAUDE_VERSION) -> Path:
    return REPO_ROOT / "tests" / "fixtures" / "claude-code" / version / "schema-rules"


def _env(home: Path, base_url: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-test-dummy",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "1",
    }


def _trim(text: str, tmp: str, port: int) -> str:
    text = text.replace(tmp, "<tmp>").replace(f"127.0.0.1:{port}", "127.0.0.1:<port>")
    text = re.sub(re.escape(tempfile.gettempdir()) + r"/schema-probe-[A-Za-z0-9_]*", "<tmp>", text)
    return text if len(text) <= STDERR_MAX else text[:STDERR_MAX] + "…"


def argv_for(binary: Path | str, case: Case) -> list[str]:
    """Like TierOps' launch.build_argv: prompt right after -p, stream-json, --json-schema inline."""
    return [str(binary), "-p", f"[schema-probe:{case.name}] return the structured output.", "--model", "sonnet",
            "--output-format", "stream-json", "--verbose", "--json-schema", case.schema_text()]


def probe(case: Case, binary: Path | str, *, timeout: float = PROBE_TIMEOUT) -> dict[str, Any]:
    """Run the CLI once for ``case`` against a fresh fake API; return the observation."""
    with FakeAnthropic() as fake, tempfile.TemporaryDirectory(prefix="schema-probe-") as tmp:
        home, cwd = Path(tmp, "home"), Path(tmp, "cwd")
        home.mkdir()
        cwd.mkdir()
        fake.script(f"[schema-probe:{case.name}]", [structured(case.instance)])
        try:
            proc = subprocess.run(argv_for(binary, case), cwd=cwd, env=_env(home, fake.url),  # noqa: S603 - the CLI
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        except OSError as exc:  # E2BIG: the kernel's per-argument limit (MAX_ARG_STRLEN, 128 KiB)
            return {"verdict": "exec-refused", "exec_error": f"{type(exc).__name__}: [Errno {exc.errno}] {exc.strerror}"}
        requests = fake.message_requests
        port = fake.port
        errors = fake.errors
    if errors:
        raise RuntimeError(f"{case.name}: fake API handler errors: {errors}")
    lines = []
    for line in proc.stdout.splitlines():
        if line.strip():
            try:
                lines.append(json.loads(line))
            except ValueError:
                lines.append({"type": "<not json>", "text": line[:200]})
    init = next((m for m in lines if m.get("type") == "system" and m.get("subtype") == "init"), None)
    result = next((m for m in reversed(lines) if m.get("type") == "result"), None)
    obs: dict[str, Any] = {"exit_code": proc.returncode, "stderr": _trim(proc.stderr.strip(), tmp, port),
                           "api_requests": len(requests)}
    if init is not None:
        obs["init_lists_tool"] = STRUCTURED_OUTPUT in (init.get("tools") or [])
    tool = None
    if requests:
        tools = requests[0]["body"].get("tools") or []
        tool = next((t for t in tools if isinstance(t, dict) and t.get("name") == STRUCTURED_OUTPUT), None)
        obs["tool_present"] = tool is not None
        if tool is not None:
            sent = tool.get("input_schema")
            obs["input_schema_verbatim"] = sent == case.build_schema() and json.dumps(
                sent, separators=(",", ":"), ensure_ascii=False) == case.schema_text()
            if not obs["input_schema_verbatim"]:
                obs["input_schema"] = sent
        # what the CLI answered to the scripted StructuredOutput call (an error when rejected)
        if len(requests) > 1:
            errs = [tr for tr in FakeAnthropic.tool_results(requests[1]) if tr.get("is_error")]
            if errs:
                content = errs[0].get("content")
                obs["tool_error"] = _trim(content if isinstance(content, str) else json.dumps(content), tmp, port)
    if result is not None:
        obs["result"] = {"subtype": result.get("subtype"), "is_error": result.get("is_error"),
                         "structured_output": "structured_output" in result}
        if "structured_output" in result:
            obs["result"]["structured_output_equals_instance"] = result["structured_output"] == case.instance
    if proc.returncode != 0 and not requests:
        obs["verdict"] = "rejected"
    elif tool is not None and not obs.get("result", {}).get("structured_output"):
        obs["verdict"] = "instance-refused"  # the tool is offered, the (object) tool input never passes
    elif tool is not None:
        obs["verdict"] = "accepted" if obs["input_schema_verbatim"] else "accepted-rewritten"
    elif requests:
        obs["verdict"] = "tool-dropped"
    else:
        obs["verdict"] = "no-api-call"
    return dict(sorted(obs.items(), key=lambda kv: (kv[0] != "verdict", kv[0])))


def record(case: Case, observed: Mapping[str, Any], version: str) -> dict[str, Any]:
    """The capture file's content for ``case``."""
    rec: dict[str, Any] = {"case": case.name, "cli_version": version, "construct": case.construct}
    if case.raw is not None:
        rec["schema_text"] = case.raw
    elif case.generator is not None:
        text = case.schema_text()
        rec["schema_generator"] = f"scripts/capture-schema-rules.py GENERATORS[{case.generator!r}]"
        rec["schema_bytes"] = len(text.encode("utf-8"))
        rec["schema_sha256"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    else:
        rec["schema"] = case.schema
    rec["instance"] = case.instance
    rec["observed"] = dict(observed)
    return rec


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def load_captures(directory: Path | None = None) -> dict[str, dict[str, Any]]:
    """Every ``<case>.json`` capture in ``directory`` (default: the pinned version's folder)."""
    directory = directory or fixture_dir()
    return {
        p.stem: json.loads(p.read_text(encoding="utf-8"))
        for p in sorted(directory.glob("*.json"))
        if p.name != "summary.json"
    }


def run_cases(names: list[str], binary: Path | str, jobs: int) -> dict[str, dict[str, Any]]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {name: pool.submit(probe, CASES[name], binary) for name in names}
        return {name: fut.result() for name, fut in futures.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--claude", type=Path, default=None, help="the claude binary (default: the pinned install)")
    ap.add_argument("--out", type=Path, default=None, help="capture folder (default: per the CLI's version)")
    ap.add_argument("--only", action="append", default=[], metavar="CASE", help="probe only this case (repeatable)")
    ap.add_argument("--jobs", type=int, default=2, help="CLIs run at once (default 2)")
    ap.add_argument("--check", action="store_true", help="compare with the captures; write nothing; exit 1 on change")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args(argv)
    if args.list:
        for c in CASES.values():
            print(f"{c.name:32} {c.construct}")
        return 0
    unknown = [n for n in args.only if n not in CASES]
    if unknown:
        ap.error(f"unknown case(s): {', '.join(unknown)}")
    binary = args.claude or claude_binary()
    version = claude_version(binary)
    out = args.out or fixture_dir(version)
    names = args.only or list(CASES)
    observed = run_cases(names, binary, args.jobs)
    if args.check:
        captured = load_captures(out)
        changed = 0
        for name in names:
            old = captured.get(name, {}).get("observed")
            if old != observed[name]:
                changed += 1
                print(f"CHANGED {name}:\n  captured: {json.dumps(old)}\n  now:      {json.dumps(observed[name])}")
        print(f"{len(names) - changed}/{len(names)} cases as captured in {out}")
        return 1 if changed else 0
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        (out / f"{name}.json").write_text(dump(record(CASES[name], observed[name], version)), encoding="utf-8")
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.exists() and args.only else {}
    verdicts = dict(summary.get("verdicts", {}))
    verdicts.update({name: observed[name]["verdict"] for name in names})
    summary = {
        "cli_version": version,
        "captured_by": "scripts/capture-schema-rules.py",
        "verdicts": {name: verdicts[name] for name in CASES if name in verdicts},
    }
    summary_path.write_text(dump(summary), encoding="utf-8")
    width = max(len(n) for n in names)
    for name in names:
        o = observed[name]
        print(f"{name:{width}}  {o['verdict']:18} exit={o.get('exit_code', '-')}  {o.get('stderr') or o.get('exec_error') or ''}")
    print(f"wrote {len(names)} capture(s) to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
