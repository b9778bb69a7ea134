"""Alerts in: what Alertmanager, Grafana or a script sends, read as :class:`Alert`\\ s.

Why a module of its own: most shops already have alerting and want a language model to look when
a page fires; everything after the request (incidents, investigations, the queue) should see one
shape whichever sender spoke. :func:`parse_payload` takes a decoded JSON body (validated by
:mod:`app.engine.alert_payloads`) and returns the sender and its alerts. It is pure, and
deliberately: it never refuses for size (long texts are cut saying so, an over-long fingerprint is
hashed) and it redacts every text the sender wrote before the text is cut, hashed or kept, so no
cut can split a secret out of its pattern. The same alert always names the same incident: its
fingerprint is the sender's, else a hash of its sorted labels (generic: of title and service;
legacy Grafana: of its org and rule id). Links are kept only when they are http(s). Severity words:
:mod:`app.engine.alert_severity`; groups: :mod:`app.engine.alert_batches`; the texts and the
tier-1 prompt: :mod:`app.engine.alert_texts`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from app.engine.alert_payloads import (
    LEGACY_FIRING,
    GenericAlert,
    GrafanaAlert,
    GrafanaLegacyPayload,
    GrafanaPayload,
    SenderAlert,
    SenderPayload,
    Source,
    Status,
    validate_payload,
)
from app.engine.alert_severity import DEFAULT_SEVERITY, SEVERITY_RANK, severity_of
from app.stream.values import clean_text

log = logging.getLogger(__name__)

# Limits, read by this module and by the OpenAPI document (app/web/api/bodies.py). None refuses a
# payload: each says where a longer text is cut.
ALERTS_READ_MAX = 10_000  # alerts read from one payload by default (TIEROPS_ALERT_MAX_ALERTS)
FINGERPRINT_MAX = 128  # a longer fingerprint becomes the first 16 hex digits of its SHA-256
TITLE_MAX = 500  # characters of a title; longer summaries are cut to this
SERVICE_MAX = 200  # characters of a service
DETAILS_MAX = 4000  # characters of details kept on the incident and in the prompt
EVAL_MATCHES_SHOWN = 20  # legacy Grafana: the series whose values the details list
LABEL_TEXT_MAX = 200  # characters of one label name or value shown
# What an alert keeps of its labels, annotations and links (an attacker may control every field).
LABELS_KEPT = 100  # label pairs stored with an alert
LABEL_VALUE_KEPT = 1000  # characters of one stored label value
ANNOTATIONS_KEPT = 30  # annotations stored per alert (summary, description, runbook_url first)
ANNOTATION_TEXT_MAX = 4000  # characters of one annotation value
URL_MAX = 2048  # characters of a link; a longer URL stays text (cut)
CUT_KEY = "tierops.cut"  # the annotation that says what was not kept
GROUP_KEY_PREFIX = "alert:group:"
Grouping = Literal["group", "fingerprint"]
# The links a sender gives, in the order they are listed: (label, where it comes from).
LINK_FIELDS = (("runbook", "runbook_url"), ("dashboard", "dashboardURL"), ("panel", "panelURL"),
               ("source", "generatorURL"), ("silence", "silenceURL"))


@dataclass(frozen=True)
class AlertGroup:
    """The notification group a sender's webhook carried (its ``groupKey``, for one receiver)."""

    key: str  # alert:group:<16 hex digits of the SHA-256 of receiver and groupKey>
    status: Status  # the payload's: resolved when every alert of the group is
    name: str | None  # groupLabels.alertname, else commonLabels.alertname
    receiver: str | None
    labels: dict[str, str] = field(default_factory=dict)  # groupLabels
    common_labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)  # commonAnnotations, capped
    truncated: int = 0  # alerts the sender left out (max_alerts)


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
    name: str | None = None  # what people call it: the alertname (generic: the title)
    annotations: dict[str, str] = field(default_factory=dict)  # capped; non-http(s) link fields as text
    links: list[dict[str, str]] = field(default_factory=list)  # [{label, url}], http(s) only
    group: AlertGroup | None = None
    unread: int = 0  # alerts of the same payload beyond max_alerts, not read
    read_limit: int | None = None  # max_alerts, when some were not read

    @property
    def key(self) -> str:
        """The incident key of this alert on its own (``fingerprint`` grouping)."""
        return f"alert:{self.fingerprint}"

    @property
    def firing(self) -> bool:
        return self.status == "firing"

    def incident_key(self, grouping: Grouping) -> str:
        """The key of the incident this alert belongs to: its group's, or its own."""
        return self.group.key if grouping == "group" and self.group is not None else self.key


