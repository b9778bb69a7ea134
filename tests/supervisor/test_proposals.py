"""Proposed actions and dry runs through real chains, and the verdict a chain's sessions get: tier 0
probes a local HTTP service, tier 1 is the fake ``claude`` executable, the store is a real SQLite
file; the verdict is read the way the session page reads it (``app/web/verdict.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.engine import cooldowns as cooldown_engine
from app.store import chains, findings, sessions
from app.store import cooldowns as action_store
from app.store import incidents as incident_store
from app.supervisor.chain import run_chain
from app.supervisor.scheduler import Supervisor
from app.web.pages import verdict
from tests.fakes import claude_control as cc
from tests.helpers import healthy
from tests.supervisor.test_probe_cycles import Target, checks_file

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def target() -> Iterator[Target]:
    t = Target()
    yield t
    t.close()


def stage(output: dict) -> dict:
    return {"lines": cc.structured_stream(cc.new_session_id(), output)}


def tier1_proposing(*actions: dict) -> dict:
    """Tier 1 confirms the check's incident (by its key) and proposes instead of acting."""
    return {"summary": "api-health fails: the api process is wedged.",
            "events": [{"level": "critical", "service": "api", "message": "api wedged", "key": "check:api-health"}],
            "memories": [], "services_checked": [{"name": "api", "status": "down", "detail": "HTTP 500"}],
            "escalation": {"needed": False, "reason": None, "context": None, "failed_checks": []},
            "actions": list(actions)}


async def decided(db: Any, settings: Any, pk: int) -> list[dict]:
    """The session's decisions, as its page computes them."""
    row = await sessions.get_session(db, pk, fresh=True)
    assert row is not None
    chain = await chains.chain_links(db, row["chain_id"], fresh=True) if row["chain_id"] is not None else []
    touched = await incident_store.session_incidents(db, pk, fresh=True)
    open_now = await verdict.read_still_open(db, row, chain, touched, settings.escalate_after)
    return [dict(d) for d in verdict.decisions(row, [], touched, [], open_now=open_now)]


async def test_a_chain_s_proposal_is_linked_to_the_check_s_incident_and_named_in_the_verdict(
        db, make_settings, validator, target, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(tier1_proposing(
        {"kind": "restart", "service": "api", "result": "proposed", "detail": "systemctl restart api"}))])
    settings = make_settings(fake, checks=checks_file(tmp_path, target.url), escalate_after=3)
    target.mode = "fail"
    probe, tier1 = await Supervisor(db, settings, validator).run_cycle(tier=0)
    [inc] = await incident_store.list_incidents(db)
    [proposal] = await action_store.proposals(db, incident_id=inc["id"])
    assert (proposal["session_pk"], proposal["tier"], proposal["kind"], proposal["service"], proposal["detail"]) == (
        tier1["id"], 1, "restart", "api", "systemctl restart api")
    assert await cooldown_engine.active(db, cooldown_engine.parse_limits(settings.cooldowns)) == []  # not taken

    # tier 1 wanted no further escalation, but the incident is open: its verdict says so, and who acts
    [still] = await decided(db, settings, tier1["id"])
    assert still["kind"] == "open" and still["link"] == f"/incidents/{inc['id']}"
    assert still["text"].startswith(f"still open: incident #{inc['id']} ") and "(critical, open)" in still["text"]
    assert [a["text"] for a in still["acts"]] == [
        "1 proposed action awaits a human: restart api",
        "re-escalates after 3 more failing cycles (TIEROPS_ESCALATE_AFTER=3) or if it worsens; resolves when its "
        "check passes"]
    # tier 0 escalated: that stays first, and the incident it handed over is still open
    assert [d["kind"] for d in await decided(db, settings, probe["id"])] == ["escalated", "open"]

    # the check passes again: the incident resolves, and only now does the verdict say "resolved"
    target.mode = "ok"
    await Supervisor(db, settings, validator).run_cycle(tier=0)
    [d] = await decided(db, settings, tier1["id"])
    assert d["kind"] == "resolved" and d["text"] == f"resolved: no further escalation needed after #{probe['id']}"


async def test_a_tier_1_that_reports_nothing_about_the_incident_is_not_resolved(db, make_settings, validator,
                                                                                target, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(healthy())])  # checks nginx only
    settings = make_settings(fake, checks=checks_file(tmp_path, target.url), escalate_after=0)
    target.mode = "fail"
    _, tier1 = await Supervisor(db, settings, validator).run_cycle(tier=0)
    assert await incident_store.session_incidents(db, tier1["id"]) == []  # it never mentioned the incident
    [still] = await decided(db, settings, tier1["id"])
    assert still["kind"] == "open" and "resolved" not in still["text"]
    assert [a["text"] for a in still["acts"]] == [
        "re-escalates only if it worsens (TIEROPS_ESCALATE_AFTER=0); resolves when its check passes"]


async def test_a_dry_run_chain_s_actions_never_count(db, make_settings, validator, target, tmp_path):
    claims = tier1_proposing(
        {"kind": "restart", "service": "api", "result": "done", "detail": "systemctl restart api"},
        {"kind": "restart", "service": "api", "result": "failed"},
        {"kind": "redeploy", "service": "api", "result": "proposed", "detail": "roll back to v41"})
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(claims), stage(claims)])
    settings = make_settings(fake, checks=checks_file(tmp_path, target.url), cooldowns="restart:1/1h")
    target.mode = "fail"
    _, tier1 = await Supervisor(db, settings, validator).run_cycle(tier=0, dry_run=True)
    assert tier1["dry_run"] is True
    stored = await findings.session_cooldowns(db, tier1["id"])
    assert [(c["action"], c["outcome"], c["note"]) for c in stored] == [
        ("restart", "dry-run", "reported done in a dry run: systemctl restart api"),
        ("restart", "dry-run", "reported failed in a dry run"),
        ("redeploy", "proposed", "roll back to v41")]
    limits = cooldown_engine.parse_limits(settings.cooldowns)
    assert await cooldown_engine.active(db, limits) == []
    row = await sessions.get_session(db, tier1["id"])
    assert row is not None and row["attention"] is None  # two "restarts" over a 1/1h limit: not flagged
    # the same report outside a dry run counts, and is flagged over the limit
    chain = await run_chain(db, settings, validator, None)
    assert [(w.kind, w.used) for w in await cooldown_engine.active(db, limits)] == [("restart", 2)]
    assert "exceeded its cooldown limit 1/1h" in (chain[0]["attention"] or "")
