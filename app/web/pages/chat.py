"""The ``/chat`` page: ask the ops agent in the dashboard, the answer streamed in as it is written.

Why a page of its own beside the OpenAI and Ollama APIs: an operator asks where they already are,
and "ask about this incident" starts a conversation with the incident, its timeline and evidence
in the agent's context (``supervisor/chat_context.py``). ``POST /chat/ask`` answers a JSON request
with an event stream (``start``, ``text``, ``tool_call``, ``tool_result``, ``done`` or ``error``),
which ``static/chat.js`` renders, tool calls folded like the transcript's; without JavaScript the
form posts, waits for the answer and shows the conversation. The dashboard's user is an operator:
asking a tier whose approval is manual is their approval (as a Run Now is).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from app.engine.chat_messages import MODELS, ChatInputError, ChatMessage
from app.engine.chat_stream import TextDelta, ToolCall, ToolResult
from app.store import chats
from app.store import incidents as incident_store
from app.supervisor.chat import ChatAsk, ChatRefused, ChatService, ChatTurn
from app.web.common import ApiError, read_body, state
from app.web.pages.forms import read_form
from app.web.templating import page

log = logging.getLogger(__name__)

QUESTION_MAX = 20_000
ASK_BODY_MAX = 64 * 1024


def _service(request: Request) -> ChatService:
    chat: ChatService = request.app.state.chat
    return chat


async def chat_page(request: Request) -> Response:
    st = state(request)
    public_id = request.path_params.get("conversation")
    conversation, turns, incident = None, [], None
    if public_id is not None:
        conversation = await chats.get_conversation(st.db, public_id)
        if conversation is None:
            raise ApiError(404, "not_found", f"no conversation {public_id!r}")
        turns = await chats.turns(st.db, conversation["id"])
        incident_id = conversation["incident_id"]
    else:
        incident_id = _incident_id(request.query_params.get("incident", ""))
    if incident_id is not None:
        incident = await incident_store.get_incident(st.db, incident_id)
    return page(request, "chat.html", {
        "conversation": conversation, "turns": turns, "incident": incident, "incident_id": incident_id,
        "conversations": await chats.list_conversations(st.db, limit=50), "models": MODELS,
        "max_tier": st.settings.max_tier, "running": _service(request).running, "chat_max": st.settings.chat_max})


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def ask(request: Request) -> Response:
    form = "application/json" not in request.headers.get("content-type", "")
    try:
        if form:
            fields = await read_form(request)
        else:
            try:
                fields = json.loads(await read_body(request, ASK_BODY_MAX, "the question"))
            except ValueError as exc:
                raise ChatRefused(400, "invalid_json", f"the body is not JSON: {exc}") from None
            if not isinstance(fields, dict):
                raise ChatRefused(400, "invalid_request", "the body must be a JSON object")
        turn = await _service(request).ask(_ask(request, fields))
    except ChatInputError as exc:
        return _refused(form, 400, "invalid_request", str(exc))
    except ChatRefused as exc:
        return _refused(form, exc.status, exc.code, exc.message, exc.retry_after)
    if form:  # no JavaScript: wait for the answer, then show the conversation
        await turn.done.wait()
        return RedirectResponse(f"/chat/{turn.conversation['public_id']}#turn-{turn.turn_pk}", status_code=303)
    return StreamingResponse(_events(turn), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _ask(request: Request, fields: Any) -> ChatAsk:
    question = fields.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ChatRefused(400, "invalid_request", "question: write a question first")
    if len(question) > QUESTION_MAX:
        raise ChatRefused(400, "invalid_request", f"question: {len(question)} characters; at most {QUESTION_MAX}")
    conversation = fields.get("conversation") or None
    model = fields.get("model") or None
    incident = str(fields.get("incident") or "")
    if not isinstance(conversation, str | None) or not isinstance(model, str | None):
        raise ChatRefused(400, "invalid_request", "conversation and model must be strings")
    address = request.client.host if request.client else "unknown"
    return ChatAsk(messages=[ChatMessage("user", question)], model=model, client="page",
                   asked_by=f"the dashboard ({address})", operator=True, conversation=conversation,
                   incident_id=_incident_id(incident))


def _incident_id(text: str) -> int | None:
    """An incident id as a form or the query gives it (anything else: none)."""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 12 else None


def _refused(form: bool, status: int, code: str, message: str, retry_after: int | None = None) -> Response:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    if form:
        raise ApiError(status, code, message)
    return JSONResponse({"error": code, "detail": message}, status_code=status, headers=headers)


async def _events(turn: ChatTurn) -> AsyncIterator[bytes]:
    await turn.started.wait()
    yield _sse("start", {"conversation": turn.conversation["public_id"], "title": turn.conversation["title"],
                         "turn": turn.turn_pk, "session": turn.session_pk, "model": turn.model, "tier": turn.tier})
    async for event in turn.events():
        if isinstance(event, TextDelta):
            yield _sse("text", {"text": event.text})
        elif isinstance(event, ToolCall):
            yield _sse("tool_call", {"id": event.id, "name": event.name, "arguments": event.arguments})
        elif isinstance(event, ToolResult):
            yield _sse("tool_result", {"id": event.id, "text": event.text, "is_error": event.is_error})
    await turn.done.wait()
    usage = turn.reader.usage
    if turn.error is not None:
        yield _sse("error", {"message": turn.error, "session": turn.session_pk, "status": turn.status})
    else:
        yield _sse("done", {"session": turn.session_pk, "status": turn.status, "cost_usd": turn.cost_usd,
                            "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens})


routes = [
    Route("/chat", chat_page, methods=["GET"]),
    Route("/chat/ask", ask, methods=["POST"]),
    Route("/chat/{conversation}", chat_page, methods=["GET"]),
]
