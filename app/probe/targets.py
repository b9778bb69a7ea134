"""The small vocabulary of a checks file: durations, ``host:port`` targets, URLs without secrets.

Why a module of its own: the inventory validates these when the file is loaded, the checks parse
them again when they run, and everything the probe shows (stream lines, the tiers' prompt) must
hide the same secrets the same way; one definition keeps the three in step.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
from functools import lru_cache
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from app.redact import Redactor, redact_then_cut

log = logging.getLogger(__name__)

__all__ = [
    "DURATION_PATTERN",
    "NAME_PATTERN",
    "clip",
    "format_duration",
    "is_ip",
    "parse_duration",
    "quote",
    "redact_target",
    "redact_text",
    "split_host_port",
    "strip_userinfo",
    "valid_hostname",
]

# The same texts are in schemas/checks.json (tests/probe/test_inventory.py keeps them equal).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_NUM = r"\d+(?:\.\d+)?"
DURATION_PATTERN = rf"^(?=\d)(?:{_NUM}h)?(?:{_NUM}m(?!s))?(?:{_NUM}s)?(?:{_NUM}ms)?$|^{_NUM}$"
_PART = re.compile(rf"({_NUM})(ms|h|m|s)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_HOSTNAME = re.compile(r"^(?=.{1,253}\.?$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
                       r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$")


def parse_duration(value: object) -> float | None:
    """Seconds from ``30s``, ``5m``, ``1h30m``, ``500ms`` or a number of seconds; None if it is none
    of these (a bool is not a number here)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str) or not re.match(DURATION_PATTERN, value.strip()):
        return None
    text = value.strip()
    if re.fullmatch(_NUM, text):
        return float(text)
    return sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(text))


def format_duration(seconds: float) -> str:
    """``300`` → ``5m``, ``5400`` → ``1h30m``, ``2.5`` → ``2.5s``, ``0.25`` → ``250ms``."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    whole = int(seconds)
    if whole != seconds or whole < 60:
        return f"{seconds:g}s"
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{n}{u}" for n, u in ((h, "h"), (m, "m"), (s, "s")) if n)


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def valid_hostname(host: str) -> bool:
    return is_ip(host) or bool(_HOSTNAME.match(host))


def split_host_port(text: str, default_port: int | None = None) -> tuple[str, int]:
    """``db:5432`` → ``("db", 5432)``, ``[::1]:53`` → ``("::1", 53)``; ValueError with a message
    for the operator otherwise. ``default_port`` allows the port to be left out."""
    text = text.strip()
    host, port_text = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"{text!r}: an IPv6 address needs a closing ']' (e.g. [::1]:443)")
        host, rest = text[1:end], text[end + 1:]
        if rest and not rest.startswith(":"):
            raise ValueError(f"{text!r} is not host:port")
        port_text = rest[1:]
        if not is_ip(host):
            raise ValueError(f"{text!r}: {host!r} in brackets is not an IPv6 address")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise ValueError(f"{text!r}: write an IPv6 address in brackets, e.g. [{text}]:443")
    if not port_text:
        if default_port is None:
            raise ValueError(f"{text!r} is not host:port (e.g. db.internal:5432)")
        port_text = str(default_port)
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    if not host or not valid_hostname(host):
        raise ValueError(f"{text!r}: {host!r} is not a host name or address")
    return host, int(port_text)


def strip_userinfo(url: str) -> str:
    """The URL without ``user:password@`` (what any stream line, summary or prompt may show)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


@lru_cache(maxsize=4)
def _redactor(environ: frozenset[tuple[str, str]]) -> Redactor:
    return Redactor.from_environment(environ=dict(environ))


def redact_text(text: str) -> str:
    """Known secret shapes and the values of secret-looking environment variables (as they are
    now: the redactor is rebuilt when the environment changes) masked."""
    return _redactor(frozenset(os.environ.items()))(text)


def clip(text: str, limit: int, *, keep: Literal["head", "tail"] = "head", mark: str = "") -> str:
    """``text`` redacted (:func:`redact_text`), then cut to ``limit`` characters: a secret cut
    first would lose its shape and pass (app/redact.py, ``redact_then_cut``)."""
    return redact_then_cut(text, limit, redact_text, keep=keep, mark=mark)


def quote(value: Any, limit: int = 60) -> str:
    """``repr(value)`` as a problem report may quote it: redacted, then cut to ``limit``."""
    return clip(repr(value), limit, mark="...")


def redact_target(kind: str, target: str) -> str:
    """A check's target as it may be shown: URLs without userinfo, commands through the redactor."""
    if kind == "http":
        return strip_userinfo(target)
    return redact_text(target) if kind == "command" else target
