"""What a chat client sends, read once: the models, the message history, and its hash.

Why a module of its own: the OpenAI and Ollama APIs carry the same thing in different shapes (the
whole history on every request; content a string or an array of parts; Ollama's ``images``), and
TierOps answers each turn by resuming one CLI session. So the history is reduced to what the agent
saw and said (system, user and assistant text; a tool call or tool message the agent itself made is
not history), and hashed: the hash of a request's earlier messages finds the conversation whose
last answer ended there. A history TierOps never answered (edited, or from another server) is given
to a fresh CLI session as a quoted transcript. Input that cannot be read gets an error naming where
(``messages[2].content[1]``) and what to send instead; nothing is silently dropped except the
agent's own tool traffic.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_MODEL", "MODELS", "ChatInputError", "ChatMessage", "history_sha256", "parse_messages",
           "prompt_for", "tier_of"]

DEFAULT_MODEL = "tierops"
# The models chat clients may ask for, and the tier each one runs as.
MODELS: dict[str, int] = {"tierops": 1, "tierops-tier1": 1, "tierops-tier2": 2, "tierops-tier3": 3}
ROLES = ("system", "user", "assistant")
MAX_MESSAGES = 500
MAX_TEXT = 100_000  # characters of one question; the whole history given to a fresh session is capped too
HISTORY_BUDGET = 60_000


class ChatInputError(ValueError):
    """A request the chat cannot read: ``where`` (a JSON path) and what to send instead."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


@dataclass(frozen=True)
class ChatMessage:
    role: str  # system | user | assistant
    text: str


def tier_of(model: str | None) -> tuple[str, int]:
    """The model's name (``tierops`` when none is given; an Ollama ``:latest`` tag is dropped) and its tier."""
    name = (model or DEFAULT_MODEL).strip()
    name = name.removesuffix(":latest")
    if name not in MODELS:
        raise ChatInputError("model", f"unknown model {model!r}; ask for one of {', '.join(MODELS)} (GET /v1/models)")
    return name, MODELS[name]


def _content_text(content: Any, where: str) -> str:
    """A message's ``content``: a string, null, or OpenAI's array of parts (text parts joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ChatInputError(where, f"content must be a string or an array of parts, not {type(content).__name__}")
    texts = []
    for i, part in enumerate(content):
        at = f"{where}[{i}]"
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, dict):
            raise ChatInputError(at, "a content part must be an object like {\"type\": \"text\", \"text\": \"...\"}")
        kind = part.get("type")
        if kind in ("text", "input_text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise ChatInputError(f"{at}.text", "must be a string")
            texts.append(text)
        else:
            raise ChatInputError(at, f"content parts of type {kind!r} are not supported; TierOps reads text only "
                                     "(send the text, or describe the image in words)")
    return "\n".join(texts)


def parse_messages(messages: Any, *, images_field: bool = False) -> list[ChatMessage]:
    """The history as the agent knows it, from an OpenAI (or, with ``images_field``, Ollama) list.
    The last message must be the user's question."""
    if not isinstance(messages, list) or not messages:
        raise ChatInputError("messages", "must be a non-empty array of {role, content} objects")
    if len(messages) > MAX_MESSAGES:
        raise ChatInputError("messages", f"{len(messages)} messages; at most {MAX_MESSAGES} per request")
    out: list[ChatMessage] = []
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise ChatInputError(where, "must be an object with role and content")
        role = msg.get("role")
        if role in ("tool", "function"):
            continue  # the agent's own tool results, echoed back: the CLI session has them
        if role == "developer":
            role = "system"
        if role not in ROLES:
            raise ChatInputError(f"{where}.role", f"{role!r} is not one of system, user, assistant, tool")
        if images_field and msg.get("images"):
            raise ChatInputError(f"{where}.images", "images are not supported; TierOps reads text only")
        text = _content_text(msg.get("content"), f"{where}.content")
        if role == "assistant" and not text.strip():
            continue  # only the agent's own tool calls
        if len(text) > MAX_TEXT:
            raise ChatInputError(f"{where}.content", f"{len(text)} characters; at most {MAX_TEXT}")
        out.append(ChatMessage(str(role), text))
    if not out or out[-1].role != "user" or not out[-1].text.strip():
        raise ChatInputError(f"messages[{len(messages) - 1}]", "the last message must be the user's question "
                             "(role user, non-empty content)")
    return out


def history_sha256(messages: Sequence[ChatMessage]) -> str:
    """The hash of a history: equal for the same roles and texts, whitespace at the ends aside."""
    canon = json.dumps([[m.role, m.text.strip()] for m in messages], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canon.encode("utf-8", "surrogatepass")).hexdigest()


def prompt_for(messages: Sequence[ChatMessage], *, resumed: bool) -> str:
    """The prompt of this turn: the question; for a fresh CLI session with earlier messages, those
    first, quoted (the client's system messages are the client's instructions, never TierOps')."""
    question = messages[-1].text
    if resumed:
        return question
    earlier = messages[:-1]
    instructions = [m.text for m in earlier if m.role == "system" and m.text.strip()]
    said = [m for m in earlier if m.role != "system"]
    parts = []
    if instructions:
        parts.append("The chat client gave these instructions:\n" + _quoted("\n\n".join(instructions)))
    if said:
        lines: list[str] = []
        used = 0
        for m in reversed(said):  # the newest first, within the budget
            entry = f"{'Operator' if m.role == 'user' else 'You (TierOps)'}:\n{_quoted(m.text)}"
            if used + len(entry) > HISTORY_BUDGET:
                lines.append("> [earlier messages left out]")
                break
            lines.append(entry)
            used += len(entry)
        parts.append("Earlier in this conversation:\n\n" + "\n\n".join(reversed(lines)))
    if not parts:
        return question
    return "\n\n".join([*parts, "The operator now asks:\n" + question])


def _quoted(text: str) -> str:
    return "\n".join(f"> {line}" for line in text.splitlines() or [""])
