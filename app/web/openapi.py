"""The OpenAPI 3.1 document served at ``/api/v1/openapi.json``, written by hand: small, exact,
and checked against behaviour by ``tests/web/test_schemathesis.py`` (every schemathesis check,
with and without the token) and against the mounted routes by ``tests/web/test_api.py``.

* Enums, tiers, lengths and ranges come from :mod:`app.vocab`, :mod:`app.web.limits` and the
  constants below, the values the handlers check against.
* Response schemas are derived from the ``TypedDict``\\ s the handlers return (the store's rows
  in :mod:`app.store.rows` and the response shapes below), so a field added to a row is
  documented with it. Objects allow additional properties: a client must ignore what it does
  not know.
* Every operation carries one tag, its path's first segment (:data:`TAGS`, issue #14): the
  ``/api/docs`` page (``app/web/docs_pages.py``) groups them by it.
* The document describes the server that serves it: with a token configured every operation
  requires the bearer scheme (and may answer 401); without one there is no security requirement.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from typing import Any, NotRequired, Required, TypedDict, Union, get_args, get_origin, get_type_hints

from app import __version__
from app.engine.alerts import FINGERPRINT_MAX, FINGERPRINT_PATTERN, LEGACY_STATES, SERVICE_MAX, TITLE_MAX
from app.engine.cooldowns import CooldownReport
from app.engine.maintenance import MaintenanceReport
from app.store.alert_incidents import AlertCounts, IncidentAlertRow
from app.store.approvals import ApprovalRow
from app.store.cooldowns import ProposalRow
from app.store.incidents import NOTE_MAX, OPERATOR_MAX, UNTIL_HELP
from app.store.maintenance import (
    DURATION_HELP,
    DURATION_MAX,
    DURATION_PATTERN,
    MAX_DAYS,
    PATTERN_MAX,
    PATTERNS_MAX,
    REASON_MAX,
    TIME_HELP,
    TIME_MAX,
    TIME_PATTERN,
    MaintenanceRow,
)
from app.store.rows import (
    EventRow,
    IncidentRow,
    MemoryRow,
    SchemaRow,
    SessionRow,
    TimelineRow,
)
from app.store.run_queue import STATUSES as QUEUE_STATUSES
from app.store.run_queue import QueuedRunRow
from app.store.sessions import AttentionAck
from app.vocab import MAX_TIER, MIN_TIER, ApprovalStatus, IncidentStatus, Level, SessionStatus, values
from app.web.limits import (
    API_BODY_MAX_BYTES,
    MEMORY_CATEGORY_MAX,
    MEMORY_DEFAULT_CONFIDENCE,
    MEMORY_SERVICE_MAX,
    MEMORY_VALUE_MAX,
    OUTPUT_MAX_RETRIES_MAX,
    PROMPT_MAX_CHARS,
    SCHEMA_DESCRIPTION_MAX,
    SCHEMA_NAME_PATTERN,
)
from app.web.notifications_api import NOTIFICATIONS_LIMIT, PREVIEW_LAST, NotificationsBody, PreviewBody
from app.web.stats_api import ROLLUP_BY, ROLLUP_LIMIT, STATS_DAYS, RollupBody, SessionListItem, StatsBody

SQLITE_MAX_INT = 2**63 - 1
NOT_BLANK = r"[^ \t\n\r\f\v]"  # a character api.py's strip keeps  # ids, offsets and sequence numbers are SQLite integers

# Query parameter ranges: (default, minimum, maximum), read by the handlers in app/web/api.py.
SESSIONS_LIMIT = (50, 1, 500)
ACTIVITY_LIMIT = (500, 1, 5000)
EVENTS_LIMIT = (100, 1, 1000)
MEMORIES_LIMIT = (200, 1, 2000)
SCHEMAS_LIMIT = (200, 1, 500)
INCIDENTS_LIMIT = (100, 1, 1000)
QUEUE_LIMIT = (100, 1, 1000)  # issue #13: GET /queue
COOLDOWN_ACTIONS_LIMIT = (20, 1, 500)  # issue #13: the recent actions GET /cooldowns lists
APPROVALS_LIMIT = (100, 1, 1000)
PROPOSALS_MAX = 500  # proposed actions listed with one session or one incident

# Incidents (issue #12, app/web/incidents_api.py): the status filter ("unresolved": open and
# acknowledged), the operator's name (one line) and the shape of a silence's end, which
# app.store.incidents.parse_until then reads (a duration, or an ISO time with its zone).
INCIDENT_FILTERS = (*values(IncidentStatus), "unresolved")
OPERATOR_PATTERN = r"^[^\x00-\x1f\x7f]*$"
UNTIL_PATTERN = r"^([0-9]{1,9}[mhd]|[0-9]{4}-[0-9]{2}-[0-9]{2}[T ].+)$"
UNTIL_MAX = 64


# --- response shapes the handlers build (beyond the store's rows) --------------------------

class OutputAttempt(TypedDict):
    """An output attempt as listed with its session (``store.attempts.list_attempts``, no output)."""

    attempt: int
    run: int | None
    kind: str
    origin: str | None
    result_subtype: str | None
    is_error: bool | None
    has_output: bool
    valid: bool | None
    errors: list[Any]
    created_at: str


class SessionDetail(SessionRow):
    output_attempts: Sequence[OutputAttempt]
    proposals: Sequence[ProposalRow]  # the actions it proposed, in its order (never taken, never counted)


class ActivityLine(TypedDict):
    """One stored stream line of a session (the session is in the URL)."""

    seq: int
    attempt: int
    ts: str
    type: str
    subtype: str | None
    display: str
    raw: str | None


class Validation(TypedDict):
    valid: bool | None
    errors: list[Any]


class SchemaRef(TypedDict):
    """The contract a session ran under (issue #11): inline | named | default, and its hash."""

    source: str | None
    name: str | None
    sha256: str | None


class ValidationFailure(TypedDict):
    type: str  # output_schema_validation_failed
    validation_errors: list[Any]
    last_output: Any
    attempts: int


class ResultBody(TypedDict):
    """``result_data`` (the accepted structured output) or ``result_text`` (only without a schema),
    never both; ``failure`` when the last attempt still failed validation."""

    session_id: str | None
    status: str
    source: str | None
    attempts: int
    degraded: bool
    schema: SchemaRef
    validation: Validation
    output_attempts: Sequence[OutputAttempt]
    result_data: NotRequired[Any]
    result_text: NotRequired[str | None]
    failure: NotRequired[ValidationFailure]


class IncidentDetail(IncidentRow):
    """An incident with its timeline (the latest 500 entries, oldest first) and the actions the
    tiers proposed for it (newest first, each with the proposing session and tier). An alert
    incident lists its alerts (a group's several: firing first, the worst first; at most 1000,
    ``alert_counts`` counts them all), each with its labels, annotations and http(s) links; the
    incident's own ``links`` (runbooks first) and ``annotations`` come from them. Every text of an
    alert is the sender's."""

    timeline: Sequence[TimelineRow]
    proposals: Sequence[ProposalRow]
    alerts: Sequence[IncidentAlertRow]
    alert_counts: AlertCounts


class ApprovalStarted(TypedDict):
    """An approval just approved and the session of the tier it started (issue #13)."""

    approval: ApprovalRow
    session_id: int


class RunStarted(TypedDict):
    id: int
    tier: int
    status: str


class StopAccepted(TypedDict):
    id: int
    stopping: bool


class AlertRun(TypedDict):
    """Issue #13: the investigation of one alert: the session started, the queued run (``coalesced``:
    joined, queued for another incident of its service), or why none (``attention``: the incident
    now needs a human, e.g. the run queue was full)."""

    session_id: int | None
    queued_id: int | None
    coalesced: bool
    why_not: str | None
    attention: bool


class AlertResult(TypedDict):
    fingerprint: str
    severity: str  # critical | warning | info, as read (TIEROPS_ALERT_DEFAULT_SEVERITY for unknown words)
    incident_id: int | None
    change: str  # opened | updated | resolved | ignored
    run: AlertRun


class AlertsAccepted(TypedDict):
    alerts: list[AlertResult]


_PRIMITIVES: dict[Any, str] = {int: "integer", float: "number", str: "string", bool: "boolean",
                               type(None): "null"}


def json_schema(tp: Any) -> dict[str, Any]:
    """The JSON Schema of a type annotation: primitives, ``X | None``, ``list[X]``, ``dict``,
    ``Any`` and ``TypedDict``\\ s (all keys but ``NotRequired`` ones required)."""
    if tp is Any:
        return {}
    if tp in _PRIMITIVES:
        return {"type": _PRIMITIVES[tp]}
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        parts = [json_schema(a) for a in get_args(tp)]
        if all(set(p) == {"type"} for p in parts):
            return {"type": [p["type"] for p in parts]}
        return {"anyOf": parts}
    if origin in (list, Sequence):
        (item,) = get_args(tp) or (Any,)
        return {"type": "array", "items": json_schema(item)}
    if origin is dict or tp is dict:
        return {"type": "object"}
    if typing.is_typeddict(tp):
        # Read Required/NotRequired from the hints: with postponed annotations (PEP 563) Python 3.11
        # counts every key in __required_keys__.
        properties, required = {}, []
        for name, hint in get_type_hints(tp, include_extras=True).items():
            marker = get_origin(hint)
            if marker in (Required, NotRequired):
                (hint,) = get_args(hint)
            if marker is Required or (marker is not NotRequired and tp.__total__):
                required.append(name)
            properties[name] = json_schema(hint)
        return {"type": "object", "required": sorted(required), "properties": properties}
    raise TypeError(f"no JSON Schema for {tp!r}")


# --- the document -------------------------------------------------------------------------

def _error(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


ERRORS = {
    "401": _error("no or a wrong bearer token (only when a token is configured)"),
    "403": _error("refused: a Host other than a loopback name without a token, or a cross-site write"),
    "404": _error("no such id"),
    "409": _error("conflict with the current state"),
    "413": _error(f"request body larger than {API_BODY_MAX_BYTES} bytes"),
    "415": _error("request body is not application/json"),
    "422": _error("a parameter or the body is invalid; detail says which and why"),
    "500": _error("the cycle could not start (a configuration problem on the server)"),
    "503": _error("the cycle did not create its session in time, or storage is unavailable (the disk full, an I/O "
                  "error, a lock: `storage_unavailable`, with Retry-After)"),
}


def _ok(schema: str | None, description: str = "ok", array: bool = False) -> dict[str, Any]:
    if schema is None:
        return {"description": description}
    ref: dict[str, Any] = {"$ref": f"#/components/schemas/{schema}"}
    return {"description": description,
            "content": {"application/json": {"schema": {"type": "array", "items": ref} if array else ref}}}


def _op(summary: str, ok: dict[str, Any], *, status: str = "200", params: list[Any] | None = None,
        body: str | None = None, body_required: bool = True, errors: tuple[str, ...] = ("422",),
        auth: bool) -> dict[str, Any]:
    codes = ("401", "403", *errors) if auth else ("403", *errors)
    if body:
        codes = (*codes, "413", "415", "422")
    op: dict[str, Any] = {"summary": summary,
                          "responses": {status: ok, **{code: ERRORS[code] for code in sorted(set(codes))}}}
    if params:
        op["parameters"] = params
    if body:
        op["requestBody"] = {"required": body_required, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{body}"}}}}
    return op


# Empty query values mean "not given" (the default, no filter), as from an HTML form: documented.
_EMPTY: dict[str, Any] = {"type": "string", "maxLength": 0}


def _q(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


def _int_q(name: str, bounds: tuple[int, int, int] | None = None, *, low: int = 0,
           high: int = SQLITE_MAX_INT) -> dict[str, Any]:
    """An integer query parameter (or empty): ``bounds`` is (default, minimum, maximum)."""
    if bounds is None:
        return _q(name, {"anyOf": [{"type": "integer", "minimum": low, "maximum": high}, _EMPTY]})
    default, low, high = bounds
    return _q(name, {"anyOf": [{"type": "integer", "minimum": low, "maximum": high}, _EMPTY], "default": default})


def _enum_q(name: str, choices: tuple[str, ...]) -> dict[str, Any]:
    return _q(name, {"type": "string", "enum": [*choices, ""]})


def _text_q(name: str) -> dict[str, Any]:
    return _q(name, {"type": "string"})


_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
_ID = {"name": "id", "in": "path", "required": True,
       "schema": {"type": "integer", "minimum": 0, "maximum": SQLITE_MAX_INT}}


def _memory_properties(*, defaults: bool) -> dict[str, Any]:
    """MemoryCreate's and MemoryPatch's fields (the same limits; only creation has defaults)."""
    confidence: dict[str, Any] = {"type": "number", "minimum": 0, "maximum": 1}
    active: dict[str, Any] = {"type": "boolean"}
    if defaults:
        confidence["default"] = MEMORY_DEFAULT_CONFIDENCE
        active["default"] = True
    # surrounding ASCII whitespace is dropped after the length check, so something else must be there
    # (an explicit class: engines disagree on what \s means beyond ASCII)
    return {"category": {"type": "string", "minLength": 1, "maxLength": MEMORY_CATEGORY_MAX, "pattern": NOT_BLANK},
            "value": {"type": "string", "minLength": 1, "maxLength": MEMORY_VALUE_MAX, "pattern": NOT_BLANK},
            "service": {"type": ["string", "null"], "maxLength": MEMORY_SERVICE_MAX},
            "confidence": confidence, "active": active}


def _incident_action_properties() -> dict[str, Any]:
    """IncidentAction's fields (IncidentSilence adds ``until``)."""
    return {"note": {"type": ["string", "null"], "maxLength": NOTE_MAX},
            "by": {"type": ["string", "null"], "maxLength": OPERATOR_MAX, "pattern": OPERATOR_PATTERN,
                   "description": "Who acts (recorded with how the request was authenticated)"}}


RESPONSE_SCHEMAS: dict[str, Any] = {
    "Session": SessionListItem, "SessionDetail": SessionDetail, "ActivityLine": ActivityLine,
    "Result": ResultBody, "RunStarted": RunStarted, "StopAccepted": StopAccepted, "Event": EventRow,
    "Memory": MemoryRow, "Schema": SchemaRow, "Incident": IncidentRow, "IncidentDetail": IncidentDetail,
    "Approval": ApprovalRow, "ApprovalStarted": ApprovalStarted,
    "Cooldowns": CooldownReport,
    "AlertsAccepted": AlertsAccepted, "QueuedRun": QueuedRunRow,
    "Stats": StatsBody, "Rollup": RollupBody,  # issue #14
    "AttentionAck": AttentionAck,  # issue #14
    "Maintenance": MaintenanceReport, "MaintenanceWindow": MaintenanceRow,
    "Notifications": NotificationsBody, "NotificationPreview": PreviewBody,
}

# Issue #14: operations grouped by tag (the /api/docs page), by the path's first segment.
TAGS = {"sessions": "Sessions, their transcripts, results and roll-ups",
        "runs": "Starting cycles", "events": "Events the tiers reported",
        "memories": "What the tiers learned", "schemas": "Named output schemas",
        "incidents": "Incidents and operator actions", "approvals": "Escalations waiting for an operator",
        "cooldowns": "Limits on actions", "alerts": "Alerts in", "queue": "Runs waiting for a cycle",
        "stats": "Statistics for widgets", "maintenance": "Maintenance windows",
        "notifications": "What people are told: messages, routes, a preview",
        "openapi.json": "This document"}


def _stats_paths(auth: bool) -> dict[str, Any]:
    """Issue #14: GET /stats and GET /sessions/rollup (app/web/stats_api.py)."""
    days = _int_q("days", STATS_DAYS) | {"description": "The window: today and the days before it (UTC days)"}
    return {
        "/stats": {"get": _op("Sessions by status, success rate, escalations, cost (total, today, per tier, per "
                              "day) and open incidents over the last N days, for Homepage or Grafana widgets",
                              _ok("Stats"), auth=auth, params=[days])},
        "/sessions/rollup": {"get": _op(
            "Cost roll-up of the last N days per UTC day (every day, oldest first) or per escalation chain "
            "(by the chain's first session, newest first; limit and offset page the chains)", _ok("Rollup"),
            auth=auth, params=[_enum_q("by", ROLLUP_BY), days, _int_q("limit", ROLLUP_LIMIT), _int_q("offset")])},
    }


def _tagged(paths: dict[str, Any]) -> dict[str, Any]:
    for path, ops in paths.items():
        tag = path.strip("/").split("/")[0]
        for op in ops.values():
            op.setdefault("tags", [tag])
    return paths



# --- alerts in (issue #13): the three shapes app/engine/alerts.py reads -----------------------

def _alert_schemas() -> dict[str, Any]:
    """Alertmanager (version "4"), Grafana (version "1") and the generic shape. The two senders'
    objects may carry fields TierOps does not read (they add fields between releases)."""
    text: dict[str, Any] = {"type": ["string", "null"]}
    labels: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
    status: dict[str, Any] = {"type": "string", "enum": ["firing", "resolved"]}
    fingerprint: dict[str, Any] = {"type": ["string", "null"], "pattern": FINGERPRINT_PATTERN,
                                   "description": f"longer than {FINGERPRINT_MAX} characters: hashed"}
    alert = {"status": status, "labels": labels, "annotations": labels, "startsAt": text, "endsAt": text,
             "generatorURL": text, "fingerprint": fingerprint}
    group = {"status": status, "receiver": text, "groupKey": text, "externalURL": text,
             **{name: {**labels, "type": ["object", "null"]} for name in ("groupLabels", "commonLabels",
                                                                          "commonAnnotations")},
             "truncatedAlerts": {"type": ["integer", "null"], "minimum": 0}}

    def alerts(item: str) -> dict[str, Any]:
        return {"type": "array", "minItems": 1, "items": {"$ref": f"#/components/schemas/{item}"},
                "description": "no limit: beyond TIEROPS_ALERT_MAX_ALERTS the rest is counted, not read"}

    integer: dict[str, Any] = {"type": ["integer", "null"]}
    words: dict[str, Any] = {"type": ["object", "null"], "additionalProperties": {"type": "string"}}

    return {
        "AlertmanagerAlert": {"type": "object", "required": ["status", "labels"], "properties": alert},
        "GrafanaAlert": {"type": "object", "required": ["status", "labels"], "properties": {
            **alert, "silenceURL": text, "dashboardURL": text, "panelURL": text,
            "values": {"type": ["object", "null"]}, "valueString": text}},
        "AlertmanagerPayload": {"type": "object", "required": ["version", "status", "alerts"],
                                "description": "Prometheus Alertmanager's webhook",
                                "properties": {**group, "version": {"type": "string", "enum": ["4"]},
                                               "alerts": alerts("AlertmanagerAlert")}},
        "GrafanaPayload": {"type": "object", "required": ["version", "status", "alerts"],
                           "description": "Grafana alerting's webhook contact point",
                           "properties": {**group, "version": {"type": "string", "enum": ["1"]},
                                          "alerts": alerts("GrafanaAlert"), "orgId": {"type": ["integer", "null"]},
                                          "title": text, "state": text, "message": text}},
        "GrafanaLegacyEvalMatch": {"type": "object", "properties": {
            "value": {"type": ["number", "null"]}, "metric": text, "tags": words}},
        "GrafanaLegacyPayload": {"type": "object", "required": ["ruleName", "state"],
                                 "description": "Grafana's legacy alerting webhook (Grafana 10 and before): one rule; "
                                                "alerting, no_data and pending fire, ok and paused resolve",
                                 "properties": {
                                     "version": {"not": {}, "description": "never present: a body with a "
                                                                           "version is read as Alertmanager or Grafana"},
                                     "ruleName": {"type": "string"},
                                     "state": {"type": "string", "enum": list(LEGACY_STATES)},
                                     "title": text, "ruleId": integer, "ruleUrl": text, "message": text,
                                     "imageUrl": text, "tags": words, "orgId": integer, "dashboardId": integer,
                                     "panelId": integer, "evalMatches": {
                                         "type": ["array", "null"],
                                         "items": {"$ref": "#/components/schemas/GrafanaLegacyEvalMatch"}}}},
        "GenericAlert": {"type": "object", "additionalProperties": False, "required": ["title"],
                         "description": "One alert from a script. severity: any word, read as in the README's "
                                        "severity table (unknown or none: TIEROPS_ALERT_DEFAULT_SEVERITY); texts "
                                        f"longer than kept are cut (title {TITLE_MAX}, service {SERVICE_MAX} "
                                        "characters), never refused",
                         "properties": {
                             "title": {"type": "string", "minLength": 1, "pattern": NOT_BLANK},
                             "service": text,
                             "severity": text,
                             "details": text,
                             "status": {"type": ["string", "null"], "enum": ["firing", "resolved", None]},
                             "fingerprint": fingerprint}},
        "AlertPayload": {"oneOf": [{"$ref": "#/components/schemas/AlertmanagerPayload"},
                                   {"$ref": "#/components/schemas/GrafanaPayload"},
                                   {"$ref": "#/components/schemas/GrafanaLegacyPayload"},
                                   {"$ref": "#/components/schemas/GenericAlert"}]},
    }


def _alerts_op(auth: bool) -> dict[str, Any]:
    """POST and PUT /alerts: the API token, or TIEROPS_WEBHOOK_TOKEN (bearer, ?token=, or either
    token as the HTTP Basic password); every alert is recorded whatever the run queue holds."""
    op = _op("Receive alerts (Alertmanager, Grafana or legacy Grafana webhook, or {title, ...}): open, update or "
             "resolve their incidents (one per notification group with TIEROPS_ALERT_GROUPING=group, the default; "
             "one per alert otherwise); an opened one starts tier 1 once (queued while a cycle runs, coalesced with a "
             "queued run of its service; when the queue is full the incident needs attention). Also as HTTP Basic: "
             "any user, the API token or TIEROPS_WEBHOOK_TOKEN as the password",
             _ok("AlertsAccepted", "accepted"), status="202", auth=auth, body="AlertPayload",
             params=[_q("token", {"type": "string"}) | {
                 "description": "TIEROPS_WEBHOOK_TOKEN, for senders that cannot set an Authorization header"}],
             errors=("422",))
    op["responses"]["413"] = _error("request body larger than TIEROPS_ALERT_BODY_MAX_BYTES (32 MiB by default)")
    return op


def _maintenance_schemas() -> dict[str, Any]:
    """The bodies of POST /maintenance and POST /maintenance/{id}/end (app/web/maintenance_api.py)."""
    time = {"type": "string", "minLength": 1, "maxLength": TIME_MAX, "pattern": TIME_PATTERN}
    patterns = {"type": "array", "minItems": 1, "maxItems": PATTERNS_MAX,
                "items": {"type": "string", "minLength": 1, "maxLength": PATTERN_MAX, "pattern": NOT_BLANK}}
    by = _incident_action_properties()["by"]
    return {
        "MaintenanceCreate": {
            "type": "object", "additionalProperties": False, "required": ["reason"],
            "oneOf": [{"required": ["duration"]}, {"required": ["ends_at"]}],
            "properties": {
                "duration": {"type": "string", "minLength": 1, "maxLength": DURATION_MAX, "pattern": DURATION_PATTERN,
                             "description": f"How long, from starts_at: {DURATION_HELP}; at most {MAX_DAYS} days"},
                "ends_at": time | {"description": f"When it ends (instead of duration): {TIME_HELP}; in the future"},
                "starts_at": time | {"description": f"When it starts (default now; at most {MAX_DAYS} days ahead)"},
                "services": patterns | {"description": "Service patterns (* and ?); left out: every service"},
                "checks": patterns | {"description": "Check patterns (* and ?); left out: every check"},
                "reason": {"type": "string", "minLength": 1, "maxLength": REASON_MAX, "pattern": NOT_BLANK},
                "by": by}},
        "MaintenanceEnd": {"type": "object", "additionalProperties": False, "properties": {"by": by}},
    }


def _maintenance_paths(auth: bool) -> dict[str, Any]:
    """GET and POST /maintenance, POST /maintenance/{id}/end; GET's 500 is a TIEROPS_MAINTENANCE the
    server cannot read."""
    get = _op("Every maintenance window: configured ones (TIEROPS_MAINTENANCE, the checks file) with their current "
              "or next occurrence, ad-hoc ones active or upcoming (active first), the ad-hoc ones that ended lately, "
              "and why configured ones may be missing", _ok("Maintenance"), auth=auth, errors=("500",))
    get["responses"]["500"] = _error("TIEROPS_MAINTENANCE cannot be read (a configuration problem on the server)")
    return {
        "/maintenance": {
            "get": get,
            "post": _op("Add an ad-hoc maintenance window: incidents inside it are recorded, nothing escalates and "
                        "no message is sent (422 with the field's path: an end in the past, longer than "
                        f"{MAX_DAYS} days)", _ok("MaintenanceWindow", "created"), status="201", auth=auth,
                        body="MaintenanceCreate")},
        "/maintenance/{id}/end": {"post": _op(
            "End an ad-hoc window now (an upcoming one never starts; 409 when it is already over or ended)",
            _ok("MaintenanceWindow"), auth=auth, params=[_ID], body="MaintenanceEnd", body_required=False,
            errors=("404", "409"))},
    }


def _cooldowns_op(auth: bool) -> dict[str, Any]:
    """GET /cooldowns (issue #13); its 500 is a TIEROPS_COOLDOWNS the server cannot read."""
    op = _op("Cooldown limits, the active windows (kind, service, used, limit, remaining, next_allowed_at) and the "
             "newest recorded actions (taken or dry runs) and, apart, the newest proposed ones with whether the "
             "limits would allow each now", _ok("Cooldowns"), auth=auth,
             params=[_int_q("limit", COOLDOWN_ACTIONS_LIMIT)], errors=("422", "500"))
    op["responses"]["500"] = _error("TIEROPS_COOLDOWNS cannot be read (a configuration problem on the server)")
    return op


def document(*, token_required: bool) -> dict[str, Any]:
    """The document for a server with (``token_required``) or without a token configured."""
    auth = token_required
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "TierOps API", "version": __version__,
                 "description": "Sessions, events, memories, incidents, approvals, runs and statistics of TierOps. With TIEROPS_TOKEN set, send "
                                "'Authorization: Bearer <token>'. Errors are {error, detail}. Request bodies are "
                                f"JSON of at most {API_BODY_MAX_BYTES} bytes (413 beyond)."},
        "servers": [{"url": "/api/v1"}],
        "components": {
            "schemas": {
                "Error": {"type": "object", "required": ["error", "detail"],
                          "properties": {"error": {"type": "string"}, "detail": {}}},
                "RunRequest": {"type": "object", "additionalProperties": False, "properties": {
                    "tier": {"type": "integer", "minimum": MIN_TIER, "maximum": MAX_TIER, "default": MIN_TIER},
                    # no NUL byte: the prompt goes on a command line (api.RunRequest says so)
                    "prompt": {"type": ["string", "null"], "maxLength": PROMPT_MAX_CHARS, "pattern": r"^[^\x00]*$"},
                    # issue #11: the first session's output contract (inline > named > default)
                    "output_schema": {"type": ["object", "null"],
                                      "description": "A JSON Schema for this run's output (checked first: 422)"},
                    "output_schema_name": {"type": ["string", "null"], "pattern": SCHEMA_NAME_PATTERN},
                    "output_mode": {"type": ["string", "null"], "enum": ["native", "prompted", None]},
                    "max_retries": {"type": ["integer", "null"], "minimum": 0, "maximum": OUTPUT_MAX_RETRIES_MAX},
                    # issue #13
                    "dry_run": {"type": "boolean", "default": False,
                                "description": "Every tier of the chain runs with read-only tools and only reports "
                                               "what it would do (always with TIEROPS_DRY_RUN)"}}},
                "SchemaCreate": {"type": "object", "additionalProperties": False, "required": ["name", "schema"],
                                 "properties": {
                                     "name": {"type": "string", "pattern": SCHEMA_NAME_PATTERN},
                                     "description": {"type": ["string", "null"], "maxLength": SCHEMA_DESCRIPTION_MAX},
                                     "schema": {"type": "object"}}},
                "MemoryCreate": {"type": "object", "additionalProperties": False, "required": ["category", "value"],
                                 "properties": _memory_properties(defaults=True)},
                "MemoryPatch": {"type": "object", "additionalProperties": False,
                                "properties": _memory_properties(defaults=False)},
                "IncidentAction": {"type": "object", "additionalProperties": False,
                                   "properties": _incident_action_properties()},
                "IncidentSilence": {"type": "object", "additionalProperties": False, "required": ["until"],
                                    "properties": {**_incident_action_properties(), "until": {
                                        "type": "string", "minLength": 1, "maxLength": UNTIL_MAX,
                                        "pattern": UNTIL_PATTERN, "description": f"{UNTIL_HELP}; at most 90 days"}}},
                "ApprovalAction": {"type": "object", "additionalProperties": False,
                                   "properties": _incident_action_properties()},
                # issue #14: who acknowledges a session's needs-attention flag
                "AttentionAckRequest": {"type": "object", "additionalProperties": False,
                                        "properties": {"by": _incident_action_properties()["by"]}},
                **_alert_schemas(),
                **_maintenance_schemas(),
                **{name: json_schema(tp) for name, tp in RESPONSE_SCHEMAS.items()},
            },
        },
        "tags": [{"name": name, "description": text} for name, text in TAGS.items()],
        "paths": _tagged({
            "/sessions": {"get": _op("List sessions, newest first, each with its chain's root id, number of "
                                     "sessions and cost", _ok("Session", array=True), auth=auth, params=[
                _enum_q("status", values(SessionStatus)), _int_q("tier", low=MIN_TIER, high=MAX_TIER),
                _int_q("limit", SESSIONS_LIMIT), _int_q("offset")])},
            "/sessions/{id}": {"get": _op("One session with its output attempts and the actions it proposed", _ok("SessionDetail"), auth=auth,
                                          params=[_ID], errors=("404",))},
            "/sessions/{id}/activity": {"get": _op("Stored stream lines after a sequence number",
                                                   _ok("ActivityLine", array=True), auth=auth,
                                                   params=[_ID, _int_q("after"), _int_q("limit", ACTIVITY_LIMIT)],
                                                   errors=("404", "422"))},
            "/sessions/{id}/result": {"get": _op("result_data or result_text, with validation, source, attempts",
                                                 _ok("Result"), auth=auth, params=[_ID], errors=("404",))},
            "/sessions/{id}/stop": {"post": _op("Stop a running session (SIGTERM, then SIGKILL)",
                                                _ok("StopAccepted", "stopping"), status="202", auth=auth,
                                                params=[_ID], errors=("404", "409"))},
            # issue #14: the overview stops listing it; the session page keeps it, marked
            "/sessions/{id}/attention/ack": {"post": _op(
                "Acknowledge a session's needs-attention flag (again: the first acknowledgement stays; "
                "409 when it needs no attention)", _ok("AttentionAck"), auth=auth, params=[_ID],
                body="AttentionAckRequest", body_required=False, errors=("404", "409"))},
            "/runs": {"post": _op("Start a chain now; answers at once with the first session id (no body: tier 1; "
                                  "409 while a cycle runs or once TIEROPS_DAILY_BUDGET_USD is spent)",
                                  {**_ok("RunStarted", "started"), "headers": {"Location": {
                                      "description": "the new session", "schema": {"type": "string"}}}},
                                  status="202", auth=auth, body="RunRequest", body_required=False,
                                  errors=("409", "500", "503"))},
            "/events": {"get": _op("List events, newest first", _ok("Event", array=True), auth=auth, params=[
                _enum_q("level", values(Level)), _text_q("service"), _int_q("session"),
                _int_q("limit", EVENTS_LIMIT), _int_q("offset")])},
            "/memories": {
                "get": _op("List memories", _ok("Memory", array=True), auth=auth, params=[
                    _text_q("service"), _text_q("category"),
                    _q("active", {"anyOf": [{"type": "boolean"}, {"type": "string", "enum": ["1", "0", ""]}]}),
                    _int_q("limit", MEMORIES_LIMIT), _int_q("offset")]),
                "post": _op("Create a memory", _ok("Memory", "created"), status="201", auth=auth,
                            body="MemoryCreate", errors=("409",))},
            "/memories/{id}": {
                "patch": _op("Edit a memory", _ok("Memory"), auth=auth, params=[_ID], body="MemoryPatch",
                             errors=("404", "409")),
                "delete": _op("Delete a memory", _ok(None, "deleted"), status="204", auth=auth, params=[_ID],
                              errors=("404",))},
            "/schemas": {
                "get": _op("List the named output schemas", _ok("Schema", array=True), auth=auth, params=[
                    _int_q("limit", SCHEMAS_LIMIT), _int_q("offset")]),
                "post": _op("Store a named output schema (immutable; checked first)", _ok("Schema", "created"),
                            status="201", auth=auth, body="SchemaCreate", errors=("409", "422"))},
            "/schemas/{name}": {
                "get": _op("One named output schema", _ok("Schema"), auth=auth, params=[_NAME], errors=("404",)),
                "delete": _op("Forget a name (sessions keep the schema they ran with)", _ok(None, "deleted"),
                              status="204", auth=auth, params=[_NAME], errors=("404",))},
            "/incidents": {"get": _op("List incidents, latest activity first", _ok("Incident", array=True),
                                      auth=auth, params=[_enum_q("status", INCIDENT_FILTERS), _text_q("service"),
                                                         _int_q("limit", INCIDENTS_LIMIT), _int_q("offset")])},
            "/incidents/{id}": {"get": _op("One incident with its timeline and the actions proposed for it", _ok("IncidentDetail"), auth=auth,
                                           params=[_ID], errors=("404",))},
            "/incidents/{id}/ack": {"post": _op("Acknowledge an open incident (it stops re-escalating)",
                                                _ok("Incident"), auth=auth, params=[_ID], body="IncidentAction",
                                                body_required=False, errors=("404", "409"))},
            "/incidents/{id}/resolve": {"post": _op("Resolve an incident by hand", _ok("Incident"), auth=auth,
                                                    params=[_ID], body="IncidentAction", body_required=False,
                                                    errors=("404", "409"))},
            "/incidents/{id}/silence": {"post": _op("No escalation for this incident's key until a time",
                                                    _ok("Incident"), auth=auth, params=[_ID], body="IncidentSilence",
                                                    errors=("404", "409"))},
            "/approvals": {"get": _op("List approvals (pending: oldest first; otherwise newest first)",
                                      _ok("Approval", array=True), auth=auth,
                                      params=[_enum_q("status", values(ApprovalStatus)),
                                              _int_q("limit", APPROVALS_LIMIT), _int_q("offset")])},
            "/approvals/{id}": {"get": _op("One approval with its handoff", _ok("Approval"), auth=auth, params=[_ID],
                                           errors=("404",))},
            "/approvals/{id}/approve": {"post": _op(
                "Approve a pending escalation: the rest of its chain starts at once from the approved tier "
                "(409 while a cycle runs: the approval stays pending)",
                {**_ok("ApprovalStarted", "approved and started"), "headers": {"Location": {
                    "description": "the new session", "schema": {"type": "string"}}}},
                status="202", auth=auth, params=[_ID], body="ApprovalAction", body_required=False,
                errors=("404", "409", "500", "503"))},
            "/approvals/{id}/reject": {"post": _op("Reject a pending escalation (its session then needs attention)",
                                                   _ok("Approval"), auth=auth, params=[_ID], body="ApprovalAction",
                                                   body_required=False, errors=("404", "409"))},
            "/cooldowns": {"get": _cooldowns_op(auth)},
            "/alerts": {"post": _alerts_op(auth), "put": _alerts_op(auth)},
            "/queue": {"get": _op("Runs waiting for a free cycle and started ones (no status: queued and started), "
                                  "newest first", _ok("QueuedRun", array=True), auth=auth,
                                  params=[_enum_q("status", QUEUE_STATUSES), _int_q("limit", QUEUE_LIMIT),
                                          _int_q("offset")])},
            "/openapi.json": {"get": {"summary": "This document", "security": [],
                                      "responses": {"200": {"description": "ok", "content": {
                                          "application/json": {"schema": {"type": "object"}}}},
                                                    "403": ERRORS["403"]}}},
            **_stats_paths(auth),
            **_maintenance_paths(auth),
            "/notifications": {"get": _op(
                "The sender's state, the routes with the URLs each reaches (scheme and host only) and the newest "
                "messages with their fate (sent, failed, suppressed with why, digested)", _ok("Notifications"),
                auth=auth, params=[_int_q("limit", NOTIFICATIONS_LIMIT)])},
            "/notifications/preview": {"get": _op(
                "For the last incidents, which messages the settings in force would send where (or why not), "
                "beside what was recorded; sends nothing", _ok("NotificationPreview"), auth=auth,
                params=[_int_q("last", PREVIEW_LAST)])},
        }),
    }
    if auth:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc
