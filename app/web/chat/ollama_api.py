"""Ollama's ``POST /api/chat``, ``POST /api/generate`` and ``GET /api/tags``, as the official
``ollama`` client uses them.

Why this shape: Ollama streams by default (``stream`` absent means true) as NDJSON, one JSON
object per line, the last with ``done: true``, ``done_reason`` and the token counts
(``prompt_eval_count``, ``eval_count``) and durations in nanoseconds. A tool call the agent made
is a message with ``tool_calls`` (its ``id``, name and arguments as an object). ``/api/generate``
is a one-question conversation (``system`` is the client's instructions). Errors are ``{error}``
with the status, as Ollama's own server answers; one after streaming began is a line with
``error``. The models are ``tierops`` and ``tierops-tier1..3`` (``:latest`` accepted).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.engine.chat_messages import MODELS, ChatMessage, parse_messages
from app.engine.chat_stream import TextDelta, ToolCall
from app.supervisor.chat import ChatTurn
from app.web.chat.common import ChatFailure, asker, failure_text, json_object, read_messages, start

log = logging.getLogger(__name__)

MODIFIED_AT = "2026-01-01T00:00:00Z"


def error(exc: ChatFailure) -> JSONResponse:
    return JSONResponse({"error": exc.message}, status_code=exc.status, headers=exc.headers)


async def tags(request: Request) -> Response:
    return JSONResponse({"models": [{
        "name": name, "model": name, "modified_at": MODIFIED_AT, "size": 0,
        "digest": hashlib.sha256(name.encode()).hexdigest(),
        "details": {"format": "tierops", "family": "tierops", "families": ["tierops"], "parameter_size": f"tier {tier}",
                    "quantization_level": "none"}} for name, tier in MODELS.items()]})


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _arguments(call: ToolCall) -> Any:
    try:
        return json.loads(call.arguments)
    except ValueError:
        return {}


def _final(turn: ChatTurn, started: float) -> dict[str, Any]:
    took = int((time.monotonic() - started) * 1e9)
    return {"done": True, "done_reason": "length" if turn.reader.finish_reason == "length" else "stop",
            "total_duration": took, "load_duration": 0, "prompt_eval_count": turn.reader.usage.prompt_tokens,
            "prompt_eval_duration": 0, "eval_count": turn.reader.usage.completion_tokens, "eval_duration": took,
            "tierops": {"conversation": turn.conversation["public_id"], "session": turn.session_pk,
                        "tier": turn.tier, "cost_usd": turn.cost_usd}}


async def _answer(request: Request, turn: ChatTurn, stream: bool, *, generate: bool) -> Response:
    started = time.monotonic()

    def piece(text: str, calls: list[ToolCall] | None = None) -> dict[str, Any]:
        head = {"model": turn.model, "created_at": _now()}
        if generate:
            return {**head, "response": text, "done": False}
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = [{"id": c.id, "function": {"name": c.name, "arguments": _arguments(c)}}
                                     for c in calls]
        return {**head, "message": message, "done": False}

    if not stream:
        async for _ in turn.events():
            pass
        await turn.done.wait()
        if turn.error is not None:
            return JSONResponse({"error": failure_text(turn)}, status_code=502)
        body = piece(turn.reader.text, None if generate else turn.reader.tool_calls)
        return JSONResponse({**body, **_final(turn, started)})

    async def lines() -> AsyncIterator[bytes]:
        async for event in turn.events():
            if isinstance(event, TextDelta):
                yield _line(piece(event.text))
            elif isinstance(event, ToolCall) and not generate:
                yield _line(piece("", [event]))
        await turn.done.wait()
        if turn.error is not None:
            yield _line({"error": failure_text(turn)})
            return
        yield _line({**piece(""), **_final(turn, started)})

    return StreamingResponse(lines(), media_type="application/x-ndjson", headers={"Cache-Control": "no-cache"})


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode() + b"\n"


async def chat(request: Request) -> Response:
    try:
        body = await json_object(request)
        messages = read_messages(parse_messages, body.get("messages"), images_field=True)
        turn = await start(request, asker(request, "ollama", messages, body.get("model")))
    except ChatFailure as exc:
        return error(exc)
    return await _answer(request, turn, body.get("stream") is not False, generate=False)


async def generate(request: Request) -> Response:
    try:
        body = await json_object(request)
        prompt, system = body.get("prompt"), body.get("system")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ChatFailure(400, "invalid_request", "prompt: a non-empty string is required")
        if system is not None and not isinstance(system, str):
            raise ChatFailure(400, "invalid_request", "system: must be a string")
        if body.get("images"):
            raise ChatFailure(400, "invalid_request", "images: not supported; TierOps reads text only")
        messages = [*([ChatMessage("system", system)] if system else []), ChatMessage("user", prompt)]
        turn = await start(request, asker(request, "ollama", messages, body.get("model")))
    except ChatFailure as exc:
        return error(exc)
    return await _answer(request, turn, body.get("stream") is not False, generate=True)


routes = [
    Route("/api/chat", chat, methods=["POST"]),
    Route("/api/generate", generate, methods=["POST"]),
    Route("/api/tags", tags, methods=["GET"]),
]