Text = Callable[[str | None], str]


def parse_payload(data: Any, *, default_severity: str = DEFAULT_SEVERITY, max_alerts: int = ALERTS_READ_MAX,
                  redact: Callable[[str], str] | None = None) -> tuple[Source, list[Alert]]:
    """The sender and its alerts, or :class:`~app.engine.alert_payloads.AlertPayloadError` listing
    every problem.

    ``default_severity``: the severity of an alert without a known one; ``max_alerts``: alerts read
    from one payload (the rest are counted in each alert's :attr:`Alert.unread`, not validated);
    ``redact``: applied to every text the sender wrote before it is cut, hashed or kept."""
    payload, unread = validate_payload(data, max_alerts)
    red = redact or (lambda s: s)

    def text(value: str | None) -> str:
        return red(clean(value or ""))

    if isinstance(payload, GenericAlert):
        return "generic", [_generic(payload, text, default_severity)]
    if isinstance(payload, GrafanaLegacyPayload):
        return "grafana-legacy", [_legacy(payload, text, default_severity)]
    source: Source = "grafana" if isinstance(payload, GrafanaPayload) else "alertmanager"
    title = payload.title if isinstance(payload, GrafanaPayload) else None
    group = _group(payload, text)
    limit = max_alerts if unread else None
    return source, [_from_sender(a, source, text(title), group, text, default_severity, unread, limit)
                    for a in payload.alerts]


# -- normalising ------------------------------------------------------------------------------

def clean(text: str) -> str:
    """Text that can be stored and put on a command line: no lone surrogate, no NUL byte."""
    return clean_text(text).replace("\x00", "\ufffd")


def first_given(*candidates: str | None) -> str | None:
    """The first candidate that is more than whitespace, stripped."""
    for c in candidates:
        if c is not None and c.strip():
            return c.strip()
    return None


def capped(text: str | None, limit: int) -> str | None:
    """``text`` cut to ``limit`` characters, the last one an ellipsis when it was longer."""
    if text is None:
        return None
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cut(text: str, limit: int) -> str:
    """``text``, or its first ``limit`` characters saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}… [cut: {len(text):,} characters in all]"


def is_link(url: str) -> bool:
    """An absolute http(s) URL of at most :data:`URL_MAX` characters, on one line: what may become
    a link on a page (``javascript:``, ``data:``, relative paths and the rest stay text)."""
    if len(url) > URL_MAX or any(c.isspace() or ord(c) < 0x20 or c == "\x7f" for c in url):
        return False
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.netloc)


_STATE_PREFIX = re.compile(r"^\[(?:FIRING|RESOLVED)(?::\d+)?\]\s*", re.IGNORECASE)
_LEGACY_PREFIX = re.compile(r"^\[(?:Alerting|OK|No Data|Pending|Paused)\]\s*", re.IGNORECASE)


def _fingerprint(given: str | None) -> str | None:
    """The sender's fingerprint (redacted); one over :data:`FINGERPRINT_MAX` characters is hashed."""
    fp = first_given(given)
    return _hash(fp) if fp is not None and len(fp) > FINGERPRINT_MAX else fp


def _severity(labels: Mapping[str, str], default: str) -> str:
    return severity_of(first_given(labels.get("severity"), labels.get("priority")), default)


def _group(p: SenderPayload, t: Text) -> AlertGroup | None:
    group_key = t(p.groupKey)
    if not group_key.strip():
        return None
    receiver = first_given(t(p.receiver))
    labels = {t(k): t(v) for k, v in (p.groupLabels or {}).items()}
    common = {t(k): t(v) for k, v in (p.commonLabels or {}).items()}
    name = first_given(labels.get("alertname"), common.get("alertname"))
    if name is None and isinstance(p, GrafanaPayload):  # "[FIRING:2] High memory usage …": the rule's words
        name = first_given(_STATE_PREFIX.sub("", t(p.title)))
    notes, _ = _annotations({t(k): t(v) for k, v in (p.commonAnnotations or {}).items()})
    return AlertGroup(key=GROUP_KEY_PREFIX + _hash(f"{receiver or ''}\n{group_key}"), status=p.status,
                      name=capped(name, TITLE_MAX), receiver=receiver, labels=labels, common_labels=common,
                      annotations=notes, truncated=p.truncatedAlerts or 0)


