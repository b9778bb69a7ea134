"""A chat turn's answer, read from its session's stored stream lines as they are committed.

Why from the stored lines: what the client is sent is exactly what the session recorded (redacted,
in order), and nothing reads the CLI's pipe twice. With ``--include-partial-messages`` the text
arrives as ``stream_event`` text deltas (reference §4.6) and each block again, whole, as an
``assistant`` line; a message whose deltas were seen is not sent twice, one without deltas (a CLI or
a stand-in that sends none) is sent whole. Tool calls are sent once their ``assistant`` line holds
the whole input (OpenAI clients expect complete arguments); tool results from ``user`` lines.
Subagent lines (``parent_tool_use_id`` set) and thinking are not part of the answer. The ``result``
line gives the usage, the error flag (API errors end ``success`` with ``is_error``, §6) and the turn
limit. Unknown or non-JSON lines are skipped here; the transcript keeps them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["AnswerReader", "ChatEvent", "ChatUsage", "TextDelta", "ToolCall", "ToolResult"]

TOOL_RESULT_MAX = 4000  # characters of a tool result sent to the client (the transcript has all)


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # the input, as JSON text (OpenAI's function.arguments)


@dataclass(frozen=True)
class ToolResult:
    id: str
    text: str
    is_error: bool


ChatEvent = TextDelta | ToolCall | ToolResult


@dataclass
class ChatUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class AnswerReader:
    """Feed it stored lines (their raw JSON text) in order; it returns the events each one adds."""

    answer: list[str] = field(default_factory=list)
    usage: ChatUsage = field(default_factory=ChatUsage)
    result_seen: bool = False
    is_error: bool = False
    error_text: str | None = None
    result_text: str | None = None
    terminal_reason: str | None = None
    session_id: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    _streamed: set[str] = field(default_factory=set)  # message ids whose text came as deltas
    _current: str | None = None  # the message the deltas belong to
    _texted: set[str] = field(default_factory=set)  # message ids whose text was sent

    @property
    def text(self) -> str:
        return "".join(self.answer)

    def feed(self, raw: str | None) -> list[ChatEvent]:
        if not raw:
            return []
        try:
            line = json.loads(raw)
        except ValueError:
            return []
        if not isinstance(line, dict) or line.get("parent_tool_use_id") is not None:
            return []
        if isinstance(line.get("session_id"), str):
            self.session_id = line["session_id"]
        kind = line.get("type")
        if kind == "stream_event":
            return self._event(line.get("event"))
        if kind == "assistant":
            return self._assistant(line.get("message"))
        if kind == "user":
            return self._user(line.get("message"))
        if kind == "result":
            self._result(line)
        return []

    def _text(self, text: str, mid: str | None) -> list[ChatEvent]:
        """``text`` of message ``mid``; the first text of another message starts a new paragraph."""
        if not text:
            return []
        events: list[ChatEvent] = []
        if self.answer and mid is not None and mid not in self._texted:
            events.append(TextDelta("\n\n"))
            self.answer.append("\n\n")
        if mid is not None:
            self._texted.add(mid)
        self.answer.append(text)
        events.append(TextDelta(text))
        return events

    def _event(self, event: Any) -> list[ChatEvent]:
        if not isinstance(event, dict):
            return []
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            mid = message.get("id") if isinstance(message, dict) else None
            self._current = mid if isinstance(mid, str) else None
            return []
        delta = event.get("delta")
        if kind == "content_block_delta" and isinstance(delta, dict) and delta.get("type") == "text_delta":
            text = delta.get("text")
            if isinstance(text, str) and text:
                if self._current is not None:
                    self._streamed.add(self._current)
                return self._text(text, self._current)
        return []

    def _assistant(self, message: Any) -> list[ChatEvent]:
        if not isinstance(message, dict) or message.get("model") == "<synthetic>":
            return []  # the CLI's synthetic API-error message: the result line says it
        mid = message.get("id") if isinstance(message.get("id"), str) else None
        events: list[ChatEvent] = []
        for block in message.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                if mid is None or mid not in self._streamed:
                    events.extend(self._text(block["text"], mid))
            elif block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                call = ToolCall(block["id"], str(block.get("name") or "tool"),
                                json.dumps(block.get("input") or {}, ensure_ascii=False))
                self.tool_calls.append(call)
                events.append(call)
        return events

    def _user(self, message: Any) -> list[ChatEvent]:
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            return []
        events: list[ChatEvent] = []
        for block in message["content"]:
            if isinstance(block, dict) and block.get("type") == "tool_result" and isinstance(block.get("tool_use_id"), str):
                content = block.get("content")
                if isinstance(content, list):
                    content = "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
                text = content if isinstance(content, str) else ""
                events.append(ToolResult(block["tool_use_id"], text[:TOOL_RESULT_MAX], block.get("is_error") is True))
        return events

    def _result(self, line: dict[str, Any]) -> None:
        self.result_seen = True
        self.is_error = line.get("is_error") is True
        result = line.get("result")
        self.result_text = result if isinstance(result, str) else None
        reason = line.get("terminal_reason")
        self.terminal_reason = reason if isinstance(reason, str) else None
        if self.is_error:
            errors = line.get("errors")
            listed = "; ".join(str(e) for e in errors) if isinstance(errors, list) else ""
            self.error_text = self.result_text or listed or f"the CLI ended with {line.get('subtype')!r}"
        usage = line.get("usage")
        if isinstance(usage, dict):
            def count(key: str) -> int:
                value = usage.get(key)
                return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
            self.usage = ChatUsage(
                prompt_tokens=count("input_tokens") + count("cache_read_input_tokens")
                + count("cache_creation_input_tokens"),
                completion_tokens=count("output_tokens"))
        if not self.answer and self.result_text and not self.is_error:
            self.answer.append(self.result_text)  # a run whose text never came as a line of its own

    @property
    def finish_reason(self) -> str:
        """OpenAI's: ``length`` when the turn limit stopped the agent, else ``stop``."""
        return "length" if self.terminal_reason == "max_turns" else "stop"
