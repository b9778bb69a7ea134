"""Schema preflight: refuse, before any CLI starts, an output schema the run could not use (issue #11).

Why: the Claude Code CLI compiles the ``--json-schema`` it is given with Ajv (draft-07, strict mode,
no formats) and, when that fails, silently leaves the ``StructuredOutput`` tool out: the run then
"succeeds" without structured output (reference §5.5). Which schemas fail was found by running the
pinned CLI (2.1.197) against the fake Messages API, one probe per construct, and recorded as
captures in ``tests/fixtures/claude-code/2.1.197/schema-rules/<case>.json`` by
``scripts/capture-schema-rules.py``. Every rule below names the capture cases that back it
(:data:`RULES`); ``tests/realcli/test_schema_rules.py`` re-runs the probes, so a CLI upgrade that
changes a behaviour fails a test instead of silently loosening or tightening a rule.

What is checked, in order (each problem names a JSON path in the ``$.properties.url.format`` form of
:func:`app.output.validate.json_path`, a rule id and what to do):

- the document is a JSON object (the CLI refuses anything else, exit 1);
- its canonical JSON fits ``max_bytes`` (``TIEROPS_SCHEMA_MAX_BYTES``) and the kernel's limit on one
  command-line argument (the schema travels inline);
- ``$schema`` names 2020-12 (the default) or draft-07, and the schema is valid against that
  meta-schema; the copy the CLI gets is also valid against draft-07 (what the CLI checks) and
  2020-12 (what the Messages API checks tool schemas against);
- the root declares ``"type": "object"`` and has no ``oneOf``/``anyOf``/``allOf`` (the Messages API
  refuses both; a tool input is always an object);
- in every subschema the CLI compiles (reached from the root through keywords and ``$ref``, as Ajv
  does — an unused ``$defs`` entry is not compiled): no ``format``, no keyword Ajv's draft-07 does not
  know (2019-09/2020-12 ones included), no ``nullable``, no keyword Ajv's strict mode refuses as
  ignored, every ``pattern`` valid both as an ECMAScript "u" regex (CLI) and a Python ``re`` (TierOps'
  own validator), every ``$ref`` resolvable inside the document (TierOps never fetches).

The CLI is given :meth:`app.output.validate.OutputValidator.wire_schema`: the schema without its root
``$schema`` and ``$id``. The CLI-facing checks look at that copy (:data:`WIRE_DROPPED_KEYS`).

Pure: no I/O except :func:`preflight_file`, which reads the one file it is given. Callers turn the
problems into the refusal (``app.engine.contracts.check_schema``: HTTP 422, CLI exit 2).
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urldefrag, urljoin

import jsonschema
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry, Specification
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT7, DRAFT202012

from app.output.validate import json_path

if TYPE_CHECKING:
    from referencing._core import Resolver  # not re-exported by referencing

__all__ = [
    "CAPTURES_DIR",
    "CLI_VERSION",
    "MAX_ARG_BYTES",
    "RULES",
    "WIRE_DROPPED_KEYS",
    "WIRE_EVIDENCE",
    "PreflightProblem",
    "Rule",
    "canonical",
    "js_regex_error",
    "preflight",
    "preflight_file",
    "sha256",
]

CLI_VERSION = "2.1.197"
CAPTURES_DIR = f"tests/fixtures/claude-code/{CLI_VERSION}/schema-rules"
# Linux MAX_ARG_STRLEN (32 pages): the longest single argv string, its NUL included. The schema is
# passed inline (--json-schema); capture large-200k: execve fails with E2BIG.
MAX_ARG_BYTES = 131072 - 1
# OutputValidator.wire_schema() leaves these root keys out of the schema given to the CLI, which is
# why a 2020-12 "$schema" is no problem although the CLI drops the tool when it sees one:
WIRE_DROPPED_KEYS = ("$schema", "$id")
WIRE_EVIDENCE = (("schema-2020-12", "tool-dropped"), ("agent-response-bundled", "tool-dropped"),
                 ("agent-response-wire", "accepted"), ("schema-nested-2020-12", "accepted"))
# preflight_file: a file this many times max_bytes is refused unread (pretty-printing slack).
FILE_SLACK = 4
MESSAGE_DETAIL_MAX = 300

DIALECT_2020_12 = "2020-12"
DIALECT_DRAFT_07 = "draft-07"
_DIALECTS: dict[str, tuple[type[jsonschema.protocols.Validator], Specification[Any]]] = {
    DIALECT_2020_12: (jsonschema.Draft202012Validator, DRAFT202012),
    DIALECT_DRAFT_07: (jsonschema.Draft7Validator, DRAFT7),
}


# --------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class Rule:
    """One preflight rule. ``evidence``: (capture case, verdict it recorded) pairs that back it;
    ``refs``: sources for what the fake API cannot show (the real Messages API's own checks)."""

    id: str
    summary: str
    evidence: tuple[tuple[str, str], ...] = ()
    refs: tuple[str, ...] = ()


def _rules(*rules: Rule) -> dict[str, Rule]:
    return {r.id: r for r in rules}


_DROPPED = "tool-dropped"
_API_400_COMBINATOR = "https://github.com/anthropics/claude-code/issues/5319"  # API 400 for root oneOf/anyOf/allOf
_API_400_TYPE = "https://github.com/Kilo-Org/kilocode/issues/12238"  # API 400 "input_schema.type: Field required"
_API_400_META = "https://github.com/anthropics/anthropic-sdk-java/issues/241"  # API 400 "must match draft 2020-12"

# Issue #11: one rule per construct the probes showed the CLI (or the Messages API behind it) refuses,
# each with the capture cases and verdicts that show it; tests/realcli/test_schema_rules.py holds
# them to the captures and the captures to the live CLI.
RULES = _rules(
    # -- the document as a whole
    Rule("file-unreadable", "the schema file does not exist or cannot be read"),
    Rule("not-json", "the schema is not JSON text", (("not-json", "rejected"),)),
    Rule("nesting-too-deep", "the schema is nested too deeply to check"),
    Rule("root-not-json-object", "the schema is JSON but not an object",
         (("root-json-array", "rejected"), ("root-json-true", "rejected"))),
    Rule("size-limit", "canonical JSON over TIEROPS_SCHEMA_MAX_BYTES (the CLI itself took 100 kB)",
         (("large-100k", "accepted"),)),
    Rule("size-exec-limit", "canonical JSON over the kernel's limit for one argument",
         (("large-200k", "exec-refused"),)),
    # -- dialect and meta-schemas
    Rule("schema-dialect", "$schema other than 2020-12 or draft-07 (the CLI itself knows draft-07 only)",
         (("schema-2019-09", _DROPPED), ("schema-draft-06", _DROPPED), ("schema-draft-04", _DROPPED),
          ("schema-draft-07", "accepted"))),
    Rule("meta-schema", "not valid against the meta-schema of its declared dialect",
         (("type-bogus", _DROPPED), ("exclusive-minimum-boolean", _DROPPED))),
    Rule("meta-schema-draft-07", "the CLI's copy is not valid against draft-07, which the CLI checks",
         (("type-bogus", _DROPPED),)),
    Rule("meta-schema-2020-12", "the CLI's copy is not valid against 2020-12, which the Messages API checks",
         (("items-array", "accepted"),), (_API_400_META,)),
    # -- the root
    Rule("root-type-not-object", 'the root does not declare "type": "object"',
         (("root-type-string", "instance-refused"), ("root-type-array", "instance-refused"),
          ("root-no-type", "accepted"), ("root-empty", "accepted")), (_API_400_TYPE,)),
    Rule("root-combinator", "oneOf/anyOf/allOf at the root (the CLI forwards it; the Messages API refuses it)",
         (("root-oneof", "accepted"), ("root-anyof", "accepted"), ("root-allof", "accepted"),
          ("root-oneof-typed", "accepted")), (_API_400_COMBINATOR,)),
    # -- constructs the CLI drops the tool for
    Rule("format-dropped-by-cli", '"format" (any value: the CLI has no formats)',
         tuple((f"format-{f}", _DROPPED) for f in (
             "uri", "uri-reference", "email", "date-time", "date", "time", "duration", "uuid", "ipv4", "ipv6",
             "hostname", "regex", "json-pointer", "unknown", "on-integer"))),
    Rule("newer-keyword-dropped-by-cli", "a 2019-09/2020-12 keyword (the CLI compiles draft-07)",
         (("dependent-required", _DROPPED), ("dependent-schemas", _DROPPED), ("unevaluated-properties", _DROPPED),
          ("prefix-items", _DROPPED), ("min-contains", _DROPPED), ("ref-anchor", _DROPPED),
          ("dynamic-ref", _DROPPED), ("recursive-ref", _DROPPED))),
    Rule("unknown-keyword-dropped-by-cli", "a keyword Ajv does not know (strict mode)",
         (("unknown-keyword", _DROPPED), ("discriminator", _DROPPED))),
    Rule("ignored-keyword-dropped-by-cli", "a keyword Ajv's strict mode refuses as having no effect",
         (("if-without-then-else", _DROPPED), ("then-without-if", _DROPPED),
          ("additional-items-without-items-array", _DROPPED), ("pattern-properties-matching-property", _DROPPED))),
    Rule("nullable-not-json-schema", '"nullable" (OpenAPI): the CLI honours it, TierOps does not',
         (("nullable-null", "accepted"), ("nullable-without-type", _DROPPED))),
    Rule("pattern-dropped-by-cli", 'a pattern that is not a valid ECMAScript regex with the "u" flag',
         (("pattern-escaped-dash", _DROPPED), ("pattern-python-named-group", _DROPPED), ("pattern-invalid", _DROPPED),
          ("pattern-backslash-z", _DROPPED), ("pattern-inline-flag", _DROPPED),
          ("pattern-properties-escaped-dash", _DROPPED), ("pattern-lone-brace", _DROPPED),
          ("pattern-lone-bracket", _DROPPED), ("pattern-quantifier-no-min", _DROPPED),
          ("pattern-backref-without-group", _DROPPED), ("pattern-class-escape-range", _DROPPED),
          ("pattern-escaped-hash", _DROPPED))),
    Rule("pattern-invalid-for-tierops", "a pattern the CLI takes but Python's re (TierOps' validator) refuses",
         (("pattern-unicode-property", "accepted"), ("pattern-js-named-group", "accepted"))),
    Rule("ref-remote", "a $ref outside the document (TierOps never fetches; the CLI drops the tool)",
         (("ref-external-url", _DROPPED), ("ref-relative-file", _DROPPED))),
    Rule("ref-unresolvable", "a $ref to nothing (or to no schema) inside the document",
         (("ref-missing-local", _DROPPED),)),
    Rule("ref-root-id", "a $ref that resolves only through the root $id, which is not on the wire",
         (("ref-via-root-id", "accepted"), ("ref-via-root-id-wire", _DROPPED))),
)


# --------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class PreflightProblem:
    """One reason to refuse a schema: where (JSON path), which rule, what to do."""

    path: str
    rule: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "rule": self.rule, "message": self.message}

    def __str__(self) -> str:
        return f"{self.path}: {self.message} [{self.rule}]"


