"""A delivery cut into the incidents it touches: one :class:`AlertBatch` per notification group,
or per alert.

Why a module of its own: Alertmanager and Grafana send a whole notification group per webhook,
and what an incident shows (its name, title, service, annotations, evidence, the timeline entry of
a delivery) is the group's, not any one alert's. ``TIEROPS_ALERT_GROUPING=group`` makes one
incident per group (keyed by a hash of receiver and ``groupKey``); ``fingerprint``, and every
payload without a ``groupKey``, one per alert. A batch also says which alerts of the delivery it
could not list: the sender's ``truncatedAlerts`` and those beyond ``TIEROPS_ALERT_MAX_ALERTS``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from app.engine.alert_payloads import Source
from app.engine.alert_texts import delivery_text, evidence_text
from app.engine.alerts import SERVICE_MAX, TITLE_MAX, Alert, AlertGroup, Grouping, capped, first_given, ranked

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AlertBatch:
    """The alerts of one delivery that belong to one incident: a whole group, or one alert."""

    key: str
    alerts: list[Alert]
    group: AlertGroup | None = None

    @property
    def source(self) -> Source:
        return self.alerts[0].source

    @property
    def firing(self) -> list[Alert]:
        return [a for a in self.alerts if a.firing]

    @property
    def resolves_group(self) -> bool:
        """The sender says every alert of the group is resolved (the payload's status)."""
        return self.group is not None and self.group.status == "resolved"

    @property
    def name(self) -> str | None:
        """The alertname people know: the group's, else the first alert's (generic: its title)."""
        if self.group is not None and self.group.name:
            return self.group.name
        return ranked(self.alerts)[0].name

    @property
    def title(self) -> str:
        """The summary: the group's common summary, else the first (firing, worst) alert's title."""
        common = self.group.annotations.get("summary") if self.group is not None else None
        return capped(first_given(common), TITLE_MAX) or ranked(self.alerts)[0].title

    @property
    def service(self) -> str | None:
        if self.group is not None:
            common = self.group.common_labels
            if found := first_given(common.get("service"), common.get("job"), common.get("instance"),
                               common.get("alertname")):
                return capped(found, SERVICE_MAX)
        return ranked(self.alerts)[0].service

    @property
    def annotations(self) -> dict[str, str]:
        """The incident's annotations: a group's common ones, an alert's own."""
        return dict(self.group.annotations) if self.group is not None else dict(self.alerts[0].annotations)

    @property
    def evidence(self) -> str:
        """The incident's latest evidence: an alert's (:func:`evidence_text`), or a group's count and
        one line per alert, firing and worst first."""
        if self.group is None:
            return evidence_text(self.alerts[0])
        lines = [f"{len(self.alerts)} alert(s) in the latest delivery: {len(self.firing)} firing, "
                 f"{len(self.alerts) - len(self.firing)} resolved"]
        for a in ranked(self.alerts):
            first = (a.details or "").splitlines()[0] if a.details else ""
            lines.append(f"- {a.status}, {a.severity}: {a.title}" + (f" — {capped(first, 300)}" if first else ""))
        return "\n".join(lines)

    @property
    def unread(self) -> int:
        """Alerts of this delivery's payload TierOps did not read (beyond TIEROPS_ALERT_MAX_ALERTS)."""
        return max(a.unread for a in self.alerts)

    @property
    def left_out(self) -> int:
        """Alerts of the delivery not listed on the incident: the sender's ``truncatedAlerts`` (its
        ``max_alerts``) and those TierOps did not read."""
        return (self.group.truncated if self.group is not None else 0) + self.unread

    def _left_out_text(self) -> str:
        parts = []
        if self.unread:
            limit = next((a.read_limit for a in self.alerts if a.read_limit), None)
            parts.append(f"{self.unread} more not read (TIEROPS_ALERT_MAX_ALERTS={limit})")
        if self.group is not None and self.group.truncated:
            parts.append(f"{self.group.truncated} more left out by the sender's max_alerts")
        return f" ({'; '.join(parts)})" if parts else ""

    @property
    def detail(self) -> str:
        """The timeline entry of this delivery: one :func:`delivery_text` line per alert, and what
        was not listed."""
        if self.group is None:
            more = self._left_out_text()
            return delivery_text(self.alerts[0]) + (f"\nthe payload's other alerts{more}" if more else "")
        head = f"{self.source} group {self.group.status}: {len(self.alerts)} alert(s)" + self._left_out_text()
        return "\n".join([head, *(delivery_text(a) for a in self.alerts)])


def batches(alerts: Sequence[Alert], grouping: Grouping) -> list[AlertBatch]:
    """``alerts`` cut into the incidents they touch, in the order each first appears: one batch
    per group (``group`` grouping, payloads with a groupKey) or per alert."""
    found: dict[str, AlertBatch] = {}
    for a in alerts:
        key = a.incident_key(grouping)
        if key in found:
            found[key].alerts.append(a)
        else:
            found[key] = AlertBatch(key, [a], a.group if key != a.key else None)
    return list(found.values())
