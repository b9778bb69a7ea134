"""Finding the JSON answer in an agent's final text: ``prompted`` mode, and text answers in
``native`` mode.

Why: in ``prompted`` mode there is no StructuredOutput tool; the schema goes into the prompt
(:func:`format_section`) and the answer is the model's final text. In ``native`` mode the CLI
itself does not look at text (a model that answers in text twice ends the run ``success`` without
``structured_output``, reference §5.4), so a valid JSON answer given as text is taken (source
``extracted``, degraded) before a resume is spent. Both need one rule for "where is the JSON in
this text", and it must never guess.

:func:`extract_json` tries, in order, the **whole** text, exactly one Markdown **fenced** block,
then one **balanced** JSON value found by a linear scanner; identical repeats count as one,
different candidates or a value cut off at the end are errors, never a guess. ``strict=True``
accepts the whole text only. The work is bounded: :data:`MAX_TEXT_CHARS`, :data:`MAX_DEPTH`,
:data:`MAX_CANDIDATES`. The rules in full, and why: ARCHITECTURE.md, "The answer in text".

The extracted ``value`` is the decoded JSON as is; like ``structured_output``, the caller passes it
through ``values.json_safe`` before storing it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.stream.values import MAX_DEPTH, as_text

log = logging.getLogger(__name__)

__all__ = [
    "MAX_CANDIDATES",
    "MAX_DEPTH",
    "MAX_TEXT_CHARS",
    "Extraction",
    "How",
    "extract_json",
    "format_section",
    "recovery_section",
]

How = Literal["whole", "fenced", "balanced"]

# Bounded work on hostile input. A real report is a few kB; the cap leaves a wide margin.
MAX_TEXT_CHARS = 1_000_000
ERROR_DETAIL_MAX = 200  # characters of a JSON decoder message quoted in an error
MAX_CANDIDATES = 1_000  # JSON values in one text before the scan gives up (one is the answer)
RECOVERY_ERRORS_MAX = 30  # errors listed in one recovery prompt (as app/supervisor/context.py does)


@dataclass(frozen=True)
class Extraction:
    """What :func:`extract_json` found. Exactly one of ``value``/``error`` is meaningful:
    ``error`` None means ``value`` is the answer (an object or array) found the ``how`` way.
    ``candidates``: JSON values found at the stage that decided (0 when none)."""

    value: Any | None
    how: How | None
    error: str | None
    candidates: int

    @property
    def ok(self) -> bool:
        return self.error is None


def _fail(error: str, candidates: int = 0) -> Extraction:
    return Extraction(value=None, how=None, error=error, candidates=candidates)


# --- decoding -------------------------------------------------------------------------------------

def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when containers nest deeper than ``limit``. Iterative: no recursion on any input."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


TOO_DEEP_ERROR = f"the JSON is nested more than {MAX_DEPTH} levels deep"


@dataclass(frozen=True)
class _Decoded:
    value: Any = None
    error: str | None = None  # None: value is a JSON object or array within the depth limit


def _decode(text: str) -> _Decoded:
    try:
        # NaN/Infinity are not JSON (the schema validator and the stored copy need real JSON).
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        return _Decoded(error=TOO_DEEP_ERROR)
    except ValueError as exc:
        return _Decoded(error=f"it does not parse as JSON: {as_text(str(exc), ERROR_DETAIL_MAX)}")
    if not isinstance(value, dict | list):
        return _Decoded(error="it is not a JSON object")
    if _too_deep(value):
        return _Decoded(error=TOO_DEEP_ERROR)
    return _Decoded(value=value)


def _canonical(value: Any) -> str:
    """Equal answers have equal text: sorted keys, and ``1``/``1.0``/``true`` kept apart (Python's
    ``==`` would call them equal). Depth is already capped, so this cannot recurse too far."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _distinct(values: list[Any]) -> int:
    return len({_canonical(v) for v in values})


# --- rule 2: code fences --------------------------------------------------------------------------

# CommonMark fences: up to 3 spaces of indent, 3+ backticks (no backtick in the info string) or
# 3+ tildes; closed by a line of the same character, at least as long, and nothing else. Only the
# fence lines are visited (found in C); the lines between them cost nothing here.
_FENCE_LINE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})(?P<rest>[^\n]*)$", re.MULTILINE)


@dataclass(frozen=True)
class _Fence:
    info: str  # the first word of the info string, lower case ("" for a bare fence)
    content: str
    closed: bool


class _TooMany(Exception):
    pass


def _fences(text: str) -> list[_Fence]:
    """The fenced code blocks of ``text``; raises :class:`_TooMany` past :data:`MAX_CANDIDATES`."""
    fences: list[_Fence] = []
    open_fence: re.Match[str] | None = None
    for m in _FENCE_LINE.finditer(text):
        fence, rest = m.group("fence"), m.group("rest").strip()
        if open_fence is None:
            if fence[0] == "`" and "`" in rest:
                continue  # not a fence: inline code such as ```a``` on its own line
            open_fence = m
        elif not rest and fence[0] == open_fence.group("fence")[0] and len(fence) >= len(open_fence.group("fence")):
            fences.append(_Fence(_info(open_fence), text[open_fence.end() + 1:m.start()], True))
            open_fence = None
            if len(fences) > MAX_CANDIDATES:
                raise _TooMany
    if open_fence is not None:
        fences.append(_Fence(_info(open_fence), text[open_fence.end() + 1:], False))
    return fences


