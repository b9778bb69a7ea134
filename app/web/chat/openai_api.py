"""``POST /v1/chat/completions`` and ``GET /v1/models``, as the official ``openai`` client and Open
WebUI expect them.

Why this shape: the whole history arrives with every request (``engine/chat_messages.py`` reads
it, content-part arrays included); ``stream: true`` answers with ``chat.completion.chunk`` events
ending ``data: [DONE]``, text as ``delta.content``, each tool call the agent made as
``delta.tool_calls`` with its id and complete arguments; the last chunk has the ``finish_reason``
and the usage from the CLI's result line (a separate usage chunk with ``stream_options.
include_usage``). Errors are OpenAI's ``{error: {message, type, code}}``; one that happens once
streaming began is a chunk with ``error``. Sampling options (temperature, …) and client-side
``tools`` are ignored: the agent runs its own tools. ``tierops`` in a response names the session
and the conversation.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.engine.chat_messages import MODELS, parse_messages
from app.engine.chat_stream import TextDelta, ToolCall
from app.supervisor.chat import ChatTurn
from app.web.chat.common import ChatFailure, asker, failure_text, json_object, read_messages, start

log = logging.getLogger(__name__)

CREATED = 1767225600  # the models' "created": 2026-01-01, a fixed date (they are not trained models)
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 409: "conflict_error", 413: "invalid_request_error", 429: "rate_limit_error"}


def error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": ERROR_TYPES.get(status, "server_error"),
                                   "param": None, "code": code}}, status_code=status, headers=headers)


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": CREATED, "owned_by": "tierops",
            "tierops": {"tier": MODELS[name]}}


async def models(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [_model(name) for name in MODELS]})


async def model(request: Request) -> Response:
    name = request.path_params["model"]
    if name not in MODELS:
        return error(404, "model_not_found", f"no model {name!r}; GET /v1/models lists them")
    return JSONResponse(_model(name))


def _usage(turn: ChatTurn) -> dict[str, int]:
    u = turn.reader.usage
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "total_tokens": u.total_tokens}


def _tierops(turn: ChatTurn) -> dict[str, Any]:
    return {"conversation": turn.conversation["public_id"], "session": turn.session_pk,
            "session_url": f"/sessions/{turn.session_pk}" if turn.session_pk else None, "tier": turn.tier,
            "cost_usd": turn.cost_usd}


def _call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


async def completions(request: Request) -> Response:
    try:
        body = await json_object(request)
        if body.get("n") not in (None, 1):
            raise ChatFailure(400, "invalid_request", "n must be 1: one answer per question")
        messages = read_messages(parse_messages, body.get("messages"))
        turn = await start(request, asker(request, "openai", messages, body.get("model")))
    except ChatFailure as exc:
        return error(exc.status, exc.code, exc.message, exc.headers)
    completion_id = f"chatcmpl-tierops-{turn.turn_pk}"
    if body.get("stream") is True:
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        return StreamingResponse(_chunks(turn, completion_id, include_usage), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    async for _ in turn.events():
        pass
    await turn.done.wait()
    if turn.error is not None:
        return error(502 if turn.status != "interrupted" else 503, "turn_failed", failure_text(turn))
    message: dict[str, Any] = {"role": "assistant", "content": turn.reader.text, "refusal": None}
    if turn.reader.tool_calls:
        message["tool_calls"] = [_call(c) for c in turn.reader.tool_calls]
    return JSONResponse({
        "id": completion_id, "object": "chat.completion", "created": int(time.time()), "model": turn.model,
        "choices": [{"index": 0, "message": message, "finish_reason": turn.reader.finish_reason, "logprobs": None}],
        "usage": _usage(turn), "system_fingerprint": None, "tierops": _tierops(turn)})


async def _chunks(turn: ChatTurn, completion_id: str, include_usage: bool) -> AsyncIterator[bytes]:
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        data = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": turn.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}], **extra}
        return b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"

    yield chunk({"role": "assistant", "content": ""})
    calls = 0
    async for event in turn.events():
        if isinstance(event, TextDelta):
            yield chunk({"content": event.text})
        elif isinstance(event, ToolCall):
            yield chunk({"tool_calls": [{"index": calls, **_call(event)}]})
            calls += 1
    await turn.done.wait()
    if turn.error is not None:
        failure = {"error": {"message": failure_text(turn), "type": "server_error", "param": None, "code": "turn_failed"}}
        yield b"data: " + json.dumps(failure).encode() + b"\n\n"
        return
    if include_usage:
        yield chunk({}, turn.reader.finish_reason, tierops=_tierops(turn))
        usage = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": turn.model,
                 "choices": [], "usage": _usage(turn)}
        yield b"data: " + json.dumps(usage).encode() + b"\n\n"
    else:
        yield chunk({}, turn.reader.finish_reason, usage=_usage(turn), tierops=_tierops(turn))
    yield b"data: [DONE]\n\n"


routes = [
    Route("/v1/chat/completions", completions, methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
    Route("/v1/models/{model:path}", model, methods=["GET"]),
]
