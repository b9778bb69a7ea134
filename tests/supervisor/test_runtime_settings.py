"""app/supervisor/runtime_settings.py and app/store/runtime_settings.py: settings changed at run time.

Every value checked by the Settings class (each refusal names the setting and the rule), a batch
all or nothing, reverts, the change log, the restart-only refusal, a stored value that no longer
passes skipped with a WARNING; and the real supervisor: a tier-0 cycle of a real probe that
escalates to the fake CLI uses the run-time tier-1 model, max tier and dry run, read at the
cycle's start, and a shortened interval wakes the schedule's wait.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import UTC, datetime

import pytest

from app.store import runtime_settings as store
from app.supervisor.runtime_settings import SettingsRefused, change_settings, effective_settings
from app.supervisor.scheduler import Supervisor
from tests.fakes import claude_control as cc
from tests.helpers import escalating, healthy, wait_until

pytestmark = pytest.mark.timeout(60)

BY = "API token from 127.0.0.1"


def refused(exc: pytest.ExceptionInfo[SettingsRefused]) -> dict[str, str]:
    return dict(exc.value.problems)


async def test_every_value_is_checked_by_the_settings_class(db, make_settings):
    base = make_settings(None)
    cases = {
        "interval": (5, "TIEROPS_INTERVAL: Input should be greater than or equal to 10; got 5"),
        "cron": ("every day", "TIEROPS_CRON: not a valid cron expression: 'every day'; got 'every day'"),
        "max_tier": (7, "TIEROPS_MAX_TIER: Input should be less than or equal to 3; got 7"),
        "notify_min_severity": ("loud", "TIEROPS_NOTIFY_MIN_SEVERITY: Input should be 'info', 'warning' or "
                                        "'critical'; got 'loud'"),
        "dry_run": ("yes", "TIEROPS_DRY_RUN: Input should be a valid boolean; got 'yes'"),  # JSON: true or false
        "tier1_model": ("claude sonnet", "TIEROPS_TIER1_MODEL: a model name is 1 to 200 characters without "
                                         "whitespace or control characters"),
        "tier2_model": ("", "TIEROPS_TIER2_MODEL: a model name is 1 to 200"),
        "tier3_model": ("x" * 201, "TIEROPS_TIER3_MODEL: a model name is 1 to 200"),
    }
    with pytest.raises(SettingsRefused) as info:
        await change_settings(db, base, sets={name: value for name, (value, _) in cases.items()}, reverts=[],
                              changed_by=BY)
    problems = refused(info)
    assert set(problems) == set(cases) and info.value.restart is False
    for name, (_, why) in cases.items():
        assert problems[name].startswith(why), (name, problems[name])
    for bad in ("claude\x00x", "claude\u2028x", "a\tb"):
        with pytest.raises(SettingsRefused):
            await change_settings(db, base, sets={"tier1_model": bad}, reverts=[], changed_by=BY)
    # a value the redactor masks is never stored
    with pytest.raises(SettingsRefused, match="looks like a secret"):
        await change_settings(db, base, sets={"tier1_model": "sk-ant-api03-" + "a1B2" * 20}, reverts=[],
                              changed_by=BY)
    # the form's text, read as the environment's is (strict=False); JSON's 60.0 is 60
    logged = await change_settings(db, base, sets={"interval": "60", "dry_run": "true", "cron": " */5 * * * * "},
                                   reverts=[], changed_by=BY, strict=False)
    assert {r["name"]: r["new_value"] for r in logged} == {"interval": 60, "dry_run": True, "cron": "*/5 * * * *"}
    logged = await change_settings(db, base, sets={"interval": 120.0}, reverts=[], changed_by=BY)
    assert logged[0]["new_value"] == 120
    assert await db.fetchval("SELECT count(*) FROM runtime_setting_changes") == 4


async def test_a_batch_is_all_or_nothing_and_restart_only_settings_are_refused(db, make_settings):
    base = make_settings(None)
    with pytest.raises(SettingsRefused) as info:
        await change_settings(db, base, sets={"interval": 60, "tier1_model": "claude-haiku-4-5", "cron": "bad"},
                              reverts=[], changed_by=BY)
    assert list(refused(info)) == ["cron"]
    assert await store.overrides(db) == [] and await store.changes(db) == []

    with pytest.raises(SettingsRefused) as info:
        await change_settings(db, base, sets={"home": "/elsewhere", "tier1_timeout": 5}, reverts=["claude_bin"],
                              changed_by=BY)
    assert info.value.restart is True
    assert refused(info) == {
        "home": "home needs a restart: set TIEROPS_HOME in the environment or .env",
        "tier1_timeout": "tier1_timeout needs a restart: set TIEROPS_TIER1_TIMEOUT in the environment or .env",
        "claude_bin": "claude_bin needs a restart: set TIEROPS_CLAUDE_BIN in the environment or .env"}
    with pytest.raises(SettingsRefused) as info:  # a restart-only one among other problems: not a plain 409
        await change_settings(db, base, sets={"home": "/x", "no_such_thing": 1}, reverts=[], changed_by=BY)
    assert info.value.restart is False and refused(info)["no_such_thing"].startswith("there is no setting")
    with pytest.raises(SettingsRefused, match="both set and reverted"):
        await change_settings(db, base, sets={"interval": 60}, reverts=["interval"], changed_by=BY)
    assert await store.overrides(db) == []


async def test_revert_the_change_log_and_the_settings_in_force(db, make_settings, caplog):
    caplog.set_level(logging.INFO)
    base = make_settings(None, tier1_model="haiku-from-env")
    assert await effective_settings(db, base) is base  # nothing changed: the base itself
    first = await change_settings(db, base, sets={"tier1_model": "claude-haiku-4-5", "max_tier": 1,
                                                  "interval": base.interval}, reverts=[], changed_by=BY)
    assert [(r["name"], r["old_value"], r["new_value"], r["action"]) for r in first] == [
        ("tier1_model", "haiku-from-env", "claude-haiku-4-5", "set"), ("max_tier", 3, 1, "set")]  # interval: in force
    now = await effective_settings(db, base)
    assert (now.tier1_model, now.max_tier, now.tier(1).model) == ("claude-haiku-4-5", 1, "claude-haiku-4-5")
    assert (base.tier1_model, base.max_tier) == ("haiku-from-env", 3)  # the base is never changed
    assert now.state_dir == base.state_dir and now.db_path == base.db_path

    again = await change_settings(db, base, sets={"tier1_model": "claude-sonnet-4-5"}, reverts=[], changed_by="other")
    assert again[0]["old_value"] == "claude-haiku-4-5"
    reverted = await change_settings(db, base, sets={}, reverts=["tier1_model", "tier2_model"], changed_by=BY)
    assert [(r["name"], r["old_value"], r["new_value"], r["action"]) for r in reverted] == [
        ("tier1_model", "claude-sonnet-4-5", "haiku-from-env", "revert")]  # tier2_model was not changed: nothing
    assert [r["name"] for r in await store.overrides(db)] == ["max_tier"]
    log_rows = await store.changes(db)
    assert [(r["name"], r["action"], r["changed_by"]) for r in log_rows] == [
        ("tier1_model", "revert", BY), ("tier1_model", "set", "other"), ("max_tier", "set", BY),
        ("tier1_model", "set", BY)]
    assert all(datetime.fromisoformat(r["changed_at"]).tzinfo == UTC for r in log_rows)
    assert "setting tier1_model reverted at run time by " + BY in caplog.text

    # a stored value that no longer passes (written by hand here) is skipped, once, with a WARNING
    caplog.clear()
    async with db.write() as conn:
        await conn.execute("UPDATE runtime_settings SET value = '9' WHERE name = 'max_tier'")
        await conn.execute("INSERT INTO runtime_settings VALUES ('home', '\"/elsewhere\"', 'old', '2020-01-01T00:00:00Z')")
    caplog.set_level(logging.WARNING)
    for _ in range(2):
        now = await effective_settings(db, base)
        assert now.max_tier == 3 and now.state_dir == base.state_dir
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("setting home changed at run time by old is skipped: home cannot change at run time")
    assert warnings[1].startswith("setting max_tier changed at run time by " + BY + " is skipped: TIEROPS_MAX_TIER: "
                                  "Input should be less than or equal to 3; got 9; TIEROPS_MAX_TIER applies")


CHECKS = """\
interval: 5m
checks:
  - name: always-fails
    service: api
    command: "exit 3"
