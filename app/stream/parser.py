"""Typed, forward-compatible parsing of Claude Code ``--output-format stream-json`` lines.

Why this module exists: every line the CLI prints must become a stored activity row, and the
few lines that matter for the outcome (``system/init``, ``assistant`` blocks, ``user`` tool
results, ``result``) must be understood without a full model of the protocol.

Deliberate choices (see ``../shared/reference/claude-code-stream-json.md``):

* Parsing never fails. A line that is not JSON becomes a :class:`TextLine`; JSON with an
  unknown ``type`` (the CLI's embedded schema lists ~40 types we have never seen) becomes an
  :class:`UnknownLine`. Both keep the raw text, so a transcript replays exactly.
* Lines are plain ``__slots__`` classes over the decoded dict, not pydantic models: ingest must
  stay within a small factor of a bare ``json.loads`` loop (issue #2 benchmark), and most fields
  are read at most once.
* ``--output-format json --verbose`` prints one line holding a JSON *array* of every message
  (``h_json_output_verbose``); it is parsed as an :class:`ArrayLine` whose items are parsed
  lines, so such a capture ingests like the stream it contains.
* Each ``assistant`` line carries exactly one content block (the CLI emits a line per block,
  reference §4.2); we still iterate over ``content`` in case that changes.
"""

from __future__ import annotations

import builtins
import json
from typing import Any, TypeVar

_T = TypeVar("_T")

DISPLAY_MAX = 240


def _short(text: str, limit: int = DISPLAY_MAX) -> str:
    """One-line preview: line breaks and tabs turned into spaces, cut at ``limit`` characters."""
    if len(text) > limit:  # never fold a 20 MB string just to keep 240 characters of it
        text = text[: limit - 1].rstrip() + "…"
    if "\n" in text or "\r" in text or "\t" in text:
        text = text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ").replace("\t", " ")
    return text


