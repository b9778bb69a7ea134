"""Legacy text markers, the fallback when a session gave no valid structured output.

Formats (from the Go tool TierOps replaces)::

    [EVENT:level[:service]] message
    [MEMORY:category[:service]] observation
    [COOLDOWN:restart|redeployment:service] success|failure — note

Faithful to the Go original (ARCHITECTURE.md, "The legacy path"): levels map as its
``normalizeEventLevel`` does, and a level it does not name is also kept as written in
``original_level``; names run to the closing bracket (only ``[``, ``]`` and line breaks end them),
whitespace collapsed; a marker repeated later in the same session is one finding, keyed by its
content as stored, the first occurrence kept. Deliberately unlike it: markers inside fenced code
blocks and inline code spans are examples, not findings, and tool results are never scanned (the
caller passes only assistant text blocks).

Extraction is incremental (one text block at a time) so memory grows with the number of distinct
markers, not with the length of the transcript.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

KNOWN_LEVELS = ("info", "warning", "critical")
# The levels the Go original's normalizeEventLevel names, and their severity there; with "info".
GO_LEVELS = {
    "info": "info",
    "warning": "warning",
    "warn": "warning",
    "degraded": "warning",
    "critical": "critical",
    "error": "critical",
    "err": "critical",
    "fatal": "critical",
    "failure": "critical",
    "failed": "critical",
}
UNKNOWN_LEVEL = "info"  # the Go original's default case; original_level keeps the text as written

# Up to the closing bracket, as in the Go original: anything but brackets and line breaks.
_NAME = r"[^\[\]\r\n]+"
_EVENT = re.compile(rf"\[EVENT:\s*(?P<level>[^:\[\]\s]+)\s*(?::(?P<service>{_NAME}))?\]\s*(?P<msg>.*)")
_MEMORY = re.compile(rf"\[MEMORY:(?P<category>[^:\[\]\r\n]+)(?::(?P<service>{_NAME}))?\]\s*(?P<msg>.*)")
_COOLDOWN = re.compile(
    rf"\[COOLDOWN:(?P<action>restart|redeployment):(?P<service>{_NAME})\]\s*"
    r"(?P<outcome>success|failure)\b\s*(?:[—–:-]+\s*)?(?P<note>.*)",  # noqa: RUF001 (the en dash is one of the separators)
    re.IGNORECASE,
)
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_INLINE_CODE = re.compile(r"`+[^`]*`+")
_MARKER_START = re.compile(r"\[(?:EVENT|MEMORY|COOLDOWN):")
# A next marker on the same line ends the current one's message.
_NEXT_MARKER = re.compile(r"\s*\[(?:EVENT|MEMORY|COOLDOWN):")


def _name(text: str | None) -> str | None:
    """A service or category as stored: whitespace collapsed, None when blank."""
    if text is None:
        return None
    return " ".join(text.split()) or None


def _key_text(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True)
class MarkerEvent:
    level: str
    service: str | None
    message: str
    original_level: str | None = None  # set (as written) only when the Go original's switch does not name it


@dataclass(frozen=True)
class MarkerMemory:
    category: str
    service: str | None
    value: str


@dataclass(frozen=True)
class MarkerCooldown:
    action: str
    service: str
    outcome: str
    note: str


def map_level(written: str) -> tuple[str, str | None]:
    """``(stored level, original_level)`` for a marker's level: a level the Go original names maps
    without a flag, anything else is stored as :data:`UNKNOWN_LEVEL` (info, as in the Go original)
    with the level kept as written."""
    known = GO_LEVELS.get(written.lower())
    return (known, None) if known else (UNKNOWN_LEVEL, written)


@dataclass
class MarkerSet:
    events: list[MarkerEvent] = field(default_factory=list)
    memories: list[MarkerMemory] = field(default_factory=list)
    cooldowns: list[MarkerCooldown] = field(default_factory=list)
    # Content keys already taken (a marker repeated later in the session is one finding).
    _seen: set[tuple[str, ...]] = field(default_factory=set, repr=False, compare=False)

    def __bool__(self) -> bool:
        return bool(self.events or self.memories or self.cooldowns)

    def scan(self, text: str) -> None:
        """Add the markers of one assistant text block."""
        if "[" not in text or not any(tag in text for tag in ("[EVENT:", "[MEMORY:", "[COOLDOWN:")):
            return  # fast path: nearly every block has no marker
        in_fence = False
        fence = ""
        for line in text.splitlines():
            m = _FENCE.match(line)
            if m:
                if not in_fence:
                    in_fence, fence = True, m.group(1)
                elif m.group(1) == fence:
                    in_fence = False
                continue
            if in_fence or "[" not in line:
                continue
            self._scan_line(_INLINE_CODE.sub("", line))

    def _first(self, key: tuple[str, ...]) -> bool:
        """True the first time ``key`` is met in this session."""
        if key in self._seen:
            return False
        self._seen.add(key)
        return True

    def _scan_line(self, line: str) -> None:
        for start in [m.start() for m in _MARKER_START.finditer(line)]:
            chunk = line[start:]
            nxt = _NEXT_MARKER.search(chunk, 1)
            if nxt:
                chunk = chunk[: nxt.start()]
            if m := _EVENT.match(chunk):
                msg = m.group("msg").strip()
                if not msg:
                    continue
                level, original = map_level(m.group("level"))
                service = _name(m.group("service"))
                if self._first(("event", level, service or "", _key_text(msg))):
                    self.events.append(MarkerEvent(level, service, msg, original_level=original))
            elif m := _MEMORY.match(chunk):
                value = m.group("msg").strip()
                category = _name(m.group("category"))
                if not value or category is None:
                    continue
                service = _name(m.group("service"))
                if self._first(("memory", category, service or "", _key_text(value))):
                    self.memories.append(MarkerMemory(category, service, value))
            elif m := _COOLDOWN.match(chunk):
                service = _name(m.group("service"))
                if service is None:
                    continue
                cooldown = MarkerCooldown(m.group("action").lower(), service, m.group("outcome").lower(),
                                          m.group("note").strip())
                if self._first(("cooldown", cooldown.action, service, cooldown.outcome, _key_text(cooldown.note))):
                    self.cooldowns.append(cooldown)


def parse_markers(text: str) -> MarkerSet:
    markers = MarkerSet()
    markers.scan(text)
    return markers
