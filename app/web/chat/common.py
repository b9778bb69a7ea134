"""What the OpenAI and Ollama chat APIs share: the body, who asks, the service, the error.

Why: both read a JSON body within a limit, turn the bearer token the middleware accepted into who
is asking (the API token is an operator, the chat token is not: ``supervisor/chat.py`` says what
that allows), and start a turn; each then answers in its own client's shape (:class:`ChatFailure`
carries the status, a code, the message and a Retry-After, whatever the cause).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.requests import Request

from app.engine.chat_messages import ChatInputError, ChatMessage
from app.supervisor.chat import ChatAsk, ChatRefused, ChatService, ChatTurn
from app.web.common import ApiError, read_body

log = logging.getLogger(__name__)

CHAT_BODY_MAX_BYTES = 4 * 1024 * 1024  # a whole conversation's history comes with every request


class ChatFailure(Exception):
    def __init__(self, status: int, code: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.retry_after = status, code, message, retry_after

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}


def service(request: Request) -> ChatService:
    chat: ChatService = request.app.state.chat
    return chat


async def json_object(request: Request) -> dict[str, Any]:
    """The request's JSON object, or :class:`ChatFailure` saying what is wrong with it."""
    try:
        raw = await read_body(request, CHAT_BODY_MAX_BYTES, "the chat request")
    except ApiError as exc:
        raise ChatFailure(exc.status_code, "too_large", str(exc.detail)) from None
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ChatFailure(400, "invalid_json", f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ChatFailure(400, "invalid_request", "the body must be a JSON object")
    return body


def asker(request: Request, client: str, messages: list[ChatMessage], model: Any) -> ChatAsk:
    principal = request.scope.get("state", {}).get("chat_principal", "api token")
    address = request.client.host if request.client else "unknown"
    if model is not None and not isinstance(model, str):
        raise ChatFailure(400, "invalid_request", "model must be a string")
    return ChatAsk(messages=messages, model=model, client=client, asked_by=f"{client} client ({principal}, {address})",
                   operator=principal == "api token")


async def start(request: Request, ask: ChatAsk) -> ChatTurn:
    """Start the turn; every refusal becomes a :class:`ChatFailure`."""
    try:
        return await service(request).ask(ask)
    except ChatInputError as exc:
        raise ChatFailure(400, "invalid_request", str(exc)) from None
    except ChatRefused as exc:
        raise ChatFailure(exc.status, exc.code, exc.message, exc.retry_after) from None


def failure_text(turn: ChatTurn) -> str:
    """Why a turn has no answer, with where its session shows it."""
    where = f" (session {turn.session_pk}: /sessions/{turn.session_pk})" if turn.session_pk else ""
    return f"the agent could not answer: {turn.error}{where}"


def read_messages(parse: Any, *args: Any, **kwargs: Any) -> list[ChatMessage]:
    try:
        messages: list[ChatMessage] = parse(*args, **kwargs)
    except ChatInputError as exc:
        raise ChatFailure(400, "invalid_request", str(exc)) from None
    return messages
