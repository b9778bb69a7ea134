"""The YAML front matter of a markdown file: a runbook's (what it covers) and a skill's ``SKILL.md``.

Why a module of its own: runbooks (``app/engine/runbooks.py``) and extension skills
(``app/probe/extensions.py``) are markdown written by other people, in other repositories, and
both open with a ``---`` block. They are read the same strict way: the block must be the file's
first line, closed by a ``---`` (or ``...``) line, a YAML mapping, read without aliases and without
deep nesting (``app/probe/yamltext.py``); a broken block is a :class:`FrontMatterError` naming the
line, never a guess. A file that does not open with ``---`` has no front matter (None).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import yaml

from app.probe import yamltext
from app.probe.targets import redact_text

log = logging.getLogger(__name__)

__all__ = ["FrontMatter", "FrontMatterError", "split"]

MAX_LINES = 200  # a front matter names a few lists; a longer block is refused, not scanned
OPEN = "---"
CLOSE = ("---", "...")


class FrontMatterError(ValueError):
    """A front matter that cannot be read: ``line`` (1-based, in the file) and what is wrong."""

    def __init__(self, line: int | None, message: str) -> None:
        super().__init__(f"line {line}: {message}" if line else message)
        self.line = line
        self.message = message


@dataclass(frozen=True)
class FrontMatter:
    data: dict[str, Any] | None  # None: the file has no front matter
    body: str  # the text after it (the whole text without one)


def split(text: str) -> FrontMatter:
    """``text``'s front matter and body; :class:`FrontMatterError` for a broken front matter."""
    text = text.removeprefix("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip() != OPEN:
        return FrontMatter(None, text)
    end = next((i for i, line in enumerate(lines[1:MAX_LINES + 2], 1) if line.rstrip() in CLOSE), None)
    if end is None:
        closed = any(line.rstrip() in CLOSE for line in lines[1:])
        raise FrontMatterError(1, f"the front matter is longer than {MAX_LINES} lines" if closed else
                                  "the front matter opened here is never closed (a line '---' must end it)")
    block = "".join(lines[1:end])
    try:
        data = yamltext.safe_load(block) if block.strip() else {}
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = redact_text(" ".join(str(x) for x in (exc.context, exc.problem) if x))
        raise FrontMatterError(mark.line + 2 if mark else 1, f"YAML syntax error in the front matter: {what}") from None
    except yaml.YAMLError as exc:
        raise FrontMatterError(1, f"YAML error in the front matter: {redact_text(str(exc))}") from None
    if not isinstance(data, dict):
        raise FrontMatterError(2, f"the front matter must be a mapping (key: value lines), not {type(data).__name__}")
    return FrontMatter(yamltext.stringify_keys(data), "".join(lines[end + 1:]))
