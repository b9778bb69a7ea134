"""Typed, forward-compatible parsing of Claude Code ``--output-format stream-json`` lines.

Why this module exists: every line the CLI prints must become a stored activity row, and the
few lines that matter for the outcome (``system/init``, ``assistant`` blocks, ``user`` tool
results, ``result``) must be understood without a full model of the protocol.

Deliberate choices (see ``../shared/reference/claude-code-stream-json.md`` and ARCHITECTURE.md,
"Stream lines"):

* Parsing never fails: a line JSON cannot decode is a :class:`TextLine` (with the reason as its
  subtype), JSON of an unknown ``type`` an :class:`UnknownLine`; both keep the raw text.
* Lines are plain ``__slots__`` classes over the decoded dict, not pydantic models: ingest must
  stay within a small factor of a bare ``json.loads`` loop.
* A JSON array on one line (``--output-format json --verbose``) is an :class:`ArrayLine` of lines.
* Every typed accessor and ``display()`` returns storable values (``app/stream/values.py``);
  ``data`` stays as decoded and ``raw`` as printed.
* Two decoders, one result: orjson for lines the caller screened for :data:`SCREEN_PATTERN`,
  ``json`` for the rest and for whatever orjson refuses.
"""

from __future__ import annotations

import builtins
import json
import logging
from typing import Any, TypeVar

import orjson

from app.stream.values import (
    DISPLAY_MAX,
    as_text,
    clean_text,
    compact,
    field_text,
    finite,
    json_safe,
    preview,
    str_or_none,
)

log = logging.getLogger(__name__)

_T = TypeVar("_T")

# What a caller screens a line for before ``parse_line(line, screened=True)`` (an RE2/re pattern):
# a run of 19 digits may be an integer beyond 64 bits, which orjson decodes as a float where json
# keeps the int. False hits only cost speed: such a line is decoded by json.
SCREEN_PATTERN = r"[0-9]{19}"


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
            return clean_text(sub) if isinstance(sub, str) else None
        return None

    @property
    def session_id(self) -> str | None:
        if isinstance(self.data, dict):
            sid = self.data.get("session_id")
            return clean_text(sid) if isinstance(sid, str) and sid else None
        return None

    def display(self) -> str:
        return preview(self.raw)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"<{type(self).__name__} {self.type}/{self.subtype} {self.display()[:60]!r}>"


class TextLine(ParsedLine):
    """A line JSON cannot decode (or not valid UTF-8). Kept verbatim; ``note`` says why when it
    is not plain text, and ``subtype`` is that reason (``not_utf8``, ``bad_json``, ``too_deep``)."""

    __slots__ = ("note", "reason")
    type = "text"

    def __init__(self, raw: str, data: Any = None, *, reason: str | None = None, note: str | None = None) -> None:
        super().__init__(raw, data)
        self.reason = reason
        self.note = note

    @property
    def subtype(self) -> str | None:
        return self.reason

    def display(self) -> str:
        return preview(f"({self.note}) {self.raw}" if self.note else self.raw)


class UnknownLine(ParsedLine):
    """Valid JSON whose ``type`` we do not know (or that has none, e.g. ``--output-format text``)."""

    __slots__ = ()

    # The base declares ``type`` as a class attribute; here it is read from the line. Both are a
    # str when read, but mypy does not let a read-only property override a settable attribute.
    @property
    def type(self) -> str:  # type: ignore[override]
        kind = self.data.get("type") if isinstance(self.data, dict) else None
        return clean_text(kind) if isinstance(kind, str) else "unknown"

    def display(self) -> str:
        label = self.type if self.subtype is None else f"{self.type}/{self.subtype}"
        return preview(f"[{label}] {self.raw}")


class SystemLine(ParsedLine):
    __slots__ = ()
    type = "system"

    # ``system/init`` facts, typed: any other JSON value there is None.
    @property
    def model(self) -> str | None:
        return str_or_none(self.data.get("model")) or None

    @property
    def cli_version(self) -> str | None:
        return str_or_none(self.data.get("claude_code_version")) or None

    @property
    def cwd(self) -> str | None:
        return str_or_none(self.data.get("cwd")) or None

    @property
    def tools(self) -> list[Any]:
        tools = self.data.get("tools")
        return tools if isinstance(tools, list) else []

    @property
    def mcp_servers(self) -> list[dict[str, str]] | None:
        """init's ``mcp_servers`` as ``[{name, status}]`` (reference §4.1; entries of another shape
        left out, at most 100); None when the line has no such list."""
        servers = self.data.get("mcp_servers")
        if not isinstance(servers, list):
            return None
        return [{"name": field_text(s["name"], 200), "status": field_text(s.get("status"), 40)}
                for s in servers[:100] if isinstance(s, dict) and isinstance(s.get("name"), str)]

    def display(self) -> str:
        d = self.data
        sub = self.subtype or "?"
        if sub == "init":
            mcp = "".join(f" mcp {s['name']}={s['status']}" for s in self.mcp_servers or [])
            return preview(f"init model={field_text(d.get('model'))} tools={len(self.tools)} cwd={field_text(d.get('cwd'))} "
                          f"permission={field_text(d.get('permissionMode'))} "
                          f"version={field_text(d.get('claude_code_version'))}{mcp}")
        if sub == "api_retry":
            delay = finite(d.get("retry_delay_ms"))
            return preview(f"api_retry attempt {field_text(d.get('attempt'))}/{field_text(d.get('max_retries'))} "
                          f"status={field_text(d.get('error_status'))} error={field_text(d.get('error'))} "
                          f"delay={'?' if delay is None else format(delay, '.0f')}ms")
        if sub == "status":
            return preview(f"status {field_text(d.get('status'))}")
        if sub == "thinking_tokens":
            return preview(f"thinking_tokens ~{field_text(d.get('estimated_tokens'))}")
        extras = {k: v for k, v in d.items() if k not in ("type", "subtype", "session_id", "uuid")}
        return preview(f"{sub} {as_text(extras, DISPLAY_MAX)}")


