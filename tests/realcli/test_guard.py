"""The guard at the moment of action: the real CLI (2.1.197) runs TierOps' PreToolUse hook before
each Bash call of a tier-3 session, against the fake API scripting the calls.

The commands run programs from a folder put first on PATH (``sudo``, ``ssh``, ``docker``,
``systemctl``) that only append their arguments to a log: a call that ran is in the log, a call the
guard stopped is not, and nothing on this machine is restarted.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import httpx
import pytest

from app.store import guard as guard_store
from app.web.app import create_app
from tests.fakes.fake_anthropic import FakeAnthropic, bash, structured
from tests.realcli.test_supervisor_e2e import child_env, make_settings, open_supervisor  # noqa: F401 (fixture)

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(120)]

TIER3_MATCH = "# TierOps tier 3: remediate"  # first line of prompts/tier3-remediate.md
DONE = {
    "summary": "SUMMARY-GUARD: tried what the guard allowed.",
    "events": [{"level": "info", "service": "api", "message": "tried"}],
    "escalation": {"needed": False, "reason": None, "context": None, "failed_checks": []},
    "services_checked": [{"name": "api", "status": "degraded", "detail": "see the calls"}],
}
PROGRAMS = ("sudo", "ssh", "docker", "systemctl")


@pytest.fixture
def ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Stand-ins for the programs the commands name, first on PATH; returns their log."""
    folder = tmp_path / "programs"
    folder.mkdir()
    log = tmp_path / "ran.log"
    for name in PROGRAMS:
        body = 'exec "$@"' if name == "sudo" else f'echo "{name} $*" >> {log}; echo "{name} ok"'
        path = folder / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    return log


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def results_by_id(fake: FakeAnthropic) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for request in fake.message_requests:
        for block in FakeAnthropic.tool_results(request):
            out[block["tool_use_id"]] = block
    return out


def content_text(block: dict) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


async def test_a_dry_run_tier3_is_stopped_before_each_mutating_call(claude_bin, fake_api, child_env, ran,  # noqa: F811
                                                                       tmp_path) -> None:
    denied = ["sudo systemctl restart api", "ssh web-1 'docker restart api'",
              'bash -c "cd /srv && docker compose up -d"']
    fake_api.script(TIER3_MATCH, [*(bash(c) for c in denied), bash("systemctl status api"), structured(DONE)])
    settings = make_settings(claude_bin, tmp_path, dry_run=True, tier3_allowed_tools="Bash")

    async with open_supervisor(settings) as (sup, db):
        chain = await sup.run_cycle(tier=3, prompt="restore api")
        session = chain[0]
        decisions = await guard_store.decisions(db, session["id"], fresh=True)
        row = await db.fetchone("SELECT argv, guard_policy FROM sessions WHERE id = ?", (session["id"],))

    assert session["status"] == "completed", session
    assert lines(ran) == ["systemctl status api"]  # only the read-only call ran
    assert [(d["decision"], d["rule"]) for d in decisions] == [("deny", "dry-run")] * 3 + [("allow", "pass")]
    assert [d["command"] for d in decisions] == [*denied, "systemctl status api"]
    assert all(d["tool_use_id"] for d in decisions) and decisions[0]["kind"] is None
    # the model read why: the guard's reason came back as the tool's error
    results = results_by_id(fake_api)
    for d in decisions[:3]:
        block = results[d["tool_use_id"]]
        assert block.get("is_error") is True and "[TierOps guard: dry-run]" in content_text(block), block
    assert "systemctl ok" in content_text(results[decisions[3]["tool_use_id"]])
    argv = json.loads(row["argv"])
    hooks = json.loads(argv[argv.index("--settings") + 1])["hooks"]["PreToolUse"]
    assert hooks[0]["matcher"].startswith("Bash") and " guard --db " in hooks[0]["hooks"][0]["command"]
    assert "--include-hook-events" in argv
    assert json.loads(row["guard_policy"])["dry_run"] is True


async def test_a_third_restart_within_its_cooldown_is_denied_at_the_call(claude_bin, fake_api, child_env,  # noqa: F811
                                                                          ran, tmp_path) -> None:
    restarts = [f"sudo systemctl restart api.service && echo restart-{n}" for n in (1, 2, 3)]
    fake_api.script(TIER3_MATCH, [*(bash(c) for c in restarts), structured(DONE)])
    settings = make_settings(claude_bin, tmp_path, tier3_allowed_tools="Bash", cooldowns="restart:2/1h")

    async with open_supervisor(settings) as (sup, db):
        chain = await sup.run_cycle(tier=3, prompt="restore api")  # an operator's run: approved
        decisions = await guard_store.decisions(db, chain[0]["id"], fresh=True)
        counted = await db.fetchall("SELECT action, service, outcome FROM cooldowns WHERE session_pk = ?",
                                    (chain[0]["id"],))

    assert lines(ran) == ["systemctl restart api.service"] * 2
    assert [(d["decision"], d["rule"], d["kind"], d["service"]) for d in decisions] == [
        ("allow", "pass", "restart", "api"), ("allow", "pass", "restart", "api"),
        ("deny", "cooldown", "restart", "api")]
    assert "restart api: 2 of 2 in 1h used; next allowed at" in decisions[2]["reason"]
    assert [tuple(r) for r in counted] == [("restart", "api", "started")] * 2
    block = results_by_id(fake_api)[decisions[2]["tool_use_id"]]
    assert block.get("is_error") is True and "[TierOps guard: cooldown]" in content_text(block)
    # a live tier stopped from acting needs a human; the page shows each decision on its call's line
    assert chain[0]["attention"] and "the guard denied 1 call that would change state" in chain[0]["attention"]
    app = create_app(settings)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as cl:
        html = (await cl.get(f"/sessions/{chain[0]['id']}")).text
        metrics = (await cl.get("/metrics")).text
    assert html.count("guard: allowed (pass)") == 2 and html.count("guard: denied (cooldown)") == 1
    assert 'id="guard"' in html and "2 of 2 in 1h used" in html
    assert 'tierops_guard_decisions_total{decision="deny",rule="cooldown",tier="3"} 1.0' in metrics


async def test_a_guard_that_cannot_answer_in_time_denies(claude_bin, fake_api, child_env, ran,  # noqa: F811
                                                         tmp_path) -> None:
    fake_api.script(TIER3_MATCH, [bash("sudo systemctl restart api"), structured(DONE)])
    # 0.1 s: the guard cannot even start in that time, so its own deadline denies the call
    settings = make_settings(claude_bin, tmp_path, tier3_allowed_tools="Bash", guard_timeout=0.1)

    async with open_supervisor(settings) as (sup, db):
        chain = await sup.run_cycle(tier=3, prompt="restore api")
        hooks = await db.fetchall("SELECT raw FROM activity WHERE session_pk = ? AND type = 'system'",
                                  (chain[0]["id"],))

    assert lines(ran) == []
    blocks = list(results_by_id(fake_api).values())
    assert len(blocks) == 1 and blocks[0].get("is_error") is True
    assert "no decision within 0.1 s" in content_text(blocks[0]), blocks[0]
    # the stream carried the hook's answer (--include-hook-events), stored with the session
    assert any("hook_response" in (r["raw"] or "") for r in hooks), [r["raw"][:200] for r in hooks]
