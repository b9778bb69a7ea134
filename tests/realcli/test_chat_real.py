"""Ask TierOps end to end: the official ``openai`` and ``ollama`` Python clients talk to a real
uvicorn serving TierOps, which runs the real claude CLI (2.1.197) against the fake Messages API.

One conversation of three turns through the ``openai`` client (streamed, then a content-part
array not streamed, then streamed with usage) is one CLI session continued with ``--resume``: the
third answer is computed by the fake from what the CLI sent, and names what the first question
said. The first turn's tool call reaches the client as a ``delta.tool_calls`` chunk with its id.
"""

from __future__ import annotations

import json

import httpx
import ollama
import openai
import pytest

from app.store import chats
from app.store.db import Database
from app.web.app import create_app
from app.web.auth import COOKIE, new_cookie
from tests.fakes.fake_anthropic import FakeAnthropic, bash, reply, text
from tests.realcli.test_supervisor_e2e import child_env, make_settings  # noqa: F401 (fixture)
from tests.web.conftest import browser, serve  # noqa: F401 (fixture)

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(180)]

API_TOKEN = "api-token-for-chat-tests"
CHAT_TOKEN = "chat-token-for-chat-tests"
WORD = "PELICAN-42"


def _first_question_word(body) -> object:
    """The third turn's answer: the code word of the conversation's first question, as the CLI
    sent the whole conversation (a resumed session replays it)."""
    said = json.dumps(body.get("messages"))
    found = WORD if WORD in said else "nothing"
    return text(f"Your first question mentioned {found}.")


@pytest.fixture
def server(claude_bin, child_env, tmp_path):  # noqa: F811
    settings = make_settings(claude_bin, tmp_path, schedule=False, token=API_TOKEN, chat_token=CHAT_TOKEN,
                             tier3_approval="manual")
    live = serve(create_app(settings), settings, None, API_TOKEN)  # type: ignore[arg-type]
    yield live
    live.stop()


async def _conversations(settings) -> list:
    db = await Database.open(settings.db_path)
    try:
        convs = await chats.list_conversations(db)
        return [(c, await chats.turns(db, c["id"])) for c in convs]
    finally:
        await db.close()


async def test_a_three_turn_conversation_with_the_openai_client(server, fake_api: FakeAnthropic) -> None:
    fake_api.script(WORD, [bash("df -h /", description="Disk use"), text("The disk is fine (12% used)."),
                           text("The second answer."), reply(_first_question_word)])
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=CHAT_TOKEN, max_retries=0, timeout=120)
    try:
        await _converse(client, server, fake_api)
    finally:
        client.close()


async def _converse(client: openai.OpenAI, server, fake_api: FakeAnthropic) -> None:

    assert {m.id for m in client.models.list()} == {"tierops", "tierops-tier1", "tierops-tier2", "tierops-tier3"}

    first_q = f"Is the disk of web-1 full? Remember the code word {WORD}."
    chunks = list(client.chat.completions.create(model="tierops", stream=True,
                                                 messages=[{"role": "user", "content": first_q}]))
    calls = [c for ch in chunks for choice in ch.choices for c in (choice.delta.tool_calls or [])]
    assert len(calls) == 1 and calls[0].id.startswith("toolu_") and calls[0].function.name == "Bash"
    assert json.loads(calls[0].function.arguments)["command"] == "df -h /"
    first = "".join(choice.delta.content or "" for ch in chunks for choice in ch.choices)
    assert first == "The disk is fine (12% used)."
    assert chunks[-1].choices[0].finish_reason == "stop" and chunks[-1].usage.completion_tokens > 0

    history = [{"role": "user", "content": first_q}, {"role": "assistant", "content": first}]
    second = client.chat.completions.create(model="tierops", messages=[
        *history, {"role": "user", "content": [{"type": "text", "text": "And the"}, {"type": "text", "text": "memory?"}]}])
    assert second.choices[0].message.content == "The second answer."
    assert second.usage.prompt_tokens > 0 and second.usage.completion_tokens > 0
    history += [{"role": "user", "content": "And the\nmemory?"}, {"role": "assistant", "content": "The second answer."}]

    third = list(client.chat.completions.create(model="tierops", stream=True, stream_options={"include_usage": True},
                                                messages=[*history, {"role": "user", "content": "What word did I give?"}]))
    answer = "".join(choice.delta.content or "" for ch in third for choice in ch.choices)
    assert answer == f"Your first question mentioned {WORD}."
    assert third[-1].choices == [] and third[-1].usage.total_tokens > 0

    # One CLI session, resumed twice; every turn a recorded chat session.
    assert len(set(fake_api.session_ids)) == 1
    [(conv, turns)] = await _conversations(server.settings)
    assert [t["status"] for t in turns] == ["completed"] * 3 and conv["cli_session_id"] == fake_api.session_ids[0]
    assert all(t["session_id"] for t in turns) and conv["client"] == "openai"
    with server.client(headers={"Authorization": f"Bearer {API_TOKEN}"}) as web:
        sessions = web.get("/api/v1/sessions").json()
        chat_sessions = [s for s in sessions["sessions"] if s["trigger"] == "chat"] if isinstance(sessions, dict) \
            else [s for s in sessions if s["trigger"] == "chat"]
        assert len(chat_sessions) == 3 and all(s["status"] == "completed" for s in chat_sessions)
        argv = web.get(f"/api/v1/sessions/{turns[1]['session_id']}").json()["argv"]
        assert "--resume" in argv and "--include-partial-messages" in argv and "--json-schema" not in argv


