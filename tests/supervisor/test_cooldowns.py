"""Cooldowns enforced by the chain: what tiers 2 and 3 are told, the escalation a
cooldown refuses, and an action reported over its limit — with the fake ``claude`` executable, a
real SQLite file and the real chain."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from app.engine.cooldowns import CooldownError
from app.store import findings
from app.supervisor.chain import run_chain
from tests.fakes import claude_control as cc
from tests.helpers import escalating, healthy

pytestmark = pytest.mark.timeout(60)


def stage(output: dict) -> dict:
    return {"lines": cc.structured_stream(cc.new_session_id(), output)}


def with_actions(output: dict, *actions: tuple[str, str | None, str]) -> dict:
    return {**output, "actions": [{"kind": k, "service": s, "result": r, "detail": f"{k} {s}: {r}"}
                                  for k, s, r in actions]}


def system_prompt(invocation: dict) -> str:
    return invocation["parsed"]["append_system_prompt"]


def plus_4h(stamp: str) -> str:
    at = datetime.fromisoformat(stamp) + timedelta(hours=4)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def restarts_of(db, service: str) -> list[str]:
    rows = await db.fetchall("SELECT created_at FROM cooldowns WHERE action = 'restart' AND service = ?"
                             " AND outcome IN ('done', 'failed') ORDER BY created_at", (service,))
    return [r[0] for r in rows]


async def test_tier2_is_told_the_allowance_its_restarts_used(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [
        stage(escalating("api down")),
        stage(with_actions(healthy("Restarted api twice."), ("restart", "api", "done"), ("restart", "api", "failed"),
                           ("cleanup", None, "dry-run"))),
        stage(escalating("api down again")),
        stage(healthy()),
    ])
    settings = make_settings(fake)
    first = await run_chain(db, settings, validator, None)
    assert [s["tier"] for s in first] == [1, 2] and all(s["attention"] is None for s in first)
    second = await run_chain(db, settings, validator, None)
    assert [s["tier"] for s in second] == [1, 2]

    tier1, tier2, tier1_again, tier2_again = fake.invocations()
    assert "## Cooldowns" not in system_prompt(tier1) and "## Cooldowns" not in system_prompt(tier1_again)
    before = system_prompt(tier2)
    assert ("## Cooldowns (limits on actions per service)\nLimits: restart at most 2 per service in 4h; "
            "redeploy at most 1 per service in 24h.") in before
    assert "No action is in cooldown now." in before
    after = system_prompt(tier2_again)
    oldest, _ = await restarts_of(db, "api")
    assert (f"- restart api: 2 of 2 in 4h used, next allowed at {plus_4h(oldest)}; do not restart api, propose it "
            "instead") in after
    assert "No action is in cooldown now." not in after and "cleanup" not in after  # a dry run never counts


async def test_a_handoff_proposing_a_third_restart_is_refused(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [
        stage(with_actions(healthy("Restarted api twice."), ("restart", "api", "done"), ("restart", "api", "done"))),
        stage(with_actions(escalating("api down"), ("restart", "api", "proposed"))),
        stage(healthy("tier 2 must not run")),
    ])
    settings = make_settings(fake)
    await run_chain(db, settings, validator, None, start_tier=2)
    chain = await run_chain(db, settings, validator, None)
    assert len(chain) == 1 and len(fake.invocations()) == 2  # tier 2 was not launched
    [s] = chain
    assert s["tier"] == 1 and s["escalation_needed"] is True and s["escalated_to"] is None
    oldest = (await restarts_of(db, "api"))[0]
    assert s["attention"] == ("escalation refused: it proposes restart of api, over the cooldown limit 2/4h "
                              f"(next allowed at {plus_4h(oldest)})")


async def test_a_proposal_within_the_limit_escalates(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [
        stage(with_actions(healthy(), ("restart", "api", "done"), ("restart", "api", "done"))),
        stage(with_actions(escalating("web down"), ("restart", "web", "proposed"), ("cleanup", "api", "proposed"))),
        stage(healthy()),
    ])
    settings = make_settings(fake)
    await run_chain(db, settings, validator, None, start_tier=2)
    chain = await run_chain(db, settings, validator, None)
    assert [(s["tier"], s["attention"]) for s in chain] == [(1, None), (2, None)]


async def test_a_redeploy_proposed_over_a_marker_redeployment_is_refused(db, make_settings, validator, tmp_path):
    """The legacy marker's ``redeployment`` counts against the ``redeploy`` limit."""
    sid = cc.new_session_id()
    marker_run = cc.structured_stream(sid, healthy(), text="[COOLDOWN:redeployment:web] success — rolled out v2")
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": marker_run, "mode": "no_structured"},
        stage(with_actions(escalating("web slow"), ("redeploy", "web", "proposed"))),
    ])
    settings = make_settings(fake, output_max_retries=0)
    [marker_session] = await run_chain(db, settings, validator, None, start_tier=3)
    assert marker_session["source"] == "markers"
    [s] = await run_chain(db, settings, validator, None)
    assert s["attention"].startswith("escalation refused: it proposes redeploy of web, over the cooldown limit 1/24h "
                                     "(next allowed at ")
    assert len(fake.invocations()) == 2