def _info(opener: re.Match[str]) -> str:
    return (opener.group("rest").split() or [""])[0].lower()


def _from_fences(text: str) -> Extraction | None:
    """Rule 2, or None to go on to rule 3."""
    values: list[Any] = []
    broken: list[str] = []
    try:
        fences = _fences(text)
    except _TooMany:
        return _fail(f"more than {MAX_CANDIDATES} code blocks in the answer; answer with exactly one JSON object")
    for fence in fences:
        if fence.info not in ("json", ""):
            continue  # ```python, ```bash …: not the answer's fence
        content = fence.content.strip()
        if content[:1] not in ("{", "["):
            if fence.info == "json" and fence.closed:
                broken.append("it does not hold a JSON object")
            continue
        decoded = _decode(content)
        if decoded.error is None:
            values.append(decoded.value)
        elif fence.info == "json" and fence.closed:
            broken.append(decoded.error)
        # an unclosed fence that does not parse: rule 3 says whether it looks cut off
    if values and not broken and (len(values) == 1 or _distinct(values) == 1):
        return Extraction(value=values[-1], how="fenced", error=None, candidates=len(values))
    total = len(values) + len(broken)
    if total == 0:
        return None
    if total == 1:
        return _fail(f"the ```json block is not valid: {broken[0]}", 1)
    # Competing blocks (different, or a broken ```json block beside a good one) are an
    # error, never a guess.
    detail = f" ({len(broken)} not valid)" if broken else ""
    return _fail(f"{total} fenced JSON blocks{detail}; answer with exactly one", total)


# --- rule 3: balanced spans -----------------------------------------------------------------------

# Openers that can start JSON: an object's first token is a key or its end, an array's a value.
# Prose such as "{placeholder}" or "[see above]" never enters the scanner.
_OPENER = re.compile(r"\{\s*[\"}]|\[\s*(?:[-0-9\"{\[\]]|true\b|false\b|null\b)")
# Inside JSON the scanner only needs brackets and whole strings (escapes included; group q is
# None when the text ends inside the string). The unrolled form cannot backtrack badly.
_TOKEN = re.compile(r'"[^"\\]*(?:\\[\s\S][^"\\]*)*(?:(?P<q>")|\\?\Z)|[{}\[\]]')
_CLOSER = {"{": "}", "[": "]"}
_DECODER = json.JSONDecoder(parse_constant=_no_constant)


@dataclass(frozen=True)
class _Span:
    kind: str  # "{" or "["
    value: Any = None
    problem: str | None = None  # None: value is the decoded span


@dataclass(frozen=True)
class _Scan:
    spans: list[_Span]
    stop: str | None = None  # why scanning stopped early: the whole extraction fails with it


def _cut_off(open_brackets: int, in_string: bool) -> str:
    where = " inside a string" if in_string else ""
    return (f"the JSON looks cut off: the text ends{where} with {open_brackets} bracket"
            f"{'s' if open_brackets > 1 else ''} still open")


def _scan(text: str) -> _Scan:
    """Top-level JSON-looking spans, left to right, in one pass.

    From each opener the span is first decoded in C (``raw_decode``); only JSON that does not
    decode is walked here, bracket by bracket and string by string, to find where it ends (or that
    it never does: cut off) so scanning can go on after it."""
    spans: list[_Span] = []
    pos = 0
    while (m := _OPENER.search(text, pos)) is not None:
        if len(spans) >= MAX_CANDIDATES:
            return _Scan(spans, f"more than {MAX_CANDIDATES} JSON values in the answer; answer with exactly one")
        start = m.start()
        opener = text[start]
        try:
            value, end = _DECODER.raw_decode(text, start)
        except RecursionError:
            return _Scan(spans, TOO_DEEP_ERROR)
        except ValueError as exc:
            problem = f"it does not parse as JSON: {as_text(str(exc), ERROR_DETAIL_MAX)}"
        else:
            if _too_deep(value):
                return _Scan(spans, TOO_DEEP_ERROR)
            spans.append(_Span(opener, value))
            pos = end
            continue
        stack = [opener]
        pos = -1  # set when the span ends; -1: the text ended first
        for t in _TOKEN.finditer(text, start + 1):
            token = t.group()
            if token[0] == '"':
                if t.group("q") is None:
                    return _Scan(spans, _cut_off(len(stack), True))
            elif token in _CLOSER:
                stack.append(token)
                if len(stack) > MAX_DEPTH:
                    return _Scan(spans, TOO_DEEP_ERROR)
            elif token != _CLOSER[stack[-1]]:
                spans.append(_Span(opener, problem=f"its brackets do not match ('{token}' closes '{stack[-1]}')"))
                pos = t.end()
                break
            else:
                stack.pop()
                if not stack:
                    spans.append(_Span(opener, problem=problem))
                    pos = t.end()
                    break
        if pos < 0:
            return _Scan(spans, _cut_off(len(stack), False))
    return _Scan(spans)


