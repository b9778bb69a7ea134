"""Schema preflight: refuse, before any CLI starts, an output schema the run could not use.

Why: the Claude Code CLI compiles the ``--json-schema`` it is given with Ajv (draft-07, strict mode,
no formats) and, when that fails, silently leaves the ``StructuredOutput`` tool out: the run then
"succeeds" without structured output (reference §5.5). Each rule here (:data:`RULES`) names the
captures of the pinned CLI that back it (``tests/fixtures/claude-code/2.1.197/schema-rules/``,
re-run by ``tests/realcli/test_schema_rules.py``), so a CLI upgrade that changes a behaviour fails
a test instead of silently loosening or tightening a rule.

This module checks the document as a whole (JSON object, size, dialect, meta-schemas, the root);
``app/output/schema_walk.py`` checks each subschema the CLI compiles. Both look at the copy the
CLI is given, :meth:`app.output.validate.OutputValidator.wire_schema` (:data:`WIRE_DROPPED_KEYS`
left out). Every problem names a JSON path (``$.properties.url.format``), a rule id and what to
do. Pure: no I/O except :func:`preflight_file`, which reads the one file it is given.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError, best_match
from referencing import Specification
from referencing.jsonschema import DRAFT7, DRAFT202012

from app.output import schema_walk
from app.output.schema_walk import json_kind, quote
from app.output.validate import json_path

log = logging.getLogger(__name__)

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
MESSAGE_DETAIL_MAX = schema_walk.MESSAGE_DETAIL_MAX

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

# One rule per construct the probes showed the CLI (or the Messages API behind it) refuses,
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
          ("pattern-escaped-hash", _DROPPED), ("pattern-quantified-boundary", _DROPPED))),
    Rule("pattern-invalid-for-tierops", "a pattern the CLI takes but Python's re (TierOps' validator) refuses",
         (("pattern-unicode-property", "accepted"), ("pattern-js-named-group", "accepted"),
          ("pattern-group-name-in-alternatives", "accepted"))),
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
        kind = json_kind(schema)
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
    spec = _DIALECTS[dialect or DIALECT_2020_12][1]
    problems += [PreflightProblem(json_path(path), rule, message)
                 for path, rule, message in schema_walk.walk(schema, wire, spec, draft_07=dialect == DIALECT_DRAFT_07)]
    return _dedupe(problems)


# --------------------------------------------------------------------------- document-level checks


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


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
    problems.append(PreflightProblem(json_path(["$schema"]), "schema-dialect", f'"$schema" is {quote(declared)}: '
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
        found = "no \"type\"" if "type" not in schema else f'"type": {quote(root_type)}'
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
