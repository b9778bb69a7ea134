"""Ask TierOps: one chat turn = one recorded session (trigger ``chat``) continuing a conversation.

Why beside the scheduler, not through it: a chat turn never takes the cycle lock and never waits
for a cycle (nor makes one wait); it is bounded by its own limit, ``TIEROPS_CHAT_MAX`` turns at once
(:class:`ChatRefused` 429 with a Retry-After beyond), and one turn per conversation at a time. A
conversation is one claude CLI session continued with ``--resume`` from the conversation's own
folder with every flag again (reference §8), so later turns see the earlier ones; when the CLI's
copy is gone (pruned, another server) the next turn starts a fresh CLI session given the history
as a quoted transcript. The rules of a scheduled run hold: the tier's tools, the daily budget and
the paused model tiers, the tier's budget, dry run and the guard; a tier above
``TIEROPS_MAX_TIER`` is refused; a tier whose approval is manual runs only for an operator (the
API token or the dashboard: asking is their approval, as a Run Now is), never for the chat token.
A client that goes away does not stop the turn: its answer is recorded for the conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from app.clock import seconds_between, utcnow
from app.config import Settings, TierConfig
from app.engine.chat_messages import ChatMessage, history_sha256, prompt_for, tier_of
from app.engine.chat_stream import AnswerReader, ChatEvent
from app.engine.cli_transcripts import config_dir, slug
from app.logs import oneline
from app.output.spec import OutputSpec
from app.store import chats
from app.store.chats import ConversationRow
from app.store.rows import ActivityRow
from app.supervisor import turn_lock
from app.supervisor.chat_context import chat_system_prompt
from app.supervisor.credentials import model_tiers_paused
from app.supervisor.guards import daily_budget_spent
from app.supervisor.halt import Halt
from app.supervisor.runtime_settings import effective_settings
from app.supervisor.scheduler import Supervisor
from app.supervisor.session import STOPPED_BY_SHUTDOWN, SessionHandle, TierRequest, run_tier_session
from app.supervisor.tier_gate import TierGate
from app.tasks import spawn
from app.vocab import SessionStatus, Trigger

log = logging.getLogger(__name__)

__all__ = ["ChatAsk", "ChatRefused", "ChatService", "ChatTurn"]

RETRY_AFTER_S = 10  # what a refused client is told to wait when every chat slot is busy
CHATS_DIR = "chats"


class ChatRefused(Exception):
    """A turn that cannot start: HTTP ``status``, a short ``code`` and what to do."""

    def __init__(self, status: int, code: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.retry_after = status, code, message, retry_after


@dataclass(frozen=True)
class ChatAsk:
    messages: list[ChatMessage]  # the history; the last one is the question
    model: str | None = None
    client: str = "page"  # page | openai | ollama
    asked_by: str = "the dashboard"
    operator: bool = True  # the API token or the dashboard (False: the chat token)
    conversation: str | None = None  # the page names its conversation; API clients are found by history
    incident_id: int | None = None  # "ask about this incident"


@dataclass
class ChatTurn:
    conversation: ConversationRow
    turn_pk: int
    model: str
    tier: int
    reader: AnswerReader = field(default_factory=AnswerReader)
    session_pk: int | None = None
    status: str | None = None  # the session's final status, once done
    error: str | None = None  # why there is no answer (set when the turn failed)
    cost_usd: float | None = None
    _queue: asyncio.Queue[ChatEvent | None] = field(default_factory=asyncio.Queue)
    started: asyncio.Event = field(default_factory=asyncio.Event)  # the session row exists (or the turn failed)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    async def events(self) -> AsyncIterator[ChatEvent]:
        """The answer's events as they are recorded, until the turn ends."""
        while (event := await self._queue.get()) is not None:
            yield event

    def tap(self, _pk: int, rows: list[ActivityRow]) -> None:
        for row in rows:
            for event in self.reader.feed(row.get("raw")):
                self._queue.put_nowait(event)


