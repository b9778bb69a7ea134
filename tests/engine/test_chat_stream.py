"""``engine/chat_stream.py`` on real captures of the CLI (2.1.197) with --include-partial-messages."""

from __future__ import annotations

import json
from pathlib import Path

from app.engine.chat_stream import AnswerReader, TextDelta, ToolCall, ToolResult

FIXTURES = Path(__file__).parents[1] / "fixtures" / "claude-code" / "2.1.197"


def read(scenario: str) -> tuple[AnswerReader, list]:
    reader = AnswerReader()
    events = []
    for line in (FIXTURES / scenario / "stdout.jsonl").read_text().splitlines():
        events += reader.feed(line)
    return reader, events


def test_text_deltas_are_sent_once_and_the_whole_block_is_not_repeated() -> None:
    reader, events = read("i_partial_messages")
    assert events == [TextDelta("Hi there! This i"), TextDelta("s the fake model.")]
    assert reader.text == "Hi there! This is the fake model." and reader.result_seen and not reader.is_error
    assert reader.usage.completion_tokens == 15 and reader.usage.prompt_tokens > 0 and reader.finish_reason == "stop"


def test_a_tool_call_with_its_id_and_result_and_the_next_message_as_a_new_paragraph() -> None:
    reader, events = read("i_partial_messages_tool")
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert len(calls) == 1 and calls[0].id.startswith("toolu_") and calls[0].name == "Bash"
    assert json.loads(calls[0].arguments) == {"command": "echo ok", "description": "Print ok"}
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [(r.id, r.is_error) for r in results] == [(calls[0].id, False)] and "ok" in results[0].text
    assert reader.text == "I'll run the command.\n\nThe command printed: ok"
    assert reader.session_id and reader.tool_calls == calls


def test_thinking_is_not_the_answer() -> None:
    reader, _ = read("a_thinking_partial")
    assert reader.text == "Hi! (after thinking)"


def test_without_partial_messages_each_text_block_is_sent_whole() -> None:
    reader, events = read("b_tool_fails")
    assert all(isinstance(e, TextDelta | ToolCall | ToolResult) for e in events)
    assert reader.text and reader.text == "".join(e.text for e in events if isinstance(e, TextDelta))


def test_an_api_error_is_an_error_not_an_answer() -> None:
    reader, events = read("f_api_500")
    assert events == [] and reader.is_error and reader.error_text.startswith("API Error: 500")
    assert reader.text == ""


def test_hostile_lines_are_skipped() -> None:
    reader = AnswerReader()
    for raw in [None, "", "not json", "[1,2]", '{"type":"assistant","message":"x"}',
                '{"type":"assistant","message":{"content":[{"type":"text","text":5},{"type":"tool_use"}]}}',
                '{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":7}}}',
                '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":[{"text":"a"},3]}]}}',
                '{"type":"result","is_error":false,"usage":{"input_tokens":-4,"output_tokens":true},"terminal_reason":"max_turns"}',
                '{"type":"assistant","parent_tool_use_id":"sub","message":{"content":[{"type":"text","text":"sub"}]}}']:
        reader.feed(raw)
    assert reader.text == "" and reader.usage.total_tokens == 0 and reader.finish_reason == "length"
