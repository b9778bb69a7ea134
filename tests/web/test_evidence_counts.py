"""Findings by evidence status per tier and model: the store's sums (``app/store/stats.py``
``evidence_counts``), ``GET /api/v1/stats``, the ``/stats`` page and the ``tierops_findings_evidence``
gauge of ``/metrics``, over sessions whose statuses the real recorder stored (hand-made streams
ingested as in tests/engine/test_evidence_check.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.store import stats as stats_store
from tests.engine.test_evidence_check import ingest
from tests.web.test_metrics_incidents import by_name, scrape


def verdicts_output() -> dict:
    """One verified critical event (its quote is in the Bash output, through ANSI colours), one
    warning quoting text no tool printed (unsupported), one info event citing nothing (uncited)."""
    return {"summary": "nginx down", "escalation": {"needed": False}, "services_checked": [], "actions": [],
            "events": [
                {"level": "critical", "service": "nginx", "message": "nginx failed",
                 "evidence": [{"quote": "Active: failed (Result: exit-code) since 03:12", "tool_use_id": "toolu_A"}]},
                {"level": "warning", "service": "postgres", "message": "lag 45 s",
                 "evidence": [{"quote": "replication lag 45 s"}]},
                {"level": "info", "message": "nothing cited"}]}


def uncited_output() -> dict:
    return {"summary": "disk", "escalation": {"needed": False}, "services_checked": [], "actions": [],
            "events": [{"level": "warning", "service": "disk", "message": "disk 91 % full"}]}


def test_counts_per_tier_and_model_on_the_api_page_and_metrics(app_server, tmp_path: Path):
    srv = app_server()
    streams = tmp_path / "streams"
    streams.mkdir()

    async def seed(st: Any) -> list[stats_store.EvidenceCount]:
        await ingest(streams, st.db, st.validator, st.settings, verdicts_output(), tier=1)
        await ingest(streams, st.db, st.validator, st.settings, verdicts_output(), tier=1)
        await ingest(streams, st.db, st.validator, st.settings, uncited_output(), tier=2)
        return await stats_store.evidence_counts(st.db)

    counts = srv.run_async(seed)
    # the stream's init line reports model "m"; the ingested sessions asked for none
    assert counts == [{"tier": 1, "model": "m", "verified": 2, "unsupported": 2, "uncited": 2},
                      {"tier": 2, "model": "m", "verified": 0, "unsupported": 0, "uncited": 1}]
    assert srv.run_async(lambda st: stats_store.evidence_counts(st.db, "9999-01-01")) == []  # the window

    with srv.client() as cl:
        body = cl.get("/api/v1/stats?days=7").json()
        page = cl.get("/stats?days=7")
    assert body["evidence"] == counts
    assert page.status_code == 200 and "Findings by evidence" in page.text
    assert "<td>1</td><td>m</td><td>2</td><td>2</td><td>2</td>" in page.text
    assert "<td>2</td><td>m</td><td>0</td><td>0</td><td>1</td>" in page.text

    text, samples = scrape(srv)
    assert "# TYPE tierops_findings_evidence gauge" in text
    assert by_name(samples, "tierops_findings_evidence") == {
        (("model", "m"), ("status", "verified"), ("tier", "1")): 2,
        (("model", "m"), ("status", "unsupported"), ("tier", "1")): 2,
        (("model", "m"), ("status", "uncited"), ("tier", "1")): 2,
        (("model", "m"), ("status", "verified"), ("tier", "2")): 0,
        (("model", "m"), ("status", "unsupported"), ("tier", "2")): 0,
        (("model", "m"), ("status", "uncited"), ("tier", "2")): 1,
    }


def test_no_checked_findings(app_server):
    srv = app_server()
    with srv.client() as cl:
        assert cl.get("/api/v1/stats").json()["evidence"] == []
        assert "No checked findings in the window." in cl.get("/stats").text
    _, samples = scrape(srv)
    assert by_name(samples, "tierops_findings_evidence") == {}
