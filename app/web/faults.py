"""Storage conditions answer 503 with ``Retry-After`` and the reason, never a 500 with a traceback.

A full disk, an I/O error or a database locked by another process past the busy timeout
(``app.store.db.is_transient``, and the recorder's :class:`StorageUnavailable`) is not a bug of
the request or of TierOps: the same request may succeed once an operator frees space. Every
endpoint that writes and every form page can meet one, so the answer is decided here once:

* :class:`StorageFaults`, an ASGI middleware inside the security middleware, turns an exception
  any handler lets through into the 503 when a storage condition is behind it (the exception or
  the one it was raised from), before the response started: JSON ``{error, detail}`` under
  ``/api/`` and for streams, the error page elsewhere. One WARNING line, no traceback; anything
  else is re-raised (a bug stays a 500).
* :func:`unavailable` is the same answer as an :class:`~app.web.common.ApiError`, for handlers
  that catch a broad exception themselves (a cycle that failed before its first session).

Not covered: a stream whose response already started (it ends; the client reconnects), and
``OSError`` in general: only the errors of a disk that is full, read-only or failing count here,
so a missing prompt file is not "storage".
"""

from __future__ import annotations

import errno
import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import StorageUnavailable
from app.logs import oneline
from app.store.db import is_transient
from app.web.common import ApiError
from app.web.templating import error_page

log = logging.getLogger(__name__)

RETRY_AFTER_S = 30  # seconds a client is told to wait before trying a write again
ERROR = "storage_unavailable"
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})


def storage_fault(exc: BaseException) -> str | None:
    """The storage condition behind ``exc`` as one line for an operator (what failed, what to do),
    or None when there is none (a bug). Follows ``raise … from`` and implicit chaining, unless the
    context was suppressed (``from None``: the raiser said it is not the cause)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, StorageUnavailable):
            return oneline(cur)
        if isinstance(cur, OSError):
            if cur.errno in _DISK_ERRNOS:
                return _describe(cur)
        elif is_transient(cur):  # SQLite's FULL, IOERR, BUSY/LOCKED past the busy timeout, …
            return _describe(cur)
        cur = cur.__cause__ or (None if cur.__suppress_context__ else cur.__context__)
    return None


def _describe(exc: BaseException) -> str:
    text = oneline(exc)
    if (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)) or "disk is full" in text.lower():
        return f"storage error: the disk is full ({text}); nothing was changed: free some space and try again"
    if "locked" in text.lower() or getattr(exc, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED"):
        return (f"storage error: the database is locked by another process ({text}); nothing was changed: "
                "try again in a moment")
    return f"storage error: {type(exc).__name__}: {text}; nothing was changed: try again once storage is back"


def _headers() -> dict[str, str]:
    return {"Retry-After": str(RETRY_AFTER_S)}


def unavailable(reason: str) -> ApiError:
    """The 503 for ``reason`` (see :func:`storage_fault`), raised by a handler; the app's HTTP error
    handler renders it as JSON or as the error page, with ``Retry-After``."""
    error = ApiError(503, ERROR, reason)
    error.headers = _headers()
    return error


def _wants_json(scope: Scope) -> bool:
    path = str(scope.get("path", ""))
    return path.startswith("/api/") or path.endswith("/stream")


def _response(scope: Scope, reason: str) -> Response:
    if _wants_json(scope):
        return JSONResponse({"error": ERROR, "detail": reason}, status_code=503, headers=_headers())
    response = error_page(Request(scope), 503, f"The change could not be stored: {reason}.")
    response.headers.update(_headers())
    return response


class StorageFaults:
    """ASGI middleware: an exception with a storage condition behind it becomes the 503 (see the
    module docstring); every other exception passes through unchanged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as exc:
            reason = storage_fault(exc)
            if reason is None or started:
                raise
            log.warning("%s %s answered 503: %s", scope.get("method"), scope.get("path"), reason,
                        extra=_fields(scope))
            await _response(scope, reason)(scope, receive, send)


def _fields(scope: Scope) -> dict[str, Any]:
    return {"method": scope.get("method"), "path": scope.get("path"), "http_status": 503}