_FIRST_ANNOTATIONS = ("summary", "description", "runbook_url")


def _annotations(notes: Mapping[str, str]) -> tuple[dict[str, str], int]:
    """At most :data:`ANNOTATIONS_KEPT` annotations (summary, description, runbook_url first, then
    by name), each cut to :data:`ANNOTATION_TEXT_MAX`; and how many were left out."""
    names = [n for n in _FIRST_ANNOTATIONS if n in notes] + sorted(n for n in notes if n not in _FIRST_ANNOTATIONS)
    kept = {cut(n, LABEL_TEXT_MAX): cut(notes[n], ANNOTATION_TEXT_MAX) for n in names[:ANNOTATIONS_KEPT]}
    return kept, max(0, len(names) - ANNOTATIONS_KEPT)


def _links(fields: Mapping[str, str | None], notes: dict[str, str]) -> list[dict[str, str]]:
    """The alert's http(s) links in :data:`LINK_FIELDS` order from ``fields`` (already redacted);
    a link field that is not one is kept as text among ``notes`` (runbook_url is an annotation already)."""
    links: list[dict[str, str]] = []
    for label, name in LINK_FIELDS:
        url = first_given(fields.get(name))
        if url is None:
            continue
        if is_link(url):
            links.append({"label": label, "url": url})
        elif name != "runbook_url":
            notes[name] = cut(url, ANNOTATION_TEXT_MAX)
    return links


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def labels_fingerprint(labels: Mapping[str, str]) -> str:
    return _hash(json.dumps(sorted(labels.items()), ensure_ascii=False, separators=(",", ":")))


def _service(labels: Mapping[str, str]) -> str | None:
    return capped(first_given(labels.get("service"), labels.get("job"), labels.get("instance"), labels.get("alertname")),
                SERVICE_MAX)


def _from_sender(a: SenderAlert, source: Source, group_title: str, group: AlertGroup | None, t: Text,
                 default_severity: str, unread: int, read_limit: int | None) -> Alert:
    labels = {t(k): t(v) for k, v in a.labels.items()}
    notes = {t(k): t(v) for k, v in a.annotations.items()}
    fingerprint = _fingerprint(t(a.fingerprint)) or labels_fingerprint(labels)
    title = first_given(notes.get("summary"), labels.get("alertname"), group_title) or f"alert {fingerprint}"
    details = first_given(notes.get("description"), notes.get("message"))
    if isinstance(a, GrafanaAlert) and (value := first_given(t(a.valueString))):
        details = f"{details}\nValue: {value}" if details else f"Value: {value}"
    name = first_given(labels.get("alertname"), _STATE_PREFIX.sub("", group_title), title)
    kept, left_out = _annotations(notes)
    fields = {"runbook_url": kept.get("runbook_url"), "generatorURL": t(a.generatorURL)}
    if isinstance(a, GrafanaAlert):
        fields.update(dashboardURL=t(a.dashboardURL), panelURL=t(a.panelURL), silenceURL=t(a.silenceURL))
    links = _links(fields, kept)
    if left_out:
        kept[CUT_KEY] = f"{left_out} more annotation(s) not kept (at most {ANNOTATIONS_KEPT} per alert)"
    return Alert(fingerprint=fingerprint, status=a.status, severity=_severity(labels, default_severity),
                 service=_service(labels), title=capped(title, TITLE_MAX) or title, details=capped(details, DETAILS_MAX),
                 labels=labels, source=source, generator_url=first_given(t(a.generatorURL)),
                 starts_at=first_given(t(a.startsAt)), name=capped(name, TITLE_MAX), annotations=kept, links=links,
                 group=group, unread=unread, read_limit=read_limit)


