"""Live SSE streams: a session's activity (``/sessions/{id}/stream``) and new events (``/events/stream``).

Guarantees, and how (ARCHITECTURE.md, "Live view", tells the whole path):

* **No gaps, no duplicates across reconnects.** Each event's ``id`` is the activity row's
  ``seq``. The stream subscribes to the hub *before* replaying from the database, replays every
  row after ``Last-Event-ID`` (or ``?after=``), then forwards live rows it has not sent yet.
* **A slow client never slows ingestion.** The hub's queues are bounded; a subscriber that falls
  behind gets one ``RESYNC`` and replays from the database. A client that stops reading is
  dropped after ``SEND_TIMEOUT`` (``app.web.sse``).
* **Cheap fan-out**: each line's frame is rendered once (``Hub.prepare``); everything queued for a
  client goes out in one write through :class:`app.web.sse.EventStream`.
* **Framing cannot break.** Event data is one line of JSON, so a tool result containing
  ``event:`` or blank lines stays data. The stream ends (``event: end``) when the session stops.
* **Whoever runs the session**: another process's session reaches the hub through
  ``supervisor/follow.py``; on its ``CATCH_UP`` this stream replays from the database after the
  last line it sent (silently), so nothing committed before the follower began is missed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.routing import Route

from app.store.activity import lines_after
from app.store.findings import events_after, last_event_id
from app.store.rows import ActivityRow
from app.store.sessions import session_status
from app.supervisor.follow import CATCH_UP
from app.supervisor.hub import ACTIVITY, RESYNC_KIND, SESSION_FINISHED, TICK_KIND
from app.vocab import SessionStatus
from app.web.common import SQLITE_MAX_INT, ApiError, path_int, state
from app.web.pages.render import render_activity, render_event_row
from app.web.sse import EventStream, frame

log = logging.getLogger(__name__)

REPLAY_BATCH = 500
PING_SECONDS = 15
SEND_TIMEOUT = 10
IDLE_CHECK = 5.0  # seconds between "is the session still running?" checks when nothing arrives


def _activity_event(row: ActivityRow) -> bytes:
    """One activity row as an encoded SSE frame (rendering is the expensive part: ~150 µs)."""
    data = {"seq": row["seq"], "attempt": row["attempt"], "type": row["type"], "subtype": row["subtype"],
            "display": row["display"], "html": str(render_activity(row))}
    return ServerSentEvent(data=json.dumps(data), event="activity", id=str(row["seq"])).encode()


def prepare_activity(row: ActivityRow) -> bytes:
    """The hub's ``prepare`` hook: render and encode a live row once, for every subscriber
    (bench/sse.py: rendering per client saturated a core at 10 clients)."""
    return _activity_event(row)


async def _replay(request: Request, pk: int, after: int) -> AsyncIterator[tuple[int, bytes]]:
    """(last seq, encoded frames) per batch of stored rows after ``after``: one write per batch."""
    db = state(request).db
    while True:
        rows = await lines_after(db, pk, after, REPLAY_BATCH)
        if rows:
            after = rows[-1]["seq"]
            yield after, b"".join(_activity_event(r) for r in rows)
        if len(rows) < REPLAY_BATCH:
            return


def _start_seq(request: Request) -> int:
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(422, "invalid_parameter", "Last-Event-ID / after must be an integer sequence number") from None
    if value > SQLITE_MAX_INT:
        raise ApiError(422, "invalid_parameter", "Last-Event-ID / after is beyond any sequence number")
    return max(0, value)  # negative: replay from the start


async def session_stream(request: Request) -> EventStream:
    st = state(request)
    pk = path_int(request)
    if await session_status(st.db, pk) is None:
        raise ApiError(404, "not_found", f"no session {pk}")
    start = _start_seq(request)
    sub = st.hub.subscribe(pk)  # before the replay: nothing committed meanwhile can be missed

    async def produce(stream: EventStream) -> None:
        last = start
        queue = sub.queue
        try:
            async for seq, replayed in _replay(request, pk, last):
                last = seq
                await stream.write(replayed)
            finished = await session_status(st.db, pk) != SessionStatus.RUNNING
            checked = time.monotonic()
            while not finished:
                # No timer here: a quiet stream is woken by a TICK from the shared ticker
                await queue.wait()
                items = queue.drain()  # everything queued goes out in one write
                frames: list[bytes] = []
                quiet = False
                for item in items:
                    if item.kind == ACTIVITY and item.row is not None:
                        if item.row["seq"] > last:
                            frames.append(item.sse or _activity_event(item.row))
                            last = item.row["seq"]
                    elif item.kind in (RESYNC_KIND, CATCH_UP):
                        if item.kind == RESYNC_KIND:  # CATCH_UP is silent: the follower began
                            frames.append(frame(json.dumps({"after": last}), "resync"))
                        if frames:
                            await stream.write(b"".join(frames))
                            frames = []
                        async for seq, replayed in _replay(request, pk, last):
                            last = seq
                            await stream.write(replayed)
                    elif item.kind == SESSION_FINISHED:
                        finished = True
                    elif item.kind == TICK_KIND:
                        quiet = True
                if frames:
                    await stream.write(b"".join(frames))
                if quiet and not finished:
                    await stream.ping_if_due()
                    if time.monotonic() - checked >= IDLE_CHECK:  # make sure the session did not end unseen
                        checked = time.monotonic()
                        finished = await session_status(st.db, pk) != SessionStatus.RUNNING
            async for seq, replayed in _replay(request, pk, last):  # lines committed before the end
                last = seq
                await stream.write(replayed)
            status = await session_status(st.db, pk)
            await stream.write(frame(json.dumps({"status": status}), "end"))
        finally:
            sub.close()

    return EventStream(produce, ping=PING_SECONDS, send_timeout=SEND_TIMEOUT, wake=sub.poke, close=sub.close)


async def events_stream(request: Request) -> EventSourceResponse:
    """New events as table rows, when sessions finish (events are routed at the end of a session)."""
    st = state(request)
    after_raw = request.headers.get("last-event-id") or request.query_params.get("after")
    try:
        last = int(after_raw) if after_raw else await last_event_id(st.db)
    except ValueError:
        last = -1
    if not 0 <= last <= SQLITE_MAX_INT:
        raise ApiError(422, "invalid_parameter", "Last-Event-ID / after must be an event id (0 or more)")
    sub = st.hub.subscribe(None)

    async def generate() -> AsyncIterator[ServerSentEvent]:
        nonlocal last
        try:
            while True:
                rows = await events_after(st.db, last, REPLAY_BATCH)
                for row in rows:
                    yield ServerSentEvent(data=json.dumps({"id": row["id"], "html": str(render_event_row(row))}),
                                          event="event", id=str(row["id"]))
                    last = row["id"]
                if len(rows) == REPLAY_BATCH:
                    continue
                while True:  # wait for a finished session (events are written then) or time out
                    try:
                        item = await asyncio.wait_for(sub.get(), timeout=IDLE_CHECK * 6)
                    except TimeoutError:
                        break
                    if item.kind in (SESSION_FINISHED, RESYNC_KIND):
                        break
        finally:
            sub.close()

    return EventSourceResponse(generate(), ping=PING_SECONDS, send_timeout=SEND_TIMEOUT)


routes = [
    Route("/sessions/{id}/stream", session_stream),
    Route("/events/stream", events_stream),
]
