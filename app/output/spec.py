"""The output contract one run asks for: which schema, from where, enforced how.

Why a value of its own: a run may carry an inline schema or a registry name instead of the one
agent-response schema given to the supervisor at start, and the session must record which won
(inline > named > the tier's default), the exact schema and its hash, and whether its output is
*routed* (only the agent-response contract becomes events, memories and escalation; any other
schema's valid output is just the session's result data).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from app.output import preflight
from app.output.validate import OutputValidator
from app.paths import DEFAULT_SCHEMA_PATH

log = logging.getLogger(__name__)

__all__ = ["AGENT_RESPONSE_SHA256", "OutputMode", "OutputSpec", "SchemaSource", "canonical_json", "schema_sha256"]

SchemaSource = Literal["inline", "named", "default"]
# native: --json-schema (the StructuredOutput tool); prompted: the schema in the prompt, the JSON in
# the final text; conversation: no contract at all (a chat turn's answer is its text; its findings,
# if any, are the legacy markers), never recovered, never degraded for lacking output.
OutputMode = Literal["native", "prompted", "conversation"]


# One definition of a schema's canonical text and hash: the preflight's.
canonical_json = preflight.canonical
schema_sha256 = preflight.sha256


AGENT_RESPONSE_SHA256 = schema_sha256(json.loads(DEFAULT_SCHEMA_PATH.read_text(encoding="utf-8")))


@dataclass(frozen=True)
class OutputSpec:
    validator: OutputValidator
    source: SchemaSource
    name: str | None = None
    mode: OutputMode = "native"
    max_retries: int | None = None  # None: TIEROPS_OUTPUT_MAX_RETRIES

    @property
    def schema(self) -> Any:
        return self.validator.schema

    @cached_property  # computed once per run (the spec is immutable)
    def canonical(self) -> str:
        return canonical_json(self.validator.schema)

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.canonical.encode("utf-8")).hexdigest()

    @property
    def routed(self) -> bool:
        """True for the agent-response contract (the bundled schema, however it was named):
        only its output is routed into events, memories and escalation."""
        return self.sha256 == AGENT_RESPONSE_SHA256

    @classmethod
    def default(cls, validator: OutputValidator, mode: OutputMode = "native") -> OutputSpec:
        return cls(validator=validator, source="default", mode=mode)

    @classmethod
    def conversation(cls, validator: OutputValidator) -> OutputSpec:
        """No output contract: a chat turn (its answer is text; no recovery resume is ever spent)."""
        return cls(validator=validator, source="default", mode="conversation", max_retries=0)
