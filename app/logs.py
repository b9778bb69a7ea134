"""Application logging: one handler on stderr, text or JSON lines (issue #10).

Why a module of its own: every command and the server configure logging the same way, and log
shippers (Loki, Vector, journald's JSON) want one JSON object per line with the session and chain
ids as fields, not inside the message. Records carry them as ``extra={"session": …, "chain": …}``.
Secrets are masked before any handler sees a record (``app.redact.install_log_redaction``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import TextIO

__all__ = ["CONTEXT_FIELDS", "TEXT_FORMAT", "JsonFormatter", "setup_logging"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
FORMATS = ("text", "json")
# Context a record may carry as ``extra``; JSON lines show each as a field, text lines ignore them
# (the message already names the session).
CONTEXT_FIELDS = ("session", "chain", "tier", "status", "cycle")
_HANDLER_NAME = "tierops"


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "message", "session"?, "chain"?, …, "exc"?}`` per line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in CONTEXT_FIELDS:
            value = getattr(record, field, None)
            if value is not None:
                entry[field] = value
        if record.exc_info:
            entry["exc"] = record.exc_text or self.formatException(record.exc_info)
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
    handler.setFormatter(JsonFormatter() if chosen_fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root.addHandler(handler)
    root.setLevel(LEVELS[chosen_level])
