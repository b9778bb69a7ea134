"""The request bodies of the OpenAPI document, written out as JSON Schema.

Why by hand while the responses are generated: a body's schema says what the handler *accepts*,
which is more than its pydantic model states by itself (surrounding whitespace is stripped after
the length check, so a text must hold a character that is not ASCII whitespace: ``NOT_BLANK``; a
prompt holds no NUL byte; a maintenance window has exactly one end), and schemathesis generates
requests from exactly these schemas. The limits are the models' own (:mod:`app.web.limits`, the
store's constants), and ``tests/web/api/test_routes.py`` and ``tests/web/api/test_incidents.py``
check the properties, required fields and limits against the models.

The alert payloads are the four shapes :mod:`app.engine.alerts` reads; the two senders' objects
may carry fields TierOps does not read (they add fields between releases).
"""

from __future__ import annotations

import logging
from typing import Any

from app.config import MODEL_NAME_MAX, MODEL_NAME_PATTERN, Settings
from app.engine.alert_payloads import FINGERPRINT_PATTERN, LEGACY_STATES
from app.engine.alerts import FINGERPRINT_MAX, SERVICE_MAX, TITLE_MAX
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
)
from app.supervisor.runtime_settings import CHANGEABLE
from app.vocab import MAX_TIER, MIN_TIER
from app.web.limits import (
    MEMORY_CATEGORY_MAX,
    MEMORY_DEFAULT_CONFIDENCE,
    MEMORY_SERVICE_MAX,
    MEMORY_VALUE_MAX,
    OPERATOR_PATTERN,
    OUTPUT_MAX_RETRIES_MAX,
    PROMPT_MAX_CHARS,
    SCHEMA_DESCRIPTION_MAX,
    SCHEMA_NAME_PATTERN,
    UNTIL_MAX,
    UNTIL_PATTERN,
)

log = logging.getLogger(__name__)

NOT_BLANK = r"[^ \t\n\r\f\v]"  # a character the handlers' strip keeps (app.web.common.ASCII_SPACE)


def request_schemas() -> dict[str, Any]:
    """Every request body, by component name."""
    return {
        "RunRequest": {"type": "object", "additionalProperties": False, "properties": {
            "tier": {"type": "integer", "minimum": MIN_TIER, "maximum": MAX_TIER, "default": MIN_TIER},
            # no NUL byte: the prompt goes on a command line (runs.RunRequest says so)
            "prompt": {"type": ["string", "null"], "maxLength": PROMPT_MAX_CHARS, "pattern": r"^[^\x00]*$"},
            # the first session's output contract (inline > named > default)
            "output_schema": {"type": ["object", "null"],
                              "description": "A JSON Schema for this run's output (checked first: 422)"},
            "output_schema_name": {"type": ["string", "null"], "pattern": SCHEMA_NAME_PATTERN},
            "output_mode": {"type": ["string", "null"], "enum": ["native", "prompted", None]},
            "max_retries": {"type": ["integer", "null"], "minimum": 0, "maximum": OUTPUT_MAX_RETRIES_MAX},
            # a dry run: the whole chain read-only
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
        # who acknowledges a session's needs-attention flag
        "AttentionAckRequest": {"type": "object", "additionalProperties": False,
                                "properties": {"by": _incident_action_properties()["by"]}},
        **_alert_schemas(),
        **_maintenance_schemas(),
        "ConfigChange": _config_change(),
    }


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
                         "description": "One alert from a script. severity: any word, read as in docs/alerts.md's "
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



def _maintenance_schemas() -> dict[str, Any]:
    """The bodies of POST /maintenance and POST /maintenance/{id}/end (app/web/api/maintenance.py)."""
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


def _config_change() -> dict[str, Any]:
    """PUT /config (app/web/api/config.py): the settings that change at run time, typed as the Settings
    class types them; a cron expression's syntax is checked by the server (400)."""
    model = {"type": "string", "minLength": 1, "maxLength": MODEL_NAME_MAX, "pattern": MODEL_NAME_PATTERN}
    bounds = Settings.model_fields["interval"].metadata
    low, high = (next(getattr(m, k) for m in bounds if hasattr(m, k)) for k in ("ge", "le"))
    props: dict[str, Any] = {
        "interval": {"type": "integer", "minimum": low, "maximum": high}, "cron": {"type": "string"},
        **{f"tier{n}_model": model for n in (1, 2, 3)},
        "max_tier": {"type": "integer", "minimum": MIN_TIER, "maximum": MAX_TIER}, "dry_run": {"type": "boolean"},
        "notify_min_severity": {"type": "string", "enum": ["info", "warning", "critical"]}}
    if set(props) != set(CHANGEABLE):  # pragma: no cover - a new changeable setting must be described here
        raise AssertionError(f"ConfigChange describes {sorted(props)}, not {sorted(CHANGEABLE)}")
    return {"type": "object", "additionalProperties": False, "properties": {
        "settings": {"type": "object", "additionalProperties": False, "properties": props,
                     "description": "NAME: value; any other setting needs a restart (409)"},
        "revert": {"type": "array", "maxItems": len(Settings.model_fields),
                   "items": {"type": "string", "enum": list(CHANGEABLE)},
                   "description": "settings going back to the environment's, .env's or the default value"}}}
