"""``engine/chat_messages.py``: what chat clients send, read once."""

from __future__ import annotations

import pytest

from app.engine.chat_messages import (
    ChatInputError,
    ChatMessage,
    history_sha256,
    parse_messages,
    prompt_for,
    tier_of,
)


def test_models_and_their_tiers() -> None:
    assert tier_of(None) == ("tierops", 1) and tier_of("tierops-tier3") == ("tierops-tier3", 3)
    assert tier_of("tierops-tier2:latest") == ("tierops-tier2", 2)
    with pytest.raises(ChatInputError, match=r"unknown model 'gpt-4'.*tierops-tier1"):
        tier_of("gpt-4")


def test_the_history_as_the_agent_knows_it() -> None:
    messages = parse_messages([
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, "b"]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "t1"}]},  # the agent's own call
        {"role": "tool", "tool_call_id": "t1", "content": "ok"},
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": "next?"}])
    assert messages == [ChatMessage("system", "be brief"), ChatMessage("user", "a\nb"),
                        ChatMessage("assistant", "answer"), ChatMessage("user", "next?")]


@pytest.mark.parametrize(("body", "where"), [
    (None, "messages"), ([], "messages"), (["x"], "messages[0]"), ([{"role": "bot", "content": "x"}], "messages[0].role"),
    ([{"role": "user", "content": 5}], "messages[0].content"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], "messages[0].content[0]"),
    ([{"role": "user", "content": [{"type": "text", "text": 1}]}], "messages[0].content[0].text"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "messages[1]"),
    ([{"role": "user", "content": "  "}], "messages[0]"),
])
def test_what_cannot_be_read_says_where(body, where) -> None:
    with pytest.raises(ChatInputError) as exc:
        parse_messages(body)
    assert exc.value.where == where


def test_ollama_images_are_refused() -> None:
    with pytest.raises(ChatInputError, match="images"):
        parse_messages([{"role": "user", "content": "x", "images": ["aGk="]}], images_field=True)


def test_the_hash_follows_roles_and_texts() -> None:
    a = [ChatMessage("user", "hi "), ChatMessage("assistant", "yo")]
    assert history_sha256(a) == history_sha256([ChatMessage("user", "hi"), ChatMessage("assistant", "yo\n")])
    assert history_sha256(a) != history_sha256([ChatMessage("user", "hi"), ChatMessage("user", "yo")])


def test_a_fresh_session_gets_the_earlier_messages_quoted() -> None:
    msgs = [ChatMessage("system", "answer in French"), ChatMessage("user", "q1"), ChatMessage("assistant", "a1\n[EVENT:x]"),
            ChatMessage("user", "q2")]
    assert prompt_for(msgs, resumed=True) == "q2"
    fresh = prompt_for(msgs, resumed=False)
    assert fresh.startswith("The chat client gave these instructions:\n> answer in French")
    assert "Operator:\n> q1" in fresh and "You (TierOps):\n> a1\n> [EVENT:x]" in fresh
    assert fresh.endswith("The operator now asks:\nq2")
    long = [ChatMessage("user", "x" * 40_000), ChatMessage("assistant", "y" * 40_000), ChatMessage("user", "q")]
    assert "[earlier messages left out]" in prompt_for(long, resumed=False)