class ChatService:
    """Beside ``supervisor``'s cycles, sharing its store, hub and the registry of this process's
    sessions (``chat_handles``: the Stop button, the follower and the sweep know them).
    Each turn runs with the settings in force now: the run-time changes re-read from the database
    (``runtime_settings.py``), so a tier's model changed on /config is the next turn's."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        self.db, self.validator, self.hub = supervisor.db, supervisor.validator, supervisor.hub
        self.handles = supervisor.chat_handles  # session pk → its CLI
        self._running: set[int] = set()  # conversation pks with a turn in flight
        self._slots = 0  # turns in flight or being created (TIEROPS_CHAT_MAX)
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False

    @property
    def running(self) -> int:
        return self._slots

    async def _current_settings(self) -> Settings:
        return await effective_settings(self.db, self.supervisor.base_settings)

    async def ask(self, ask: ChatAsk) -> ChatTurn:
        """Start a turn (raises :class:`ChatRefused`, or ``ChatInputError`` for an unknown model)."""
        if self._stopping:
            raise ChatRefused(503, "shutting_down", "the server is shutting down; ask again in a moment", RETRY_AFTER_S)
        settings = await self._current_settings()
        conv = await self._conversation(ask)
        model, tier = (conv["model"], conv["tier"]) if conv is not None else tier_of(ask.model)
        approved_by = self._admit(settings, tier, ask)
        if (why := await daily_budget_spent(self.db, settings, tier)) is not None:
            raise ChatRefused(503, "budget_spent", why)
        if (paused := await model_tiers_paused(self.db, settings)) is not None:
            raise ChatRefused(503, "model_tiers_paused", str(paused))
        if conv is not None and conv["id"] in self._running:
            raise ChatRefused(409, "turn_running", f"conversation {conv['public_id']} is still answering its "
                              "previous question; wait for that answer", RETRY_AFTER_S)
        if self._slots >= settings.chat_max:
            raise ChatRefused(429, "chat_busy", f"{self._slots} chat turns are running, the limit "
                              f"(TIEROPS_CHAT_MAX={settings.chat_max}); ask again shortly", RETRY_AFTER_S)
        # Taken with no await since the checks: two requests never both pass them for one slot.
        self._slots += 1
        if conv is not None:
            self._running.add(conv["id"])
        question = ask.messages[-1].text
        try:
            if conv is None:
                public_id = secrets.token_urlsafe(9)
                cwd = settings.state_dir.resolve() / CHATS_DIR / public_id
                conv = await chats.create_conversation(
                    self.db, public_id=public_id, title=question, model=model, tier=tier, client=ask.client,
                    cwd=str(cwd), incident_id=ask.incident_id, created_by=ask.asked_by)
                self._running.add(conv["id"])
            turn_pk = await chats.start_turn(self.db, conv["id"], question, ask.asked_by)
        except BaseException:
            self._slots -= 1
            if conv is not None:
                self._running.discard(conv["id"])
            raise
        turn = ChatTurn(conv, turn_pk, model, tier)
        task = spawn(self._run(settings, ask, turn, approved_by), f"chat-{conv['public_id']}-{turn_pk}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return turn

    def _admit(self, settings: Settings, tier: int, ask: ChatAsk) -> str | None:
        """Who approved running ``tier`` (None: no approval needed), or :class:`ChatRefused`."""
        if tier > settings.max_tier:
            raise ChatRefused(403, "tier_not_allowed", f"tier {tier} is above TIEROPS_MAX_TIER={settings.max_tier}; "
                              f"ask a lower tier (models tierops-tier1..{settings.max_tier})")
        approval = {1: settings.tier1_approval, 2: settings.tier2_approval, 3: settings.tier3_approval}[tier]
        if approval != "manual":
            return None
        if not ask.operator:
            raise ChatRefused(403, "approval_required", f"tier {tier} needs an operator's approval "
                              f"(TIEROPS_TIER{tier}_APPROVAL=manual); the chat token cannot give it: ask with the "
                              "API token or on the dashboard's chat page")
        return f"an operator asking in chat ({ask.asked_by})"

    async def _conversation(self, ask: ChatAsk) -> ConversationRow | None:
        if ask.conversation is not None:
            conv = await chats.get_conversation(self.db, ask.conversation, fresh=True)
            if conv is None:
                raise ChatRefused(404, "not_found", f"no conversation {ask.conversation!r}")
            return conv
        if len(ask.messages) < 2:
            return None
        name, _ = tier_of(ask.model)
        return await chats.find_by_history(self.db, history_sha256(ask.messages[:-1]), name)

    async def _history(self, conv: ConversationRow, ask: ChatAsk) -> list[ChatMessage]:
        """The page sends only its question: the history is the conversation's recorded turns."""
        if ask.client != "page":
            return ask.messages
        past: list[ChatMessage] = []
        for t in await chats.turns(self.db, conv["id"], fresh=True):
            if t["answer"] and t["status"] == SessionStatus.COMPLETED:
                past += [ChatMessage("user", t["question"]), ChatMessage("assistant", t["answer"])]
        return [*past, ask.messages[-1]]

    def _resumable(self, settings: Settings, conv: ConversationRow) -> str | None:
        """The CLI session to resume, when the CLI's own copy of it is still there."""
        sid = conv["cli_session_id"]
        if not sid or settings.chat_resume_days <= 0 or seconds_between(conv["updated_at"], utcnow()) > \
                settings.chat_resume_days * 86400:
            return None
        path = config_dir(settings.state_dir.resolve() / "home") / "projects" / slug(conv["cwd"]) / f"{sid}.jsonl"
        return sid if path.is_file() else None

    async def _run(self, settings: Settings, ask: ChatAsk, turn: ChatTurn, approved_by: str | None) -> None:
        conv = turn.conversation
        answer_hash: str | None = None
        try:
            history = await self._history(conv, ask)
            resume = self._resumable(settings, conv)
            if resume is None and conv["cli_session_id"]:
                log.info("conversation %s: the CLI session %s is gone; a fresh one gets the history", conv["public_id"],
                         conv["cli_session_id"])
            cwd = Path(conv["cwd"])
            base = settings.tier(turn.tier)
            cfg = TierConfig(**{**base.model_dump(), "timeout": settings.chat_timeout,
                                "max_turns": settings.chat_max_turns})
            req = TierRequest(
                tier=turn.tier, prompt=prompt_for(history, resumed=resume is not None),
                system_prompt=await chat_system_prompt(self.db, settings, turn.tier, dry_run=settings.dry_run,
                                                       incident_id=conv["incident_id"]),
                trigger=Trigger.CHAT, spec=OutputSpec.conversation(self.validator), dry_run=settings.dry_run,
                approved_by=approved_by, cwd=cwd, resume=resume, keep_cli_session=settings.chat_resume_days > 0,
                tier_config=cfg,
                partial_messages=True, tap=turn.tap)

            starting = [True]

            def started() -> None:
                if starting:
                    starting.clear()
                    self.supervisor.chat_starting -= 1

            def on_start(pk: int, handle: SessionHandle) -> None:
                turn.session_pk = pk
                self.handles[pk] = handle
                started()
                if self._stopping:
                    handle.stop(STOPPED_BY_SHUTDOWN)
                turn.started.set()
                spawn(chats.set_turn_session(self.db, turn.turn_pk, pk), f"chat-turn-{turn.turn_pk}-session")

            # A tier that may act holds the locks of its incident's service (every service without
            # one) like a chain's tier: never two acting tiers on one service at a time.
            node = self.supervisor.node.id if self.supervisor.node is not None else None
            gate = TierGate(self.db, settings, TierGate.holder_name(node, f"chat-{turn.turn_pk}"), Halt())
            # The turn lock first, then the session row: no sweep of any process takes it for abandoned.
            with turn_lock.hold(cwd):
                async with gate.hold(turn.tier, [conv["incident_id"]] if conv["incident_id"] else [],
                                     dry_run=settings.dry_run):
                    self.supervisor.chat_starting += 1
                    try:
                        result = await run_tier_session(self.db, settings, self.validator, self.hub, req,
                                                        on_start=on_start)
                    finally:
                        started()
            report = result.report
            turn.status, turn.cost_usd = report["status"], report.get("cost_usd")
            if turn.status != SessionStatus.COMPLETED or turn.reader.is_error:
                turn.error = turn.reader.error_text or report.get("status_reason") or f"the session {turn.status}"
            elif not turn.reader.text.strip():
                turn.error = "the agent gave no answer"
            else:
                answer_hash = history_sha256([*history, ChatMessage("assistant", turn.reader.text)])
        except asyncio.CancelledError:
            turn.status, turn.error = SessionStatus.INTERRUPTED, "the server stopped while the turn ran"
            raise
        except BlockingIOError:  # the turn lock: this conversation answers in another tierops process
            turn.status, turn.error = SessionStatus.FAILED, ("another TierOps process is answering this "
                                                             "conversation's previous question; ask again when it is done")
        except Exception as exc:  # ModelTiersPaused raced in, a storage failure, a bug: the client is told
            log.exception("conversation %s: turn %d failed", conv["public_id"], turn.turn_pk)
            turn.status, turn.error = SessionStatus.FAILED, oneline(exc)
        finally:
            if turn.session_pk is not None:
                self.handles.pop(turn.session_pk, None)
            self._running.discard(conv["id"])
            self._slots -= 1
            turn.started.set()
            turn.done.set()
            turn._queue.put_nowait(None)
            with contextlib.suppress(Exception):  # logged by the store's retry path; the turn's session stands
                await chats.finish_turn(self.db, turn.turn_pk, answer=turn.reader.text or turn.error,
                                        status=turn.status or SessionStatus.FAILED,
                                        cli_session_id=turn.reader.session_id, history_sha256=answer_hash)

    def stop_session(self, pk: int) -> bool:
        handle = self.handles.get(pk)
        if handle is None:
            return False
        handle.stop()
        return True

    async def shutdown(self, grace: float) -> None:
        """Stop every running turn's CLI and wait (at most ``grace`` s) for them to be recorded."""
        self._stopping = True
        for handle in list(self.handles.values()):
            handle.stop(STOPPED_BY_SHUTDOWN)
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks), timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
