"""Validation of ``structured_output`` by TierOps itself.

Why: the CLI validates the StructuredOutput tool input with Ajv, but a run can still end
``success`` without any output (reference §5.4), the CLI silently ignores a schema it cannot
compile (§5.5), and ``--resume`` forgets the schema altogether (§8). So the output is checked
again here, against the schema file, collecting every error (not the first) with a JSON path in
the ``$.events[0].level`` form (root ``$``) that the recovery prompt and the pages show.

The draft comes from the schema's ``$schema`` (Draft 2020-12 when absent; Draft-7 and the others
jsonschema knows are honoured).

The output may hold any JSON value (a stream line may hold anything); the engine passes it
through ``values.json_safe`` first. Validation itself never raises on it either: a document nested beyond
what the validator can walk is one error at ``$``, and every message is capped text without lone
surrogates (a message quotes the offending value, which may be megabytes long).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from app.errors import ConfigError
from app.paths import DEFAULT_SCHEMA_PATH
from app.stream.values import as_text

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_SCHEMA_PATH",
    "OutputValidator",
    "SchemaLoadError",
    "ValidationIssue",
    "ValidationResult",
    "json_path",
]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MESSAGE_MAX = 1_000  # characters of one error message
TOO_DEEP_MESSAGE = "the document is nested too deeply to validate"


class SchemaLoadError(ConfigError):
    """The schema file is missing, not JSON, or not a valid JSON Schema. Message says which."""


@dataclass(frozen=True)
class ValidationIssue:
    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


@dataclass
class ValidationResult:
    valid: bool
    errors: list[ValidationIssue] = field(default_factory=list)

    def errors_as_dicts(self) -> list[dict[str, str]]:
        return [e.as_dict() for e in self.errors]


def json_path(parts: Any) -> str:
    """``deque(['events', 0, 'level'])`` → ``$.events[0].level``."""
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENT.match(str(part)):
            out += f".{part}"
        else:
            out += "[" + json.dumps(str(part)) + "]"
    return out


class OutputValidator:
    """A compiled schema. Create once per schema, call :meth:`validate` per output."""

    def __init__(self, schema: dict[str, Any], source: str = "<schema>") -> None:
        if not isinstance(schema, dict):
            raise SchemaLoadError(f"{source}: a JSON Schema must be a JSON object, got {type(schema).__name__}")
        cls = validator_for(schema, default=jsonschema.Draft202012Validator)
        try:
            cls.check_schema(schema)
        except SchemaError as exc:
            where = json_path(exc.path) if exc.path else "$"
            raise SchemaLoadError(
                f"{source}: not a valid JSON Schema ({cls.__name__}) at {where}: {exc.message}"
            ) from None
        self.schema = schema
        self.source = source
        self._validator = cls(schema)

    @classmethod
    def from_file(cls, path: str | Path | None = None) -> OutputValidator:
        path = Path(path) if path else DEFAULT_SCHEMA_PATH
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SchemaLoadError(f"schema file not found: {path}") from None
        except OSError as exc:
            raise SchemaLoadError(f"cannot read schema file {path}: {exc.strerror}") from None
        try:
            # NaN/Infinity are not JSON: the wire copy sent to the CLI must be valid JSON.
            schema = json.loads(text, parse_constant=_no_constant)
        except RecursionError:
            raise SchemaLoadError(f"schema file {path} is nested too deeply to parse") from None
        except ValueError as exc:
            raise SchemaLoadError(f"schema file {path} is not valid JSON: {exc}") from None
        return cls(schema, source=str(path))

    def wire_schema(self) -> str:
        """The schema as compact inline JSON for ``--json-schema``.

        ``$schema``/``$id`` are dropped: the CLI compiles the schema with Ajv and silently ignores
        a schema it cannot compile (reference §5.5), and a 2020-12 meta-schema URI is not one the
        CLI is known to accept. Our own validation still uses the full schema.
        """
        wire = {k: v for k, v in self.schema.items() if k not in ("$schema", "$id")}
        return json.dumps(wire, separators=(",", ":"), ensure_ascii=False)

    def validate(self, output: Any) -> ValidationResult:
        try:
            errors = sorted(
                self._validator.iter_errors(output),
                key=lambda e: (list(map(str, e.absolute_path)), e.message),
            )
            issues = [ValidationIssue(json_path(e.absolute_path), _message(e.message)) for e in errors]
        except RecursionError:
            issues = [ValidationIssue("$", TOO_DEEP_MESSAGE)]
        return ValidationResult(valid=not issues, errors=issues)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _message(text: str) -> str:
    if len(text) > MESSAGE_MAX:
        text = text[: MESSAGE_MAX - 1] + "…"
    return as_text(text)
