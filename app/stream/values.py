"""Decoded JSON values as they can be stored, shown and emitted again.

Why a module of its own: a stream line's fields may hold any JSON value (a number where a list is
expected, integers beyond 64 bits, ``1e999``/``NaN``, lone UTF-16 surrogates from a JS string cut
mid-emoji, nesting deeper than the recursion limit), and everything after the parser (validation,
redaction, SQLite, the API's JSON, the pages) needs values it can take. These helpers never raise:
a non-finite float or an integer outside SQLite's 64 bits is None (:func:`finite`), a lone
surrogate becomes U+FFFD (:func:`clean_text`), containers pass through :func:`json_safe`, and any
value becomes one piece of display text (:func:`as_text`, :func:`preview`).
"""

from __future__ import annotations

import json
import logging
import math
import re
from typing import Any

log = logging.getLogger(__name__)

__all__ = [
    "DISPLAY_MAX",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_DEPTH",
    "TOO_DEEP",
    "as_text",
    "clean_text",
    "compact",
    "field_text",
    "finite",
    "json_safe",
    "preview",
    "str_or_none",
]

DISPLAY_MAX = 240
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
# Containers nested deeper than this are cut by :func:`json_safe`: every later step (validation,
# redaction, storage, the API's JSON) walks values recursively, and real output nests < 20 deep.
MAX_DEPTH = 64
TOO_DEEP = "(nested too deeply)"
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` encodable as UTF-8: each lone surrogate (a ``\\ud83d`` JSON escape) becomes U+FFFD."""
    if text.isascii():  # O(1) in CPython: nearly every string takes this path
        return text
    return _SURROGATE.sub("\ufffd", text)


def finite(value: Any) -> int | float | None:
    """A JSON number as it can be stored: None for booleans, non-numbers, non-finite floats and
    integers outside SQLite's signed 64 bits."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if INT64_MIN <= value <= INT64_MAX else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return None


def json_safe(value: Any, _depth: int = 0) -> Any:
    """A copy of a decoded JSON value that every JSON encoder, SQLite and UTF-8 accept: strings
    (and keys) via :func:`clean_text`, numbers via :func:`finite` (None when out of range),
    containers deeper than :data:`MAX_DEPTH` replaced by :data:`TOO_DEEP`."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, int | float):
        return finite(value)
    if isinstance(value, dict | list | tuple):
        if _depth >= MAX_DEPTH:
            return TOO_DEEP
        if isinstance(value, dict):
            return {clean_text(k) if isinstance(k, str) else as_text(k): json_safe(v, _depth + 1)
                    for k, v in value.items()}
        return [json_safe(v, _depth + 1) for v in value]
    return as_text(value)


def as_text(value: Any, limit: int | None = None) -> str:
    """Any decoded value as one piece of display text, never raising: a string as is, anything
    else as compact JSON (:data:`TOO_DEEP` when it cannot be encoded); lone surrogates replaced.
    ``limit`` cuts long text."""
    text = value if isinstance(value, str) else compact(value)
    if limit is not None and len(text) > limit:
        text = text[:limit]
    return clean_text(text)


def preview(text: str, limit: int = DISPLAY_MAX) -> str:
    """One-line preview: line breaks and tabs turned into spaces, cut at ``limit`` characters."""
    if len(text) > limit:  # never fold a 20 MB string just to keep 240 characters of it
        text = text[: limit - 1].rstrip() + "…"
    if "\n" in text or "\r" in text or "\t" in text:
        text = text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ").replace("\t", " ")
    return clean_text(text)


def compact(value: Any) -> str:
    """Compact JSON text of a decoded value; never raises (too deep, unencodable: a placeholder)."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except RecursionError:
        return TOO_DEEP
    except (TypeError, ValueError):
        try:
            return str(value)
        except (RecursionError, ValueError):
            return TOO_DEEP


def field_text(value: Any, limit: int = DISPLAY_MAX * 2) -> str:
    """A field's value as display text (any JSON value; ``""`` for a missing one)."""
    return "" if value is None else as_text(value, limit)


def str_or_none(value: Any) -> str | None:
    return clean_text(value) if isinstance(value, str) else None