def _legacy(p: GrafanaLegacyPayload, t: Text, default_severity: str) -> Alert:
    """A legacy Grafana rule's notification as one alert: its tags are the labels (plus
    ``alertname``: the rule's name), its message and matched series the details, ``ruleUrl`` its
    panel link; keyed by the org and rule id (else the rule's name and URL)."""
    rule = first_given(t(p.ruleName)) or first_given(_LEGACY_PREFIX.sub("", t(p.title)))
    tags = {t(k): t(v) for k, v in (p.tags or {}).items()}
    labels = {**tags, "alertname": rule} if rule and "alertname" not in tags else tags
    matches = p.evalMatches or []
    series_tags = [{t(k): t(v) for k, v in (m.tags or {}).items()} for m in matches]
    identity = f"{p.orgId or 0}/{p.ruleId}" if p.ruleId is not None else f"{rule or ''}\n{t(p.ruleUrl)}"
    fingerprint = _hash(f"grafana-legacy\n{identity}")
    lines = [m for m in [first_given(t(p.message))] if m]
    if p.state == "no_data":
        lines.append("The rule's query returned no data (Grafana state no_data).")
    elif p.state == "paused":
        lines.append("The rule was paused in Grafana: it is no longer evaluated.")
    for m in matches[:EVAL_MATCHES_SHOWN]:
        value = "no value" if m.value is None else f"{m.value:g}"
        lines.append(f"- {first_given(t(m.metric)) or '(series)'}: {value}")
    if len(matches) > EVAL_MATCHES_SHOWN:
        lines.append(f"- and {len(matches) - EVAL_MATCHES_SHOWN} more series")
    notes: dict[str, str] = {}
    if message := first_given(t(p.message)):
        notes["description"] = cut(message, ANNOTATION_TEXT_MAX)
    notes["grafana_state"] = p.state
    if image := first_given(t(p.imageUrl)):
        notes["imageUrl"] = cut(image, ANNOTATION_TEXT_MAX)
    rule_url = first_given(t(p.ruleUrl))
    links = [{"label": "panel", "url": rule_url}] if rule_url and is_link(rule_url) else []
    if rule_url and not links:
        notes["ruleUrl"] = cut(rule_url, ANNOTATION_TEXT_MAX)
    first_series = series_tags[0] if series_tags else {}
    service = _service({**{k: v for k, v in first_series.items() if k in ("service", "job", "instance")}, **tags,
                        "alertname": rule or ""})
    title = rule or f"alert {fingerprint}"
    return Alert(fingerprint=fingerprint, status="firing" if p.state in LEGACY_FIRING else "resolved",
                 severity=_severity(tags, default_severity), service=service, title=capped(title, TITLE_MAX) or title,
                 details=capped("\n".join(lines) or None, DETAILS_MAX), labels=labels, source="grafana-legacy",
                 generator_url=rule_url, name=capped(rule, TITLE_MAX), annotations=notes, links=links)


def _generic(g: GenericAlert, t: Text, default_severity: str) -> Alert:
    title = t(g.title).strip()
    service = capped(first_given(t(g.service)), SERVICE_MAX)
    fingerprint = _fingerprint(t(g.fingerprint)) or _hash(f"{title}\n{service or ''}")
    shown = capped(title, TITLE_MAX) or title
    return Alert(fingerprint=fingerprint, status=g.status or "firing", severity=severity_of(g.severity, default_severity),
                 service=service, title=shown, details=capped(first_given(t(g.details)), DETAILS_MAX),
                 source="generic", name=shown)


# -- what an alert keeps, and in what order its alerts are shown ---------------------------------

def kept_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels stored with an alert: at most :data:`LABELS_KEPT` pairs (sorted), each cut."""
    pairs = sorted(labels.items())
    kept = {cut(k, LABEL_TEXT_MAX): cut(v, LABEL_VALUE_KEPT) for k, v in pairs[:LABELS_KEPT]}
    if len(pairs) > LABELS_KEPT:
        kept[CUT_KEY] = f"{len(pairs) - LABELS_KEPT} more label(s) not kept (at most {LABELS_KEPT} per alert)"
    return kept


def ranked(alerts: Sequence[Alert]) -> list[Alert]:
    """Firing before resolved, then the worst severity first, then as sent."""
    return sorted(alerts, key=lambda a: (not a.firing, SEVERITY_RANK.get(a.severity, 2)))

