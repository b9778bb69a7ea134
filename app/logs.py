"""Application logging: one handler on stderr, text or JSON lines, and the HTTP access log.

Why a module of its own: every command and the server configure logging the same way, and log
shippers (Loki, Vector, journald's JSON) want one JSON object per line with the session and chain
ids as fields, not inside the message. Records carry them as ``extra={"session": …, "chain": …}``;
only the names in :data:`CONTEXT_FIELDS` become JSON fields (uvicorn adds extras of its own, e.g.
a coloured copy of its message, that must not). Text lines show the message alone: it already
names the session.

Secrets: ``app.redact.install_log_redaction`` masks a record's template and string arguments when
the record is made, but ``extra`` values are set on the record after that, and a non-string
argument (an exception, a path) is only turned into text when the message is formatted. So both
formatters pass what they write through the same record factory once more (:func:`redacted`):
the message as formatted, every string field, the traceback. Whatever redactor is installed at
that moment is the one used (the web lifespan's also knows the dashboard token).

The access log (``tierops serve``): one line per HTTP request on the logger ``tierops.access``
(:class:`AccessLog`, when ``TIEROPS_ACCESS_LOG`` is on), filtered or turned off apart from the
application's lines. uvicorn's own access log is off and its other loggers go through our root
handler (``log_config=None``): every line of the server has one format, none is printed twice.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable, MutableMapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ACCESS_LOGGER", "CONTEXT_FIELDS", "TEXT_FORMAT", "AccessLog", "JsonFormatter", "TextFormatter",
           "escape_controls", "guard_library_loggers", "oneline", "redacted", "setup_logging"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
FORMATS = ("text", "json")
# Context a record may carry as ``extra``; JSON lines show each one that is set as a field. Ids,
# numbers and closed sets only: free text (a reason, an error) belongs in the message, where the
# record factory masks it (and JSON strings are masked again here anyway).
CONTEXT_FIELDS = (
    "session", "chain", "tier", "status", "cycle",             # who and what
    "trigger", "model", "parent", "to_tier", "source",         # how a session started / ended
    "sessions", "attempts", "lines", "cost_usd", "duration_s",  # totals
    "attempt", "backoff_s", "count",                           # storage retries, the sweep
    "method", "path", "http_status", "client", "duration_ms",  # the access log
)
ACCESS_LOGGER = "tierops.access"
log = logging.getLogger(__name__)
_HANDLER_NAME = "tierops"
ONELINE_LIMIT = 300


def redacted(text: str) -> str:
    """``text`` masked by the redactor installed in the record factory (none installed: as is).

    The factory is the one place ``install_log_redaction`` puts its redactor, so a throw-away
    record made by it is how a formatter reaches that redactor without a second registry."""
    try:
        record = logging.getLogRecordFactory()("tierops", logging.INFO, "", 0, text, None, None)
    except Exception:  # a log line must never raise
        return text
    return record.msg if isinstance(record.msg, str) else text


def oneline(text: object, limit: int = ONELINE_LIMIT) -> str:
    """``text`` on one line, cut at ``limit`` characters: a reason written by a model or a CLI may
    run over many lines, and a log line is one fact on one line (the database keeps it whole)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# What the text format escapes: every C0 control (newline and carriage return among them), DEL,
