"""Alerts in (issue #13): what Alertmanager, Grafana or a script POSTs, read as :class:`Alert`\\ s.

Why a module of its own: TierOps watched only what its own checks and tiers found; most shops
already have alerting (Prometheus Alertmanager, Grafana) and want a language model to look when
a page fires. Three senders speak three shapes, and everything after the request — incidents,
investigations, the queue — should see one: :class:`Alert` (fingerprint, firing or resolved,
severity, service, title, details, labels, source, generator URL). This module is pure: it reads
a decoded JSON body, or says exactly what is wrong with it (:class:`AlertPayloadError`: every
problem with its JSON path), and renders the texts the incident and the tier-1 prompt carry.

The shape is told by ``version``: ``"4"`` is an Alertmanager webhook, ``"1"`` Grafana's alerting
webhook; without ``version`` (and without ``alerts``) it is the generic ``{title, service?,
severity?, details?, status?, fingerprint?}``. The two senders' payloads are validated strictly
in what TierOps reads (types, statuses, required fields) but may carry fields it does not know:
both add fields between releases, and refusing an upgraded Alertmanager would lose its pages.
The generic shape is TierOps' own and refuses unknown fields.

Severity comes from ``labels.severity`` (or the generic ``severity``): critical, error, page and
high are ``critical``; warning, warn and medium ``warning``; anything else ``info``. The
fingerprint is the sender's, else the first 16 hex digits of the SHA-256 of the sorted labels
(generic: of title and service), so the same alert always names the same incident.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.stream.parser import clean_text

log = logging.getLogger(__name__)

# Limits, read by the models below and by the OpenAPI document (app/web/openapi.py).
ALERTS_MAX = 500  # alerts in one webhook payload (Alertmanager groups can be large)
FINGERPRINT_MAX = 128
FINGERPRINT_PATTERN = r"^[^\x00-\x1f\x7f]*$"  # one line: it becomes the incident key alert:<fingerprint>
TITLE_MAX = 500  # the generic title; longer summaries are cut to this on the incident
SERVICE_MAX = 200
GENERIC_DETAILS_MAX = 20_000  # what a generic body may send
DETAILS_MAX = 4000  # characters of details kept on the incident and in the prompt
LABELS_SHOWN = 50  # label pairs shown in evidence, timeline and prompt
LABEL_TEXT_MAX = 200  # characters of one label name or value shown
SEVERITY_WORDS = ("info", "low", "warning", "warn", "medium", "critical", "error", "high", "page")

Status = Literal["firing", "resolved"]
Source = Literal["alertmanager", "grafana", "generic"]
_CRITICAL = frozenset({"critical", "error", "page", "high"})
_WARNING = frozenset({"warning", "warn", "medium"})


class AlertPayloadError(ValueError):
    """The body is not an alert payload TierOps reads; ``problems`` lists ``{path, message}``."""

    def __init__(self, problems: list[dict[str, str]]) -> None:
        super().__init__("; ".join(f"{p['path']}: {p['message']}" for p in problems))
        self.problems = problems


@dataclass(frozen=True)
class Alert:
    """One alert, whichever sender it came from."""

    fingerprint: str
    status: Status
    severity: str  # info | warning | critical
    service: str | None
    title: str
    details: str | None
    labels: dict[str, str] = field(default_factory=dict)
    source: Source = "generic"
    generator_url: str | None = None
    starts_at: str | None = None

    @property
    def key(self) -> str:
        """The incident key of this alert."""
        return f"alert:{self.fingerprint}"

    @property
    def firing(self) -> bool:
        return self.status == "firing"


# -- the three shapes ---------------------------------------------------------------------------

def _integral(value: Any) -> Any:
    """JSON Schema's integer includes 1.0 (strict mode alone would refuse it)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class _SenderAlert(BaseModel):
    """One alert of an Alertmanager or Grafana webhook: the fields TierOps reads, typed."""

    model_config = ConfigDict(strict=True, extra="ignore")
    status: Status
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: str | None = None
    endsAt: str | None = None
    generatorURL: str | None = None
    fingerprint: str | None = Field(None, max_length=FINGERPRINT_MAX, pattern=FINGERPRINT_PATTERN)


class GrafanaAlert(_SenderAlert):
    silenceURL: str | None = None
    dashboardURL: str | None = None
    panelURL: str | None = None
    values: dict[str, Any] | None = None
    valueString: str | None = None


class _SenderPayload(BaseModel):
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


class AlertmanagerPayload(_SenderPayload):
    """Prometheus Alertmanager's webhook (``version: "4"``)."""

    version: Literal["4"]
    alerts: list[_SenderAlert] = Field(min_length=1, max_length=ALERTS_MAX)


class GrafanaPayload(_SenderPayload):
    """Grafana alerting's webhook contact point (``version: "1"``)."""

    version: Literal["1"]
    alerts: list[GrafanaAlert] = Field(min_length=1, max_length=ALERTS_MAX)
    orgId: int | None = None
    title: str | None = None
    state: str | None = None
    message: str | None = None

    @field_validator("orgId", mode="before")
    @classmethod
    def _whole_org(cls, value: Any) -> Any:
        return _integral(value)


class GenericAlert(BaseModel):
    """TierOps' own small shape, for scripts and senders without a template of their own."""

    model_config = ConfigDict(strict=True, extra="forbid")
    title: str = Field(min_length=1, max_length=TITLE_MAX)
    service: str | None = Field(None, max_length=SERVICE_MAX)
    severity: Literal["info", "low", "warning", "warn", "medium", "critical", "error", "high", "page"] | None = None
    details: str | None = Field(None, max_length=GENERIC_DETAILS_MAX)
    status: Status | None = None
    fingerprint: str | None = Field(None, max_length=FINGERPRINT_MAX, pattern=FINGERPRINT_PATTERN)

    @field_validator("title")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip(" \t\n\r\f\v"):
            raise ValueError("must contain more than whitespace")
        return value


Payload = AlertmanagerPayload | GrafanaPayload | GenericAlert


def _path(loc: tuple[int | str, ...]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)


def parse_payload(data: Any) -> tuple[Source, list[Alert]]:
    """The sender and its alerts, or :class:`AlertPayloadError` listing every problem."""
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
    elif "alerts" in data:
        raise AlertPayloadError([{"path": "$.version", "message": "Field required: a payload with alerts is a "
                                                                   "webhook and says its version (\"4\": Alertmanager, "
                                                                   "\"1\": Grafana)"}])
    else:
        model = GenericAlert
    try:
        payload = model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        problems = [{"path": _path(e["loc"]), "message": e["msg"]} for e in errors]
        if model is GenericAlert and any(e["loc"] == ("title",) and e["type"] == "missing" for e in errors):
            problems.append({"path": "$", "message": "read as a generic alert {title, service?, severity?, details?, "
                                                     "status?, fingerprint?}: it has no version"})
        raise AlertPayloadError(problems) from None
    if isinstance(payload, GenericAlert):
        return "generic", [_generic(payload)]
    if isinstance(payload, GrafanaPayload):
        return "grafana", [_from_sender(a, "grafana", payload.title) for a in payload.alerts]
    return "alertmanager", [_from_sender(a, "alertmanager", None) for a in payload.alerts]


# -- normalising ------------------------------------------------------------------------------

def clean(text: str) -> str:
    """Text that can be stored and put on a command line: no lone surrogate, no NUL byte."""
    return clean_text(text).replace("\x00", "\ufffd")


def severity_of(word: str | None) -> str:
    w = (word or "").strip().lower()
    return "critical" if w in _CRITICAL else "warning" if w in _WARNING else "info"


def _first(*candidates: str | None) -> str | None:
    for c in candidates:
        if c is not None and c.strip():
            return c.strip()
    return None


def _cap(text: str | None, limit: int) -> str | None:
    if text is None:
        return None
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def labels_fingerprint(labels: Mapping[str, str]) -> str:
    return _hash(json.dumps(sorted(labels.items()), ensure_ascii=False, separators=(",", ":")))


