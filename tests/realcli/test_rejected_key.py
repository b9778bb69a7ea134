"""End to end with the REAL claude CLI (2.1.197) against the fake Messages API answering 401: the
CLI retries a rejected key like a 5xx, about three minutes with its default retries (reference §6,
fixture ``f_api_401``); the supervisor stops it at its first ``api_retry`` with ``error_status``
401, fails the session with what to do, pauses the model tiers, and the next cycle does not start
tier 1. A restart with a key the API accepts lifts the pause by itself.

Nothing between the supervisor and the CLI is faked. ``CLAUDE_CODE_MAX_RETRIES`` is left unset (the
CLI's default, 10 retries), and the tier's timeout (60 s) is far below the CLI's three minutes of
retries: a session that ended any other way than by the early stop would say "timed out"."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from app.config import Settings
from app.output.validate import OutputValidator
from app.store.db import Database
from app.supervisor.credentials import ModelTiersPaused, read_pause
from app.supervisor.scheduler import Supervisor
from tests.fakes.fake_anthropic import FakeAnthropic, structured

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(150)]

GOOD, BAD = "sk-ant-test-accepted-key", "sk-ant-test-rejected-key"
TIER1_MATCH = "# TierOps tier 1: observe"
DISABLE_VARS = ("DISABLE_AUTOUPDATER", "DISABLE_TELEMETRY", "DISABLE_ERROR_REPORTING")
HEALTHY = {
    "summary": "All fine.", "events": [], "memories": [],
    "escalation": {"needed": False, "reason": None, "context": None, "failed_checks": []},
    "services_checked": [{"name": "host", "status": "healthy", "detail": "ok"}],
}


@pytest.fixture
def api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(keys={GOOD}) as fake:
        fake.script(TIER1_MATCH, [structured(HEALTHY)])
        yield fake


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, api: FakeAnthropic) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith(("ANTHROPIC_", "CLAUDE_CODE_", "TIEROPS_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", BAD)
    monkeypatch.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
    for name in DISABLE_VARS:
        monkeypatch.setenv(name, "1")
    return monkeypatch


@contextlib.asynccontextmanager
async def supervisor(settings: Settings) -> AsyncIterator[tuple[Supervisor, Database]]:
    db = await Database.open(settings.db)
    sup = Supervisor(db, settings, OutputValidator.from_file())
    try:
        yield sup, db
    finally:
        await sup.shutdown()
        await db.close()


async def test_a_rejected_key_ends_the_session_at_once_and_pauses_tier_1(claude_bin, api, environment, tmp_path: Path,
                                                                         caplog):
    settings = Settings(claude_bin=claude_bin, home=tmp_path / "state", db=tmp_path / "t.db",
                        child_env_allow=",".join(DISABLE_VARS), tier1_allowed_tools="Bash", tier1_timeout=60,
                        kill_grace=2)
    async with supervisor(settings) as (sup, db):
        [s] = await sup.run_cycle()
        assert s["status"] == "failed", s
        assert s["status_reason"].startswith("API key rejected (HTTP 401 authentication_failed): the API refused the "
                                             "credentials the claude CLI was given"), s["status_reason"]
        assert "timed out" not in s["status_reason"]
        assert s["attention"].startswith("tier 1 failed: API key rejected (HTTP 401")
        refused = [r for r in api.requests if r["kind"] == "unauthorized"]
        assert 1 <= len(refused) <= 3, len(refused)  # not the CLI's ten retries
        took = await db.fetchval("SELECT (julianday(ended_at) - julianday(started_at)) * 86400 FROM sessions")
        print(f"session {s['id']} ended after {took:.1f} s")  # measured, not asserted (see the module docstring)
        retries = await db.fetchall("SELECT raw FROM activity WHERE session_pk = ? AND subtype = 'api_retry'",
                                    (s["id"],))
        assert retries and '"error_status":401' in retries[0]["raw"].replace(" ", "")
        pause = await read_pause(db)
        assert pause is not None and pause.session == s["id"] and pause.reason == "HTTP 401 authentication_failed"
        assert BAD not in (await db.fetchval("SELECT value FROM monitor_state"))

        # the next cycle does not start tier 1: a scheduled one is skipped, a manual one refused
        await sup.run_forever(cycles=1)
        assert sup.last_cycle_status.startswith("skipped: model tiers paused: the API rejected the credentials")
        with pytest.raises(ModelTiersPaused):
            await sup.run_cycle()
        assert [r for r in api.requests if r["kind"] == "unauthorized"] == refused  # no new request
        assert await db.fetchval("SELECT COUNT(*) FROM sessions") == 1

    # a restart with a key the API accepts: the pause lifts by itself, tier 1 runs again
    environment.setenv("ANTHROPIC_API_KEY", GOOD)
    async with supervisor(settings) as (sup, db):
        with caplog.at_level(logging.INFO, logger="app.supervisor.credentials"):
            [s] = await sup.run_cycle()
        assert s["status"] == "completed", s
        assert await read_pause(db) is None
    assert any("model tiers resumed: the credentials changed" in r.getMessage() for r in caplog.records)
