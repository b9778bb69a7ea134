"""The CLI's own rejections of StructuredOutput calls, and a JSON answer given as text.

Why: every attempt counts. With ``--json-schema`` the CLI validates the StructuredOutput tool
input itself and, when it does not match, hands the error back to the model as a failed tool
result and lets it try again (up to ``MAX_STRUCTURED_OUTPUT_RETRIES``, then
``error_max_structured_output_retries``, reference §5.3). Those retries never reach TierOps'
validator and the ``result`` line only counts them, so ``output_attempts`` is built from the
stream: a ``StructuredOutput`` ``tool_use`` answered by a ``tool_result`` with ``is_error`` (or,
after ``--resume`` without the schema, "No such tool available": kind ``unavailable``). Only the
main agent counts: lines with a ``parent_tool_use_id`` belong to a subagent. The shapes, as CLI
2.1.197 prints them: ARCHITECTURE.md, "The CLI's own rejections".

:class:`FinalText` follows the other way a model answers without the tool: text in its last
message (one ``message.id`` after the last ``user`` line) holding no tool call;
:meth:`FinalText.answer` runs :func:`app.output.extract.extract_json` on it.

Both classes are fed one parsed line at a time, as the recorder sees them; :func:`find_rejections`
and :func:`text_answer` run them over a whole list. ``seq`` is the line's number in the session as
the recorder numbers them (1-based, empty lines not counted); when the caller gives none the
classes count the lines they are fed the same way.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from app.output.extract import MAX_TEXT_CHARS, Extraction, extract_json
from app.output.validate import json_path
from app.stream.parser import (
    ArrayLine,
    AssistantLine,
    ParsedLine,
    SystemLine,
    UserLine,
)
from app.stream.values import as_text, clean_text, json_safe

log = logging.getLogger(__name__)

__all__ = [
    "STRUCTURED_OUTPUT_TOOL",
    "CliRejection",
    "FinalText",
    "RejectionKind",
    "RejectionTracker",
    "find_rejections",
    "parse_cli_errors",
    "text_answer",
]

STRUCTURED_OUTPUT_TOOL = "StructuredOutput"
SCHEMA_ERROR_PREFIX = "Output does not match required schema: "
UNAVAILABLE_MARK = "No such tool available"
ERROR_TEXT_MAX = 10_000  # characters of one tool_result kept (Ajv's text is short; hostile ones are not)
MAX_PENDING = 1_000  # StructuredOutput calls awaiting their result (the CLI answers each at once)
MAX_KEPT = 100  # rejections kept with their output; more are only counted (the CLI stops at 5 by default)
MAX_FINAL_CHARS = MAX_TEXT_CHARS + 1  # final-text characters kept: enough for extract_json to refuse it

RejectionKind = Literal["schema", "unavailable", "error"]

# One Ajv error: "<instancePath or root>: <message>". The next one starts after ", " with a path.
_AJV_ERROR = re.compile(r"(?:^|, )(?P<path>root|(?:/[^/:,]*)+): ")
_TOOL_ERROR_TAG = re.compile(r"</?tool_use_error>")


@dataclass(frozen=True)
class CliRejection:
    """One StructuredOutput call the CLI refused (every attempt counts: an output attempt of origin
    ``cli_rejected``)."""

    tool_use_id: str
    input: Any  # the rejected output, via values.json_safe (storable as is)
    error_text: str  # the tool_result content, as the CLI wrote it (capped)
    seq: int | None  # the line of the rejecting tool_result
    call_seq: int | None = None  # the line of the tool_use
    kind: RejectionKind = "error"
    errors: list[dict[str, str]] = field(default_factory=list)  # [{path, message}], paths as ``$.a[0]``


def _pointer_path(pointer: str) -> str:
    """Ajv's instancePath (a JSON Pointer, ``root`` for the document) → ``$.events[0].level``."""
    if pointer == "root":
        return "$"
    parts: list[str | int] = []
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        parts.append(int(part) if part.isdigit() and len(part) < 10 else part)
    return json_path(parts)