# --------------------------------------------------------------------------- canonical form


def canonical(schema: Any) -> str:
    """The one text of a schema: sorted keys, no whitespace, non-ASCII kept (``app.output.spec``
    uses it as ``canonical_json``). NaN/Infinity raise ValueError: they are not JSON."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256(schema: Any) -> str:
    """SHA-256 (hex) of :func:`canonical`'s UTF-8 bytes: equal schemas, equal hashes."""
    return hashlib.sha256(canonical(schema).encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- entry points


def preflight_file(path: Path, max_bytes: int) -> list[PreflightProblem]:
    """Read ``path`` and :func:`preflight` it. A missing, unreadable, oversized or non-JSON file is a
    problem at ``$``, never an exception (for ``tierops schemas check FILE``)."""
    try:
        size = path.stat().st_size
        if path.is_dir():
            return [PreflightProblem("$", "file-unreadable", f"{path} is a directory, not a schema file")]
        if size > FILE_SLACK * max_bytes:
            return [PreflightProblem("$", "size-limit", f"{path} is {size} bytes; a schema may be at most {max_bytes} "
                                     "bytes as canonical JSON (TIEROPS_SCHEMA_MAX_BYTES): make it smaller")]
        data = path.read_bytes()
    except FileNotFoundError:
        return [PreflightProblem("$", "file-unreadable", f"{path}: no such file")]
    except OSError as exc:
        return [PreflightProblem("$", "file-unreadable", f"{path}: cannot read it ({exc.strerror or exc})")]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [PreflightProblem("$", "not-json", f"{path} is not UTF-8 text (byte {exc.start}); save it as UTF-8 JSON")]
    try:
        schema = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        return [PreflightProblem("$", "nesting-too-deep", f"{path} is nested too deeply to parse; flatten it with $defs")]
    except ValueError as exc:
        return [PreflightProblem("$", "not-json", f"{path} is not valid JSON: {exc}")]
    return preflight(schema, max_bytes=max_bytes)


def preflight(schema: Any, *, max_bytes: int) -> list[PreflightProblem]:
    """Every problem that would make the pinned CLI (or the Messages API, or TierOps' own validator)
    refuse or silently ignore ``schema``; ``[]`` when it can be used. Never raises."""
    try:
        return _preflight(schema, max_bytes)
    except RecursionError:
        return [PreflightProblem("$", "nesting-too-deep", "the schema is nested too deeply to check; flatten it "
                                 "with $defs and $ref")]


def _preflight(schema: Any, max_bytes: int) -> list[PreflightProblem]:
    if not isinstance(schema, dict):
        kind = _json_kind(schema)
        return [PreflightProblem("$", "root-not-json-object", f"the schema is a JSON {kind}, not an object; the CLI "
                                 'refuses it ("--json-schema must be a JSON object"). Write an object schema with '
                                 '"type": "object" at the root')]
    problems: list[PreflightProblem] = []
    try:
        size = len(canonical(schema).encode("utf-8"))
    except ValueError:
        return [PreflightProblem("$", "not-json", "the schema holds NaN or Infinity, which are not JSON; use numbers")]
    if size > max_bytes:
        problems.append(PreflightProblem("$", "size-limit", f"the schema is {size} bytes as canonical JSON, over the "
                                         f"limit of {max_bytes} (TIEROPS_SCHEMA_MAX_BYTES): make it smaller (shorter "
                                         "descriptions, shared $defs)"))
    elif size > MAX_ARG_BYTES:
        problems.append(PreflightProblem("$", "size-exec-limit", f"the schema is {size} bytes as canonical JSON; it "
                                         f"travels inline on the CLI's command line, where one argument may hold at "
                                         f"most {MAX_ARG_BYTES} bytes: make it smaller"))

    wire = {k: v for k, v in schema.items() if k not in WIRE_DROPPED_KEYS}
    dialect = _dialect(schema, problems)
    reported: set[str] = set()
    if dialect is not None:
        _meta(schema, dialect, "meta-schema", f"not a valid {dialect} schema", problems, reported)
    if dialect != DIALECT_DRAFT_07:
        _meta(wire, DIALECT_DRAFT_07, "meta-schema-draft-07", "not valid against the draft-07 meta-schema, which the "
              "CLI checks every schema against (it then silently drops the StructuredOutput tool)", problems, reported)
    if dialect != DIALECT_2020_12:
        _meta(wire, DIALECT_2020_12, "meta-schema-2020-12", "not valid against the 2020-12 meta-schema, which the "
              "Messages API checks tool schemas against (it then refuses every request)", problems, reported)

    _root(schema, problems)
    _Walker(schema, wire, dialect or DIALECT_2020_12, problems).run()
    return _dedupe(problems)


# --------------------------------------------------------------------------- document-level checks


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def _q(value: Any) -> str:
    """A JSON value quoted for a message, capped."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= MESSAGE_DETAIL_MAX else text[: MESSAGE_DETAIL_MAX - 1] + "…"


def _dialect(schema: dict[str, Any], problems: list[PreflightProblem]) -> str | None:
    """The declared dialect (2020-12 when ``$schema`` is absent); None, with a problem, when it is
    one TierOps does not take."""
    if "$schema" not in schema:
        return DIALECT_2020_12
    declared = schema["$schema"]
    if isinstance(declared, str):
        cls = jsonschema.validators.validator_for({"$schema": declared}, default=None)  # type: ignore[arg-type]
        for name, (known, _spec) in _DIALECTS.items():
            if cls is known:
                return name
    problems.append(PreflightProblem(json_path(["$schema"]), "schema-dialect", f'"$schema" is {_q(declared)}: '
                                     "TierOps takes JSON Schema 2020-12 (the default when \"$schema\" is absent) "
                                     'and draft-07 only. Declare "https://json-schema.org/draft/2020-12/schema" or '
                                     '"http://json-schema.org/draft-07/schema#" and use that dialect\'s keywords'))
    return None


def _meta(schema: dict[str, Any], dialect: str, rule: str, what: str,
          problems: list[PreflightProblem], reported: set[str]) -> None:
    """Meta-schema errors, the most relevant one per path; paths already reported are skipped."""
    cls = _DIALECTS[dialect][0]
    validator = cls(cls.META_SCHEMA)  # no format checker: patterns are judged by their own rules
    by_path: dict[str, list[ValidationError]] = {}
    for err in validator.iter_errors(schema):
        by_path.setdefault(json_path(err.absolute_path), []).append(err)
    for path in sorted(by_path):
        if path in reported:
            continue
        reported.add(path)
        err = best_match(by_path[path])
        detail = err.message if len(err.message) <= MESSAGE_DETAIL_MAX else err.message[: MESSAGE_DETAIL_MAX - 1] + "…"
        problems.append(PreflightProblem(path, rule, f"{what}: {detail}"))


def _root(schema: dict[str, Any], problems: list[PreflightProblem]) -> None:
    root_type = schema.get("type")
    if root_type != "object":
        found = "no \"type\"" if "type" not in schema else f'"type": {_q(root_type)}'
        problems.append(PreflightProblem("$" if "type" not in schema else "$.type", "root-type-not-object",
                                         f'the root must declare "type": "object" (found {found}): the model answers '
                                         "through a tool whose input is always a JSON object, and the Messages API "
                                         'refuses a tool schema without a root "type". Put other values under a property'))
    problems.extend(
        PreflightProblem(f"$.{kw}", "root-combinator",
                         f'"{kw}" at the root: the Messages API refuses tool schemas with oneOf, anyOf or allOf at '
                         "the top level (HTTP 400 on every request). Move the alternatives under a property, or "
                         'express them with "if"/"then"/"else" or "not" at the root')
        for kw in ("oneOf", "anyOf", "allOf") if kw in schema
    )


def _dedupe(problems: list[PreflightProblem]) -> list[PreflightProblem]:
    seen: set[tuple[str, str, str]] = set()
    out = []
    for p in problems:
        key = (p.path, p.rule, p.message)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


# --------------------------------------------------------------------------- the walk

# The keywords of Ajv's default (draft-07) vocabularies in the pinned CLI: core, validation (with
# OpenAPI's nullable), draft-07 applicators, format, metadata, content. Strict mode refuses any other
# key in a compiled subschema (captures unknown-keyword, discriminator).
AJV_DRAFT7_KEYWORDS = frozenset({
    "$schema", "$id", "$defs", "$vocabulary", "$comment", "definitions", "$ref",
    "maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum", "multipleOf", "maxLength", "minLength",
    "pattern", "maxProperties", "minProperties", "required", "maxItems", "minItems", "uniqueItems", "type",
    "nullable", "const", "enum",
    "not", "anyOf", "oneOf", "allOf", "if", "then", "else", "propertyNames", "additionalProperties",
    "dependencies", "properties", "patternProperties", "items", "contains", "additionalItems",
    "format",
    "title", "description", "default", "deprecated", "readOnly", "writeOnly", "examples",
    "contentMediaType", "contentEncoding", "contentSchema",
})
# 2019-09 / 2020-12 keywords and what to write instead (captures dependent-required, dependent-schemas,
# unevaluated-properties, prefix-items, min-contains, ref-anchor, dynamic-ref, recursive-ref).
NEWER_KEYWORDS = {
    "$anchor": 'refer to the subschema by its path ("#/$defs/<name>") instead',
    "$dynamicAnchor": 'use a plain "$ref" to "#/$defs/<name>" (or "#") instead',
    "$dynamicRef": 'use a plain "$ref" to "#/$defs/<name>" (or "#") instead',
    "$recursiveAnchor": 'use a plain "$ref" to "#/$defs/<name>" (or "#") instead',
    "$recursiveRef": 'use a plain "$ref" to "#/$defs/<name>" (or "#") instead',
    "dependentRequired": 'use "dependencies" with an array of property names instead',
    "dependentSchemas": 'use "dependencies" with a schema instead',
    "unevaluatedProperties": 'use "additionalProperties" (listing every allowed property under "properties") instead',
    "unevaluatedItems": 'describe every item with "items" instead',
    "prefixItems": 'describe the items with one "items" schema instead (tuples are written differently in draft-07 '
                   "and 2020-12)",
    "minContains": 'remove it ("contains" alone means at least one)',
    "maxContains": "remove it, or check the count after the run",
}
_SCHEMA_VALUED = ("additionalProperties", "additionalItems", "contains", "propertyNames", "not", "if", "then", "else")
_SCHEMA_MAPS = ("properties", "patternProperties")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf")


@dataclass
class _Walker:
    """Visits the subschemas Ajv compiles: from the root through applicator keywords and ``$ref``
    targets (an unreferenced ``$defs`` entry is never compiled: captures format-in-unused-defs,
    unknown-keyword-in-unused-defs)."""

    schema: dict[str, Any]
    wire: dict[str, Any]
    dialect: str
    problems: list[PreflightProblem]
    paths: dict[int, tuple[str | int, ...]] = field(default_factory=dict)
    seen: set[int] = field(default_factory=set)

    def run(self) -> None:
        self._index(self.wire, ())
        spec = _DIALECTS[self.dialect][1]
        resolver = Registry().resolver_with_root(spec.create_resource(self.wire))
        root_id = self.schema.get("$id")
        orig_base = urldefrag(root_id)[0] if isinstance(root_id, str) else ""
        self._walk(self.wire, (), resolver, "", orig_base)

    def _index(self, node: Any, path: tuple[str | int, ...]) -> None:
        if isinstance(node, dict):
            self.paths.setdefault(id(node), path)
            for k, v in node.items():
                self._index(v, (*path, k))
        elif isinstance(node, list):
            self.paths.setdefault(id(node), path)
            for i, v in enumerate(node):
                self._index(v, (*path, i))

    def _add(self, path: tuple[str | int, ...], rule: str, message: str) -> None:
        self.problems.append(PreflightProblem(json_path(path), rule, message))

    def _walk(self, node: Any, path: tuple[str | int, ...], resolver: Resolver[Any], base: str, orig_base: str) -> None:
        if not isinstance(node, dict) or id(node) in self.seen:
            return
        self.seen.add(id(node))
        if path and isinstance(node.get("$id"), str):
            spec = _DIALECTS[self.dialect][1]
            resolver = resolver.in_subresource(spec.create_resource(node))
            if not (self.dialect == DIALECT_DRAFT_07 and node["$id"].startswith("#")):
                base, orig_base = urljoin(base, node["$id"]), urljoin(orig_base, node["$id"])
        self._keywords(node, path)
        for kw in _SCHEMA_VALUED:
            if kw in node:
                self._walk(node[kw], (*path, kw), resolver, base, orig_base)
        for kw in _SCHEMA_MAPS:
            if isinstance(node.get(kw), dict):
                for name, sub in node[kw].items():
                    self._walk(sub, (*path, kw, name), resolver, base, orig_base)
        for kw in _SCHEMA_LISTS:
            if isinstance(node.get(kw), list):
                for i, sub in enumerate(node[kw]):
                    self._walk(sub, (*path, kw, i), resolver, base, orig_base)
        items = node.get("items")
        if isinstance(items, list):
            for i, sub in enumerate(items):
                self._walk(sub, (*path, "items", i), resolver, base, orig_base)
        elif "items" in node:
            self._walk(items, (*path, "items"), resolver, base, orig_base)
        if isinstance(node.get("dependencies"), dict):
            for name, sub in node["dependencies"].items():
                self._walk(sub, (*path, "dependencies", name), resolver, base, orig_base)
        if isinstance(node.get("$ref"), str):
            self._ref(node["$ref"], (*path, "$ref"), resolver, base, orig_base)

    # ---- keywords of one compiled subschema

    def _keywords(self, node: dict[str, Any], path: tuple[str | int, ...]) -> None:
        for key, value in node.items():
            kpath = (*path, key)
            if key in NEWER_KEYWORDS:
                self._add(kpath, "newer-keyword-dropped-by-cli",
                          f'"{key}" is a 2019-09/2020-12 keyword; the CLI compiles schemas as draft-07, does not know '
                          f"it and silently drops the StructuredOutput tool: {NEWER_KEYWORDS[key]}")
            elif key == "format":
                self._add(kpath, "format-dropped-by-cli",
                          f'"format": {_q(value)}: the CLI knows no formats and silently drops the StructuredOutput '
                          'tool for any schema using one; remove "format" (use "pattern" if the shape matters)')
            elif key == "nullable":
                self._add(kpath, "nullable-not-json-schema",
                          '"nullable" is OpenAPI, not JSON Schema: the CLI honours it (it accepts null) while '
                          "TierOps' validator ignores it (it refuses null), and without \"type\" the CLI drops the "
                          'StructuredOutput tool. Write "type": ["<type>", "null"] instead')
            elif key not in AJV_DRAFT7_KEYWORDS:
                self._add(kpath, "unknown-keyword-dropped-by-cli",
                          f'"{key}" is not a keyword the CLI knows; its validator runs in strict mode and silently '
                          'drops the StructuredOutput tool for an unknown keyword. Remove it (notes go in '
                          '"description" or "$comment")')
        self._ignored(node, path)
        if isinstance(node.get("pattern"), str):
            self._pattern(node["pattern"], (*path, "pattern"))
        if isinstance(node.get("patternProperties"), dict):
            for pat in node["patternProperties"]:
                self._pattern(pat, (*path, "patternProperties", pat))

    def _ignored(self, node: dict[str, Any], path: tuple[str | int, ...]) -> None:
        """Ajv strict mode throws on keywords that would have no effect (captures if-without-then-else,
        then-without-if, additional-items-without-items-array, pattern-properties-matching-property)."""
        tail = "; the CLI's strict validator refuses that and silently drops the StructuredOutput tool."
        if "if" in node and "then" not in node and "else" not in node:
            self._add((*path, "if"), "ignored-keyword-dropped-by-cli",
                      f'"if" without "then" or "else" has no effect{tail} Add "then"/"else" or remove "if"')
        for kw in ("then", "else"):
            if kw in node and "if" not in node:
                self._add((*path, kw), "ignored-keyword-dropped-by-cli",
                          f'"{kw}" without "if" has no effect{tail} Add "if" or remove "{kw}"')
        if "additionalItems" in node and not isinstance(node.get("items"), list):
            self._add((*path, "additionalItems"), "ignored-keyword-dropped-by-cli",
                      f'"additionalItems" without an array "items" has no effect{tail} Remove it')
        props, pats = node.get("properties"), node.get("patternProperties")
        if isinstance(props, dict) and isinstance(pats, dict):
            for pat in pats:
                compiled = _python_regex(pat)
                hits = [name for name in props if compiled is not None and compiled.search(name)]
                if hits:
                    self._add((*path, "patternProperties", pat), "ignored-keyword-dropped-by-cli",
                              f"the pattern {_q(pat)} also matches {_q(hits[0])}, a name under \"properties\"{tail} "
                              "Narrow the pattern or drop the property from \"properties\"")

    def _pattern(self, pattern: str, path: tuple[str | int, ...]) -> None:
        js = js_regex_error(pattern)
        if js is not None:
            self._add(path, "pattern-dropped-by-cli",
                      f'{_q(pattern)} is not a valid ECMAScript regular expression with the "u" flag, which is how '
                      f"the CLI compiles it ({js}); the CLI silently drops the StructuredOutput tool. Rewrite it")
            return
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                re.compile(pattern)
        except re.error as exc:
            self._add(path, "pattern-invalid-for-tierops",
                      f"TierOps' validator (Python re) cannot compile {_q(pattern)} ({exc}); write it in the "
                      "syntax Python and ECMAScript share (no \\p{…}, no (?<name>…))")

    # ---- $ref

    def _ref(self, ref: str, path: tuple[str | int, ...], resolver: Resolver[Any], base: str, orig_base: str) -> None:
        try:
            resolved = resolver.lookup(ref)
        except (Unresolvable, ValueError, LookupError, TypeError):
            self._unresolved(ref, path, base, orig_base)
            return
        target = resolved.contents
        if isinstance(target, bool):
            return  # true / false: a schema with nothing to compile
        if not isinstance(target, dict):
            self._add(path, "ref-unresolvable", f'"$ref": {_q(ref)} points at {_article(_json_kind(target))}, not at a '
                      'schema; the CLI silently drops the StructuredOutput tool for it. Point it at a schema such as '
                      '"#/$defs/<name>"')
            return
        target_path = self.paths.get(id(target))
        if target_path is None:  # not inside this document (cannot happen without a retriever)
            self._unresolved(ref, path, base, orig_base)
            return
        self._walk(target, target_path, resolved.resolver, base, orig_base)

    def _unresolved(self, ref: str, path: tuple[str | int, ...], base: str, orig_base: str) -> None:
        try:
            doc = urldefrag(urljoin(base, ref))[0]
            orig_doc, fragment = urldefrag(urljoin(orig_base, ref))
        except ValueError:
            doc, orig_doc, fragment = ref, ref, ""
        root_id = self.schema.get("$id")
        root_doc = urldefrag(root_id)[0] if isinstance(root_id, str) else None
        local = {""} | {urldefrag(i)[0] for i in _embedded_ids(self.wire)}
        if doc not in local and root_doc and orig_doc == root_doc:
            self._add(path, "ref-root-id", f'"$ref": {_q(ref)} resolves only through the root "$id", which TierOps '
                      "leaves out of the schema it gives the CLI (the CLI then silently drops the StructuredOutput "
                      f'tool); write it as {_q("#" + fragment)}')
        elif doc not in local:
            self._add(path, "ref-remote", f'"$ref": {_q(ref)} points outside this schema; TierOps never fetches '
                      "schemas and the CLI silently drops the StructuredOutput tool for a $ref it cannot resolve. "
                      'Copy the target under "$defs" and refer to it as "#/$defs/<name>"')
        else:
            self._add(path, "ref-unresolvable", f'"$ref": {_q(ref)} points at nothing in this schema; the CLI '
                      "silently drops the StructuredOutput tool for a $ref it cannot resolve. Point it at an "
                      'existing "#/$defs/<name>"')


def _article(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _embedded_ids(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$id"), str):
            yield node["$id"]
        for v in node.values():
            yield from _embedded_ids(v)
    elif isinstance(node, list):
        for v in node:
            yield from _embedded_ids(v)


def _python_regex(pattern: str) -> re.Pattern[str] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return re.compile(pattern)
    except re.error:
        return None


# --------------------------------------------------------------------------- ECMAScript regex syntax

_SYNTAX_CHARS = frozenset("^$\\.*+?()[]{}|")
_CLASS_ESCAPES = frozenset("dDsSwW")
_CONTROL_ESCAPES = {"f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09, "v": 0x0B}
_HEX = frozenset("0123456789abcdefABCDEF")
_PROPERTY = re.compile(r"[A-Za-z_]+(?:=[A-Za-z0-9_]+)?")
_MODIFIERS = frozenset("ims")


class _JsSyntaxError(Exception):
    pass


class _JsRegex:
    """A syntax checker for ECMAScript regular expressions with the ``u`` flag, as Ajv compiles
    ``pattern`` (``new RegExp(p, "u")``) in the CLI's JavaScriptCore. Checked against the CLI by the
    pattern-* capture cases (modifier groups like ``(?i:a)`` are accepted: capture
    pattern-modifier-group)."""

    def __init__(self, source: str) -> None:
        self.s = source
        self.i = 0
        self.groups = 0
        self.names: list[str] = []
        self.backrefs: list[int] = []
        self.named_refs: list[str] = []

    def fail(self, what: str, at: int | None = None, hint: str = "") -> _JsSyntaxError:
        return _JsSyntaxError(f"{what} at offset {self.i if at is None else at}{hint}")

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def parse(self) -> None:
        self.disjunction()
        if self.i < len(self.s):
            raise self.fail("unmatched \")\"")
        for n in self.backrefs:
            if n > self.groups:
                raise _JsSyntaxError(f"back-reference \\{n} to a group that does not exist")
        for name in self.named_refs:
            if name not in self.names:
                raise _JsSyntaxError(f"\\k<{name}> names no group")

    def disjunction(self) -> None:
        self.alternative()
        while self.peek() == "|":
            self.i += 1
            self.alternative()

    def alternative(self) -> None:
        while self.i < len(self.s) and self.peek() not in ("|", ")"):
            self.term()

    def term(self) -> None:
        c = self.peek()
        if c in ("^", "$"):
            self.i += 1
            self.no_quantifier()
        elif c == "\\" and self.peek(1) in ("b", "B"):
            self.i += 2
            self.no_quantifier()
        elif c == "(":
            if self.group():
                self.quantifier()
            else:
                self.no_quantifier()
        elif c == "[":
            self.char_class()
            self.quantifier()
        elif c == "\\":
            self.atom_escape()
            self.quantifier()
        elif c in ("*", "+", "?", "{"):
            raise self.fail(f'nothing to repeat before "{c}"')
        elif c in ("]", "}"):
            raise self.fail(f'lone "{c}"')
        else:
            self.i += 1
            self.quantifier()

    def no_quantifier(self) -> None:
        if self.peek() in ("*", "+", "?", "{"):
            raise self.fail(f'nothing to repeat before "{self.peek()}"')

    def quantifier(self) -> None:
        c = self.peek()
        if c in ("*", "+", "?"):
            self.i += 1
        elif c == "{":
            m = re.compile(r"\{(\d+)(,(\d*))?\}").match(self.s, self.i)
            if m is None:
                raise self.fail("incomplete quantifier")
            low, high = int(m.group(1)), m.group(3)
            if high and int(high) < low:
                raise self.fail("numbers out of order in {} quantifier")
            self.i = m.end()
        else:
            return
        if self.peek() == "?":
            self.i += 1

    def group(self) -> bool:
        """Parses ``( … )``; returns whether it may be quantified."""
        start = self.i
        rest = self.s[self.i:]
        quantifiable = True
        if rest.startswith(("(?=", "(?!")):
            self.i += 3
            quantifiable = False
        elif rest.startswith(("(?<=", "(?<!")):
            self.i += 4
            quantifiable = False
        elif rest.startswith("(?:"):
            self.i += 3
        elif rest.startswith("(?<"):
            self.i += 3
            end = self.s.find(">", self.i)
            name = self.s[self.i:end] if end >= 0 else ""
            if not name or not name.replace("$", "_").isidentifier():
                raise self.fail("invalid group name")
            if name in self.names:
                raise self.fail(f'duplicate group name "{name}"')
            self.names.append(name)
            self.groups += 1
            self.i = end + 1
        elif rest.startswith("(?"):
            self.i += 2
            self.modifiers()
        else:
            self.i += 1
            self.groups += 1
        self.disjunction()
        if self.peek() != ")":
            self.i = start
            raise self.fail('unterminated group "("')
        self.i += 1
        return quantifiable

    def modifiers(self) -> None:
        m = re.compile(r"([a-z]*)(?:-([a-z]*))?:").match(self.s, self.i)
        if m is None:
            raise self.fail("invalid group")
        on, off = m.group(1), m.group(2) or ""
        flags = on + off
        if (not flags or not set(flags) <= _MODIFIERS or len(set(flags)) != len(flags)
                or (m.group(2) is not None and not off and not on)):
            raise self.fail("invalid group")
        self.i = m.end()

    def atom_escape(self) -> None:
        self.i += 1
        c = self.peek()
        if not c:
            raise self.fail("\\ at end of pattern")
        if c in "123456789":
            end = self.i
            while self.peek(end - self.i).isdigit():
                end += 1
            self.backrefs.append(int(self.s[self.i:end]))
            self.i = end
        elif c == "k":
            self.i += 1
            m = re.compile(r"<([^>]*)>").match(self.s, self.i)
            if m is None:
                raise self.fail("invalid named reference")
            self.named_refs.append(m.group(1))
            self.i = m.end()
        elif c in _CLASS_ESCAPES:
            self.i += 1
        elif c in ("p", "P"):
            self.property_escape()
        else:
            self.character_escape(in_class=False)

    def property_escape(self) -> None:
        self.i += 1
        m = re.compile(r"\{([^}]*)\}").match(self.s, self.i)
        if m is None or not _PROPERTY.fullmatch(m.group(1)):
            raise self.fail("invalid property name")
        self.i = m.end()

    def character_escape(self, in_class: bool) -> int:
        """After the backslash; returns the code point."""
        c = self.peek()
        if c in _CONTROL_ESCAPES:
            self.i += 1
            return _CONTROL_ESCAPES[c]
        if c == "c":
            letter = self.peek(1)
            if not (letter.isascii() and letter.isalpha()):
                raise self.fail("invalid unicode escape \\c")
            self.i += 2
            return ord(letter) % 32
        if c == "0":
            if self.peek(1).isdigit():
                raise self.fail("invalid decimal escape")
            self.i += 1
            return 0
        if c == "x":
            digits = self.s[self.i + 1:self.i + 3]
            if len(digits) != 2 or not set(digits) <= _HEX:
                raise self.fail("invalid escape \\x")
            self.i += 3
            return int(digits, 16)
        if c == "u":
            return self.unicode_escape()
        if c in _SYNTAX_CHARS or c == "/" or (in_class and c == "-"):
            self.i += 1
            return ord(c)
        raise self.fail(f'invalid escape "\\{c}"', self.i - 1,
                        ': with the "u" flag only ^$\\.*+?()[]{}|/ may be escaped (and "-" inside a class)')

    def unicode_escape(self) -> int:
        if self.peek(1) == "{":
            end = self.s.find("}", self.i + 2)
            digits = self.s[self.i + 2:end] if end >= 0 else ""
            if not digits or not set(digits) <= _HEX or int(digits, 16) > 0x10FFFF:
                raise self.fail("invalid unicode escape")
            self.i = end + 1
            return int(digits, 16)
        digits = self.s[self.i + 1:self.i + 5]
        if len(digits) != 4 or not set(digits) <= _HEX:
            raise self.fail("invalid unicode escape")
        self.i += 5
        code = int(digits, 16)
        if 0xD800 <= code <= 0xDBFF and self.s[self.i:self.i + 2] == "\\u":
            trail = self.s[self.i + 2:self.i + 6]
            if len(trail) == 4 and set(trail) <= _HEX and 0xDC00 <= int(trail, 16) <= 0xDFFF:
                self.i += 6
                return 0x10000 + ((code - 0xD800) << 10) + (int(trail, 16) - 0xDC00)
        return code

    def char_class(self) -> None:
        start = self.i
        self.i += 1
        if self.peek() == "^":
            self.i += 1
        while True:
            if self.i >= len(self.s):
                self.i = start
                raise self.fail('unterminated character class "["')
            if self.peek() == "]":
                self.i += 1
                return
            at = self.i
            low = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                high = self.class_atom()
                if low is None or high is None:
                    raise self.fail("invalid character class (a range cannot start or end at a class escape)", at)
                if low > high:
                    raise self.fail("range out of order in character class", at)

    def class_atom(self) -> int | None:
        """One class atom; its code point, or None for a class escape such as \\d."""
        c = self.peek()
        if c != "\\":
            self.i += 1
            return ord(c)
        self.i += 1
        d = self.peek()
        if not d:
            raise self.fail("\\ at end of pattern")
        if d == "b":
            self.i += 1
            return 0x08
        if d in _CLASS_ESCAPES:
            self.i += 1
            return None
        if d in ("p", "P"):
            self.property_escape()
            return None
        if d in "123456789":
            raise self.fail("invalid class escape")
        return self.character_escape(in_class=True)


def js_regex_error(pattern: str) -> str | None:
    """Why ``new RegExp(pattern, "u")`` would throw in the CLI, or None when it compiles."""
    try:
        _JsRegex(pattern).parse()
    except _JsSyntaxError as exc:
        return str(exc)
    return None

