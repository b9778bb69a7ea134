"""Legacy text markers, the fallback when a session gave no valid structured output.

Formats (from the Go tool TierOps replaces)::

    [EVENT:level[:service]] message
    [MEMORY:category[:service]] observation
    [COOLDOWN:restart|redeployment:service] success|failure — note

Deliberate divergences from the original:

* Service names may contain dots, dashes, slashes and ``@`` (``api.payments-v2``,
  ``nginx@web-1``); the Go regex silently dropped dotted names.
* An unknown level is kept as ``warning`` with the original level recorded — never silently
  rewritten and never dropped.
* Markers inside fenced code blocks (```` ``` ```` / ``~~~``) and inline code spans are examples,
  not findings, and are skipped. Tool results are never scanned (the caller passes only
  assistant text blocks).

Extraction is incremental (one text block at a time) so memory grows with the number of
markers, not with the length of the transcript.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

KNOWN_LEVELS = ("info", "warning", "critical")
_SERVICE = r"[A-Za-z0-9_.@/\-]+"
_EVENT = re.compile(rf"\[EVENT:(?P<level>[A-Za-z]+)(?::(?P<service>{_SERVICE}))?\]\s*(?P<msg>.*)")
_MEMORY = re.compile(rf"\[MEMORY:(?P<category>[A-Za-z0-9_.\-]+)(?::(?P<service>{_SERVICE}))?\]\s*(?P<msg>.*)")
_COOLDOWN = re.compile(
    rf"\[COOLDOWN:(?P<action>restart|redeployment):(?P<service>{_SERVICE})\]\s*"
    r"(?P<outcome>success|failure)\b\s*(?:[—–:-]+\s*)?(?P<note>.*)",  # noqa: RUF001 (the en dash is one of the separators)
    re.IGNORECASE,
)
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_INLINE_CODE = re.compile(r"`+[^`]*`+")
# A next marker on the same line ends the current one's message.
_NEXT_MARKER = re.compile(r"\s*\[(?:EVENT|MEMORY|COOLDOWN):")


@dataclass(frozen=True)
class MarkerEvent:
    level: str
    service: str | None
    message: str
    original_level: str | None = None  # set when the marker's level was not a known one


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


@dataclass
class MarkerSet:
    events: list[MarkerEvent] = field(default_factory=list)
    memories: list[MarkerMemory] = field(default_factory=list)
    cooldowns: list[MarkerCooldown] = field(default_factory=list)

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

    def _scan_line(self, line: str) -> None:
        for start in [m.start() for m in re.finditer(r"\[(?:EVENT|MEMORY|COOLDOWN):", line)]:
            chunk = line[start:]
            nxt = _NEXT_MARKER.search(chunk, 1)
            if nxt:
                chunk = chunk[: nxt.start()]
            if m := _EVENT.match(chunk):
                level = m.group("level")
                msg = m.group("msg").strip()
                if not msg:
                    continue
                norm = level.lower()
                if norm in KNOWN_LEVELS:
                    self.events.append(MarkerEvent(norm, m.group("service"), msg))
                else:
                    self.events.append(MarkerEvent("warning", m.group("service"), msg, original_level=level))
            elif m := _MEMORY.match(chunk):
                value = m.group("msg").strip()
                if value:
                    self.memories.append(MarkerMemory(m.group("category"), m.group("service"), value))
            elif m := _COOLDOWN.match(chunk):
                self.cooldowns.append(
                    MarkerCooldown(m.group("action").lower(), m.group("service"),
                                   m.group("outcome").lower(), m.group("note").strip())
                )


def parse_markers(text: str) -> MarkerSet:
    markers = MarkerSet()
    markers.scan(text)
    return markers