def parse_cli_errors(text: str) -> tuple[RejectionKind, list[dict[str, str]]]:
    """The CLI's rejection text as ``(kind, [{path, message}])``, in the form TierOps' own
    validator reports errors. Ajv errors are comma-joined; a message that itself holds
    ``", /x: "`` would be split there (the raw text is kept in :attr:`CliRejection.error_text`)."""
    if text.startswith(SCHEMA_ERROR_PREFIX):
        body = text[len(SCHEMA_ERROR_PREFIX):]
        found = list(_AJV_ERROR.finditer(body))
        if found and found[0].start() == 0:
            errors = []
            for i, m in enumerate(found):
                end = found[i + 1].start() if i + 1 < len(found) else len(body)
                errors.append({"path": _pointer_path(m.group("path")), "message": body[m.end():end]})
            return "schema", errors
        return "schema", [{"path": "$", "message": body}]
    message = _TOOL_ERROR_TAG.sub("", text).strip()
    if message.startswith("Error: "):
        message = message[len("Error: "):]
    return ("unavailable" if UNAVAILABLE_MARK in text else "error"), [{"path": "$", "message": message}]


def _content_text(content: Any) -> str:
    """A tool_result's ``content``: a string in every capture; content blocks are joined."""
    if isinstance(content, str):
        return as_text(content, ERROR_TEXT_MAX)
    if isinstance(content, list):
        texts = [b.get("text") for b in content[:100] if isinstance(b, dict)]
        return as_text("\n".join(t for t in texts if isinstance(t, str)), ERROR_TEXT_MAX)
    return "" if content is None else as_text(content, ERROR_TEXT_MAX)


def _main_agent(line: ParsedLine) -> bool:
    return isinstance(line.data, dict) and line.data.get("parent_tool_use_id") is None


class _Counter:
    """Line numbering shared by the trackers: the caller's ``seq``, else 1, 2, 3 …"""

    def __init__(self) -> None:
        self.seq = 0

    def next(self, parsed: ParsedLine | None, seq: int | None) -> int | None:
        if seq is not None:
            self.seq = seq
        elif parsed is not None:
            self.seq += 1
        return self.seq if parsed is not None else None


class RejectionTracker:
    """Fed every parsed line of a session (all its CLI runs), in order; collects
    :attr:`rejections` and the ids of :attr:`accepted` calls."""

    def __init__(self) -> None:
        self.rejections: list[CliRejection] = []
        self.rejected_count = 0  # all of them, also those past MAX_KEPT
        self.accepted: list[str] = []
        self._pending: dict[str, tuple[Any, int | None]] = {}
        self._counter = _Counter()

    def feed(self, parsed: ParsedLine | None, seq: int | None = None) -> list[CliRejection]:
        """Take one line (None, an empty line, is allowed and not counted); returns the
        rejections it completed (usually none)."""
        number = self._counter.next(parsed, seq)
        if parsed is None:
            return []
        new: list[CliRejection] = []
        self._observe(parsed, number, new)
        return new

    def _observe(self, parsed: ParsedLine, seq: int | None, new: list[CliRejection]) -> None:
        if isinstance(parsed, ArrayLine):  # --output-format json --verbose: one line, every message
            for item in parsed.items:
                self._observe(item, seq, new)
            return
        if isinstance(parsed, SystemLine) and parsed.subtype == "init":
            self._pending.clear()  # a new CLI run (or prompt): earlier calls can no longer be answered
            return
        if not _main_agent(parsed):
            return
        if isinstance(parsed, AssistantLine):
            for block in parsed.tool_uses():
                tool_id = block.get("id")
                if block.get("name") == STRUCTURED_OUTPUT_TOOL and isinstance(tool_id, str):
                    if len(self._pending) >= MAX_PENDING:
                        self._pending.pop(next(iter(self._pending)))
                    self._pending[tool_id] = (block.get("input"), seq)
        elif isinstance(parsed, UserLine):
            for block in parsed.tool_results():
                tool_id = block.get("tool_use_id")
                if not isinstance(tool_id, str) or tool_id not in self._pending:
                    continue
                output, call_seq = self._pending.pop(tool_id)
                if block.get("is_error") is not True:
                    self.accepted.append(clean_text(tool_id))
                    continue
                # Every attempt counts, the CLI's own refusals too (origin cli_rejected).
                text = _content_text(block.get("content"))
                kind, errors = parse_cli_errors(text)
                rejection = CliRejection(tool_use_id=clean_text(tool_id), input=json_safe(output),
                                         error_text=text, seq=seq, call_seq=call_seq, kind=kind, errors=errors)
                self.rejected_count += 1
                if len(self.rejections) < MAX_KEPT:
                    self.rejections.append(rejection)
                new.append(rejection)


