"""Reading and parsing the CLI's stream-json output (see parser.py)."""

import logging

from app.stream.parser import (
    ArrayLine,
    AssistantLine,
    ParsedLine,
    ResultLine,
    StreamEventLine,
    SystemLine,
    TextLine,
    UnknownLine,
    UserLine,
    parse_line,
)

log = logging.getLogger(__name__)

__all__ = [
    "ArrayLine",
    "AssistantLine",
    "ParsedLine",
    "ResultLine",
    "StreamEventLine",
    "SystemLine",
    "TextLine",
    "UnknownLine",
    "UserLine",
    "parse_line",
]
