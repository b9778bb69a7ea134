"""The sender: records every message, then sends it through Apprise without ever holding up a cycle.

What it does differently from "call Apprise where something happens": :meth:`Notifier.post`
decides the message's fate (``policy.decide``), writes one ``notifications`` row and wakes a
background sender; it never raises and never waits on the network, and a message still pending
when the process stops goes out at the next start. Each message carries a ``dedup_key``, so a
second post is a no-op. Critical messages are never held: they cut the gathering pause short and
go out first, one by one, whatever the per-minute allowance; only lower severities are
rate-limited, a burst going out as ONE digest per set of URLs. A failed send is retried after 1, 4
and 16 s (:data:`RETRY_DELAYS`) to the URLs that have not accepted it yet, then the row is
``failed``. URLs are never stored, shown or logged (``urls.py``). When the row cannot be written
(the database is what broke) the message is kept in memory and sent anyway (bounded).

A message's title leads with its severity (``[CRITICAL] api: api-health failing``, added here);
its body is what ``messages.py`` wrote, then the dashboard link (``TIEROPS_PUBLIC_URL`` + the
message's path; no link without a public URL). The rules in full: ARCHITECTURE.md,
"Notifications".
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from app.clock import parse_stamp
from app.config import Settings
from app.errors import ConfigError
from app.logs import guard_library_loggers, oneline
from app.notify import policy
from app.notify.messages import Notice
from app.notify.policy import NO_URLS, Earlier, format_title, quiet_hours
from app.notify.preview import IncidentPreview, preview
from app.notify.routes import DEFAULT_ROUTE, RouteError, RouteTable, checks_mtime, load_routes
from app.notify.urls import (
    NOT_INSTALLED,
    SECRET_LOGGERS,
    MaskFilter,
    UrlMask,
    apprise_available,
    notify_urls,
    send_one,
    shown_url,
)
from app.store import notifications as store
from app.store.db import Database
from app.tasks import spawn

log = logging.getLogger(__name__)

__all__ = ["Notifier"]

RETRY_DELAYS = (1.0, 4.0, 16.0)  # seconds before the 2nd, 3rd and 4th try
DIGEST_WINDOW = 60.0  # seconds: TIEROPS_NOTIFY_DIGEST_AFTER messages per this window, the rest digested
GATHER = 1.0  # seconds the sender waits after a wake-up, so a burst is seen as one
CLOSE_DRAIN = 5.0  # seconds close() lets the sender finish what is due
UNSTORED_MAX = 100  # messages kept in memory while they cannot be stored
SENDER_BACKOFF_MAX = 60.0  # seconds between the sender's tries while storage fails
DIGEST_LINES = 40  # messages listed in a digest's body
BODY_MAX = 4000  # characters of a body sent (chat services cut long messages anyway)


@dataclass
class _Message:
    """A message the sender holds: a row (``pk``) or, when it could not be stored, only this."""

    kind: str
    severity: str
    title: str
    body: str
    link: str | None
    pk: int | None = None
    attempts: int = 0
    due: float = 0.0  # monotonic time of the next try
    done_urls: set[int] = field(default_factory=set)  # URLs (by index) that accepted it
    routes: tuple[str, ...] = (DEFAULT_ROUTE,)

    def text(self) -> str:
        body = self.body if len(self.body) <= BODY_MAX else self.body[: BODY_MAX - 1] + "…"
        return f"{body}\n\n{self.link}" if self.link else body


class Notifier:
    """Records messages and sends them in the background. ``retry_delays``, ``digest_window`` and
    ``gather`` are seconds (tests pass short ones); ``now`` gives the wall clock for quiet hours."""

    def __init__(self, db: Database, settings: Settings, *, retry_delays: Sequence[float] = RETRY_DELAYS,
                 digest_window: float = DIGEST_WINDOW, gather: float = GATHER,
                 now: Callable[[], datetime] | None = None) -> None:
        self.db = db
        self.settings = settings
        self.retry_delays = tuple(retry_delays)
        self.digest_window = digest_window
        self.gather = gather
        self._now = now or (lambda: datetime.now(UTC))
        self._config_error: str | None = None
        try:
            self._urls = notify_urls(settings)
        except ConfigError as exc:
            self._urls, self._config_error = [], str(exc)
        try:
            self._quiet = quiet_hours(settings.notify_quiet_hours)
        except ValueError as exc:
            self._quiet = None
            self._config_error = self._config_error or str(exc)
        self._table = RouteTable.build(self._urls, [])
        self._mask = UrlMask(self._urls)
        self._routes_mtime: float | None = None
        self._routes_error: str | None = None
        self._load_table()
        self._apprise: bool | None = None  # importable? (checked once, when first needed)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # With several nodes on one store only the leader sends what is stored (each node records);
        # the node wakes the sender when it comes to lead (``wake``).
        self.may_send: Callable[[], bool] = lambda: True
        self._closing = False
        self._hurry = asyncio.Event()  # set by close() and by a critical message: ends a gathering pause at once
        self._retrying: dict[int, _Message] = {}  # pk → a stored message waiting for its next try
        self._unstored: deque[_Message] = deque(maxlen=UNSTORED_MAX)
        self._sends: deque[float] = deque()  # monotonic times of messages sent one by one (and digests)
        self._failures: deque[datetime] = deque()  # when messages failed for good (the last 24 h)
        self._last_error: str | None = self._config_error or self._routes_error
        self._held_until: float | None = None  # over the minute's allowance: digest at this monotonic time
        self._sender_errors = 0  # the sender's storage failures in a row
        self._sender_retry_at: float | None = None
        self._unguard: Callable[[], None] | None = None
        self._logged_missing = False

    # -- routes ----------------------------------------------------------------------------------

    def _load_table(self) -> None:
        """(Re)read the routes: at start, and whenever the checks file changed (it may hold them).
        Broken routes keep the last good table (at start: the default route) and are reported."""
        self._routes_mtime = checks_mtime(self.settings)
        try:
            self._table = load_routes(self.settings, self._urls)
        except RouteError as exc:
            if self._routes_error != str(exc):
                log.error("notification routes not used: %s", oneline(exc))
            self._routes_error = str(exc)
            self._last_error = str(exc)
            return
        if self._routes_error:
            log.info("notification routes work again (%s)", self._table.origin)
        self._routes_error = None
        self._mask = UrlMask(self._table.urls)

    @property
    def table(self) -> RouteTable:
        """The routes in force (reloaded when the checks file changed)."""
        if self.settings.checks is not None and checks_mtime(self.settings) != self._routes_mtime:
            self._load_table()
        return self._table

    # -- public API ----------------------------------------------------------------------------

    @property
    def configured(self) -> bool:
        return bool(self._table.targets)

    async def start(self) -> None:
        """Start the background sender (idempotent). Logs what is configured, never the URLs."""
        if self._task is not None:
            return
        self._closing = False
        self._hurry.clear()
        if self._config_error:
            log.error("notifications: %s", self._config_error)
        if self._table.targets:
            # Apprise's (and urllib3's) lines masked; its per-message INFO chatter ("Notifying 1
            # service(s)", "Sent …") kept out unless we log at debug: the sender logs each message.
            self._unguard = guard_library_loggers(SECRET_LOGGERS, MaskFilter(self._mask), quiet=True)
            if self._has_apprise():
                log.info("notifications: %d URL(s), at %s and above%s; routes: %s", len(self._table.targets),
                         self.settings.notify_min_severity,
                         f", quiet hours {self.settings.notify_quiet_hours} UTC" if self._quiet else "",
                         self._table.origin)
        with contextlib.suppress(Exception):  # the overview's count; storage trouble is reported elsewhere
            since = (self._now() - timedelta(days=1)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            for when in await store.failure_times(self.db, since):
                self._failures.appendleft(parse_stamp(when))
        self._task = spawn(self._run(), "tierops-notifier")
        self._wake.set()  # messages left pending by an earlier run

    def wake(self) -> None:
        """Look for due messages now (this node just came to lead)."""
        self._wake.set()

    async def close(self) -> None:
        """Let the sender send what is due for at most :data:`CLOSE_DRAIN` s, then stop it. What
        is still pending stays pending (sent at the next start)."""
        task, self._task = self._task, None
        if task is not None:
            self._closing = True
            self._hurry.set()
            self._wake.set()
            try:
                await asyncio.wait_for(asyncio.shield(task), CLOSE_DRAIN)
            except Exception:  # the drain timed out (or the sender failed: logged by spawn)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._unguard is not None:
            self._unguard()
            self._unguard = None

    async def post(self, notice: Notice) -> None:
        """Record one message and wake the sender. Never raises, never waits on the network."""
        try:
            await self._record(notice)
        except Exception as exc:  # a caller's cycle must never fail because of a notification
            log.error("notification %r could not be recorded: %s: %s", notice.kind, type(exc).__name__, oneline(exc))

    async def decision(self, notice: Notice) -> policy.Decision:
        """What :meth:`post` would decide for ``notice`` now (reads what its opening became)."""
        earlier = await self._earlier(notice)
        return policy.decide(notice, min_severity=self.settings.notify_min_severity, quiet=self._quiet,
                             quiet_text=self.settings.notify_quiet_hours, table=self.table,
                             config_error=self._config_error, apprise=self._has_apprise, now=self._now(),
                             earlier=earlier)

    async def preview(self, last: int = 10) -> list[IncidentPreview]:
        """What the settings in force would send where for the ``last`` incidents (``preview.py``)."""
        return await preview(self.db, table=self.table, min_severity=self.settings.notify_min_severity,
                             quiet=self._quiet, quiet_text=self.settings.notify_quiet_hours,
                             config_error=self._config_error, apprise=apprise_available(), last=last, now=self._now())

    def routes_view(self) -> list[dict[str, Any]]:
        """The routes in force as people read them (URLs in their shown form only)."""
        table = self.table
        out = [{"name": r.name, "match": r.describe(), "to": [shown_url(t) if "://" in t else t for t in r.to],
                "continue": r.continue_, "urls": [shown_url(table.targets[i].url) for i in table.indexes([r.name])]}
               for r in table.routes]
        default = table.indexes([DEFAULT_ROUTE])
        out.append({"name": DEFAULT_ROUTE, "match": "what no route matches" if table.routes else "everything",
                    "to": ["URLs without a tag"] if table.routes else ["every URL"], "continue": False,
                    "urls": [shown_url(table.targets[i].url) for i in default]})
        return out

    def status(self) -> dict[str, Any]:
        """For the overview and ``/healthz``: never the URLs."""
        cutoff = self._now() - timedelta(days=1)
        while self._failures and self._failures[0] < cutoff:
            self._failures.popleft()
        return {
            "configured": bool(self._table.targets),
            "urls": len(self._table.targets),
            "apprise": apprise_available(),
            "min_severity": self.settings.notify_min_severity,
            "quiet_hours": self.settings.notify_quiet_hours or None,
            "routes": [r.name for r in self._table.routes],
            "routes_from": self._table.origin,
            "routes_error": self._routes_error,
            "retrying": len(self._retrying) + len(self._unstored),  # waiting for their next try
            "last_error": self._last_error,
            "failures_24h": len(self._failures),
        }

    # -- recording -----------------------------------------------------------------------------

    async def _earlier(self, notice: Notice) -> Earlier | None:
        """What became of the messages ``notice`` follows (None: it follows nothing recorded)."""
        if not notice.follows and notice.follows_key is None:
            return None
        rows = await store.earlier(self.db, incident_ids=notice.follows, dedup_key=notice.follows_key)
        if not rows:
            return None
        out = [r for r in rows if r["status"] != store.SUPPRESSED]
        if not out:
            return Earlier(False, why=next((r["why"] for r in rows if r["why"]), None))
        routes = tuple(dict.fromkeys(name for r in out for name in (r["routes"] or [DEFAULT_ROUTE])))
        return Earlier(True, routes)

    async def _record(self, notice: Notice) -> None:
        severity = notice.severity
        if severity not in policy.RANK:
            log.warning("notification %r: unknown severity %r, sent as warning", notice.kind, severity)
            severity = "warning"
        title = format_title(severity, oneline(notice.title)[:300])
        decided = await self.decision(notice)
        msg = _Message(notice.kind, severity, title, notice.body.strip(), self._link(notice.link_path),
                       routes=decided.routes or (DEFAULT_ROUTE,))
        try:
            pk = await store.record(self.db, kind=notice.kind, severity=severity, title=msg.title, body=msg.body,
                                    link=msg.link, dedup_key=notice.dedup_key, status=decided.status,
                                    why=decided.why, last_error=decided.error, incident_id=notice.incident_id,
                                    source=notice.source, service=notice.service, check_name=notice.check,
                                    routes=decided.routes if decided.status != store.SUPPRESSED else ())
        except Exception as exc:
            if decided.status != store.PENDING:
                raise
            # The database is what broke (a monitor notice says so): send it anyway, from memory.
            log.error("notification %r could not be recorded (%s: %s); sending it without a record", notice.kind,
                      type(exc).__name__, oneline(exc))
            self._unstored.append(msg)
            self._wake.set()
            return
        if pk is None:
            log.debug("notification %r not repeated: %s was recorded before", notice.kind, notice.dedup_key)
            return
        if decided.status == store.PENDING:
            if severity == "critical":
                self._hurry.set()  # no gathering pause for a page
            self._wake.set()
        elif decided.status == store.FAILED and decided.error:
            self._failed_for_good(decided.error)

    def _has_apprise(self) -> bool:
        if self._apprise is None:
            self._apprise = apprise_available()
        if not self._apprise and not self._logged_missing and self._table.targets:
            self._logged_missing = True
            log.error("notifications: %d URL(s) configured but %s; messages are recorded as failed",
                      len(self._table.targets), NOT_INSTALLED)
        return self._apprise

    def _link(self, path: str | None) -> str | None:
        base = self.settings.public_url.strip().rstrip("/")
        if not base or not path:
            return None
        return f"{base}/{path.lstrip('/')}"

    # -- the sender ----------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            if not self._closing:
                with contextlib.suppress(TimeoutError):  # a retry or a held digest is due
                    await asyncio.wait_for(self._wake.wait(), self._next_due())
                if self._wake.is_set() and self.gather > 0 and not self._closing and not self._hurry.is_set():
                    with contextlib.suppress(TimeoutError):  # one cycle's messages arrive together; a page does not wait
                        await asyncio.wait_for(self._hurry.wait(), self.gather)
            self._wake.clear()
            if not self._closing:
                self._hurry.clear()
            try:
                await self._send_unstored()  # first: they need no storage
                if self.may_send():
                    await self._send_due()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # storage trouble: try again later (backing off), never die
                self._sender_errors += 1
                delay = min(SENDER_BACKOFF_MAX, 2.0 ** min(self._sender_errors, 10))
                self._sender_retry_at = time.monotonic() + delay
                log.log(logging.ERROR if self._sender_errors == 1 else logging.DEBUG,
                        "notifications: the sender cannot read or update the notifications (%s: %s); "
                        "trying again in %.0f s", type(exc).__name__, oneline(exc), delay)
            else:
                if self._sender_errors:
                    log.info("notifications: the sender works again")
                self._sender_errors, self._sender_retry_at = 0, None
            if self._closing:
                return

    def _next_due(self) -> float | None:
        """Seconds until a retry or a held message is due (None: nothing scheduled)."""
        dues = [m.due for m in itertools.chain(self._retrying.values(), self._unstored)]
        dues += [t for t in (self._held_until, self._sender_retry_at) if t is not None]
        return max(0.0, min(dues) - time.monotonic()) if dues else None

    async def _send_unstored(self) -> None:
        """Messages that could not be recorded, when due: one by one, never digested."""
        now = time.monotonic()
        for msg in [m for m in self._unstored if m.due <= now]:
            await self._deliver(msg)

    async def _send_due(self) -> None:
        now = time.monotonic()
        while self._sends and self._sends[0] <= now - self.digest_window:
            self._sends.popleft()
        rows = await store.pending(self.db)
        if rows and not self.table.targets:  # pending from a run that had URLs: nothing to send them with now
            await store.mark_suppressed(self.db, [r["id"] for r in rows], NO_URLS)
            return
        fresh = [_Message(r["kind"], r["severity"], r["title"], r["body"], r["link"], pk=r["id"],
                          attempts=r["attempts"], routes=tuple(r["routes"]) or (DEFAULT_ROUTE,))
                 for r in rows if r["id"] not in self._retrying]
        # Critical first, one by one, never held or digested: a page never waits behind warnings.
        for msg in [m for m in fresh if m.severity == "critical"]:
            await self._deliver(msg)
        for msg in [m for m in self._retrying.values() if m.due <= now]:  # retries: one by one, never digested
            await self._deliver(msg)
        fresh = [m for m in fresh if m.severity != "critical"]
        if not fresh:
            self._held_until = None
            return
        allowance = self.settings.notify_digest_after - len(self._sends)
        if len(fresh) <= allowance:
            self._held_until = None
            for msg in fresh:
                await self._deliver(msg)
            return
        if len(fresh) > self.settings.notify_digest_after or self._closing or (
                self._held_until is not None and now >= self._held_until):
            self._held_until = None
            groups: dict[tuple[int, ...], list[_Message]] = {}
            for msg in fresh:  # one digest per set of URLs
                groups.setdefault(tuple(self._targets(msg)), []).append(msg)
            for group in groups.values():
                await self._digest(group)
            return
        # Over the minute's allowance: hold them until the oldest send of the minute is a minute old.
        self._held_until = self._sends[0] + self.digest_window if self._sends else now

    def _targets(self, msg: _Message) -> list[int]:
        return self.table.indexes(msg.routes)

    async def _digest(self, messages: list[_Message]) -> None:
        if len(messages) == 1:
            await self._deliver(messages[0])
            return
        severity = max((m.severity for m in messages), key=lambda s: policy.RANK[s])
        lines = [f"- {m.title}" + (f" ({m.link})" if m.link else "") for m in messages[:DIGEST_LINES]]
        if len(messages) > DIGEST_LINES:
            lines.append(f"- … and {len(messages) - DIGEST_LINES} more (see the dashboard)")
        title = format_title(severity, f"tierops: {len(messages)} notifications")
        body = "More notifications than TIEROPS_NOTIFY_DIGEST_AFTER within a minute; together:\n" + "\n".join(lines)
        link = self._link("/notifications")
        routes = tuple(dict.fromkeys(r for m in messages for r in m.routes))
        pk = await store.record_digest(self.db, [m.pk for m in messages if m.pk is not None], severity=severity,
                                       title=title, body=body, link=link, routes=routes)
        log.info("notifications: %d messages sent as digest #%d", len(messages), pk)
        await self._deliver(_Message("digest", severity, title, body, link, pk=pk, routes=routes))

    async def _deliver(self, msg: _Message) -> None:
        """One try to every URL of the message's routes that has not accepted it yet; then sent,
        retried or failed."""
        msg.attempts += 1
        errors: list[str] = []
        table = self.table
        targets = [i for i in self._targets(msg) if i not in msg.done_urls]
        if not targets and not msg.done_urls:  # the routes changed since it was recorded
            self._forget(msg)
            why = f"its routes ({', '.join(msg.routes)}) reach no URL now"
            if msg.pk is not None:
                await store.mark_failed(self.db, msg.pk, msg.attempts, why)
            log.warning("notification %s not sent: %s", f"#{msg.pk}" if msg.pk is not None else "(unrecorded)", why)
            return
        for i in targets:
            url = table.targets[i].url
            error = await asyncio.to_thread(send_one, url, msg.title, msg.text(), msg.severity, self._mask, msg.kind)
            if error is None:
                msg.done_urls.add(i)
            else:
                errors.append(f"{shown_url(url)}: {error}" if len(table.targets) > 1 else error)
        if not errors:
            self._sends.append(time.monotonic())
            self._forget(msg)
            if msg.pk is not None:
                await store.mark_sent(self.db, msg.pk, msg.attempts)
            log.info("notification %s sent: %s", f"#{msg.pk}" if msg.pk is not None else "(unrecorded)", msg.title,
                     extra={"kind": msg.kind, "attempts": msg.attempts})
            return
        error = "; ".join(errors)
        self._last_error = error
        if msg.attempts <= len(self.retry_delays):
            delay = self.retry_delays[msg.attempts - 1]
            msg.due = time.monotonic() + delay
            if msg.pk is not None:
                self._retrying[msg.pk] = msg
                await store.note_failure(self.db, msg.pk, msg.attempts, error)
            log.info("notification %s: try %d failed (%s); again in %.0f s",
                     f"#{msg.pk}" if msg.pk is not None else "(unrecorded)", msg.attempts, error, delay)
            return
        self._forget(msg)
        self._failed_for_good(error)
        if msg.pk is not None:
            await store.mark_failed(self.db, msg.pk, msg.attempts, error)
        log.warning("notification %s failed after %d tries: %s", f"#{msg.pk}" if msg.pk is not None else "(unrecorded)",
                    msg.attempts, error, extra={"kind": msg.kind})

    def _forget(self, msg: _Message) -> None:
        if msg.pk is not None:
            self._retrying.pop(msg.pk, None)
        with contextlib.suppress(ValueError):
            self._unstored.remove(msg)

    def _failed_for_good(self, error: str) -> None:
        self._last_error = error
        self._failures.append(self._now())
