"""A scripted fake of the Anthropic Messages API, good enough for the real ``claude`` CLI.

Stdlib only. Start it, point the CLI at it with
``ANTHROPIC_BASE_URL=<fake.url> ANTHROPIC_API_KEY=sk-test-dummy`` and script what the
"model" answers::

    from tests.fakes.fake_anthropic import FakeAnthropic, bash, structured, text

    with FakeAnthropic() as fake:
        fake.script("health check", [bash("echo ok"), structured({"summary": "ok"})])
        ...  # run `claude -p "run the health check" ...` with ANTHROPIC_BASE_URL=fake.url
        req = fake.message_requests[0]
        assert "MARKER" in fake.system_text(req)

What it serves (see shared/reference/claude-code-stream-json.md, section 7):

- ``HEAD /`` (the CLI's connection warm-up) and any unknown path: 404 with an
  Anthropic-style error JSON (no body for HEAD).
- ``POST /v1/messages`` (the CLI adds ``?beta=true``): the next turn of the
  conversation's script, as an SSE stream when the body has ``"stream": true``
  (``message_start``, ``ping``, ``content_block_start`` / ``content_block_delta``
  (``text_delta`` or ``input_json_delta``) / ``content_block_stop`` per block,
  ``message_delta`` with the stop reason and usage, ``message_stop``), otherwise as
  one message JSON. Every answer carries a ``request-id`` header.
- ``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``.
- ``GET /v1/models``: the Models API's list of ``fake.models`` (``{type, id, display_name,
  created_at}``), paginated like the real API when given ``limit`` (``after_id``, ``has_more``,
  ``first_id``, ``last_id``); ``fake.models_delay`` s before answering, ``fake.models_error`` an
  HTTP error status instead, ``fake.models_raw`` bytes answered as they are (a body that is not the
  list); counted by ``fake.models_requests``.
- Credentials: with ``FakeAnthropic(keys={...})`` every POST must carry one of those keys as
  ``x-api-key`` or ``Authorization: Bearer`` (the CLI sends the first for ``ANTHROPIC_API_KEY``, the
  second for ``ANTHROPIC_AUTH_TOKEN`` / ``CLAUDE_CODE_OAUTH_TOKEN``); any other request gets the
  API's 401 ``authentication_error`` (recorded with kind ``unauthorized``). Without ``keys``
  (the default) every key is accepted.

The SSE body is sent with ``Transfer-Encoding: chunked`` on a keep-alive HTTP/1.1
connection (as the real API does), so the client sees the end of the stream at the
terminating chunk and never waits for a connection close.

Conversations: a request belongs to the conversation named by its
``x-claude-code-session-id`` header (falling back to ``metadata.user_id``'s
``session_id``). The first request of a conversation picks a script: the first
registered one whose ``match`` is a substring of :meth:`FakeAnthropic.prompt_text`
or :meth:`FakeAnthropic.system_text` of that request, else the default script (one
text turn ``"No script matched."``). Each later request of the same conversation
(including the CLI's own retries, and a ``claude --resume`` run, which keeps the
session id) gets the next turn. After the last turn it answers ``"Done."``
(``end_turn``), or the script's ``exhausted`` turn when one was given.

Mind that the CLI's main system prompt is ~6 kB of generic text: a short ``match``
string may be found there. Use distinctive match strings.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

__all__ = [
    "FakeAnthropic",
    "Turn",
    "bash",
    "error",
    "hang",
    "message",
    "reply",
    "structured",
    "text",
    "tool_use",
]

DEFAULT_TEXT = "No script matched."
EXHAUSTED_TEXT = "Done."

_CONNECTION_ERRORS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)

_ERROR_TYPES_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


# --------------------------------------------------------------------------- turns


@dataclass(frozen=True)
class Turn:
    """One scripted answer. Build it with the helpers below rather than by hand.

    kind "message": an assistant message with ``content`` blocks and ``stop_reason``.
    kind "error":   HTTP ``status`` with an Anthropic error JSON.
    kind "hang":    wait ``seconds`` (cut short when the fake stops), then answer with
                    ``then``, or, when ``then`` is None, with the conversation's next turn.
    kind "reply":   ``respond(body)`` decides the answer from the request (see :func:`reply`).
    """

    kind: str
    content: tuple[Mapping[str, Any], ...] = ()
    stop_reason: str = "end_turn"
    status: int = 200
    error_type: str = "api_error"
    error_message: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    seconds: float = 0.0
    then: Turn | None = None
    respond: Callable[[Mapping[str, Any]], Turn] | None = None

    def describe(self) -> dict[str, Any]:
        """Short JSON-able description, recorded with each request as ``answer``."""
        if self.kind == "message":
            return {"content": [dict(b) for b in self.content], "stop_reason": self.stop_reason}
        if self.kind == "error":
            return {"error": {"status": self.status, "type": self.error_type, "message": self.error_message}}
        if self.kind == "reply":
            return {"reply": getattr(self.respond, "__name__", "respond")}
        return {"hang": self.seconds, "then": self.then.describe() if self.then else None}


def message(*blocks: Mapping[str, Any], stop_reason: str | None = None) -> Turn:
    """A message with arbitrary content blocks (``{"type":"text","text":...}`` or
    ``{"type":"tool_use","name":...,"input":{...}}``; a tool_use ``id`` is generated
    when absent). ``stop_reason`` defaults to ``tool_use`` when a tool_use block is
    present, else ``end_turn``."""
    if not blocks:
        raise ValueError("message() needs at least one content block")
    for b in blocks:
        if b.get("type") not in ("text", "tool_use"):
            raise ValueError(f"unsupported content block type: {b.get('type')!r}")
    if stop_reason is None:
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return Turn(kind="message", content=tuple(dict(b) for b in blocks), stop_reason=stop_reason)


def text(s: str) -> Turn:
    """One text block, stop_reason ``end_turn``."""
    return message({"type": "text", "text": s})


def tool_use(name: str, input: Mapping[str, Any], text: str | None = None) -> Turn:
    """Optional leading text block, then one tool_use block; stop_reason ``tool_use``."""
    blocks: list[dict[str, Any]] = []
    if text is not None:
        blocks.append({"type": "text", "text": text})
    blocks.append({"type": "tool_use", "name": name, "input": dict(input)})
    return message(*blocks, stop_reason="tool_use")


def structured(obj: Mapping[str, Any], text: str | None = None) -> Turn:
    """A ``StructuredOutput`` tool call (what the CLI offers when ``--json-schema`` is given)."""
    return tool_use("StructuredOutput", obj, text=text)


def bash(command: str, description: str = "Run a health probe", text: str | None = None) -> Turn:
    """A ``Bash`` tool call."""
    return tool_use("Bash", {"command": command, "description": description}, text=text)


def error(
    status: int,
    type: str | None = None,
    message: str = "Internal server error",
    headers: Mapping[str, str] | None = None,
) -> Turn:
    """An HTTP error answer: ``{"type":"error","error":{"type":...,"message":...}}``.

    ``type`` defaults to the API's usual type for the status (``api_error`` for 500,
    ``overloaded_error`` for 529, ``authentication_error`` for 401, ...).
    """
    if status < 400:
        raise ValueError("error() needs an HTTP error status (>= 400)")
    etype = type or _ERROR_TYPES_BY_STATUS.get(status, "api_error")
    return Turn(
        kind="error",
        status=status,
        error_type=etype,
        error_message=message,
        headers=tuple((headers or {}).items()),
    )


def reply(respond: Callable[[Mapping[str, Any]], Turn]) -> Turn:
    """An answer computed from the request body (its ``messages``: what the CLI sent, earlier turns
    of a resumed conversation included), e.g. to show that a later turn saw an earlier one."""
    return Turn("reply", respond=respond)


def hang(seconds: float, then: Turn | None = None) -> Turn:
    """Wait ``seconds`` before answering (nothing is sent meanwhile, not even headers).

    Then answer with ``then``, or, when ``then`` is None, with the conversation's next
    scripted turn (``"Done."`` if there is none). The wait ends early when the fake is
    stopped, so a test may use a long hang and kill the CLI.
    """
    if seconds < 0:
        raise ValueError("hang() needs seconds >= 0")
    return Turn(kind="hang", seconds=float(seconds), then=then)


# --------------------------------------------------------------------------- scripts


@dataclass
class _Script:
    match: str
    turns: tuple[Turn, ...]
    exhausted: Turn


@dataclass
class _Conversation:
    key: str
    script: _Script
    is_default: bool
    next_index: int = 0
    served: list[int] = field(default_factory=list)

    def next_turn(self) -> tuple[int, Turn]:
        i = self.next_index
        self.next_index += 1
        if i < len(self.script.turns):
            return i, self.script.turns[i]
        return i, self.script.exhausted


# --------------------------------------------------------------------------- helpers


def _blocks_text(content: Any) -> list[str]:
    """Texts of a message's content (a string or a list of blocks); tool results skipped."""
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                out.append(block)
            elif isinstance(block, Mapping) and block.get("type") == "text":
                out.append(str(block.get("text", "")))
    return out