def _from_sender(a: _SenderAlert, source: Source, group_title: str | None) -> Alert:
    labels = {clean(k): clean(v) for k, v in a.labels.items()}
    notes = {clean(k): clean(v) for k, v in a.annotations.items()}
    fingerprint = _first(clean(a.fingerprint or "")) or labels_fingerprint(labels)
    title = _first(notes.get("summary"), labels.get("alertname"), clean(group_title or "")) or f"alert {fingerprint}"
    details = _first(notes.get("description"), notes.get("message"))
    if isinstance(a, GrafanaAlert) and (value := _first(clean(a.valueString or ""))):
        details = f"{details}\nValue: {value}" if details else f"Value: {value}"
    return Alert(fingerprint=fingerprint, status=a.status, severity=severity_of(labels.get("severity")),
                 service=_cap(_first(labels.get("service"), labels.get("job"), labels.get("instance"),
                                     labels.get("alertname")), SERVICE_MAX),
                 title=_cap(title, TITLE_MAX) or title, details=_cap(details, DETAILS_MAX), labels=labels,
                 source=source, generator_url=_first(clean(a.generatorURL or "")),
                 starts_at=_first(clean(a.startsAt or "")))


def _generic(g: GenericAlert) -> Alert:
    title = clean(g.title).strip()
    service = _first(clean(g.service or ""))
    fingerprint = _first(clean(g.fingerprint or "")) or _hash(f"{title}\n{service or ''}")
    return Alert(fingerprint=fingerprint, status=g.status or "firing", severity=severity_of(g.severity),
                 service=service, title=title, details=_cap(_first(clean(g.details or "")), DETAILS_MAX),
                 source="generic")


# -- the texts an alert leaves behind ---------------------------------------------------------

def labels_text(labels: Mapping[str, str]) -> str:
    """``a=1, b=2`` sorted, at most :data:`LABELS_SHOWN` pairs, each side cut to :data:`LABEL_TEXT_MAX`."""
    pairs = [f"{_cap(k, LABEL_TEXT_MAX)}={_cap(v, LABEL_TEXT_MAX)}" for k, v in sorted(labels.items())]
    more = f", and {len(pairs) - LABELS_SHOWN} more" if len(pairs) > LABELS_SHOWN else ""
    return ", ".join(pairs[:LABELS_SHOWN]) + more


def evidence_text(alert: Alert) -> str:
    """The incident's latest evidence: the details (or title), then the labels."""
    parts = [alert.details or alert.title]
    if alert.labels:
        parts.append(f"labels: {labels_text(alert.labels)}")
    return "\n".join(parts)


def delivery_text(alert: Alert) -> str:
    """One timeline line per delivery: who sent what."""
    text = f"{alert.source} {alert.status}, {alert.severity}: {alert.title}"
    if alert.labels:
        text += f" [{labels_text(alert.labels)}]"
    if alert.generator_url:
        text += f" {alert.generator_url}"
    return text


def alert_section(alert: Alert, incident_id: int | None = None) -> str:
    """The ``## Alert`` section a tier-1 investigation is given (its operator request)."""
    lines = ["## Alert", "",
             f"An alert from {alert.source} opened an incident. Investigate it: what is wrong, since when, why.", "",
             f"- source: {alert.source}",
             f"- title: {alert.title}",
             f"- severity: {alert.severity}",
             f"- service: {alert.service or '(none given)'}",
             f"- status: {alert.status}" + (f" since {alert.starts_at}" if alert.starts_at else "")]
    if incident_id is not None:
        lines.append(f"- incident: #{incident_id}, key {alert.key} (report findings about it with this key)")
    else:
        lines.append(f"- incident key: {alert.key} (report findings about it with this key)")
    lines.append(f"- labels: {labels_text(alert.labels) if alert.labels else '(none)'}")
    lines.append(f"- generator URL: {alert.generator_url or '(none)'}")
    lines += ["", "### Details", "", alert.details or "(none given)"]
    return "\n".join(lines)
