"""The request bodies alert senders post, as pydantic models: which shape a body is, and every
problem with it.

Why a module of its own: the shapes are the senders' (Alertmanager's webhook, Grafana's alerting
webhook, Grafana's legacy webhook) plus TierOps' own generic one, and the OpenAPI document
(``app/web/api/bodies.py``) describes the same fields. :func:`validate_payload` tells the shape by
``version`` (``"4"`` Alertmanager, ``"1"`` Grafana; without it ``ruleName``/``ruleId``/
``evalMatches`` mean legacy Grafana, anything else the generic shape) and lists every problem with
its JSON path (:class:`AlertPayloadError`). What it deliberately does differently: the senders'
models read strictly what TierOps uses but ignore fields they do not know (senders add fields
between releases; refusing an upgraded Alertmanager would lose its pages), while the generic shape
refuses unknown fields. Size is never a reason to refuse: beyond ``max_alerts`` the alerts are
counted, not validated.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

log = logging.getLogger(__name__)

FINGERPRINT_PATTERN = r"^[^\x00-\x1f\x7f]*$"  # one line: it becomes the incident key alert:<fingerprint>
Status = Literal["firing", "resolved"]
Source = Literal["alertmanager", "grafana", "grafana-legacy", "generic"]
LEGACY_KEYS = ("ruleName", "ruleId", "evalMatches")  # what tells a legacy Grafana webhook (no version)


class AlertPayloadError(ValueError):
    """The body is not an alert payload TierOps reads; ``problems`` lists ``{path, message}``."""

    def __init__(self, problems: list[dict[str, str]]) -> None:
        super().__init__("; ".join(f"{p['path']}: {p['message']}" for p in problems))
        self.problems = problems


def _integral(value: Any) -> Any:
    """JSON Schema's integer includes 1.0 (strict mode alone would refuse it)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class SenderAlert(BaseModel):
    """One alert of an Alertmanager or Grafana webhook: the fields TierOps reads, typed."""

    model_config = ConfigDict(strict=True, extra="ignore")
    status: Status
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: str | None = None
    endsAt: str | None = None
    generatorURL: str | None = None
    fingerprint: str | None = Field(None, pattern=FINGERPRINT_PATTERN)


class GrafanaAlert(SenderAlert):
    silenceURL: str | None = None
    dashboardURL: str | None = None
    panelURL: str | None = None
    values: dict[str, Any] | None = None
    valueString: str | None = None


class SenderPayload(BaseModel):
    """What Alertmanager (version 4) and Grafana (version 1) both send around their alerts."""

    model_config = ConfigDict(strict=True, extra="ignore")
    status: Status
    receiver: str | None = None
    groupKey: str | None = None
    groupLabels: dict[str, str] | None = None
    commonLabels: dict[str, str] | None = None
    commonAnnotations: dict[str, str] | None = None
    externalURL: str | None = None
    truncatedAlerts: int | None = Field(None, ge=0)

    @field_validator("truncatedAlerts", mode="before")
    @classmethod
    def _whole(cls, value: Any) -> Any:
        return _integral(value)


class AlertmanagerPayload(SenderPayload):
    """Prometheus Alertmanager's webhook (``version: "4"``)."""

    version: Literal["4"]
    alerts: list[SenderAlert] = Field(min_length=1)


class GrafanaPayload(SenderPayload):
    """Grafana alerting's webhook contact point (``version: "1"``)."""

    version: Literal["1"]
    alerts: list[GrafanaAlert] = Field(min_length=1)
    orgId: int | None = None
    title: str | None = None
    state: str | None = None
    message: str | None = None

    @field_validator("orgId", mode="before")
    @classmethod
    def _whole_org(cls, value: Any) -> Any:
        return _integral(value)