def _estimate_tokens(n_chars: int) -> int:
    return max(1, n_chars // 4)


def _new_id(prefix: str, n: int = 20) -> str:
    return f"{prefix}{uuid.uuid4().hex[:n]}"


def _split(s: str, parts: int) -> list[str]:
    if not s:
        return [""]
    size = max(1, -(-len(s) // parts))
    return [s[i : i + size] for i in range(0, len(s), size)]


def _session_of(headers: Mapping[str, str], body: Any) -> str:
    sid = headers.get("x-claude-code-session-id")
    if sid:
        return sid
    if isinstance(body, Mapping):
        meta = body.get("metadata")
        if isinstance(meta, Mapping):
            uid = meta.get("user_id")
            if isinstance(uid, str):
                with contextlib.suppress(ValueError):
                    parsed = json.loads(uid)
                    if isinstance(parsed, Mapping) and parsed.get("session_id"):
                        return str(parsed["session_id"])
    return "<no-session>"


# --------------------------------------------------------------------------- server


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer that tracks its handler threads and connections so that
    stop() can cut keep-alive connections and join every thread (no leaks, no
    ResourceWarning)."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, fake: FakeAnthropic) -> None:
        self.fake = fake
        self._track_lock = threading.Lock()
        self._handler_threads: set[threading.Thread] = set()
        self._open_conns: set[socket.socket] = set()
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        t = threading.Thread(
            target=self._run_request,
            args=(request, client_address),
            name=f"fake-anthropic-conn-{client_address[1]}",
            daemon=True,
        )
        with self._track_lock:
            self._handler_threads.add(t)
            self._open_conns.add(request)
        t.start()

    def _run_request(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            with self._track_lock:
                self._open_conns.discard(request)
            self.shutdown_request(request)
            with self._track_lock:
                self._handler_threads.discard(threading.current_thread())

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            return  # client went away (killed CLI, stop()): not interesting
        self.fake._errors.append(repr(exc))
        super().handle_error(request, client_address)

    def cut_connections(self) -> None:
        with self._track_lock:
            conns = list(self._open_conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)

    def join_threads(self, timeout: float) -> list[threading.Thread]:
        deadline = time.monotonic() + timeout
        while True:
            with self._track_lock:
                threads = list(self._handler_threads)
            if not threads:
                return []
            for t in threads:
                t.join(max(0.0, deadline - time.monotonic()))
            if time.monotonic() >= deadline:
                with self._track_lock:
                    return [t for t in self._handler_threads if t.is_alive()]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeAnthropic/1.0"
    timeout = 120  # idle keep-alive connections are dropped after this (backstop only)
    server: _Server

    # ---- plumbing

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def version_string(self) -> str:
        return self.server_version

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                line = self.rfile.readline()
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send_json(
        self, status: int, obj: Any, request_id: str | None, extra: Iterable[tuple[str, str]] = ()
    ) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if request_id:
            self.send_header("request-id", request_id)
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.wfile.flush()

    def _not_found(self, request_id: str) -> None:
        self._send_json(
            404,
            {
                "type": "error",
                "error": {"type": "not_found_error", "message": f"Not found: {self.command} {self.path}"},
                "request_id": request_id,
            },
            request_id,
        )

    def _record(self, body: Any, raw_len: int, **extra: Any) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "seq": 0,
            "t": time.time(),
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body,
            "body_len": raw_len,
            "client_port": self.client_address[1],
        }
        rec.update(extra)
        return self.server.fake._add_request(rec)

    # ---- verbs

    def do_HEAD(self) -> None:
        rid = _new_id("req_fake_", 16)
        self._record(None, 0, kind="404", request_id=rid)
        self._not_found(rid)

    def do_GET(self) -> None:
        rid = _new_id("req_fake_", 16)
        if urlsplit(self.path).path.rstrip("/") == "/v1/models":
            self._models(rid)
            return
        self._record(None, 0, kind="404", request_id=rid)
        self._not_found(rid)

    def _models(self, rid: str) -> None:
        """GET /v1/models: the Models API's list, paginated when ``limit`` is given."""
        fake = self.server.fake
        self._record(None, 0, kind="models", request_id=rid)
        if fake.models_delay and fake._stopping.wait(fake.models_delay):
            self.close_connection = True
            return
        if not fake._authorized(self.headers):
            self._send_json(401, {"type": "error", "error": {"type": "authentication_error",
                                                             "message": "invalid x-api-key"}, "request_id": rid}, rid)
            return
        if fake.models_error is not None:
            etype = _ERROR_TYPES_BY_STATUS.get(fake.models_error, "api_error")
            self._send_json(fake.models_error, {"type": "error", "error": {"type": etype, "message": "fake: models "
                                                                           "error"}, "request_id": rid}, rid)
            return
        if fake.models_raw is not None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(fake.models_raw)))
            self.end_headers()
            self.wfile.write(fake.models_raw)
            return
        query = dict(parse_qsl(urlsplit(self.path).query))
        items = [{"type": "model", "created_at": "2025-01-01T00:00:00Z", **m} for m in fake.models]
        if "after_id" in query:
            ids = [m["id"] for m in items]
            items = items[ids.index(query["after_id"]) + 1:] if query["after_id"] in ids else []
        limit = int(query["limit"]) if query.get("limit", "").isdigit() else len(items)
        page, more = items[:limit], len(items) > limit
        self._send_json(200, {"data": page, "has_more": more, "first_id": page[0]["id"] if page else None,
                              "last_id": page[-1]["id"] if page else None}, rid)

    def do_POST(self) -> None:
        rid = _new_id("req_fake_", 16)
        raw = self._read_body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        route = urlsplit(self.path).path.rstrip("/")
        if not self.server.fake._authorized(self.headers):
            self._record(body, len(raw), kind="unauthorized", request_id=rid)
            self._send_json(
                401,
                {
                    "type": "error",
                    "error": {"type": "authentication_error", "message": "invalid x-api-key"},
                    "request_id": rid,
                },
                rid,
            )
            return
        if route == "/v1/messages/count_tokens":
            self._record(body, len(raw), kind="count_tokens", request_id=rid)
            self._send_json(200, {"input_tokens": _estimate_tokens(len(raw))}, rid)
            return
        if route != "/v1/messages":
            self._record(body, len(raw), kind="404", request_id=rid)
            self._not_found(rid)
            return
        if not isinstance(body, dict):
            self._record(body, len(raw), kind="bad_request", request_id=rid)
            self._send_json(
                400,
                {
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": "fake: body is not a JSON object"},
                    "request_id": rid,
                },
                rid,
            )
            return

        fake = self.server.fake
        headers = {k.lower(): v for k, v in self.headers.items()}
        key = _session_of(headers, body)
        conv, index, turn = fake._next_turn(key, body)
        rec = self._record(
            body,
            len(raw),
            kind="main",
            request_id=rid,
            session_id=key,
            script=None if conv.is_default else conv.script.match,
            turn_index=index,
            answer=turn.describe(),
        )
        # resolve hangs (outside the lock)
        while turn.kind == "hang":
            if fake._stopping.wait(turn.seconds):
                self.close_connection = True
                return
            if turn.then is not None:
                turn = turn.then
            else:
                _, index, turn = fake._next_turn(key, body)
                rec.setdefault("hang_then_turn_index", index)
        if turn.kind == "reply" and turn.respond is not None:
            turn = turn.respond(body)
            rec["answer"] = turn.describe()
        self._answer(turn, body, len(raw), rid)

    # ---- answers

    def _answer(self, turn: Turn, body: Mapping[str, Any], raw_len: int, rid: str) -> None:
        if turn.kind == "error":
            self._send_json(
                turn.status,
                {
                    "type": "error",
                    "error": {"type": turn.error_type, "message": turn.error_message},
                    "request_id": rid,
                },
                rid,
                turn.headers,
            )
            return
        model = str(body.get("model") or "claude-fake")
        content: list[dict[str, Any]] = []
        for block in turn.content:
            b = dict(block)
            if b["type"] == "tool_use":
                b = {
                    "type": "tool_use",
                    "id": b.get("id") or _new_id("toolu_fake_"),
                    "name": b["name"],
                    "input": b.get("input", {}),
                }
            content.append(b)
        in_tok = _estimate_tokens(raw_len)
        out_tok = _estimate_tokens(len(json.dumps(content)))
        msg_id = _new_id("msg_fake_")
        if body.get("stream"):
            self._stream(msg_id, model, content, turn.stop_reason, in_tok, out_tok, rid)
        else:
            self._send_json(
                200,
                {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": content,
                    "stop_reason": turn.stop_reason,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": in_tok,
                        "output_tokens": out_tok,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": 0,
                        "service_tier": "standard",
                    },
                },
                rid,
            )

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, name: str, obj: Mapping[str, Any]) -> None:
        self._chunk(f"event: {name}\ndata: {json.dumps(obj, separators=(',', ':'))}\n\n".encode())

    def _stream(
        self,
        msg_id: str,
        model: str,
        content: list[dict[str, Any]],
        stop_reason: str,
        in_tok: int,
        out_tok: int,
        rid: str,
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("request-id", rid)
        self.end_headers()
        self._event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": in_tok,
                        "output_tokens": 1,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": 0,
                        "service_tier": "standard",
                    },
                },
            },
        )
        self._event("ping", {"type": "ping"})
        for i, block in enumerate(content):
            if block["type"] == "text":
                self._event(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
                for piece in _split(block["text"], 3):
                    self._event(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": i,
                            "delta": {"type": "text_delta", "text": piece},
                        },
                    )
            else:
                self._event(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {
                            "type": "tool_use",
                            "id": block["id"],
                            "name": block["name"],
                            "input": {},
                        },
                    },
                )
                for piece in _split(json.dumps(block["input"], separators=(",", ":")), 3):
                    self._event(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": i,
                            "delta": {"type": "input_json_delta", "partial_json": piece},
                        },
                    )
            self._event("content_block_stop", {"type": "content_block_stop", "index": i})
        self._event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {
                    "input_tokens": in_tok,
                    "output_tokens": out_tok,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                },
            },
        )
        self._event("message_stop", {"type": "message_stop"})
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


