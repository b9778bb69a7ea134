"""Apprise URLs: reading them, keeping their secrets out of every text, sending one message.

Why a module of its own: the URLs are credentials (a chat webhook's token, a mail password), and
every place that touches one — the sender, ``tierops notify test``, the heartbeat, the logs of the
libraries that send — must treat them the same way: never stored, shown or logged. What a person
sees of a URL is its scheme and host, in Apprise's own privacy form (:func:`shown_url`); errors
are masked (:class:`UrlMask`) before they are kept; the ``apprise`` and ``urllib3`` loggers (which
print request URLs at debug) are masked too (:class:`MaskFilter`).

Apprise is imported lazily: it is an optional extra (``pip install 'tierops[notify]'``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import re
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from app.config import Settings
from app.errors import ConfigError
from app.logs import guard_library_loggers, oneline
from app.redact import MASK

log = logging.getLogger(__name__)

__all__ = ["NOTIFY_SETTING_HINT", "NOT_INSTALLED", "SECRET_LOGGERS", "MaskFilter", "UrlMask", "apprise_available",
           "captured_only", "notify_urls", "send_one", "shown_url", "split_urls"]

NOT_INSTALLED = "Apprise is not installed: install tierops[notify] (pip install 'tierops[notify]')"
NOTIFY_SETTING_HINT = "set TIEROPS_NOTIFY_URLS (or TIEROPS_NOTIFY_URLS_FILE) to one or more Apprise URLs"
_COMMA_BEFORE_URL = re.compile(r",(?=(?:[A-Za-z0-9_][A-Za-z0-9_.\-]*(?:,[A-Za-z0-9_][A-Za-z0-9_.\-]*)*=)?"
                               r"[A-Za-z][A-Za-z0-9+.\-]*://)")
_HOSTNAME = re.compile(r"^(localhost|[0-9.]+|\[[0-9a-fA-F:.]+\]|[A-Za-z0-9\-]+(\.[A-Za-z0-9\-]+)+)(:\d+)?$")


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
    return split_urls(text)


def split_urls(text: str) -> list[str]:
    """Whitespace separates URLs; so does a comma that ends a URL when another URL (or a tagged
    one, ``TAG=scheme://``) follows it. A comma inside a URL stays (``mailto://…?to=a@x,b@y``), and
    so does one between tags (``pager,ops=json://…``)."""
    out: list[str] = []
    for chunk in text.split():
        start = 0
        for m in _COMMA_BEFORE_URL.finditer(chunk):
            if "://" in chunk[start:m.start()]:
                out.append(chunk[start:m.start()])
                start = m.end()
        out.append(chunk[start:])
    return [part.strip(",") for part in out if part.strip(",")]


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


class MaskFilter(logging.Filter):
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
def captured_only(mask: UrlMask) -> Iterator[None]:
    """For ``notify test``: Apprise's lines masked and kept to the capture (each URL's line says
    the error; the same warning on stderr again would only repeat it)."""
    undo = guard_library_loggers(SECRET_LOGGERS, MaskFilter(mask), propagate=False)
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


_NOTIFY_TYPES = {"info": "info", "warning": "warning", "critical": "failure"}


def notify_type(kind: str, severity: str) -> str:
    """Apprise's notify type (the colour and icon chat services show): a resolution is a success."""
    return "success" if kind == "incident_resolved" else _NOTIFY_TYPES.get(severity, "info")


def send_one(url: str, title: str, body: str, severity: str, mask: UrlMask, kind: str = "") -> str | None:
    """Send to one URL (in a thread); None when accepted, else the masked error."""
    apprise = _import_apprise()
    obj = apprise.Apprise()
    if not obj.add(url):
        return "not a valid Apprise URL (unknown scheme or missing parts)"
    with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as captured:
        try:
            ok = bool(obj.notify(title=title, body=body, notify_type=notify_type(kind, severity)))
        except Exception as exc:  # a plugin's bug: reported like a failed send
            return mask(f"{type(exc).__name__}: {exc}")
        text = captured.getvalue()
    if ok:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return mask(oneline("; ".join(lines[-3:])))[:500] if lines else "the service did not accept the message"