class _EvalMatch(BaseModel):
    """One series a legacy Grafana rule matched (``value`` is null for no data)."""

    model_config = ConfigDict(strict=True, extra="ignore")
    value: float | None = None
    metric: str | None = None
    tags: dict[str, str] | None = None

    @field_validator("value", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:  # an integer beyond a double: JSON allows it
                return math.inf if value > 0 else -math.inf
        return value


LEGACY_STATES = ("alerting", "no_data", "pending", "ok", "paused")
LEGACY_FIRING = frozenset({"alerting", "no_data", "pending"})


class GrafanaLegacyPayload(BaseModel):
    """Grafana's legacy alerting webhook (Grafana 10 and before, dashboard alerts): one rule per
    body, ``state`` one of :data:`LEGACY_STATES`, optional fields omitted when empty."""

    model_config = ConfigDict(strict=True, extra="ignore")
    ruleName: str
    state: Literal["alerting", "no_data", "pending", "ok", "paused"]
    title: str | None = None
    ruleId: int | None = None
    ruleUrl: str | None = None
    message: str | None = None
    imageUrl: str | None = None
    evalMatches: list[_EvalMatch] | None = None
    tags: dict[str, str] | None = None
    orgId: int | None = None
    dashboardId: int | None = None
    panelId: int | None = None

    @field_validator("ruleId", "orgId", "dashboardId", "panelId", mode="before")
    @classmethod
    def _whole(cls, value: Any) -> Any:
        return _integral(value)


class GenericAlert(BaseModel):
    """TierOps' own small shape, for scripts and senders without a template of their own. Long
    texts are cut, not refused; ``severity`` is any word (``alert_severity.SEVERITY_TABLE``)."""

    model_config = ConfigDict(strict=True, extra="forbid")
    title: str = Field(min_length=1)
    service: str | None = None
    severity: str | None = None
    details: str | None = None
    status: Status | None = None
    fingerprint: str | None = Field(None, pattern=FINGERPRINT_PATTERN)

    @field_validator("title")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip(" \t\n\r\f\v"):
            raise ValueError("must contain more than whitespace")
        return value


Payload = AlertmanagerPayload | GrafanaPayload | GrafanaLegacyPayload | GenericAlert


def _path(loc: tuple[int | str, ...]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)


def validate_payload(data: Any, max_alerts: int) -> tuple[Payload, int]:
    """The body as its sender's model, and how many of its alerts beyond ``max_alerts`` were left
    unread (cut off before validation); or :class:`AlertPayloadError` listing every problem."""
    if not isinstance(data, dict):
        raise AlertPayloadError([{"path": "$", "message": "must be a JSON object (an Alertmanager or Grafana "
                                                          "webhook payload, or {title, ...})"}])
    model: type[Payload]
    if "version" in data:
        version = data["version"]
        if version == "4":
            model = AlertmanagerPayload
        elif version == "1":
            model = GrafanaPayload
        else:
            shown = json.dumps(version)[:40]
            raise AlertPayloadError([{"path": "$.version", "message": f"must be \"4\" (Prometheus Alertmanager) or "
                                                                       f"\"1\" (Grafana alerting), got {shown}"}])
    elif any(k in data for k in LEGACY_KEYS):
        model = GrafanaLegacyPayload
    elif "alerts" in data:
        raise AlertPayloadError([{"path": "$.version", "message": "Field required: a payload with alerts is a "
                                                                   "webhook and says its version (\"4\": Alertmanager, "
                                                                   "\"1\": Grafana)"}])
    else:
        model = GenericAlert
    unread = 0
    listed = data.get("alerts")
    if model in (AlertmanagerPayload, GrafanaPayload) and isinstance(listed, list) and len(listed) > max_alerts:
        unread = len(listed) - max_alerts
        data = {**data, "alerts": listed[:max_alerts]}
    try:
        payload = model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        problems = [{"path": _path(e["loc"]), "message": e["msg"]} for e in errors]
        if model is GenericAlert and any(e["loc"] == ("title",) and e["type"] == "missing" for e in errors):
            problems.append({"path": "$", "message": "read as a generic alert {title, service?, severity?, details?, "
                                                     "status?, fingerprint?}: it has no version"})
        raise AlertPayloadError(problems) from None
    return payload, unread