def _compact(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return str(value)


class ParsedLine:
    """Base of every parsed line. ``type``/``subtype`` are what gets stored in activity."""

    __slots__ = ("data", "raw")
    type: str = "unknown"

    def __init__(self, raw: str, data: Any = None) -> None:
        self.raw = raw
        self.data = data

    @property
    def subtype(self) -> str | None:
        if isinstance(self.data, dict):
            sub = self.data.get("subtype")
            return sub if isinstance(sub, str) else None
        return None

    @property
    def session_id(self) -> str | None:
        if isinstance(self.data, dict):
            sid = self.data.get("session_id")
            return sid if isinstance(sid, str) and sid else None
        return None

    def display(self) -> str:
        return _short(self.raw)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"<{type(self).__name__} {self.type}/{self.subtype} {self.display()[:60]!r}>"


class TextLine(ParsedLine):
    """A line that is not JSON at all (or not valid UTF-8). Kept verbatim."""

    __slots__ = ()
    type = "text"


class UnknownLine(ParsedLine):
    """Valid JSON whose ``type`` we do not know (or that has none, e.g. ``--output-format text``)."""

    __slots__ = ()

    # The base declares ``type`` as a class attribute; here it is read from the line. Both are a
    # str when read, but mypy does not let a read-only property override a settable attribute.
    @property
    def type(self) -> str:  # type: ignore[override]
        kind = self.data.get("type") if isinstance(self.data, dict) else None
        return kind if isinstance(kind, str) else "unknown"

    def display(self) -> str:
        label = self.type if self.subtype is None else f"{self.type}/{self.subtype}"
        return _short(f"[{label}] {self.raw}")


class SystemLine(ParsedLine):
    __slots__ = ()
    type = "system"

    def display(self) -> str:
        d = self.data
        sub = self.subtype or "?"
        if sub == "init":
            tools = d.get("tools") or []
            return _short(f"init model={d.get('model')} tools={len(tools)} cwd={d.get('cwd')} "
                          f"permission={d.get('permissionMode')} version={d.get('claude_code_version')}")
        if sub == "api_retry":
            return _short(f"api_retry attempt {d.get('attempt')}/{d.get('max_retries')} "
                          f"status={d.get('error_status')} error={d.get('error')} "
                          f"delay={float(d.get('retry_delay_ms') or 0):.0f}ms")
        if sub == "status":
            return _short(f"status {d.get('status')}")
        if sub == "thinking_tokens":
            return _short(f"thinking_tokens ~{d.get('estimated_tokens')}")
        extras = {k: v for k, v in d.items() if k not in ("type", "subtype", "session_id", "uuid")}
        return _short(f"{sub} {_compact(extras)}")


class AssistantLine(ParsedLine):
    __slots__ = ()
    type = "assistant"

    @property
    def message(self) -> dict[str, Any]:
        msg = self.data.get("message")
        return msg if isinstance(msg, dict) else {}

    @property
    def blocks(self) -> list[dict[str, Any]]:
        content = self.message.get("content")
        if isinstance(content, list):
            return [b for b in content if isinstance(b, dict)]
        if isinstance(content, str):
            return [{"type": "text", "text": content}]
        return []

    @property
    def is_synthetic_error(self) -> bool:
        """The CLI's own error message after a failed API call (reference §4.2)."""
        return self.message.get("model") == "<synthetic>" or "error" in self.data

    def texts(self) -> list[str]:
        return [b["text"] for b in self.blocks if b.get("type") == "text" and isinstance(b.get("text"), str)]

    def tool_uses(self) -> list[dict[str, Any]]:
        return [b for b in self.blocks if b.get("type") == "tool_use"]

    def display(self) -> str:
        parts = []
        for b in self.blocks:
            kind = b.get("type")
            if kind == "text":
                parts.append(str(b.get("text", "")))
            elif kind == "tool_use":
                inp = b.get("input")
                if isinstance(inp, dict) and isinstance(inp.get("command"), str):
                    parts.append(f"{b.get('name')}: {inp['command']}")
                else:
                    parts.append(f"{b.get('name')}: {_compact(inp)[:DISPLAY_MAX * 2]}")
            elif kind in ("thinking", "redacted_thinking"):
                parts.append(f"(thinking) {str(b.get('thinking', ''))[:DISPLAY_MAX * 2]}")
            else:
                parts.append(f"({kind})")
        prefix = f"[{self.data.get('error')}] " if self.data.get("error") else ""
        return _short(prefix + " | ".join(parts))


class UserLine(ParsedLine):
    __slots__ = ()
    type = "user"

    @property
    def blocks(self) -> list[dict[str, Any]]:
        msg = self.data.get("message")
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, list):
            return [b for b in content if isinstance(b, dict)]
        if isinstance(content, str):
            return [{"type": "text", "text": content}]
        return []

    def tool_results(self) -> list[dict[str, Any]]:
        return [b for b in self.blocks if b.get("type") == "tool_result"]

    def display(self) -> str:
        parts = []
        for b in self.blocks:
            if b.get("type") == "tool_result":
                content = b.get("content")
                if isinstance(content, list):  # content blocks instead of a string
                    content = " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
                label = "tool error" if b.get("is_error") else "tool result"
                parts.append(f"{label}: {str(content)[:DISPLAY_MAX * 2]}")
            elif b.get("type") == "text":
                parts.append(str(b.get("text", ""))[: DISPLAY_MAX * 2])
            else:
                parts.append(f"({b.get('type')})")
        prefix = "(synthetic) " if self.data.get("isSynthetic") else ""
        return _short(prefix + " | ".join(parts))


class StreamEventLine(ParsedLine):
    __slots__ = ()
    type = "stream_event"

    def display(self) -> str:
        ev = self.data.get("event")
        if not isinstance(ev, dict):
            return "stream_event"
        kind = ev.get("type", "?")
        delta = ev.get("delta")
        if isinstance(delta, dict):
            text = delta.get("text") or delta.get("partial_json") or delta.get("thinking") or ""
            return _short(f"{kind} {delta.get('type', '')} {text}")
        return _short(f"{kind}")


