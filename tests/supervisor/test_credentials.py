"""app/supervisor/credentials.py: the model tiers paused after the API rejected the credentials.

Real SQLite, real cycles with the fake CLI and a local HTTP target for tier 0. The pause is
recorded the way a session records it (``pause_model_tiers`` with the CLI's environment); a session
meeting a 401 is tests/supervisor/test_session.py, the real CLI tests/realcli/test_rejected_key.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from app.store import incidents, monitor_state
from app.store import sessions as session_store
from app.supervisor.chain import run_chain
from app.supervisor.credentials import (
    PAUSE,
    ModelTiersPaused,
    cli_home,
    current_fingerprint,
    fingerprint,
    model_tiers_paused,
    pause_holds,
    pause_model_tiers,
    read_pause,
)
from app.supervisor.launch import child_env
from app.supervisor.scheduler import Supervisor
from tests.fakes import claude_control as cc
from tests.helpers import escalating, healthy
from tests.supervisor.test_probe_cycles import Target, checks_file

pytestmark = pytest.mark.timeout(60)

KEY = "sk-ant-api03-rejected-key-000"


@pytest.fixture
def target() -> Iterator[Target]:
    t = Target()
    yield t
    t.close()


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    for name in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    return KEY


async def pause(db, settings, session: int | None = None):
    """Record a rejection of the credentials a CLI gets now (what session.py does)."""
    home = cli_home(settings)
    return await pause_model_tiers(db, "HTTP 401 authentication_failed", child_env(home, settings.allowed_env()),
                                   home, session)


def test_the_fingerprint_follows_each_credential_and_never_shows_a_value(tmp_path):
    base = {"ANTHROPIC_API_KEY": KEY, "PATH": "/bin"}
    first = fingerprint(base)
    assert len(first) == 16 and KEY not in first and first == fingerprint(dict(base))
    assert fingerprint({**base, "PATH": "/usr/bin", "HOME": "/x"}) == first  # only the credentials count
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        assert fingerprint({**base, name: "other"}) != first, name
    # a `claude login` stored in the CLI's HOME counts too
    home = tmp_path / "home"
    assert fingerprint(base, home) == first  # none stored
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text('{"claudeAiOauth": {"accessToken": "a"}}')
    stored = fingerprint(base, home)
    assert stored != first
    (home / ".claude" / ".credentials.json").write_text('{"claudeAiOauth": {"accessToken": "b"}}')
    assert fingerprint(base, home) != stored


async def test_a_pause_holds_until_the_credentials_change_then_lifts_itself(db, make_settings, key, monkeypatch,
                                                                            caplog):
    settings = make_settings(None)
    assert await model_tiers_paused(db, settings) is None
    recorded = await pause(db, settings, session=None)
    assert recorded.fingerprint == current_fingerprint(settings)
    row = await monitor_state.get(db, PAUSE)
    assert row is not None and KEY not in str(row["value"])
    why = await model_tiers_paused(db, settings)
    assert why is not None and why.startswith("model tiers paused: the API rejected the credentials "
                                              "(HTTP 401 authentication_failed) at ")
    assert "no tier >= 1 starts until the credentials change" in why and "tierops doctor --online" in why
    assert await model_tiers_paused(db, settings) == why  # the same credentials: still paused

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-a-new-key-111")  # a restart with a new key
    assert await pause_holds(db, settings) is None  # readers see it no longer holds, without writing
    assert await read_pause(db) is not None
    with caplog.at_level(logging.INFO, logger="app.supervisor.credentials"):
        assert await model_tiers_paused(db, settings) is None
    assert await read_pause(db) is None  # lifted: deleted
    assert any("model tiers resumed: the credentials changed" in r.getMessage() for r in caplog.records)


async def test_a_run_from_tier_1_is_refused_like_a_spent_budget(db, make_settings, validator, tmp_path, key):
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    settings = make_settings(fake)
    await pause(db, settings)
    with pytest.raises(ModelTiersPaused, match=r"^model tiers paused: "):
        await run_chain(db, settings, validator, None)
    assert await db.fetchval("SELECT COUNT(*) FROM sessions") == 0 and fake.invocations() == []


async def test_tier_0_keeps_running_and_a_new_incident_needs_a_human_instead(db, make_settings, validator, target,
                                                                             tmp_path, key):
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    settings = make_settings(fake, checks=checks_file(tmp_path, target.url))
    sup = Supervisor(db, settings, validator)
    await pause(db, settings)
    target.mode = "fail"  # an incident opens: tier 0 asks for tier 1
    chain = await sup.run_cycle(tier=0)
    assert [(s["tier"], s["status"]) for s in chain] == [(0, "completed")] and fake.invocations() == []
    attention = chain[0]["attention"]
    assert "check:api-health" in attention
    assert "; not escalated to tier 1: model tiers paused: the API rejected the credentials" in attention
    [inc] = await incidents.list_incidents(db)
    assert inc["escalations"] == 1  # escalated to a human, once per incident
    assert sup.consecutive_failures == 0 and sup.last_cycle_status == "needs_attention"


async def test_an_approved_escalation_that_cannot_start_flags_its_session(db, make_settings, validator, tmp_path,
                                                                          key):
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), escalating())}])
    settings = make_settings(fake)
    [parent] = await run_chain(db, make_settings(fake, max_tier=1), validator, None)  # tier 1 asks for tier 2
    await pause(db, settings, session=parent["id"])
    row = await session_store.get_session(db, parent["id"], fresh=True)
    assert row is not None
    links = await run_chain(db, settings, validator, None, start_tier=2, parent=row, handoff="approved handoff")
    assert [link["tier"] for link in links] == [1] and len(fake.invocations()) == 1  # tier 2 never started
    flagged = await session_store.get_session(db, parent["id"], fresh=True)
    assert flagged is not None and flagged["attention"].startswith("model tiers paused: the API rejected the "
                                                                   f"credentials (HTTP 401 authentication_failed) in "
                                                                   f"session #{parent['id']}")