def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return []


class AssistantLine(ParsedLine):
    # ``blocks`` is read by display, the recorder, the rejection and final-text trackers: built
    # once per line (no work is done twice per line).
    __slots__ = ("_blocks",)
    type = "assistant"

    def __init__(self, raw: str, data: Any = None) -> None:
        self.raw = raw
        self.data = data
        self._blocks: list[dict[str, Any]] | None = None

    @property
    def message(self) -> dict[str, Any]:
        msg = self.data.get("message")
        return msg if isinstance(msg, dict) else {}

    @property
    def blocks(self) -> list[dict[str, Any]]:
        if self._blocks is None:
            self._blocks = _blocks(self.data.get("message"))
        return self._blocks

    @property
    def is_synthetic_error(self) -> bool:
        """The CLI's own error message after a failed API call (reference §4.2)."""
        return self.message.get("model") == "<synthetic>" or "error" in self.data

    def texts(self) -> list[str]:
        return [clean_text(b["text"]) for b in self.blocks
                if b.get("type") == "text" and isinstance(b.get("text"), str)]

    def tool_uses(self) -> list[dict[str, Any]]:
        """The tool_use blocks as decoded (their ``input`` may hold any value: see :func:`json_safe`)."""
        return [b for b in self.blocks if b.get("type") == "tool_use"]

    def display(self) -> str:
        parts = []
        for b in self.blocks:
            kind = b.get("type")
            if kind == "text":
                parts.append(field_text(b.get("text"), DISPLAY_MAX))
            elif kind == "tool_use":
                inp = b.get("input")
                if isinstance(inp, dict) and isinstance(inp.get("command"), str):
                    parts.append(f"{field_text(b.get('name'))}: {field_text(inp['command'], DISPLAY_MAX)}")
                else:
                    parts.append(f"{field_text(b.get('name'))}: {field_text(inp)}")
            elif kind in ("thinking", "redacted_thinking"):
                parts.append(f"(thinking) {field_text(b.get('thinking'))}")
            else:
                parts.append(f"({field_text(kind)})")
        error = self.data.get("error")
        prefix = f"[{field_text(error)}] " if error else ""
        if not parts:  # no block we can show: the line itself
            return preview(prefix + f"[assistant] {self.raw}")
        return preview(prefix + " | ".join(parts))


class UserLine(ParsedLine):
    __slots__ = ("_blocks",)  # built once, as for AssistantLine
    type = "user"

    def __init__(self, raw: str, data: Any = None) -> None:
        self.raw = raw
        self.data = data
        self._blocks: list[dict[str, Any]] | None = None

    @property
    def blocks(self) -> list[dict[str, Any]]:
        if self._blocks is None:
            self._blocks = _blocks(self.data.get("message"))
        return self._blocks

    def tool_results(self) -> list[dict[str, Any]]:
        return [b for b in self.blocks if b.get("type") == "tool_result"]

    def display(self) -> str:
        parts = []
        for b in self.blocks:
            if b.get("type") == "tool_result":
                content = b.get("content")
                if isinstance(content, list):  # content blocks instead of a string
                    content = " ".join(field_text(c.get("text")) for c in content[:50] if isinstance(c, dict))
                label = "tool error" if b.get("is_error") is True else "tool result"
                parts.append(f"{label}: {field_text(content)}")
            elif b.get("type") == "text":
                parts.append(field_text(b.get("text")))
            else:
                parts.append(f"({field_text(b.get('type'))})")
        prefix = "(synthetic) " if self.data.get("isSynthetic") is True else ""
        if not parts:
            return preview(prefix + f"[user] {self.raw}")
        return preview(prefix + " | ".join(parts))


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
            sub = delta.get("type")
            if type(kind) is str and type(sub) is str and type(text) is str:
                # Over half the lines of a stream: preview cleans the joined text, the
                # same as cleaning each part as field_text does (one character for one), so only cut.
                limit = DISPLAY_MAX * 2
                return preview(f"{kind[:limit]} {sub[:limit]} {text[:limit]}")
            return preview(f"{field_text(kind)} {field_text(sub)} {field_text(text)}")
        return preview(field_text(kind))


