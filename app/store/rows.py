"""Typed rows: what the store's read functions return.

Rows are plain dicts (cheap to build, JSON-serialisable for ``--json`` and the API) described by
``TypedDict`` so every caller knows the keys. JSON columns come back decoded and 0/1 flags as
booleans (:func:`decode`), so API and CLI output carry stored fields under their column names.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from typing import Any, TypedDict, cast

log = logging.getLogger(__name__)

JSON_COLUMNS = frozenset({"guard_policy", "result_errors", "permission_denials", "model_usage", "validation_errors",
                          "structured_output", "escalation_failed_checks", "notes", "errors", "output", "argv",
                          "body", "output_schema", "links", "annotations", "labels", "routes", "incident_ids",
                          "mcp_servers", "escalation_evidence"})
BOOL_COLUMNS = frozenset({"degraded", "is_error", "validation_valid", "escalation_needed", "active", "has_output",
                          "valid", "flapping", "dry_run"})


def decode(row: sqlite3.Row) -> dict[str, Any]:
    """A row as a dict with JSON columns decoded and flags as booleans (undecodable JSON stays text)."""
    out = dict(row)
    for key, value in out.items():
        if key in JSON_COLUMNS and isinstance(value, str):
            with contextlib.suppress(ValueError):
                out[key] = json.loads(value)
        elif key in BOOL_COLUMNS and value is not None:
            out[key] = bool(value)
    return out


def decode_all(rows: list[sqlite3.Row], kind: type[Any]) -> list[Any]:
    """``[decode(r) for r in rows]`` typed as ``list[kind]`` (``kind`` is a TypedDict)."""
    return cast(list[kind], [decode(r) for r in rows])  # type: ignore[valid-type]


def where(**conditions: Any) -> tuple[str, list[Any]]:
    """`` WHERE a = ? AND b = ?`` and its parameters, for the conditions given a value (None and
    "" mean "no filter"). Keys are column expressions (``e__level`` for ``e.level``), never input."""
    clauses, params = [], []
    for column, value in conditions.items():
        if value is None or value == "":
            continue
        clauses.append(f"{column.replace('__', '.')} = ?")
        params.append(int(value) if isinstance(value, bool) else value)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def dumps(value: Any) -> str:
    """Compact JSON as stored (non-ASCII kept as is)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class SessionListRow(TypedDict):
    id: int
    session_id: str | None
    tier: int | None
    model: str | None
    cli_model: str | None
    trigger: str
    status: str
    status_reason: str | None
    degraded: bool
    source: str | None
    attempts: int
    parent_session_id: int | None
    escalated_to: int | None
    chain_id: int | None
    attention: str | None
    started_at: str
    ended_at: str | None
    duration_ms: int | None
    cost_usd: float | None
    input_tokens: int | None
    output_tokens: int | None
    num_turns: int | None
    result_subtype: str | None
    is_error: bool | None
    api_error_status: int | None
    exit_code: int | None
    validation_valid: bool | None
    escalation_needed: bool | None
    escalation_reason: str | None
    summary: str | None
    line_count: int
    dry_run: bool  # read-only tools, told to only say what it would do
    max_budget_usd: float | None  # the --max-budget-usd it ran with (None: none)


class SessionRow(SessionListRow):
    """Every column of ``sessions`` (``SELECT *``), decoded."""

    prompt: str | None
    cwd: str | None
    duration_api_ms: int | None
    cache_read_tokens: int | None
    cache_creation_tokens: int | None
    stop_reason: str | None
    terminal_reason: str | None
    result_text: str | None
    result_errors: Any
    permission_denials: Any
    model_usage: Any
    cli_version: str | None
    validation_errors: Any
    structured_output: Any
    invalid_output: str | None
    escalation_context: str | None
    escalation_failed_checks: Any
    handoff_raw: str | None
    notes: Any
    stderr_tail: str | None
    stream_sha256: str | None
    argv: Any
    system_prompt: str | None
    # the output contract
    schema_source: str | None
    schema_name: str | None
    schema_sha256: str | None
    output_schema: Any
    output_mode: str | None
    output_via: str | None
    escalation_gate: str | None  # why tier 0's request to escalate was not acted on
    # an operator acknowledged the attention item; a Stop sent from another process
    attention_acked_at: str | None
    attention_acked_by: str | None
    stop_requested_at: str | None
    stop_requested_by: str | None
    guard_policy: Any  # what the PreToolUse guard may allow (app/engine/guard.py GuardPolicy); None: unguarded
    mcp_servers: list[McpServerStatus] | None  # as the CLI's init line reported them; None: no init line yet
    # How many findings (events, service checks, actions) cite tool output that holds, that does not, or
    # cite nothing; None: not checked. The escalation's own citations as checked.
    findings_verified: int | None
    findings_unsupported: int | None
    findings_uncited: int | None
    escalation_evidence_status: str | None
    escalation_evidence: list[CheckedCitation] | None


class McpServerStatus(TypedDict):
    """One MCP server of a session, as the CLI's init line reported it (``connected``, ``failed``, …)."""

    name: str
    status: str


class ChainLink(TypedDict):
    """One session of an escalation chain, as ``tierops run --json`` prints it."""

    id: int
    session_id: str | None
    tier: int | None
    model: str | None
    status: str
    status_reason: str | None
    degraded: bool
    source: str | None
    attempts: int
    escalated_to: int | None
    escalated_to_session_id: str | None
    parent_session_id: int | None
    escalation_needed: bool | None
    escalation_reason: str | None
    escalation_gate: str | None
    attention: str | None
    cost_usd: float | None
    input_tokens: int | None
    output_tokens: int | None
    duration_ms: int | None
    started_at: str
    ended_at: str | None
    dry_run: bool  # read-only tools, told to only say what it would do