def _from_spans(text: str) -> Extraction:
    """Rule 3."""
    scan = _scan(text)
    if scan.stop is not None:
        # A truncated answer's inner objects are fragments, never the answer.
        return _fail(scan.stop, len(scan.spans) + 1)
    pool = [s for s in scan.spans if s.kind == "{"] or scan.spans
    if not pool:
        return _fail("no JSON object found in the answer")
    values = [s.value for s in pool if s.problem is None]
    problems = [s.problem for s in pool if s.problem is not None]
    if not problems and (len(values) == 1 or _distinct(values) == 1):
        return Extraction(value=values[-1], how="balanced", error=None, candidates=len(values))
    if len(pool) == 1:
        return _fail(f"the answer looks like JSON but {problems[0]}", 1)
    noun = "JSON objects" if pool[0].kind == "{" else "JSON arrays"
    detail = f"{_distinct(values)} different" if values else ""
    if problems:
        detail += (", " if detail else "") + f"{len(problems)} not valid"
    return _fail(f"{len(pool)} {noun} in the answer ({detail}); answer with exactly one", len(pool))


# --- the entry point ------------------------------------------------------------------------------

def extract_json(text: str, *, strict: bool = False) -> Extraction:
    """The one JSON answer in ``text`` (see the module docstring for the rules and limits)."""
    if len(text) > MAX_TEXT_CHARS:
        return _fail(f"the answer is {len(text):,} characters long; at most {MAX_TEXT_CHARS:,} are read")
    stripped = text.strip()
    if not stripped:
        return _fail("the answer is empty")
    if stripped[0] in "{[":
        decoded = _decode(stripped)
        if decoded.error is None:
            return Extraction(value=decoded.value, how="whole", error=None, candidates=1)
        if decoded.error == TOO_DEEP_ERROR:
            return _fail(decoded.error, 1)
    fenced = _from_fences(stripped)
    lenient = fenced if fenced is not None else _from_spans(stripped)
    if not strict or not lenient.ok:
        return lenient
    # Strict refuses any text around the JSON, fences included.
    found = "inside a code fence" if lenient.how == "fenced" else "with other text around it"
    return _fail(f"strict mode: the answer must be the JSON object alone, but it came {found}",
                 lenient.candidates)


# --- prompts of prompted mode ---------------------------------------------------------------------

def _fence_for(body: str) -> str:
    """A backtick fence longer than any backtick run in ``body`` (a schema description may hold
    ```), so the fence cannot be closed early."""
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    return "`" * max(3, longest + 1)


def format_section(schema: Mapping[str, Any], *, strict: bool = False) -> str:
    """The "Required output format" section of a prompted-mode prompt: the schema,
    pretty-printed in a ```json fence, and the rules :func:`extract_json` applies."""
    body = json.dumps(schema, indent=2, ensure_ascii=False, sort_keys=False)
    fence = _fence_for(body)
    if strict:
        how = ("Your final message must be that JSON object alone: no text before or after it and no code "
               "fence around it.")
    else:
        how = ("Give it as the whole final message, or inside a single ```json code block; keep any remark "
               "short and outside the block.")
    return "\n".join([
        "## Required output format",
        "",
        "When you are done, answer with exactly one JSON object that validates against this JSON Schema:",
        "",
        f"{fence}json",
        body,
        fence,
        "",
        f"- {how}",
        "- Exactly one JSON object: no second object, no example object, no partial draft.",
        "- Do not use a tool to return it; it must be in your final message.",
    ])


def recovery_section(errors: Iterable[Mapping[str, str]], had_output: bool, *, strict: bool = False) -> str:
    """The resume prompt of prompted-mode recovery (the native-mode one is
    ``app.supervisor.context.recovery_prompt``). ``errors`` are ``{path, message}``: the schema
    validator's, or one ``{"path": "$", "message": extraction.error}`` when ``had_output`` is
    False (no JSON answer could be read)."""
    listed = list(errors)[:RECOVERY_ERRORS_MAX]
    if had_output:
        head = "Your JSON answer did not match the required schema. TierOps found these problems:"
        lines = [f"- {as_text(e.get('path', '$'), 200)}: {as_text(e.get('message', ''), 1000)}" for e in listed]
    else:
        head = "TierOps could not read a JSON answer from your previous message:"
        lines = [f"- {as_text(e.get('message', ''), 1000)}" for e in listed]
    alone = ("the JSON object alone, with no text or code fence around it" if strict
             else "exactly one JSON object, alone or in a single ```json code block")
    tail = ("Do not run any more checks. Reply now with your complete report as " + alone +
            ", following the Required output format given earlier and fixing the problems listed.")
    return "\n".join([head, *lines, "", tail])