class ResultLine(ParsedLine):
    """The final line of a turn; the only reliable status (reference §4.4, §10.1).

    Every accessor returns a value that can be stored: numbers via :func:`finite`, strings via
    :func:`clean_text`, containers via :func:`json_safe`."""

    __slots__ = ()
    type = "result"

    def _get(self, key: str, kind: builtins.type[_T]) -> _T | None:
        # ``builtins.type``: inside this class body ``type`` is the line type attribute above.
        value = self.data.get(key)
        if isinstance(value, bool) and kind is not bool:  # JSON true is not a number here
            return None
        if not isinstance(value, kind):
            return None
        if isinstance(value, str):
            return clean_text(value)  # type: ignore[return-value]
        if isinstance(value, int | float):
            return finite(value)  # type: ignore[return-value]
        if isinstance(value, dict | list):
            return json_safe(value)  # type: ignore[no-any-return]
        return value

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
        v = finite(self.data.get("total_cost_usd"))  # JSON true, 1e999, 10**30: not a cost
        return None if v is None else float(v)

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
        return [as_text(e) for e in (self._get("errors", list) or [])]

    @property
    def has_structured_output(self) -> bool:
        return "structured_output" in self.data

    @property
    def structured_output(self) -> Any:
        return json_safe(self.data.get("structured_output"))

    def display(self) -> str:
        cost = self.total_cost_usd
        bits = [f"result {self.subtype}", f"is_error={field_text(self.data.get('is_error'), 20) or 'null'}"]
        if self.api_error_status is not None:
            bits.append(f"api_status={self.api_error_status}")
        if self.num_turns is not None:
            bits.append(f"turns={self.num_turns}")
        if cost is not None:
            bits.append(f"cost=${cost:.4f}")
        bits.append("structured_output" if self.has_structured_output else "no structured_output")
        errors = self.errors
        if errors:
            bits.append("errors=" + "; ".join(errors))
        elif self.is_error and self.result_text:
            bits.append(self.result_text)
        return preview(" ".join(bits))


class ArrayLine(ParsedLine):
    """A JSON array on one line: ``--output-format json --verbose`` prints every message this way.

    Its objects are parsed as lines; any other item (a nested array, a scalar) is an
    :class:`UnknownLine`, so an array nested a thousand deep costs no recursion here."""

    __slots__ = ("items",)
    type = "array"

    def __init__(self, raw: str, data: list[Any]) -> None:
        super().__init__(raw, data)
        self.items = [parse_obj(compact(item), item) if isinstance(item, dict) else UnknownLine(compact(item), item)
                      for item in data]

    @property
    def session_id(self) -> str | None:
        for item in self.items:
            if item.session_id:
                return item.session_id
        return None

    def display(self) -> str:
        kinds = [item.type for item in self.items]
        return preview(f"array of {len(kinds)} messages: {', '.join(kinds)}")


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


def _loads_screened(text: str) -> Any:
    """orjson for a screened line; ``json`` decides whatever orjson refuses (see the module notes)."""
    try:
        return orjson.loads(text)
    except ValueError:  # orjson.JSONDecodeError (a json.JSONDecodeError): NaN, 1e999, "\\ud83d", depth
        return json.loads(text)


def parse_line(line: bytes | str, *, screened: bool = False) -> ParsedLine | None:
    """Parse one physical stdout line. Returns None only for an empty line (no content to keep).

    Never raises: undecodable bytes, non-JSON text, JSON that does not decode (cut short, an
    integer of more than 4,300 digits) and JSON nested deeper than the recursion limit become a
    :class:`TextLine` holding the line as printed, with a note why.

    ``screened``: the caller has made sure the line holds no match of :data:`SCREEN_PATTERN`, so
    the faster decoder gives the same value (the recorder screens whole batches at once).
    """
    if isinstance(line, bytes):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            # Keep every byte: undecodable bytes become \\xNN escapes in the stored text.
            return TextLine(line.rstrip(b"\r\n").decode("utf-8", "backslashreplace"),
                            reason="not_utf8", note="not UTF-8: bytes kept as \\xNN escapes")
    else:
        text = line
    text = text.rstrip("\r\n")
    if not text:
        return None
    try:
        data = _loads_screened(text) if screened else json.loads(text)
    except RecursionError:
        return TextLine(text, reason="too_deep", note="JSON nested too deeply to parse")
    except ValueError as exc:
        if text.lstrip()[:1] in ("{", "["):  # meant to be JSON: say what is wrong with it
            return TextLine(text, reason="bad_json", note=f"invalid JSON: {as_text(str(exc), 120)}")
        return TextLine(text)
    try:
        return parse_obj(text, data)
    except RecursionError:  # a line that decoded at the edge of the limit (parse_obj recurses)
        return TextLine(text, reason="too_deep", note="JSON nested too deeply to parse")