class FinalText:
    """The text of the main agent's last message, when that message called no tool (a candidate
    answer given as text instead of through StructuredOutput, or the answer in prompted mode)."""

    def __init__(self) -> None:
        self._message_id: Any = None
        self._parts: list[str] = []
        self._size = 0
        self._tool_called = False
        self._counter = _Counter()
        self.seq: int | None = None  # the line of the last text block taken

    def _reset(self) -> None:
        self._message_id = None
        self._parts = []
        self._size = 0
        self._tool_called = False
        self.seq = None

    def feed(self, parsed: ParsedLine | None, seq: int | None = None) -> None:
        number = self._counter.next(parsed, seq)
        if parsed is not None:
            self._observe(parsed, number)

    def _observe(self, parsed: ParsedLine, seq: int | None) -> None:
        if isinstance(parsed, ArrayLine):
            for item in parsed.items:
                self._observe(item, seq)
            return
        if isinstance(parsed, SystemLine) and parsed.subtype == "init":
            self._reset()  # a new run or prompt: what came before is not its answer
            return
        if not _main_agent(parsed):
            return
        if isinstance(parsed, UserLine):
            self._reset()  # tool results or the CLI's nudge: the model's turn goes on
        elif isinstance(parsed, AssistantLine):
            if parsed.is_synthetic_error:
                self._reset()  # the CLI's API-error text (reference §4.2), not the model's answer
                return
            message_id = parsed.message.get("id")
            if message_id is None or message_id != self._message_id:
                self._reset()
                self._message_id = message_id
            if parsed.tool_uses():
                self._tool_called = True
            for text in parsed.texts():
                if self._size + len(text) > MAX_FINAL_CHARS:
                    text = text[: max(0, MAX_FINAL_CHARS - self._size)]
                self._parts.append(text)
                self._size += len(text)
                self.seq = seq

    @property
    def text(self) -> str | None:
        """The final message's text blocks joined by newlines; None when there is none, or the
        message also called a tool (then the text is commentary, not the answer)."""
        if self._tool_called or not self._parts:
            return None
        return "\n".join(self._parts)

    def answer(self, *, strict: bool = False) -> Extraction | None:
        """:func:`extract_json` of :attr:`text` (its ``error`` says why when it holds no usable
        JSON), or None when there is no final text."""
        text = self.text
        return None if text is None else extract_json(text, strict=strict)


def find_rejections(lines: Iterable[ParsedLine | None]) -> list[CliRejection]:
    """Every rejected StructuredOutput call in ``lines`` (one session's lines, in order)."""
    tracker = RejectionTracker()
    for line in lines:
        tracker.feed(line)
    return tracker.rejections


def text_answer(lines: Iterable[ParsedLine | None], *, strict: bool = False) -> Extraction | None:
    """The JSON answer in the final assistant text of ``lines`` (see :class:`FinalText`)."""
    final = FinalText()
    for line in lines:
        final.feed(line)
    return final.answer(strict=strict)
