"""Reading and parsing the CLI's stream-json output (see parser.py)."""

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
