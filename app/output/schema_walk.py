"""The subschemas the CLI compiles, and what in them makes it drop the StructuredOutput tool.

Why a module of its own: ``app/output/preflight.py`` judges a schema document as a whole (its
size, dialect, meta-schemas, root); this walker visits what the CLI's Ajv (draft-07, strict mode)
compiles: from the root through applicator keywords and ``$ref`` targets, as Ajv does, so an
unreferenced ``$defs`` entry is never judged (captures format-in-unused-defs,
unknown-keyword-in-unused-defs). Each finding is a (path of keys, rule id, message); the rule ids
are those of :data:`app.output.preflight.RULES`, which also say which capture backs each.

Patterns are compiled as the CLI compiles them, ``new RegExp(p, "u")``, by ``regress`` (the
ECMAScript engine jsonschema uses for ``format: regex``), and with Python's ``re``, which is
TierOps' own validator. Pure: no I/O.
"""

from __future__ import annotations

import json
import logging
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urldefrag, urljoin

import regress
from referencing import Registry, Specification
from referencing.exceptions import Unresolvable

if TYPE_CHECKING:
    from referencing._core import Resolver  # not re-exported by referencing

log = logging.getLogger(__name__)

__all__ = ["AJV_DRAFT7_KEYWORDS", "NEWER_KEYWORDS", "Finding", "js_regex_error", "json_kind", "quote", "walk"]

KeyPath = tuple[str | int, ...]
Finding = tuple[KeyPath, str, str]
"""One problem the walk found: the path of keys to it, the rule id, what to do."""

MESSAGE_DETAIL_MAX = 300

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


def walk(schema: dict[str, Any], wire: dict[str, Any], spec: Specification[Any], *, draft_07: bool) -> list[Finding]:
    """Every finding in the subschemas the CLI compiles of ``wire`` (the copy it is given);
    ``schema`` is the document as written (its root ``$id`` explains a ``$ref`` the wire breaks),
    ``spec`` its dialect's, ``draft_07`` whether ``"$id": "#name"`` is an anchor."""
    walker = _Walker(schema, wire, spec, draft_07)
    walker.run()
    return walker.findings


def json_kind(value: Any) -> str:
    """The JSON name of a decoded value's type (``object``, ``array``, ``number`` …)."""
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