class ChainTotals(TypedDict):
    sessions: int
    cost_usd: float
    input_tokens: int
    output_tokens: int
    duration_ms: int


class ActivityRow(TypedDict):
    """One stored stream line. ``raw`` is None on transcript pages for lines above the page limit."""

    session_pk: int
    seq: int
    attempt: int
    ts: str
    type: str
    subtype: str | None
    display: str
    raw: str | None


class TranscriptRow(ActivityRow):
    raw_len: int


class AttemptRow(TypedDict):
    attempt: int
    kind: str
    run: int | None  # the CLI run (activity.attempt) it happened in
    origin: str | None  # tool | cli_rejected | extracted | prompted (NULL: recorded before origins were)
    result_subtype: str | None
    is_error: bool | None
    has_output: bool
    output: Any
    valid: bool | None
    errors: Any
    created_at: str


class EventRow(TypedDict):
    id: int
    session_pk: int | None  # None once the session was pruned: events are kept
    session_id: str | None
    tier: int | None
    level: str
    original_level: str | None
    service: str | None
    message: str
    source: str
    created_at: str
    evidence_status: str | None  # verified | unsupported | uncited; None: not checked (app/engine/evidence_check.py)
    evidence: list[CheckedCitation] | None


class CheckedCitation(TypedDict):
    """A finding's citation as checked against its session's tool calls."""

    quote: str | None
    tool_use_id: str | None  # as the model cited it
    holds: bool
    found_in: str | None  # the tool call the quote was found in
    why: str | None  # why it does not hold


class ReportEvent(TypedDict):
    level: str
    original_level: str | None
    service: str | None
    message: str


class MemoryRow(TypedDict):
    id: int
    service: str | None
    category: str
    value: str
    confidence: float
    active: bool
    times_seen: int
    created_at: str
    updated_at: str
    created_by_session: int | None
    reinforced_by_session: int | None
    # The memory lifecycle (app/store/memories.py): when a session last taught or
    # repeated it (confidence decays from there), whether its decayed confidence fell below the
    # floor (then it is not given to the tiers), and the memory that contradicted and replaced it.
    last_seen_at: str | None
    stale: bool
    replaced_by: int | None


class PromptMemory(TypedDict):
    service: str | None
    category: str
    value: str
    confidence: float


class CheckRow(TypedDict):
    name: str
    status: str
    detail: str | None
    created_at: str
    session_pk: int
    evidence_status: str | None
    evidence: list[CheckedCitation] | None


class IncidentFindingRow(TypedDict):
    """A checked problem finding of a session that worked on an incident (``app/store/evidence.py``)."""

    kind: str  # event | check
    id: int
    session_pk: int
    tier: int | None
    status: str  # an event's level, a check's status
    service: str | None
    message: str | None  # an event's message, a check's detail
    evidence_status: str
    evidence: list[CheckedCitation] | None
    created_at: str


class CooldownRow(TypedDict):
    action: str
    service: str
    outcome: str
    note: str | None
    evidence_status: str | None  # of an action reported in the session's output
    evidence: list[CheckedCitation] | None


class RunningRow(TypedDict):
    id: int
    tier: int | None
    model: str | None
    trigger: str
    started_at: str


class AttentionRow(TypedDict):
    id: int
    tier: int | None
    attention: str
    started_at: str


class StatusCount(TypedDict):
    status: str
    tier: int
    n: int


class SchemaRow(TypedDict):
    """A named output schema in the registry; ``body`` is the schema itself."""

    id: int
    name: str
    description: str | None
    body: Any
    sha256: str
    created_at: str
    used_by: int  # sessions that ran with this schema (by hash)


class IncidentRow(TypedDict):
    """An incident, every column of ``incidents``."""

    id: int
    key: str
    service: str | None
    check_name: str | None
    origin: str
    status: str
    severity: str
    title: str
    evidence: str | None
    opened_at: str
    last_seen_at: str
    occurrences: int
    last_chain_id: int | None
    first_session_pk: int | None
    last_session_pk: int | None
    escalations: int
    escalated_at: str | None
    escalated_occurrences: int | None
    flapping: bool
    acknowledged_at: str | None
    acknowledged_by: str | None
    silenced_until: str | None
    silenced_by: str | None
    resolved_at: str | None
    resolved_by: str | None
    duration_s: float | None
    note: str | None
    name: str | None  # what people call it: the check, the alert's name; None for a model's finding
    alert_source: str | None  # alertmanager | grafana | grafana-legacy | generic (origin alert)
    links: list[dict[str, str]] | None  # [{label, url}] from the alert's sender
    annotations: dict[str, str] | None
    maintenance: str | None  # the maintenance window holding it, while one does
    maintenance_until: str | None
    reopened_from: int | None  # the incident of the same key it reopens (resolved shortly before)
    attention: str | None  # why a human must look (its alert's investigation could not be queued)
    attention_at: str | None
    alerts_truncated: int  # alerts of its latest delivery not listed (sender's max_alerts, TIEROPS_ALERT_MAX_ALERTS)


class TimelineRow(TypedDict):
    """One thing that touched an incident, with the session's tier and the probe result if any."""

    id: int
    at: str
    kind: str
    session_pk: int | None
    tier: int | None
    actor: str | None
    detail: str | None
    check_name: str | None
    check_status: str | None
    latency_ms: float | None


class ProbeResultRow(TypedDict):
    id: int
    session_pk: int
    check_name: str
    service: str | None
    status: str
    latency_ms: float | None
    detail: str | None
    created_at: str


class IncidentCount(TypedDict):
    service: str | None
    severity: str
    status: str
    count: int
