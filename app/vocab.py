"""The words TierOps stores, once: session statuses, triggers, sources, levels, service statuses, tiers.

Why: the same closed sets appear in the migrations' ``CHECK`` constraints, click choices, API
query parameters, the OpenAPI enums, the agent contract and the renderer. Declaring them here
(as ``StrEnum``, so a member *is* its string and compares equal to what SQLite returns) keeps
them from drifting apart. Shipped migrations keep the literal text they were written with;
``tests/test_vocab.py`` checks that their ``CHECK`` lists match these enums.
"""

from __future__ import annotations

import logging
from enum import StrEnum

log = logging.getLogger(__name__)


class SessionStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class Trigger(StrEnum):
    INGEST = "ingest"          # tierops ingest of a recorded stream
    SCHEDULE = "schedule"      # a scheduled cycle
    MANUAL = "manual"          # Run Now, POST /runs, tierops run
    ESCALATION = "escalation"  # started by the tier below
    ALERT = "alert"            # an alert that opened an incident (POST /api/v1/alerts)
    CHAT = "chat"              # one turn of a conversation (the chat page, /v1/chat/completions, /api/chat)


class Source(StrEnum):
    """Where a session's routed findings came from."""

    STRUCTURED_OUTPUT = "structured_output"
    MARKERS = "markers"
    HANDOFF = "handoff"
    NONE = "none"


class Level(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class ServiceStatus(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    DOWN = "down"
    UNREACHABLE = "unreachable"


class IncidentStatus(StrEnum):
    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"


class ApprovalStatus(StrEnum):  # a manual tier's approval: app/store/approvals.py
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


class AttemptKind(StrEnum):
    STREAM = "stream"  # the first CLI run of a session
    RESUME = "resume"  # an output-recovery --resume


PROBE_TIER = 0  # deterministic checks (`tierops probe`), no language model
MIN_TIER = PROBE_TIER
FIRST_MODEL_TIER = 1
MAX_TIER = 3
TIERS = tuple(range(MIN_TIER, MAX_TIER + 1))
MODEL_TIERS = tuple(range(FIRST_MODEL_TIER, MAX_TIER + 1))  # the tiers that run the claude CLI


def values(enum: type[StrEnum]) -> tuple[str, ...]:
    """The members' strings, in declaration order (for click choices, API checks, OpenAPI enums)."""
    return tuple(member.value for member in enum)