# every C1 control (U+0085 is a newline to some readers) and the Unicode line and paragraph
# separators.
_TEXT_ESCAPES: dict[int, str] = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_TEXT_ESCAPES.update({0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029"})
TRACEBACK_INDENT = "  "  # every traceback line of a text record starts with it


def escape_controls(text: str) -> str:
    """``text`` as one line without control characters: line breaks and controls written as escapes
    (``\\n``, ``\\r``, ``\\t``, ``\\x1b``, ``\\u2028``)."""
    return text.translate(_TEXT_ESCAPES)


class TextFormatter(logging.Formatter):
    """:data:`TEXT_FORMAT` with the message masked once more, and one record is one line: a newline in a message (an
    alert's service, a model's reason, a URL path) would otherwise write a line of its own that
    reads like another record. The message, the logger's name and the level are escaped
    (:func:`escape_controls`); a traceback follows on lines of its own, each indented by
    :data:`TRACEBACK_INDENT` with its controls escaped, so only a record's first line starts at
    column 0."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = logging.makeLogRecord(record.__dict__)
        line.msg, line.args = escape_controls(redacted(record.getMessage())), None
        line.name, line.levelname = escape_controls(record.name), escape_controls(record.levelname)
        line.exc_info = line.exc_text = line.stack_info = None
        text = super().format(line)
        extra = []
        if record.exc_info and not record.exc_text:  # already set (and masked) by the redacting factory
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            extra.append(record.exc_text)
        if record.stack_info:
            extra.append(self.formatStack(record.stack_info))
        for block in extra:
            text += "".join(f"\n{TRACEBACK_INDENT}{escape_controls(part)}" for part in redacted(block).splitlines())
        # Not the whole line again: the message and every block are masked; the rest is the time,
        # the level and the logger's name, and "app.web.auth: refused …" would read as a credential.
        return text


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "message", "session"?, "chain"?, …, "exc"?}``, one object per line
    (``json.dumps`` escapes the newlines of a traceback or a message)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redacted(record.getMessage()),
        }
        for field in CONTEXT_FIELDS:
            value = getattr(record, field, None)
            if value is None:
                continue
            if isinstance(value, bool | int | float):
                entry[field] = value
            else:  # a string, a StrEnum, anything else: as text, masked
                entry[field] = redacted(str(value))
        if record.exc_info and not record.exc_text:  # already set (and masked) by the redacting factory
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exc"] = redacted(record.exc_text)
        if record.stack_info:
            entry["stack"] = redacted(self.formatStack(record.stack_info))
        return json.dumps(entry, ensure_ascii=False, default=str)


def _pick(value: str | None, env: str, allowed: dict[str, int] | tuple[str, ...], default: str) -> str:
    """The flag, else a valid environment value, else the default (an invalid environment value is
    reported by the command's settings load; logging must be set up before that)."""
    if value:
        return value
    from_env = os.environ.get(env, "").strip().lower()
    return from_env if from_env in allowed else default


def setup_logging(level: str | None = None, fmt: str | None = None, *, default_level: str = "warning",
                  stream: TextIO | None = None) -> None:
    """Install TierOps' handler on the root logger (replacing an earlier one of ours).

    ``level``/``fmt`` come from ``--log-level``/``--log-format``; when None,
    ``TIEROPS_LOG_LEVEL``/``TIEROPS_LOG_FORMAT``; else ``default_level`` and text.
    """
    chosen_level = _pick(level, "TIEROPS_LOG_LEVEL", LEVELS, default_level)
    chosen_fmt = _pick(fmt, "TIEROPS_LOG_FORMAT", FORMATS, "text")
    root = logging.getLogger()
    for existing in list(root.handlers):
        if existing.get_name() == _HANDLER_NAME:
            root.removeHandler(existing)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if chosen_fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(LEVELS[chosen_level])


_access = logging.getLogger(ACCESS_LOGGER)


class AccessLog:
    """ASGI middleware: one INFO line per HTTP request on ``tierops.access``, when it is answered.

    ``client - "METHOD /path HTTP/1.1" status duration ms``, with the same as fields. The query
    string is left out (nothing secret in any log line: a token or a filter value in a URL is
    not the access log's to keep). A request whose handler raised before answering is
    logged with status 500; one whose client went away first, with 499 (nginx's number for it).
    A streamed response (SSE) is logged when it ends, with how long it was open.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status: list[int] = []

        async def send_and_note(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        failed: BaseException | None = None
        try:
            await self.app(scope, receive, send_and_note)
        except BaseException as exc:  # logged below, then re-raised: the server reports it
            failed = exc
            raise
        finally:
            code = status[0] if status else (500 if isinstance(failed, Exception) else 499)
            _log_request(scope, code, time.monotonic() - started)


def _log_request(scope: MutableMapping[str, Any], code: int, seconds: float) -> None:
    client = scope.get("client")
    who = f"{client[0]}:{client[1]}" if client else "-"
    method, path = str(scope.get("method", "-")), str(scope.get("path", "-"))
    version = str(scope.get("http_version", "1.1"))
    ms = round(seconds * 1000, 1)
    _access.info('%s - "%s %s HTTP/%s" %d %.1f ms', who, method, path, version, code, ms,
                 extra={"method": method, "path": path, "http_status": code, "client": who, "duration_ms": ms})


def guard_library_loggers(names: Sequence[str], flt: logging.Filter, *, quiet: bool = False,
                          propagate: bool | None = None) -> Callable[[], None]:
    """Put ``flt`` on each of a library's loggers ``names`` (a filter on a logger sees only that
    logger's own records, so each needs it): Apprise and urllib3 print request URLs, which hold
    notification secrets. ``quiet``: the first logger gets WARNING when it has no level
    and the application does not log at debug (a library's per-call INFO chatter); ``propagate``:
    set on the first logger. Returns the function that undoes all of it."""
    loggers = [logging.getLogger(name) for name in names]
    first = loggers[0]
    level, was_propagating = first.level, first.propagate
    for logger in loggers:
        logger.addFilter(flt)
    if quiet and level == logging.NOTSET and logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        first.setLevel(logging.WARNING)
    if propagate is not None:
        first.propagate = propagate

    def undo() -> None:
        for logger in loggers:
            logger.removeFilter(flt)
        first.setLevel(level)
        first.propagate = was_propagating

    return undo
