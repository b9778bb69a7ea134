"""Notifications (issue #13): telling people what changed, through Apprise, without ever holding
up a cycle.

What it does differently from "call Apprise where something happens":

* **Recorded first, sent later.** :meth:`Notifier.notify` writes one ``notifications`` row and
  wakes a background sender; it never raises and never waits on the network. So a cycle is never
  slowed by a slow chat service, the overview shows every message and its fate, and a message
  still pending when the process stops goes out at the next start.
* **Once per state change.** Callers pass a ``dedup_key`` (``incident:12:opened``); the store's
  unique key makes a second call a no-op, across restarts and processes.
* **Decided when recorded.** Below ``TIEROPS_NOTIFY_MIN_SEVERITY``, or not critical during
  ``TIEROPS_NOTIFY_QUIET_HOURS`` (UTC), a message is stored ``suppressed`` with why; with no URLs
  it is stored ``suppressed`` ("no TIEROPS_NOTIFY_URLS"), so the overview still lists what would
  have been sent; with URLs but no Apprise installed it is stored ``failed`` ("install
  tierops[notify]") and one error is logged.
* **Digest.** At most ``TIEROPS_NOTIFY_DIGEST_AFTER`` messages go out one by one within a
  minute. More waiting at once (a burst: the sender waits :data:`GATHER` s after a wake-up so one
  cycle's messages arrive together), or more than the minute allows, are sent as ONE digest
  message listing them (their rows become ``digested``, "sent in digest #N"); a message over the
  minute's allowance waits at most until the minute's oldest send is a minute old.
* **Retries.** A send that fails is tried again after 1, 4 and 16 s (:data:`RETRY_DELAYS`,
  injectable), other messages going out meanwhile; then the row is ``failed`` with the error.
  With several URLs a retry goes only to the URLs that have not accepted the message yet.
* **Secrets.** The URLs (they often hold tokens and passwords) are never stored, shown or logged:
  errors are taken from Apprise's log and masked (:class:`UrlMask`), and a filter on the
  ``apprise`` logger masks them in Apprise's own lines (its debug lines print request URLs, which
  for many services hold the token). ``tierops notify test`` shows scheme and host only
  (:func:`shown_url`, from Apprise's own privacy form).
* **No storage, still a message.** When the row cannot be written (the database is what broke),
  the message is kept in memory and sent anyway (bounded; tried like any other).

Apprise is imported lazily: it is an optional extra (``pip install 'tierops[notify]'``).
Message shape: the title leads with the severity and the service, ``[CRITICAL] api: incident
opened — api-health failing`` (:func:`format_title` adds the ``[SEVERITY]``); the body is the short
evidence or summary, then the dashboard link (``TIEROPS_PUBLIC_URL`` + the caller's path; no link
without a public URL).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import logging
import re
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote, urlsplit

from app.clock import parse_stamp, utcnow
from app.config import Settings
from app.errors import ConfigError
from app.logs import guard_library_loggers, oneline
from app.redact import MASK
from app.store import notifications as store
from app.store.db import Database
from app.tasks import spawn

log = logging.getLogger(__name__)

__all__ = ["NOTIFY_SETTING_HINT", "Notifier", "UrlMask", "UrlResult", "format_title", "notify_urls",
           "send_test", "shown_url"]

SEVERITIES = ("info", "warning", "critical")
RANK = {name: i for i, name in enumerate(SEVERITIES)}
RETRY_DELAYS = (1.0, 4.0, 16.0)  # seconds before the 2nd, 3rd and 4th try
DIGEST_WINDOW = 60.0  # seconds: TIEROPS_NOTIFY_DIGEST_AFTER messages per this window, the rest digested
GATHER = 1.0  # seconds the sender waits after a wake-up, so a burst is seen as one
CLOSE_DRAIN = 5.0  # seconds close() lets the sender finish what is due
UNSTORED_MAX = 100  # messages kept in memory while they cannot be stored
SENDER_BACKOFF_MAX = 60.0  # seconds between the sender's tries while storage fails
DIGEST_LINES = 40  # messages listed in a digest's body
BODY_MAX = 4000  # characters of a body sent (chat services cut long messages anyway)
NO_URLS = "no TIEROPS_NOTIFY_URLS"
NOT_INSTALLED = "Apprise is not installed: install tierops[notify] (pip install 'tierops[notify]')"
NOTIFY_SETTING_HINT = "set TIEROPS_NOTIFY_URLS (or TIEROPS_NOTIFY_URLS_FILE) to one or more Apprise URLs"

# Split on whitespace, and on a comma only when another URL (scheme://) follows it: an Apprise
# URL may hold commas itself (mailto://…?to=a@x,b@y).
_URL_SPLIT = re.compile(r"\s+|,\s*(?=[A-Za-z][A-Za-z0-9+.\-]*://)")
_QUIET = re.compile(r"^\s*(\d{1,2})(?::00)?\s*-\s*(\d{1,2})(?::00)?\s*$")
_HOSTNAME = re.compile(r"^(localhost|[0-9.]+|\[[0-9a-fA-F:.]+\]|[A-Za-z0-9\-]+(\.[A-Za-z0-9\-]+)+)(:\d+)?$")


# -- settings --------------------------------------------------------------------------------

def notify_urls(settings: Settings) -> list[str]:
    """The Apprise URLs from TIEROPS_NOTIFY_URLS, else TIEROPS_NOTIFY_URLS_FILE (lines starting
    with ``#`` are comments). Raises :class:`ConfigError` when the file cannot be read; the message
    names the file, never its content."""
    text = settings.notify_urls.get_secret_value() if settings.notify_urls is not None else ""
    if not text.strip() and settings.notify_urls_file is not None:
        try:
            raw = settings.notify_urls_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"TIEROPS_NOTIFY_URLS_FILE {settings.notify_urls_file}: "
                              f"{exc.strerror or type(exc).__name__}") from None
        text = "\n".join(line for line in raw.splitlines() if not line.strip().startswith("#"))
    return [part.strip().strip(",") for part in _URL_SPLIT.split(text) if part.strip().strip(",")]


def quiet_hours(spec: str) -> tuple[int, int] | None:
    """``"22-07"`` → (22, 7); None for empty. Raises ValueError for anything else."""
    if not spec.strip():
        return None
    match = _QUIET.match(spec)
    if match is None:
        raise ValueError(f"TIEROPS_NOTIFY_QUIET_HOURS={spec!r} is not START-END in UTC hours, e.g. 22-07")
    start, end = int(match.group(1)), int(match.group(2))
    if not (0 <= start <= 24 and 0 <= end <= 24):
        raise ValueError(f"TIEROPS_NOTIFY_QUIET_HOURS={spec!r}: hours are 0 to 24")
    return start % 24, end % 24


def in_quiet_hours(hours: tuple[int, int] | None, now: datetime) -> bool:
    if hours is None:
        return False
    start, end = hours
    hour = now.astimezone(UTC).hour
    if start == end:
        return False
    return start <= hour < end if start < end else (hour >= start or hour < end)


_TAGGED = re.compile(r"^\[[A-Z]+\] ")


def format_title(severity: str, title: str) -> str:
    """``[CRITICAL] api: incident opened — …``: the severity first, unless the caller tagged the
    title already (``[RESOLVED] api: …``)."""
    return title if _TAGGED.match(title) else f"[{severity.upper()}] {title}"


# -- secrets ---------------------------------------------------------------------------------

class UrlMask:
    """Masks the notification (or heartbeat) URLs and the secret parts of each in any text: the
    whole URL, its user and password, path segments, query values and a "host" that is no host
    name (Apprise puts tokens there: ``tgram://BOTTOKEN/CHAT``), also percent-decoded."""

    def __init__(self, urls: Sequence[str]) -> None:
        pieces: set[str] = set()
        for url in urls:
            pieces |= {url, url.rstrip("/")}
            try:
                parts = urlsplit(url)
            except ValueError:
                continue
            netloc = parts.netloc
            userinfo, _, host = netloc.rpartition("@")
            if userinfo:
                user, _, password = userinfo.partition(":")
                pieces |= {password, unquote(password)} if len(password) >= 3 else set()
                pieces |= {user, unquote(user)} if len(user) >= 8 else set()
            if host and not _HOSTNAME.match(host):
                pieces |= {host, unquote(host)}
            for segment in parts.path.split("/"):
                if len(segment) >= 8:
                    pieces |= {segment, unquote(segment)}
            for pair in parts.query.split("&"):
                value = pair.partition("=")[2]
                if len(value) >= 8:
                    pieces |= {value, unquote(value)}
        self._pieces = sorted((p for p in pieces if p), key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for piece in self._pieces:
            if piece in text:
                text = text.replace(piece, MASK)
        return text


# Loggers that print request URLs or their paths: Apprise's debug lines ("JSON POST URL: …"),
# urllib3's request lines (the libraries Apprise sends with). A filter on a logger only sees that
# logger's own records, so each one gets it.
SECRET_LOGGERS = ("apprise", "urllib3.connectionpool", "urllib3.util.retry")


class _MaskFilter(logging.Filter):
    """On :data:`SECRET_LOGGERS`: their lines (and what LogCapture keeps) without our secrets."""

    def __init__(self, mask: UrlMask) -> None:
        super().__init__()
        self.mask = mask

    def filter(self, record: logging.LogRecord) -> bool:
        with contextlib.suppress(Exception):  # a log line must never raise
            message = record.getMessage()
            masked = self.mask(message)
            if masked != message:
                record.msg, record.args = masked, None
        return True


@contextlib.contextmanager
def _apprise_log_captured_only(mask: UrlMask) -> Iterator[None]:
    """For ``notify test``: Apprise's lines masked and kept to the capture (each URL's line says
    the error; the same warning on stderr again would only repeat it)."""
    undo = guard_library_loggers(SECRET_LOGGERS, _MaskFilter(mask), propagate=False)
    try:
        yield
    finally:
        undo()


def shown_url(url: str) -> str:
    """Scheme and host only, from Apprise's own privacy form (a token in the host position comes
    out as ``1...z``): ``json://127.0.0.1:8080``, ``tgram://1...z``."""
    scheme = url.partition("://")[0] if "://" in url else "?"
    try:
        apprise = _import_apprise()
        plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
        private = plugin.url(privacy=True) if plugin else None
    except Exception:  # a URL Apprise cannot even parse: only its scheme is shown
        private = None
    if not private:
        return f"{scheme}://…"
    netloc = urlsplit(private).netloc.rpartition("@")[2]
    return f"{scheme}://{netloc}"


def _import_apprise() -> Any:
    import apprise  # optional extra, imported when first needed

    return apprise


def apprise_available() -> bool:
    """Whether Apprise can be imported (found without importing it: cheap for ``/healthz``)."""
    return importlib.util.find_spec("apprise") is not None


# -- sending ---------------------------------------------------------------------------------

_NOTIFY_TYPES = {"info": "info", "warning": "warning", "critical": "failure"}


def _send_one(url: str, title: str, body: str, severity: str, mask: UrlMask) -> str | None:
    """Send to one URL (in a thread); None when accepted, else the masked error."""
    apprise = _import_apprise()
    obj = apprise.Apprise()
    if not obj.add(url):
        return "not a valid Apprise URL (unknown scheme or missing parts)"
    with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as captured:
        try:
            ok = bool(obj.notify(title=title, body=body, notify_type=_NOTIFY_TYPES.get(severity, "info")))
        except Exception as exc:  # a plugin's bug: reported like a failed send
            return mask(f"{type(exc).__name__}: {exc}")
        text = captured.getvalue()
    if ok:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return mask(oneline("; ".join(lines[-3:])))[:500] if lines else "the service did not accept the message"


@dataclass(frozen=True)
class UrlResult:
    """One URL's answer to ``tierops notify test``: its shown form, and None or the error."""

    shown: str
    error: str | None


async def send_test(settings: Settings) -> list[UrlResult]:
    """Send a test message to every configured URL, one at a time. Raises :class:`ConfigError`
    when none is configured or Apprise is missing (the CLI exits 2)."""
    urls = notify_urls(settings)
    if not urls:
        raise ConfigError(f"no notification URL configured: {NOTIFY_SETTING_HINT}")
    if not apprise_available():
        raise ConfigError(NOT_INSTALLED)
    mask = UrlMask(urls)
    title = format_title("info", "tierops: test notification")
    link = f"\n\n{settings.public_url.rstrip('/')}/" if settings.public_url.strip() else ""
    body = f"A test message from `tierops notify test` at {utcnow()}: this URL works.{link}"
    results = []
    with _apprise_log_captured_only(mask):
        for url in urls:
            error = await asyncio.to_thread(_send_one, url, title, body, "info", mask)
            results.append(UrlResult(shown_url(url), error))
    return results


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
        self._mask = UrlMask(self._urls)
        self._apprise: bool | None = None  # importable? (checked once, when first needed)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = asyncio.Event()  # set by close(): ends a gathering pause at once
        self._retrying: dict[int, _Message] = {}  # pk → a stored message waiting for its next try
        self._unstored: deque[_Message] = deque(maxlen=UNSTORED_MAX)
        self._sends: deque[float] = deque()  # monotonic times of messages sent one by one (and digests)
        self._failures: deque[datetime] = deque()  # when messages failed for good (the last 24 h)
        self._last_error: str | None = self._config_error
        self._held_until: float | None = None  # over the minute's allowance: digest at this monotonic time
        self._sender_errors = 0  # the sender's storage failures in a row
        self._sender_retry_at: float | None = None
        self._unguard: Callable[[], None] | None = None
        self._logged_missing = False

    # -- public API ----------------------------------------------------------------------------

    @property
    def configured(self) -> bool:
        return bool(self._urls)

    async def start(self) -> None:
        """Start the background sender (idempotent). Logs what is configured, never the URLs."""
        if self._task is not None:
            return
        self._closing = False
        self._closed.clear()
        if self._config_error:
            log.error("notifications: %s", self._config_error)
        if self._urls:
            # Apprise's (and urllib3's) lines masked; its per-message INFO chatter ("Notifying 1
            # service(s)", "Sent …") kept out unless we log at debug: the sender logs each message.
            self._unguard = guard_library_loggers(SECRET_LOGGERS, _MaskFilter(self._mask), quiet=True)
            if self._has_apprise():
                log.info("notifications: %d URL(s), at %s and above%s", len(self._urls),
                         self.settings.notify_min_severity,
                         f", quiet hours {self.settings.notify_quiet_hours} UTC" if self._quiet else "")
        with contextlib.suppress(Exception):  # the overview's count; storage trouble is reported elsewhere
            since = (self._now() - timedelta(days=1)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            for when in await store.failure_times(self.db, since):
                self._failures.appendleft(_parse(when))
        self._task = spawn(self._run(), "tierops-notifier")
        self._wake.set()  # messages left pending by an earlier run

    async def close(self) -> None:
        """Let the sender send what is due for at most :data:`CLOSE_DRAIN` s, then stop it. What
        is still pending stays pending (sent at the next start)."""
        task, self._task = self._task, None
        if task is not None:
            self._closing = True
            self._closed.set()
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

    async def notify(self, kind: str, severity: str, title: str, body: str, *, link_path: str | None = None,
                     dedup_key: str | None = None) -> None:
        """Record one message and wake the sender. Never raises, never waits on the network."""
        try:
            await self._notify(kind, severity, title, body, link_path, dedup_key)
        except Exception as exc:  # a caller's cycle must never fail because of a notification
            log.error("notification %r could not be recorded: %s: %s", kind, type(exc).__name__, oneline(exc))

    def status(self) -> dict[str, Any]:
        """For the overview and ``/healthz``: never the URLs."""
        cutoff = self._now() - timedelta(days=1)
        while self._failures and self._failures[0] < cutoff:
            self._failures.popleft()
        return {
            "configured": bool(self._urls),
            "urls": len(self._urls),
            "apprise": apprise_available(),
            "min_severity": self.settings.notify_min_severity,
            "quiet_hours": self.settings.notify_quiet_hours or None,
            "retrying": len(self._retrying) + len(self._unstored),  # waiting for their next try
            "last_error": self._last_error,
            "failures_24h": len(self._failures),
        }

    # -- recording -----------------------------------------------------------------------------

    async def _notify(self, kind: str, severity: str, title: str, body: str, link_path: str | None,
                      dedup_key: str | None) -> None:
        if severity not in RANK:
            log.warning("notification %r: unknown severity %r, sent as warning", kind, severity)
            severity = "warning"
        msg = _Message(kind, severity, format_title(severity, oneline(title)[:300]), body.strip(),
                       self._link(link_path))
        status, why, error = self._decide(severity)
        try:
            pk = await store.record(self.db, kind=kind, severity=severity, title=msg.title, body=msg.body,
                                    link=msg.link, dedup_key=dedup_key, status=status, why=why, last_error=error)
        except Exception as exc:
            if status != store.PENDING:
                raise
            # The database is what broke (a monitor notice says so): send it anyway, from memory.
            log.error("notification %r could not be recorded (%s: %s); sending it without a record", kind,
                      type(exc).__name__, oneline(exc))
            self._unstored.append(msg)
            self._wake.set()
            return
        if pk is None:
            log.debug("notification %r not repeated: %s was recorded before", kind, dedup_key)
            return
        if status == store.PENDING:
            self._wake.set()
        elif status == store.FAILED and error:
            self._failed_for_good(error)

    def _decide(self, severity: str) -> tuple[str, str | None, str | None]:
        """(status, why, error) for a new message."""
        minimum = self.settings.notify_min_severity
        if RANK[severity] < RANK[minimum]:
            return store.SUPPRESSED, f"below TIEROPS_NOTIFY_MIN_SEVERITY={minimum}", None
        if severity != "critical" and in_quiet_hours(self._quiet, self._now()):
            return store.SUPPRESSED, f"quiet hours ({self.settings.notify_quiet_hours} UTC): only critical is sent", None
        if self._config_error and not self._urls:
            return store.FAILED, None, self._config_error
        if not self._urls:
            return store.SUPPRESSED, NO_URLS, None
        if not self._has_apprise():
            return store.FAILED, None, NOT_INSTALLED
        return store.PENDING, None, None

    def _has_apprise(self) -> bool:
        if self._apprise is None:
            self._apprise = apprise_available()
        if not self._apprise and not self._logged_missing:
            self._logged_missing = True
            log.error("notifications: %d URL(s) configured but %s; messages are recorded as failed",
                      len(self._urls), NOT_INSTALLED)
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
                if self._wake.is_set() and self.gather > 0 and not self._closing:
                    with contextlib.suppress(TimeoutError):  # one cycle's messages arrive together; close() ends it
                        await asyncio.wait_for(self._closed.wait(), self.gather)
            self._wake.clear()
            try:
                await self._send_unstored()  # first: they need no storage
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
        if rows and not self._urls:  # pending from a run that had URLs: nothing to send them with now
            await store.mark_suppressed(self.db, [r["id"] for r in rows], NO_URLS)
            return
        fresh = [_Message(r["kind"], r["severity"], r["title"], r["body"], r["link"], pk=r["id"],
                          attempts=r["attempts"]) for r in rows if r["id"] not in self._retrying]
        for msg in [m for m in self._retrying.values() if m.due <= now]:  # retries: one by one, never digested
            await self._deliver(msg)
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
            await self._digest(fresh)
            return
        # Over the minute's allowance: hold them until the oldest send of the minute is a minute old.
        self._held_until = self._sends[0] + self.digest_window if self._sends else now

    async def _digest(self, messages: list[_Message]) -> None:
        if len(messages) == 1:
            await self._deliver(messages[0])
            return
        worst = max((m.severity for m in messages), key=lambda s: RANK[s])
        lines = [f"- {m.title}" + (f" ({m.link})" if m.link else "") for m in messages[:DIGEST_LINES]]
        if len(messages) > DIGEST_LINES:
            lines.append(f"- … and {len(messages) - DIGEST_LINES} more (see the dashboard)")
        title = format_title(worst, f"tierops: {len(messages)} notifications")
        body = "More notifications than TIEROPS_NOTIFY_DIGEST_AFTER within a minute; together:\n" + "\n".join(lines)
        link = self._link("/")
        pk = await store.record_digest(self.db, [m.pk for m in messages if m.pk is not None], severity=worst,
                                       title=title, body=body, link=link)
        log.info("notifications: %d messages sent as digest #%d", len(messages), pk)
        await self._deliver(_Message("digest", worst, title, body, link, pk=pk))

    async def _deliver(self, msg: _Message) -> None:
        """One try to every URL that has not accepted ``msg`` yet; then sent, retried or failed."""
        msg.attempts += 1
        errors: list[str] = []
        for i, url in enumerate(self._urls):
            if i in msg.done_urls:
                continue
            error = await asyncio.to_thread(_send_one, url, msg.title, msg.text(), msg.severity, self._mask)
            if error is None:
                msg.done_urls.add(i)
            else:
                errors.append(f"{shown_url(url)}: {error}" if len(self._urls) > 1 else error)
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


def _parse(stamp: str) -> datetime:
    return parse_stamp(stamp)