async def test_the_ollama_client_and_the_tokens(server, fake_api: FakeAnthropic) -> None:
    fake_api.script("OLLAMA-Q", [text("Ollama sees TierOps.")])
    fake_api.script("GENERATE-Q", [text("Generated.")])
    client = ollama.Client(host=server.url, headers={"Authorization": f"Bearer {CHAT_TOKEN}"})
    try:
        assert {m.model for m in client.list().models} >= {"tierops", "tierops-tier1"}
        parts = list(client.chat(model="tierops", messages=[{"role": "user", "content": "OLLAMA-Q status?"}],
                                 stream=True))
        assert "".join(p.message.content for p in parts) == "Ollama sees TierOps."
        assert parts[-1].done and parts[-1].eval_count > 0
        generated = client.generate(model="tierops:latest", prompt="GENERATE-Q now", stream=False)
        assert generated.response == "Generated." and generated.done
    finally:
        client._client.close()

    # Every chat endpoint: 401 without a token and with a wrong one; the chat token opens nothing else.
    with httpx.Client(base_url=server.url, timeout=10) as web:
        for method, path in [("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("POST", "/api/chat"),
                             ("POST", "/api/generate"), ("GET", "/api/tags"), ("GET", "/v1/models/tierops")]:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Cookie": "tierops_session=1.x"}):
                assert web.request(method, path, headers=headers, json={}).status_code == 401, (path, headers)
        chat_auth = {"Authorization": f"Bearer {CHAT_TOKEN}"}
        assert web.get("/api/v1/sessions", headers=chat_auth).status_code == 401
        assert web.get("/chat", headers=chat_auth, follow_redirects=False).status_code == 303
        # tier 3's approval is manual: the chat token cannot give it, and says so
        refused = web.post("/v1/chat/completions", headers=chat_auth, json={
            "model": "tierops-tier3", "messages": [{"role": "user", "content": "restart api"}]})
        assert refused.status_code == 403 and "approval" in refused.json()["error"]["message"]
        unknown = web.post("/v1/chat/completions", headers=chat_auth, json={
            "model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]})
        assert unknown.status_code == 400 and "tierops-tier1" in unknown.json()["error"]["message"]
        image = web.post("/v1/chat/completions", headers=chat_auth, json={"messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})
        assert image.status_code == 400 and "messages[0].content[0]" in image.json()["error"]["message"]


def test_the_chat_page_in_chromium(server, fake_api: FakeAnthropic, browser) -> None:  # noqa: F811
    """Asked from the keyboard on /chat: the answer streams in, the tool call is folded with its result."""
    fake_api.script("BROWSER-Q", [bash("uptime", description="Load"), text("Load is low; nothing to do.")])
    context = browser.new_context(viewport={"width": 390, "height": 844})
    context.add_cookies([{"name": COOKIE, "value": new_cookie(API_TOKEN), "url": server.url}])
    try:
        page = context.new_page()
        page.goto(f"{server.url}/chat")
        page.get_by_label("Your question").fill("BROWSER-Q: how loaded is web-1?")
        page.get_by_label("Your question").press("Control+Enter")
        answer = page.locator("#chat-turns .chat-answer").last
        answer.wait_for()
        page.wait_for_function("document.querySelector('#chat-turns .chat-answer:last-of-type') &&"
                               " document.getElementById('chat-status').textContent === 'Answered.'", timeout=60_000)
        assert answer.text_content() == "Load is low; nothing to do."
        tool = page.locator("#chat-turns details.chat-tool").last
        assert tool.locator("summary").text_content() == "Bash: uptime" and not tool.evaluate("d => d.open")
        assert tool.locator("pre").count() == 2  # the call's input, then its result
        assert page.url.startswith(f"{server.url}/chat/")  # the conversation has its address now
        page.reload()
        assert page.locator(".chat-turn .chat-answer").last.text_content().strip().endswith("Load is low; nothing to do.")
    finally:
        context.close()