def quote(value: Any) -> str:
    """A JSON value quoted for a message, capped."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= MESSAGE_DETAIL_MAX else text[: MESSAGE_DETAIL_MAX - 1] + "…"


# A lone surrogate (from a JSON "\ud83d" escape), and the backslashes before it.
_LONE_SURROGATE = re.compile(r"(\\*)([\ud800-\udfff])")


def _utf8_pattern(pattern: str) -> str:
    """``pattern`` as text regress (UTF-8) takes, meaning what the CLI's UTF-16 string means: a
    surrogate pair as its one character, a lone surrogate as the ``\\u{…}`` escape of that code
    point, or after an escaping backslash as U+FFFD (an identity escape the "u" flag refuses
    either way)."""
    if pattern.isascii():
        return pattern
    pattern = pattern.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")

    def escape(m: re.Match[str]) -> str:
        slashes = m.group(1)
        if len(slashes) % 2:
            return slashes + "\ufffd"
        return f"{slashes}\\u{{{ord(m.group(2)):X}}}"

    return _LONE_SURROGATE.sub(escape, pattern)


def js_regex_error(pattern: str) -> str | None:
    """Why ``new RegExp(pattern, "u")`` would throw in the CLI (regress's message), or None when it
    compiles. The pattern-* capture cases hold regress to the CLI's verdicts; where they differ, a
    rule of its own says so (:func:`_quantified_boundary`)."""
    try:
        regress.Regex(_utf8_pattern(pattern), "u")
    except regress.RegressError as exc:
        return str(exc)
    if _quantified_boundary(pattern):
        return "Quantifier not allowed here (after \\b or \\B)"
    return None


def _quantified_boundary(pattern: str) -> bool:
    """Whether a ``\\b`` or ``\\B`` assertion is quantified (``^a\\b+$``): ECMAScript refuses to repeat
    an assertion and the CLI drops the tool (capture pattern-quantified-boundary), while regress
    takes it. Read only after regress accepted ``pattern``, so its syntax is sound: an escape's
    second character is never a quantifier's, and inside a class ``\\b`` is a backspace."""
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if not in_class and pattern[i + 1:i + 2] in ("b", "B") and pattern[i + 2:i + 3] in ("*", "+", "?", "{"):
                return True
            i += 2
            continue
        if c == "[":
            in_class = True
        elif c == "]":
            in_class = False
        i += 1
    return False


def _python_regex(pattern: str) -> re.Pattern[str] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return re.compile(pattern)
    except re.error:
        return None


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


@dataclass
class _Walker:
    """Visits the subschemas Ajv compiles, each once: from the root through applicator keywords
    and ``$ref`` targets."""

    schema: dict[str, Any]
    wire: dict[str, Any]
    spec: Specification[Any]
    draft_07: bool
    findings: list[Finding] = field(default_factory=list)
    paths: dict[int, KeyPath] = field(default_factory=dict)
    seen: set[int] = field(default_factory=set)

    def run(self) -> None:
        self._index(self.wire, ())
        resolver = Registry().resolver_with_root(self.spec.create_resource(self.wire))
        root_id = self.schema.get("$id")
        orig_base = urldefrag(root_id)[0] if isinstance(root_id, str) else ""
        self._walk(self.wire, (), resolver, "", orig_base)

    def _index(self, node: Any, path: KeyPath) -> None:
        if isinstance(node, dict):
            self.paths.setdefault(id(node), path)
            for k, v in node.items():
                self._index(v, (*path, k))
        elif isinstance(node, list):
            self.paths.setdefault(id(node), path)
            for i, v in enumerate(node):
                self._index(v, (*path, i))

    def _add(self, path: KeyPath, rule: str, message: str) -> None:
        self.findings.append((path, rule, message))

    def _walk(self, node: Any, path: KeyPath, resolver: Resolver[Any], base: str, orig_base: str) -> None:
        if not isinstance(node, dict) or id(node) in self.seen:
            return
        self.seen.add(id(node))
        if path and isinstance(node.get("$id"), str):
            resolver = resolver.in_subresource(self.spec.create_resource(node))
            if not (self.draft_07 and node["$id"].startswith("#")):
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

    def _keywords(self, node: dict[str, Any], path: KeyPath) -> None:
        for key, value in node.items():
            kpath = (*path, key)
            if key in NEWER_KEYWORDS:
                self._add(kpath, "newer-keyword-dropped-by-cli",
                          f'"{key}" is a 2019-09/2020-12 keyword; the CLI compiles schemas as draft-07, does not know '
                          f"it and silently drops the StructuredOutput tool: {NEWER_KEYWORDS[key]}")
            elif key == "format":
                self._add(kpath, "format-dropped-by-cli",
                          f'"format": {quote(value)}: the CLI knows no formats and silently drops the StructuredOutput '
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

    def _ignored(self, node: dict[str, Any], path: KeyPath) -> None:
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
                              f"the pattern {quote(pat)} also matches {quote(hits[0])}, a name under \"properties\""
                              f"{tail} Narrow the pattern or drop the property from \"properties\"")

    def _pattern(self, pattern: str, path: KeyPath) -> None:
        js = js_regex_error(pattern)
        if js is not None:
            self._add(path, "pattern-dropped-by-cli",
                      f'{quote(pattern)} is not a valid ECMAScript regular expression with the "u" flag, which is how '
                      f"the CLI compiles it ({js}); the CLI silently drops the StructuredOutput tool. Rewrite it")
            return
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                re.compile(pattern)
        except re.error as exc:
            self._add(path, "pattern-invalid-for-tierops",
                      f"TierOps' validator (Python re) cannot compile {quote(pattern)} ({exc}); write it in the "
                      "syntax Python and ECMAScript share (no \\p{…}, no (?<name>…))")

    # ---- $ref

    def _ref(self, ref: str, path: KeyPath, resolver: Resolver[Any], base: str, orig_base: str) -> None:
        try:
            resolved = resolver.lookup(ref)
        except (Unresolvable, ValueError, LookupError, TypeError):
            self._unresolved(ref, path, base, orig_base)
            return
        target = resolved.contents
        if isinstance(target, bool):
            return  # true / false: a schema with nothing to compile
        if not isinstance(target, dict):
            self._add(path, "ref-unresolvable", f'"$ref": {quote(ref)} points at {_article(json_kind(target))}, not '
                      'at a schema; the CLI silently drops the StructuredOutput tool for it. Point it at a schema such '
                      'as "#/$defs/<name>"')
            return
        target_path = self.paths.get(id(target))
        if target_path is None:  # not inside this document (cannot happen without a retriever)
            self._unresolved(ref, path, base, orig_base)
            return
        self._walk(target, target_path, resolved.resolver, base, orig_base)

    def _unresolved(self, ref: str, path: KeyPath, base: str, orig_base: str) -> None:
        try:
            doc = urldefrag(urljoin(base, ref))[0]
            orig_doc, fragment = urldefrag(urljoin(orig_base, ref))
        except ValueError:
            doc, orig_doc, fragment = ref, ref, ""
        root_id = self.schema.get("$id")
        root_doc = urldefrag(root_id)[0] if isinstance(root_id, str) else None
        local = {""} | {urldefrag(i)[0] for i in _embedded_ids(self.wire)}
        if doc not in local and root_doc and orig_doc == root_doc:
            self._add(path, "ref-root-id", f'"$ref": {quote(ref)} resolves only through the root "$id", which TierOps '
                      "leaves out of the schema it gives the CLI (the CLI then silently drops the StructuredOutput "
                      f'tool); write it as {quote("#" + fragment)}')
        elif doc not in local:
            self._add(path, "ref-remote", f'"$ref": {quote(ref)} points outside this schema; TierOps never fetches '
                      "schemas and the CLI silently drops the StructuredOutput tool for a $ref it cannot resolve. "
                      'Copy the target under "$defs" and refer to it as "#/$defs/<name>"')
        else:
            self._add(path, "ref-unresolvable", f'"$ref": {quote(ref)} points at nothing in this schema; the CLI '
                      "silently drops the StructuredOutput tool for a $ref it cannot resolve. Point it at an "
                      'existing "#/$defs/<name>"')