# --------------------------------------------------------------------------- public


class FakeAnthropic:
    """Scripted fake Messages API on ``127.0.0.1:<random port>``; see the module docstring.

    Use as a context manager (``with FakeAnthropic() as fake:``) or call
    :meth:`start` / :meth:`stop`. Thread-safe: several CLIs may talk to it at once.
    """

    def __init__(self, keys: Iterable[str] | None = None) -> None:
        self.keys = frozenset(keys) if keys is not None else None  # None: any key is accepted
        self._lock = threading.Lock()
        self._scripts: list[_Script] = []
        self._default = _Script(match="", turns=(text(DEFAULT_TEXT),), exhausted=text(EXHAUSTED_TEXT))
        self._conversations: dict[str, _Conversation] = {}
        self._requests: list[dict[str, Any]] = []
        self._errors: list[str] = []
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        # GET /v1/models: the list ({id, display_name[, created_at]}), a delay, an error status, a raw body
        self.models: list[dict[str, Any]] = [
            {"id": "claude-opus-4-8", "display_name": "Claude Opus 4.8"},
            {"id": "claude-sonnet-4-5", "display_name": "Claude Sonnet 4.5"},
            {"id": "claude-haiku-4-5", "display_name": "Claude Haiku 4.5"}]
        self.models_delay = 0.0
        self.models_error: int | None = None
        self.models_raw: bytes | None = None

    # ---- lifecycle

    def start(self) -> FakeAnthropic:
        if self._server is not None:
            raise RuntimeError("FakeAnthropic already started")
        self._stopping.clear()
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-anthropic",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving, end pending hangs, cut open connections, join every thread."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        if thread is not None:
            thread.join(timeout)
        server.cut_connections()
        stuck = server.join_threads(timeout)
        server.server_close()
        self._server = None
        self._thread = None
        if stuck:
            raise RuntimeError(f"FakeAnthropic: {len(stuck)} handler thread(s) did not stop")

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeAnthropic is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """Base URL for ``ANTHROPIC_BASE_URL`` (no trailing slash)."""
        return f"http://127.0.0.1:{self.port}"

    def _authorized(self, headers: Any) -> bool:
        if self.keys is None:
            return True
        given = {headers.get("x-api-key") or ""}
        auth = headers.get("authorization") or ""
        if auth.lower().startswith("bearer "):
            given.add(auth[7:].strip())
        return bool(given & self.keys)

    # ---- scripting

    def script(self, match: str, turns: Sequence[Turn], *, exhausted: Turn | None = None) -> None:
        """Register a conversation script.

        A new conversation uses the first registered script whose ``match`` is a
        substring of the request's prompt text or system text (``""`` matches all).
        ``turns`` are answered in order, one per API request of that conversation
        (a CLI retry is a request too). Past the end: ``exhausted``, default
        ``text("Done.")``; e.g. ``script(m, [], exhausted=error(500))`` fails every call.
        """
        turns = tuple(turns)
        for t in (*turns, *([exhausted] if exhausted else [])):
            if not isinstance(t, Turn):
                raise TypeError(f"turns must be Turn objects (use text(), tool_use(), ...), got {t!r}")
        with self._lock:
            self._scripts.append(
                _Script(match=match, turns=turns, exhausted=exhausted or text(EXHAUSTED_TEXT))
            )

    def _next_turn(self, key: str, body: Mapping[str, Any]) -> tuple[_Conversation, int, Turn]:
        with self._lock:
            conv = self._conversations.get(key)
            if conv is None:
                haystacks = (self.prompt_text(body), self.system_text(body))
                chosen = next((s for s in self._scripts if any(s.match in h for h in haystacks)), None)
                conv = _Conversation(key=key, script=chosen or self._default, is_default=chosen is None)
                self._conversations[key] = conv
            index, turn = conv.next_turn()
            conv.served.append(index)
            return conv, index, turn

    def _add_request(self, rec: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            rec["seq"] = len(self._requests) + 1
            self._requests.append(rec)
        return rec

    # ---- inspection

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Snapshot of every request received, in order. Each is a dict with
        ``seq``, ``t``, ``method``, ``path`` (with query, e.g. ``/v1/messages?beta=true``),
        ``headers`` (lower-cased names), ``body`` (parsed JSON or None), ``body_len``,
        ``client_port`` (same port = same keep-alive connection),
        ``kind`` (``"main"``, ``"404"``, ``"count_tokens"``, ``"bad_request"``),
        ``request_id``; for ``main`` also ``session_id``, ``script`` (its match string,
        None for the default script), ``turn_index`` and ``answer``."""
        with self._lock:
            return list(self._requests)

    @property
    def models_requests(self) -> int:
        """How many ``GET /v1/models`` requests arrived (each page counts)."""
        return sum(1 for r in self.requests if r.get("kind") == "models")

    @property
    def message_requests(self) -> list[dict[str, Any]]:
        """Only the ``POST /v1/messages`` requests."""
        return [r for r in self.requests if r.get("kind") == "main"]

    @property
    def session_ids(self) -> list[str]:
        """Conversation keys seen, in order of first request."""
        with self._lock:
            return list(self._conversations)

    @property
    def errors(self) -> list[str]:
        """Unexpected exceptions raised inside handlers (should stay empty)."""
        return list(self._errors)

    @staticmethod
    def _body(request: Mapping[str, Any]) -> Mapping[str, Any]:
        body = request.get("body") if "body" in request and "messages" not in request else request
        return body if isinstance(body, Mapping) else {}

    @staticmethod
    def system_text(request: Mapping[str, Any]) -> str:
        """The request's top-level ``system`` text (blocks joined by ``"\\n"``).

        ``request`` is a recorded request (from :attr:`requests`) or a request body.
        ``--append-system-prompt`` text ends the last block. Messages with
        ``"role": "system"`` inside ``messages`` are not included.
        """
        body = FakeAnthropic._body(request)
        return "\n".join(_blocks_text(body.get("system")))

    @staticmethod
    def prompt_text(request: Mapping[str, Any]) -> str:
        """Text of every ``user`` message's text blocks (joined by ``"\\n"``), without
        the CLI's ``<system-reminder>`` blocks and without tool results.

        On a resumed conversation this includes the earlier prompts; the newest
        prompt is :meth:`last_prompt_text`.
        """
        return "\n".join(FakeAnthropic._prompt_parts(request))

    @staticmethod
    def last_prompt_text(request: Mapping[str, Any]) -> str:
        """Text blocks of the last ``user`` message that has any (see :meth:`prompt_text`)."""
        body = FakeAnthropic._body(request)
        for m in reversed(body.get("messages") or []):
            if isinstance(m, Mapping) and m.get("role") == "user":
                parts = [
                    t
                    for t in _blocks_text(m.get("content"))
                    if not t.lstrip().startswith("<system-reminder>")
                ]
                if parts:
                    return "\n".join(parts)
        return ""

    @staticmethod
    def _prompt_parts(request: Mapping[str, Any]) -> list[str]:
        body = FakeAnthropic._body(request)
        parts: list[str] = []
        for m in body.get("messages") or []:
            if isinstance(m, Mapping) and m.get("role") == "user":
                parts.extend(
                    t
                    for t in _blocks_text(m.get("content"))
                    if not t.lstrip().startswith("<system-reminder>")
                )
        return parts

    @staticmethod
    def tool_names(request: Mapping[str, Any]) -> list[str]:
        """Names of the tools offered in the request (``StructuredOutput`` when ``--json-schema``)."""
        body = FakeAnthropic._body(request)
        return [t.get("name", "") for t in body.get("tools") or [] if isinstance(t, Mapping)]

    @staticmethod
    def tool_results(request: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every ``tool_result`` block the request sends back, oldest first."""
        body = FakeAnthropic._body(request)
        out: list[dict[str, Any]] = []
        for m in body.get("messages") or []:
            content = m.get("content") if isinstance(m, Mapping) else None
            if isinstance(content, list):
                out.extend(
                    dict(b) for b in content if isinstance(b, Mapping) and b.get("type") == "tool_result"
                )
        return out
