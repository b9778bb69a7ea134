"""The operations of the OpenAPI document: every path, its parameters, body and answers.

* Query parameters are the ones the handlers read, with the ranges they check
  (:mod:`app.web.limits` and the handlers' own constants); an empty value means "not given" (the
  default, no filter), as from an HTML form, and is documented so. Unknown query parameters are
  refused (``app/web/api/routes.py``), so this list is also what the server accepts.
* Every error answer is ``{error, detail}`` (:data:`ERROR_SCHEMA`); an operation lists the codes
  it can give. With a token configured every operation may answer 401.
* Every operation carries one tag, its path's first segment (:func:`_tagged`): the ``/api/docs``
  page (``app/web/pages/docs.py``) groups them by it.
"""

from __future__ import annotations

import logging
from typing import Any

from app.store.maintenance import MAX_DAYS
from app.store.run_queue import STATUSES as QUEUE_STATUSES
from app.vocab import MAX_TIER, MIN_TIER, ApprovalStatus, Level, SessionStatus, values
from app.web.api.notifications import NOTIFICATIONS_LIMIT, PREVIEW_LAST
from app.web.api.stats import ROLLUP_BY, ROLLUP_LIMIT, STATS_DAYS
from app.web.common import SQLITE_MAX_INT
from app.web.limits import (
    ACTIVITY_LIMIT,
    API_BODY_MAX_BYTES,
    APPROVALS_LIMIT,
    COOLDOWN_ACTIONS_LIMIT,
    EVENTS_LIMIT,
    INCIDENT_FILTERS,
    INCIDENTS_LIMIT,
    MEMORIES_LIMIT,
    QUEUE_LIMIT,
    SCHEMAS_LIMIT,
    SESSIONS_LIMIT,
)

log = logging.getLogger(__name__)

ERROR_SCHEMA: dict[str, Any] = {"type": "object", "required": ["error", "detail"],
                                "properties": {"error": {"type": "string"}, "detail": {}}}


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



def paths(*, auth: bool) -> dict[str, Any]:
    """Every operation, tagged; ``auth``: a token is configured (401 is then a possible answer)."""
    return _tagged({
        "/sessions": {"get": _op("List sessions, newest first, each with its chain's root id, number of "
                                 "sessions and cost", _ok("Session", array=True), auth=auth, params=[
            _enum_q("status", values(SessionStatus)), _int_q("tier", low=MIN_TIER, high=MAX_TIER),
            _int_q("limit", SESSIONS_LIMIT), _int_q("offset")])},
        "/sessions/{id}": {"get": _op("One session with its output attempts, the actions it proposed and the runbooks "
                                          "it was given", _ok("SessionDetail"), auth=auth, params=[_ID],
                                      errors=("404",))},
        "/sessions/{id}/activity": {"get": _op("Stored stream lines after a sequence number",
                                               _ok("ActivityLine", array=True), auth=auth,
                                               params=[_ID, _int_q("after"), _int_q("limit", ACTIVITY_LIMIT)],
                                               errors=("404", "422"))},
        "/sessions/{id}/result": {"get": _op("result_data or result_text, with validation, source, attempts",
                                             _ok("Result"), auth=auth, params=[_ID], errors=("404",))},
        "/sessions/{id}/stop": {"post": _op("Stop a running session (SIGTERM, then SIGKILL)",
                                            _ok("StopAccepted", "stopping"), status="202", auth=auth,
                                            params=[_ID], errors=("404", "409"))},
        # the overview stops listing it; the session page keeps it, marked
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
        **_runtime_paths(auth),
        "/notifications": {"get": _op(
            "The sender's state, the routes with the URLs each reaches (scheme and host only) and the newest "
            "messages with their fate (sent, failed, suppressed with why, digested)", _ok("Notifications"),
            auth=auth, params=[_int_q("limit", NOTIFICATIONS_LIMIT)])},
        "/notifications/preview": {"get": _op(
            "For the last incidents, which messages the settings in force would send where (or why not), "
            "beside what was recorded; sends nothing", _ok("NotificationPreview"), auth=auth,
            params=[_int_q("last", PREVIEW_LAST)])},
    })


def _stats_paths(auth: bool) -> dict[str, Any]:
    """GET /stats and GET /sessions/rollup (app/web/api/stats.py)."""
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


def _runtime_paths(auth: bool) -> dict[str, Any]:
    """GET and PUT /config (app/web/api/config.py), GET /models and POST /models/refresh
    (app/web/api/models.py): 502/504 carry the last good list, marked stale, when there is one."""
    put = _op("Change settings at run time, all or nothing: {settings: {NAME: value}} and/or {revert: [NAME]} "
              "(back to the environment's, .env's or the default value); each value is checked by the Settings "
              "class (400 invalid_setting naming the setting and the rule; 409 needs_restart for any other setting); "
              "the next cycle uses them, and a changed schedule applies at once", _ok("ConfigUpdated"), auth=auth,
              body="ConfigChange", errors=("409",))
    put["responses"]["400"] = _error("a value breaks its setting's rule, a name is set and reverted at once, or no "
                                     "such setting; detail lists {setting, message}")
    put["responses"]["409"] = _error("the setting needs a restart: set TIEROPS_X in the environment or .env")
    stale = ("; besides {error, detail} it carries the Models fields: the last good list, stale: true, with its "
             "age (an empty list, stale: false, when there is none)")
    models = {"502": _error("the upstream cannot be reached, refused (HTTP 401 with the API's message, ...) or did "
                            "not answer the Models API's list" + stale),
              "504": _error("no answer within TIEROPS_MODELS_TIMEOUT" + stale)}
    get_models = _op("The models the upstream offers (the Anthropic Models API at ANTHROPIC_BASE_URL, with the "
                     "CLI's credential), kept TIEROPS_MODELS_CACHE_TTL s", _ok("Models"), auth=auth, errors=())
    refresh = _op("Ask the upstream for its models now (joins a fetch in flight)", _ok("Models"), auth=auth,
                  errors=())
    get_models["responses"].update(models)
    refresh["responses"].update(models)
    return {
        "/config": {"get": _op("The settings that change at run time: each one's value in force, where it comes "
                               "from (changed at run time by whom and when, else env, file, command line or "
                               "default), what a revert gives, and the newest changes", _ok("Config"), auth=auth,
                               errors=()),
                    "put": put},
        "/models": {"get": get_models},
        "/models/refresh": {"post": refresh},
    }


def _cooldowns_op(auth: bool) -> dict[str, Any]:
    """GET /cooldowns; its 500 is a TIEROPS_COOLDOWNS the server cannot read."""
    op = _op("Cooldown limits, the active windows (kind, service, used, limit, remaining, next_allowed_at) and the "
             "newest recorded actions (taken or dry runs) and, apart, the newest proposed ones with whether the "
             "limits would allow each now", _ok("Cooldowns"), auth=auth,
             params=[_int_q("limit", COOLDOWN_ACTIONS_LIMIT)], errors=("422", "500"))
    op["responses"]["500"] = _error("TIEROPS_COOLDOWNS cannot be read (a configuration problem on the server)")
    return op

