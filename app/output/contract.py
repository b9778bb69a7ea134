"""Pydantic models of the agent response contract (``schemas/agent-response.json``).

The JSON Schema is the source of truth sent to the CLI and used for validation; these models are
the typed view routing works with. ``tests/output/test_contract.py`` proves both accept and reject
the same documents, so the two cannot drift apart silently. Strict mode: the schema does not
coerce ``"true"`` to a boolean or ``1`` to a string, so neither may the models.
"""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)

Level = Literal["info", "warning", "critical"]
ServiceStatus = Literal["healthy", "degraded", "down", "unreachable"]
ActionResult = Literal["done", "failed", "proposed", "dry-run"]  # done/failed count against cooldowns


class _Model(BaseModel):
    # Extra keys are allowed by the schema (no additionalProperties), so they are ignored here.
    model_config = ConfigDict(strict=True, extra="ignore")


class Citation(_Model):
    """Evidence of a finding: an exact excerpt of a tool result (of the command, for an action)."""

    quote: str = Field(min_length=1, max_length=2000)
    tool_use_id: str | None = None  # the tool call it is from, when the model knows it


class Event(_Model):
    level: Level
    service: str | None = None
    message: str = Field(min_length=1)
    key: str | None = Field(None, min_length=1, max_length=200)  # the incident it belongs to
    evidence: list[Citation] = Field(default_factory=list)


class Memory(_Model):
    key: str = Field(min_length=1)
    value: str = Field(min_length=1)


class Escalation(_Model):
    needed: bool
    reason: str | None = None
    context: str | None = None
    failed_checks: list[str] = Field(default_factory=list)
    evidence: list[Citation] = Field(default_factory=list)


class ServiceCheck(_Model):
    name: str = Field(min_length=1)
    status: ServiceStatus
    detail: str | None = None
    check: str | None = None  # an inventory check (tier 0's probe sets these three)
    service: str | None = None
    latency_ms: float | None = None
    evidence: list[Citation] = Field(default_factory=list)


class Action(_Model):
    """An action taken or proposed: restart, redeploy, config-change, cleanup …"""

    kind: str = Field(min_length=1)
    service: str | None = None
    result: ActionResult
    detail: str | None = None
    evidence: list[Citation] = Field(default_factory=list)


class AgentResponse(_Model):
    summary: str
    events: list[Event]
    memories: list[Memory] = Field(default_factory=list)
    escalation: Escalation
    services_checked: list[ServiceCheck]
    actions: list[Action] = Field(default_factory=list)
