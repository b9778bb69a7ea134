"""``supervisor/chat.py`` with the fake CLI executable: the rules a chat turn starts under, the
conversation found again by its history, the turn lock the sweep respects.

(The real CLI and the real openai/ollama clients: tests/realcli/test_chat_real.py.)
"""

from __future__ import annotations

import asyncio

import pytest

from app.engine.chat_messages import ChatInputError, ChatMessage
from app.engine.cli_transcripts import slug
from app.output.validate import OutputValidator
from app.store import chats
from app.supervisor import turn_lock
from app.supervisor.chat import ChatAsk, ChatRefused, ChatService
from app.supervisor.scheduler import Supervisor
from tests.fakes.claude_control import fixture, make_fake_claude

Q1 = [ChatMessage("user", "how is api?")]


def replay(scenario: str, **extra) -> dict:
    return {"replay": str(fixture(scenario)), **extra}


async def answered(service: ChatService, ask: ChatAsk):
    turn = await service.ask(ask)
    events = [e async for e in turn.events()]
    await turn.done.wait()
    return turn, events


async def test_a_turn_is_a_chat_session_and_the_next_request_finds_its_conversation(db, make_settings, tmp_path) -> None:
    fake = make_fake_claude(tmp_path / "bin", [replay("i_partial_messages")] * 3)
    settings = make_settings(fake)
    service = ChatService(Supervisor(db, settings, OutputValidator.from_file()))
    turn, events = await answered(service, ChatAsk(Q1, client="openai", asked_by="test"))
    assert turn.error is None and turn.reader.text == "Hi there! This is the fake model." and events
    row = await db.fetchone("SELECT trigger, status, degraded, tier, argv FROM sessions WHERE id = ?", (turn.session_pk,))
    assert (row["trigger"], row["status"], row["degraded"], row["tier"]) == ("chat", "completed", 0, 1)
    assert "--include-partial-messages" in row["argv"] and "--json-schema" not in row["argv"]

    # The fake CLI keeps no copy of its session: the next turn starts afresh, the history quoted.
    follow = [*Q1, ChatMessage("assistant", turn.reader.text), ChatMessage("user", "and now?")]
    again, _ = await answered(service, ChatAsk(follow, client="openai", asked_by="test"))
    assert again.conversation["public_id"] == turn.conversation["public_id"]
    # With the CLI's copy where the real CLI keeps it (reference §8), the third turn resumes it.
    copy = (settings.state_dir.resolve() / "home" / ".claude" / "projects" / slug(turn.conversation["cwd"])
            / f"{turn.reader.session_id}.jsonl")
    copy.parent.mkdir(parents=True)
    copy.write_text("{}\n")
    third = [*follow, ChatMessage("assistant", again.reader.text), ChatMessage("user", "third?")]
    last, _ = await answered(service, ChatAsk(third, client="openai", asked_by="test"))
    assert last.conversation["public_id"] == turn.conversation["public_id"]
    first, second, resumed = fake.invocations()
    assert "resume" not in second["parsed"] and "Earlier in this conversation" in second["stdin_prompt"]
    assert resumed["parsed"]["resume"] == turn.reader.session_id and resumed["stdin_prompt"] == "third?"
    assert first["cwd"] == second["cwd"] == resumed["cwd"] == turn.conversation["cwd"]
    assert copy.exists()  # a chat turn keeps the CLI's copy for the next one
    turns = await chats.turns(db, turn.conversation["id"], fresh=True)
    assert [t["status"] for t in turns] == ["completed"] * 3 and turns[0]["answer"] == turn.reader.text

    edited = [*Q1, ChatMessage("assistant", "something else"), ChatMessage("user", "and now?")]
    assert await chats.find_by_history(db, "0" * 64, "tierops") is None
    fresh = await service._conversation(ChatAsk(edited, client="openai"))
    assert fresh is None  # an edited history is a new conversation (given the history as a transcript)