class ResultLine(ParsedLine):
    """The final line of a turn; the only reliable status (reference §4.4, §10.1)."""

    __slots__ = ()
    type = "result"

    def _get(self, key: str, kind: builtins.type[_T]) -> _T | None:
        # ``builtins.type``: inside this class body ``type`` is the line type attribute above.
        value = self.data.get(key)
        if isinstance(value, bool) and kind is not bool:  # JSON true is not a number here
            return None
        return value if isinstance(value, kind) else None

    @property
    def is_error(self) -> bool:
        # Trust is_error above subtype: API failures end as subtype "success" with is_error true.
        return self.data.get("is_error") is True or (self.subtype or "success") != "success"

    @property
    def api_error_status(self) -> int | None:
        return self._get("api_error_status", int)

    @property
    def num_turns(self) -> int | None:
        return self._get("num_turns", int)

    @property
    def duration_ms(self) -> int | None:
        return self._get("duration_ms", int)

    @property
    def duration_api_ms(self) -> int | None:
        return self._get("duration_api_ms", int)

    @property
    def total_cost_usd(self) -> float | None:
        v = self.data.get("total_cost_usd")
        if isinstance(v, bool) or not isinstance(v, int | float):  # JSON true is not a number here
            return None
        return float(v)

    @property
    def result_text(self) -> str | None:
        return self._get("result", str)

    @property
    def stop_reason(self) -> str | None:
        return self._get("stop_reason", str)

    @property
    def terminal_reason(self) -> str | None:
        return self._get("terminal_reason", str)

    @property
    def usage(self) -> dict[str, Any]:
        return self._get("usage", dict) or {}

    @property
    def model_usage(self) -> dict[str, Any]:
        return self._get("modelUsage", dict) or {}

    @property
    def permission_denials(self) -> list[Any]:
        return self._get("permission_denials", list) or []

    @property
    def errors(self) -> list[str]:
        return [str(e) for e in (self._get("errors", list) or [])]

    @property
    def has_structured_output(self) -> bool:
        return "structured_output" in self.data

    @property
    def structured_output(self) -> Any:
        return self.data.get("structured_output")

    def display(self) -> str:
        cost = self.total_cost_usd
        bits = [f"result {self.subtype}", f"is_error={str(self.data.get('is_error')).lower()}"]
        if self.api_error_status is not None:
            bits.append(f"api_status={self.api_error_status}")
        if self.num_turns is not None:
            bits.append(f"turns={self.num_turns}")
        if cost is not None:
            bits.append(f"cost=${cost:.4f}")
        bits.append("structured_output" if self.has_structured_output else "no structured_output")
        if self.errors:
            bits.append("errors=" + "; ".join(self.errors))
        elif self.is_error and self.result_text:
            bits.append(self.result_text)
        return _short(" ".join(bits))


class ArrayLine(ParsedLine):
    """A JSON array on one line: ``--output-format json --verbose`` prints every message this way."""

    __slots__ = ("items",)
    type = "array"

    def __init__(self, raw: str, data: list[Any]) -> None:
        super().__init__(raw, data)
        self.items = [parse_obj(_compact(item), item) for item in data]

    @property
    def session_id(self) -> str | None:
        for item in self.items:
            if item.session_id:
                return item.session_id
        return None

    def display(self) -> str:
        kinds = [item.type for item in self.items]
        return _short(f"array of {len(kinds)} messages: {', '.join(kinds)}")


_BY_TYPE: dict[str, type[ParsedLine]] = {
    "system": SystemLine,
    "assistant": AssistantLine,
    "user": UserLine,
    "stream_event": StreamEventLine,
    "result": ResultLine,
}


def parse_obj(raw: str, data: Any) -> ParsedLine:
    if isinstance(data, dict):
        kind = data.get("type")
        cls = _BY_TYPE.get(kind) if isinstance(kind, str) else None  # {"type": [1]} must not raise
        return cls(raw, data) if cls else UnknownLine(raw, data)
    if isinstance(data, list):
        return ArrayLine(raw, data)
    return UnknownLine(raw, data)


def parse_line(line: bytes | str) -> ParsedLine | None:
    """Parse one physical stdout line. Returns None only for an empty line (no content to keep).

    Never raises: undecodable bytes and non-JSON text become a :class:`TextLine`.
    """
    if isinstance(line, bytes):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            # Keep every byte: undecodable bytes become \\xNN escapes in the stored text.
            return TextLine(line.rstrip(b"\r\n").decode("utf-8", "backslashreplace"))
    else:
        text = line
    text = text.rstrip("\r\n")
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return TextLine(text)
    return parse_obj(text, data)