"""


async def test_a_run_time_change_is_used_by_the_next_cycle(db, make_settings, validator, tmp_path):
    checks = tmp_path / "checks.yaml"
    checks.write_text(CHECKS, encoding="utf-8")
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), escalating("api still failing"))}])
    sup = Supervisor(db, make_settings(fake, checks=checks), validator)
    assert sup.settings.tier1_model == "haiku"
    logged = await change_settings(db, sup.base_settings, sets={"tier1_model": "claude-run-time-1", "max_tier": 1,
                                                                "dry_run": True, "notify_min_severity": "critical"},
                                   reverts=[], changed_by=BY)
    assert len(logged) == 4
    chain = await sup.run_cycle(tier=0)  # no reload by hand: the cycle reads them at its start
    assert [(s["tier"], s["model"], s["status"]) for s in chain] == [
        (0, "tierops-probe", "completed"), (1, "claude-run-time-1", "completed")]
    [inv] = fake.invocations()
    assert inv["parsed"]["model"] == "claude-run-time-1"
    argv = json.loads(await db.fetchval("SELECT argv FROM sessions WHERE id = ?", (chain[1]["id"],)))
    assert argv[argv.index("--model") + 1] == "claude-run-time-1"
    row = await db.fetchone("SELECT dry_run, attention FROM sessions WHERE id = ?", (chain[1]["id"],))
    assert row["dry_run"] == 1  # TIEROPS_DRY_RUN changed at run time
    assert "TIEROPS_MAX_TIER" in row["attention"]  # it asked for tier 2; max_tier 1 (run time) stops it
    assert sup.notifier.settings.notify_min_severity == "critical" and sup.cycle_health.settings is sup.settings
    assert sup.base_settings.tier1_model == "haiku" and sup.base_settings.max_tier == 3
    [change] = [c for c in await store.changes(db) if c["name"] == "tier1_model"]
    assert (change["old_value"], change["new_value"], change["changed_by"]) == ("haiku", "claude-run-time-1", BY)

    # reverted: the next read of the settings (the next cycle's start) has the base value again
    await change_settings(db, sup.base_settings, sets={}, reverts=["tier1_model"], changed_by=BY)
    assert (await sup.reload_settings()).tier(1).model == "haiku"


async def test_a_shortened_interval_wakes_the_schedule(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    sup = Supervisor(db, make_settings(fake, interval=3600), validator)
    started = time.time()
    forever = asyncio.create_task(sup.run_forever(cycles=2))
    try:
        await wait_until(lambda: sup.next_run_at is not None and len(fake.invocations()) == 1,
                         what="the first cycle and its wait")
        assert sup.next_run_at.timestamp() - started > 3000  # waiting out an hour
        await change_settings(db, sup.base_settings, sets={"interval": 10}, reverts=[], changed_by=BY)
        await sup.reload_settings()  # what PUT /api/v1/config does after a change
        await wait_until(lambda: sup.next_run_at.timestamp() - started < 15, 5, "the wait to look again")
        assert sup.settings.interval == 10 and not forever.done()
    finally:
        forever.cancel()
        with pytest.raises(asyncio.CancelledError):
            await forever
