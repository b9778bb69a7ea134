"""``app/engine/alert_batches.py``: a delivery cut into one batch per group or one per alert, and
what a batch shows."""

from __future__ import annotations

from app.engine.alert_batches import batches
from app.engine.alert_texts import evidence_text
from app.engine.alerts import parse_payload
from tests.engine.alert_samples import sample


def test_a_group_is_one_batch_in_group_mode_and_three_in_fingerprint_mode():
    _, alerts = parse_payload(sample("alertmanager-group-firing"))
    [batch] = batches(alerts, "group")
    assert batch.alerts == alerts and batch.name == "HighRequestLatency" and batch.service == "api"
    assert batch.title == "API p99 latency above 2s on api-2"  # no common summary: the worst firing alert's
    assert batch.annotations == {"runbook_url": "https://runbooks.example.com/api/high-latency"}
    assert batch.evidence.splitlines()[0] == "3 alert(s) in the latest delivery: 3 firing, 0 resolved"
    assert batch.detail.startswith("alertmanager group firing: 3 alert(s)\nalertmanager firing, warning: ")
    assert not batch.resolves_group
    singles = batches(alerts, "fingerprint")
    assert [b.key for b in singles] == [a.key for a in alerts] and all(b.group is None for b in singles)
    assert singles[0].annotations == alerts[0].annotations and singles[0].evidence == evidence_text(alerts[0])
    _, resolved = parse_payload(sample("alertmanager-group-resolved"))
    assert batches(resolved, "group")[0].resolves_group
    # no groupKey (the generic shape, a hand-made webhook): one incident per alert whatever the setting
    _, [generic] = parse_payload(sample("generic-firing"))
    assert generic.group is None and generic.name == "Backup job failed on db-1" and generic.links == []
    bare = sample("alertmanager-group-firing")
    del bare["groupKey"]
    _, plain = parse_payload(bare)
    assert [b.key for b in batches(plain, "group")] == [a.key for a in plain]