async def test_the_limits_a_turn_starts_under(db, make_settings, tmp_path) -> None:
    fake = make_fake_claude(tmp_path / "bin", [replay("i_partial_messages", start_delay=3)] * 3)
    settings = make_settings(fake, chat_max=1, max_tier=2, tier2_approval="manual")
    service = ChatService(Supervisor(db, settings, OutputValidator.from_file()))
    with pytest.raises(ChatRefused) as too_high:
        await service.ask(ChatAsk(Q1, model="tierops-tier3"))
    assert too_high.value.status == 403 and "TIEROPS_MAX_TIER=2" in too_high.value.message
    with pytest.raises(ChatRefused) as no_approval:
        await service.ask(ChatAsk(Q1, model="tierops-tier2", operator=False))
    assert no_approval.value.status == 403 and "chat token cannot give it" in no_approval.value.message
    with pytest.raises(ChatInputError):
        await service.ask(ChatAsk(Q1, model="gpt"))

    running = await service.ask(ChatAsk(Q1, model="tierops-tier2", asked_by="ops"))  # asking is the operator's approval
    await asyncio.wait_for(running.started.wait(), 10)
    assert turn_lock.held(running.conversation["cwd"])
    with pytest.raises(ChatRefused) as busy:
        await service.ask(ChatAsk(Q1))
    assert busy.value.status == 429 and busy.value.retry_after and "TIEROPS_CHAT_MAX=1" in busy.value.message
    with pytest.raises(ChatRefused) as same:
        await service.ask(ChatAsk([ChatMessage("user", "more")], conversation=running.conversation["public_id"]))
    assert same.value.status == 409 and "still answering" in same.value.message
    # A chat turn never takes the cycle lock, and the sweep leaves it alone
    assert not service.supervisor.busy and await service.supervisor.sweep_abandoned() == 0
    await asyncio.wait_for(running.done.wait(), 30)
    assert running.error is None and not turn_lock.held(running.conversation["cwd"])
    policy = await db.fetchval("SELECT guard_policy FROM sessions WHERE id = ?", (running.session_pk,))
    assert "an operator asking in chat (ops)" in policy


async def test_a_failed_turn_says_why_and_a_dead_server_turn_is_interrupted(db, make_settings, tmp_path) -> None:
    fake = make_fake_claude(tmp_path / "bin", [replay("f_api_500")])
    service = ChatService(Supervisor(db, make_settings(fake), OutputValidator.from_file()))
    turn, _ = await answered(service, ChatAsk(Q1))
    assert turn.error and turn.error.startswith("API Error: 500")
    [row] = await chats.turns(db, turn.conversation["id"], fresh=True)
    assert row["status"] == "failed" or row["answer"].startswith("API Error")
    conv = await chats.get_conversation(db, turn.conversation["public_id"], fresh=True)
    assert conv["history_sha256"] is None  # nothing to continue from
    await chats.start_turn(db, conv["id"], "left running", "x")
    assert await chats.interrupt_running(db, "the server stopped") == 1


async def test_the_chat_prompt_holds_the_records_and_the_incident_asked_about(db, make_settings, tmp_path) -> None:
    from app.supervisor.chat_context import chat_system_prompt
    from tests.web.api.test_incidents import seed_incidents

    ids = await seed_incidents(db)
    settings = make_settings(None)
    tier1 = await chat_system_prompt(db, settings, 1, dry_run=False, incident_id=ids["api"])
    assert "read-only: never change anything" in tier1
    assert f"The incident the operator asks about: #{ids['api']}" in tier1 and "HTTP 502 from /health" in tier1
    assert "Timeline (oldest first)" in tier1 and "## Open incidents" in tier1 and "## Recent sessions" in tier1
    assert "resolved" not in tier1.split("## Open incidents")[1].split("##")[0]  # cache was resolved
    tier3 = await chat_system_prompt(db, settings, 3, dry_run=True)
    assert "read-only" in tier3 and "This is a dry run" in tier3  # a dry run never acts, whatever the tier
    tier2 = await chat_system_prompt(db, settings, 2, dry_run=False, incident_id=999999)
    assert "only when the operator asks" in tier2 and "#999999 is not in the records" in tier2


async def test_concurrent_questions_never_exceed_the_limit(db, make_settings, tmp_path) -> None:
    fake = make_fake_claude(tmp_path / "bin", [replay("i_partial_messages", start_delay=1)] * 3)
    service = ChatService(Supervisor(db, make_settings(fake, chat_max=2), OutputValidator.from_file()))
    asks = [service.ask(ChatAsk([ChatMessage("user", f"question {i}")])) for i in range(3)]
    outcomes = await asyncio.gather(*asks, return_exceptions=True)
    turns = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, ChatRefused)]
    assert len(turns) == 2 and [r.status for r in refused] == [429] and service.running == 2
    for turn in turns:
        await asyncio.wait_for(turn.done.wait(), 30)
    assert service.running == 0


async def test_a_turn_runs_with_the_settings_changed_at_run_time(db, make_settings, tmp_path) -> None:
    from app.supervisor.runtime_settings import change_settings

    fake = make_fake_claude(tmp_path / "bin", [replay("i_partial_messages")] * 2)
    settings = make_settings(fake)
    service = ChatService(Supervisor(db, settings, OutputValidator.from_file()))
    await change_settings(db, settings, sets={"tier1_model": "claude-chat-run-time", "dry_run": True}, reverts=[],
                          changed_by="test")
    turn, _ = await answered(service, ChatAsk(Q1))
    [run] = fake.invocations()
    assert run["parsed"]["model"] == "claude-chat-run-time" and turn.error is None
    assert await db.fetchval("SELECT dry_run FROM sessions WHERE id = ?", (turn.session_pk,)) == 1
    await change_settings(db, settings, sets={"max_tier": 0}, reverts=[], changed_by="test")
    with pytest.raises(ChatRefused, match="TIEROPS_MAX_TIER=0"):
        await service.ask(ChatAsk(Q1))