async def test_an_action_taken_over_its_limit_is_flagged(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [
        stage(with_actions(healthy("Restarted api three times."), ("restart", "api", "done"),
                           ("restart", "api", "failed"), ("restart", "api", "done"), ("restart", "web", "done"))),
        stage(with_actions(escalating("still down"), ("redeploy", "api", "done"), ("redeploy", "api", "done"))),
    ])
    settings = make_settings(fake)
    [s] = await run_chain(db, settings, validator, None, start_tier=2)
    expected = "restart of api exceeded its cooldown limit 2/4h (3 taken in 4h)"
    assert s["attention"] == expected and s["status"] == "completed"
    [event] = await findings.list_events(db, session=s["id"], level="warning")
    assert (event["message"], event["service"], event["source"]) == (expected, "api", "tierops")

    # Tier 3 (the highest) asks to escalate too: both reasons are kept.
    [s3] = await run_chain(db, settings, validator, None, start_tier=3)
    assert s3["attention"] == ("redeploy of api exceeded its cooldown limit 1/24h (2 taken in 24h); escalation "
                               "requested at tier 3, the highest tier allowed (TIEROPS_MAX_TIER)")


async def test_within_the_limit_nothing_is_flagged(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [
        stage(with_actions(healthy(), ("restart", "api", "done"), ("restart", "api", "dry-run"),
                           ("restart", "api", "proposed"), ("restart", "api", "done"))),
    ])
    [s] = await run_chain(db, make_settings(fake), validator, None, start_tier=2)
    assert s["attention"] is None
    assert await findings.list_events(db, session=s["id"], level="warning") == []


async def test_custom_limits_and_no_limits(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [
        stage(with_actions(healthy(), ("restart", "api", "done"), ("restart", "api", "done"))),
        stage(with_actions(escalating(), ("restart", "api", "proposed"))),
        stage(healthy()),
    ])
    await run_chain(db, make_settings(fake, cooldowns=""), validator, None, start_tier=2)
    chain = await run_chain(db, make_settings(fake, cooldowns=""), validator, None)
    assert [(s["tier"], s["attention"]) for s in chain] == [(1, None), (2, None)]  # no limits: never refused
    assert "## Cooldowns" not in system_prompt(fake.last())

    fake.set_stages([stage(with_actions(escalating(), ("restart", "api", "proposed")))])
    [s] = await run_chain(db, make_settings(fake, cooldowns="redeploy:9/1h, restart:1/10m"), validator, None)
    assert s["attention"].startswith("escalation refused: it proposes restart of api, over the cooldown limit 1/10m")


async def test_a_bad_setting_stops_the_chain_before_any_session(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(healthy())])
    with pytest.raises(CooldownError, match=r"^TIEROPS_COOLDOWNS: 'restart:2/4' is not KIND:COUNT/WINDOW"):
        await run_chain(db, make_settings(fake, cooldowns="restart:2/4"), validator, None)
    assert fake.invocations() == []
    assert await db.fetchval("SELECT count(*) FROM sessions") == 0
