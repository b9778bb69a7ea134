"""Whether a finding's cited evidence is really in the session's tool calls.

A citation is ``{"quote": str, "tool_use_id": str | None}``: an excerpt of a tool call's result (of
its input for an action). :func:`tool_calls_of` pairs the stored ``assistant`` tool_use blocks with
the ``user`` tool_result blocks of every attempt; :func:`check` decides one citation, pure (the lines
come from ``app/store/evidence.py``).

What it deliberately does: a plain substring search (never a regex) of the quote in what the model
was shown, after both sides are redacted with the caller's redactor (a quote holding a secret the
stored text has as ``[REDACTED]`` still matches), stripped of ANSI sequences and whitespace-collapsed;
a case-folded match counts as the same verdict. A quote never matches across one of the CLI's cuts
(a failing command's ``... [N characters truncated] ...``, the 2 KB preview of a persisted output):
each kept part is searched alone. It never raises on a line it cannot read. ARCHITECTURE.md,
"Evidence", has the rules and the measurements behind them.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

log = logging.getLogger(__name__)

QUOTE_MAX = 2_000
"""The longest quote checked (characters, as given): evidence is a short excerpt."""

Redact = Callable[[str], str]
Status = Literal["verified", "unsupported", "uncited"]

# CSI (ESC [ … final byte, or the 8-bit CSI), OSC (ESC ] … BEL or ST), and the other two-byte escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
                   r"|\x1b[@-Z\\^_]|\x1b")
# A failing command's long output, as the CLI 2.1.197 returns it: the first and last ~5,000
# characters around this marker (measured; the capture in tests/fixtures/evidence/).
_CUT = re.compile(r"\n*\.\.\. \[\d+ (?:characters|chars|lines) truncated\] \.\.\.\n*")
# An output over 30,000 characters is saved to a file; the model is shown this wrapper with a 2 KB
# preview (measured as above).
_PERSISTED = re.compile(r"<persisted-output>\n(?P<head>.*?)\n\nPreview \([^)\n]*\):\n(?P<preview>.*?)"
                        r"(?:\n\.\.\.)?\n</persisted-output>\s*", re.S)
# The Read tool numbers each line ("12\tline"); a quote of the file's text has no numbers.
_READ_NUMBER = re.compile(r"(?m)^ *\d+\t")


@dataclass(frozen=True, slots=True)
class ToolCall:
    tool_use_id: str
    name: str
    input_text: str
    """Bash: its ``command``; any other tool: its input as compact JSON."""
    result_text: str
    """The tool_result content as text ("" when no result was stored: the run ended first)."""
    is_error: bool
    attempt: int
    seq: int
    result_seq: int | None


@dataclass(frozen=True, slots=True)
class CitationResult:
    holds: bool
    tool_use_id: str | None
    """The call the quote was found in (None when it does not hold)."""
    why: str | None = None
    """Why it does not hold (None when it does)."""


def normalise(text: str) -> str:
    """``text`` without ANSI escape sequences, every run of whitespace one space, trimmed. Case is
    kept; :func:`check` also tries a case-folded match."""
    return " ".join(_ANSI.sub("", text).split())


# --- reading the stored lines ------------------------------------------------------------------


def tool_calls_of(lines: Iterable[tuple[int, int, str]]) -> list[ToolCall]:
    """The tool calls in ``(seq, attempt, raw)`` lines, in call order, each with its result.

    Every attempt's calls count (a resumed run is one session). Lines that are not JSON, of another
    type, or shaped unexpectedly are skipped; a result whose call is not among the lines is dropped;
    the first of two blocks with the same id wins."""
    uses: dict[str, tuple[str, str, int, int]] = {}
    results: dict[str, tuple[str, bool, int]] = {}
    for seq, attempt, raw in lines:
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        # `--output-format json --verbose` prints every message as one array line.
        for message in value if isinstance(value, list) else [value]:
            if isinstance(message, dict):
                _read_message(message, seq, attempt, uses, results)
    calls = []
    for tool_use_id, (name, input_text, seq, attempt) in uses.items():
        result_text, is_error, result_seq = results.get(tool_use_id, ("", False, None))
        calls.append(ToolCall(tool_use_id, name, input_text, result_text, is_error, attempt, seq, result_seq))
    return calls


def _read_message(message: Mapping[str, Any], seq: int, attempt: int,
                  uses: dict[str, tuple[str, str, int, int]], results: dict[str, tuple[str, bool, int]]) -> None:
    body = message.get("message")
    content = body.get("content") if isinstance(body, dict) else None
    if not isinstance(content, list):
        return
    blocks = [b for b in content if isinstance(b, dict)]
    if message.get("type") == "assistant":
        for block in blocks:
            tool_use_id, name = block.get("id"), block.get("name")
            if block.get("type") == "tool_use" and isinstance(tool_use_id, str) and isinstance(name, str):
                uses.setdefault(tool_use_id, (name, _input_text(name, block.get("input")), seq, attempt))
    elif message.get("type") == "user":
        answers = [b for b in blocks if b.get("type") == "tool_result" and isinstance(b.get("tool_use_id"), str)]
        # The line's own structured result (`tool_use_result`) stands in for an answer without text.
        spare = _text_of_structured(message.get("tool_use_result")) if len(answers) == 1 else ""
        for block in answers:
            text = _text_of_content(block.get("content")) or spare
            results.setdefault(block["tool_use_id"], (text, block.get("is_error") is True, seq))


def _input_text(name: str, value: Any) -> str:
    if name == "Bash" and isinstance(value, dict) and isinstance(value.get("command"), str):
        return str(value["command"])
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return ""


def _text_of_content(content: Any) -> str:
    """A tool_result's content as text: a string, or the text parts of an array (images skipped)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p if isinstance(p, str) else p.get("text") if isinstance(p, dict) and p.get("type") == "text"
                 else None for p in content]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _text_of_structured(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        fields = [value.get(k) for k in ("stdout", "stderr", "content")]
        return "\n".join(f for f in fields if isinstance(f, str) and f)
    return ""


# --- checking ----------------------------------------------------------------------------------


def check(citation: Mapping[str, Any], calls: Sequence[ToolCall], redact: Redact, *,
          action: bool = False) -> CitationResult:
    """Whether ``citation`` holds: its quote is in the result (``action``: the input) of the call it
    names, or of any call when it names none. ``redact`` is the redactor the session was recorded
    with (the same rules; a different environment's secrets are masked on both sides alike)."""
    quote, tool_use_id = citation.get("quote"), citation.get("tool_use_id")
    if not isinstance(quote, str):
        return CitationResult(False, None, "the quote is not text")
    if tool_use_id is not None and not isinstance(tool_use_id, str):
        return CitationResult(False, None, "the tool_use_id is not text")
    if len(quote) > QUOTE_MAX:
        return CitationResult(False, None, f"quote over {QUOTE_MAX:,} characters")
    needle = normalise(redact(quote))
    if not needle:
        return CitationResult(False, None, "empty quote")
    folded = needle.casefold()
    where = "input" if action else "result"
    if tool_use_id is not None:
        call = next((c for c in calls if c.tool_use_id == tool_use_id), None)
        if call is None:
            return CitationResult(False, None, f"no tool call {_shown(tool_use_id)} in this session")
        if _found(needle, folded, call, action, redact):
            return CitationResult(True, call.tool_use_id)
        return CitationResult(False, None, f"the quote is not in {_shown(tool_use_id)}'s {where}")
    for call in calls:
        if _found(needle, folded, call, action, redact):
            return CitationResult(True, call.tool_use_id)
    return CitationResult(False, None, f"the quote is not in any tool {where} of this session")


def finding_status(citations: Sequence[Mapping[str, Any]] | None, calls: Sequence[ToolCall], redact: Redact, *,
                   action: bool = False) -> tuple[Status, list[CitationResult]]:
    """``uncited`` without citations, ``verified`` when every one holds, else ``unsupported``."""
    if not citations:
        return "uncited", []
    results = [check(c, calls, redact, action=action) if isinstance(c, Mapping)
               else CitationResult(False, None, "the citation is not an object") for c in citations]
    return ("verified" if all(r.holds for r in results) else "unsupported"), results


def _found(needle: str, folded: str, call: ToolCall, action: bool, redact: Redact) -> bool:
    text = call.input_text if action else call.result_text
    exact, casefolded = _haystacks(text, "" if action else call.name, redact)
    return any(needle in part for part in exact) or any(folded in part for part in casefolded)


@functools.lru_cache(maxsize=512)
def _haystacks(text: str, tool: str, redact: Redact) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The parts of ``text`` a quote may match within, normalised, and their case-folded copies."""
    parts = _kept_parts(redact(text))
    if tool == "Read":
        parts += [_READ_NUMBER.sub("", p) for p in parts]
    exact = tuple(n for n in (normalise(p) for p in parts) if n)
    return exact, tuple(n.casefold() for n in exact)


def _kept_parts(text: str) -> list[str]:
    """``text`` split at the CLI's cuts: a persisted output's header and preview, then the text on
    each side of a truncation marker."""
    persisted = _PERSISTED.fullmatch(text)
    pieces = [persisted["head"], persisted["preview"]] if persisted else [text]
    return [part for piece in pieces for part in _CUT.split(piece)]


def _shown(tool_use_id: str) -> str:
    """A model-written id as it may appear in a message: short, and quoted when it is not id-like."""
    if re.fullmatch(r"[A-Za-z0-9_\-]{1,80}", tool_use_id):
        return tool_use_id
    return json.dumps(tool_use_id[:80])
