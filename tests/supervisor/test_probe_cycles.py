"""Tier 0 in the real supervisor: the probe (``python -m app probe``, a real
subprocess) runs a checks file against real local targets started here, its stream is ingested
like a claude session's, and incidents decide when a language model (the fake ``claude``) runs.

* a healthy cycle launches no CLI and costs $0;
* a failure opens one incident and escalates once, with the evidence, the inventory and the
  incident's key in tier 1's system prompt; later cycles count occurrences without escalating;
* recovery resolves the incident (with its duration);
* flapping is marked and escalated once; acknowledged and silenced incidents do not escalate;
* without the claude CLI the tier-0 session needs attention, with the evidence;
* ``tierops run --tier 0 --checks FILE --json`` prints the same cycle report as other runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from app.store import incidents
from app.supervisor.scheduler import Supervisor
from tests.fakes import claude_control as cc
from tests.helpers import healthy

pytestmark = pytest.mark.timeout(120)


class Target:
    """A local HTTP service the tests tell to fail or recover (``mode``: ok | fail)."""

    def __init__(self) -> None:
        self.mode = "ok"
        target = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                code, body = (200, b"ok") if target.mode == "ok" else (500, b"database connection refused")
                self.send_response(code)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/healthz"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def target() -> Iterator[Target]:
    t = Target()
    yield t
    t.close()


def checks_file(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "checks.yaml"
    path.write_text(f"""\
interval: 5m
hosts:
  - name: web-1
    ssh: ops@web-1.internal
checks:
  - name: api-health
    service: api
    http: {url}
    status: 200
    contains: ok
    severity: critical
    timeout: 5s
  - name: resolver
    service: dns
    dns: localhost
""", encoding="utf-8")
    return path


@pytest.fixture
def fake(tmp_path: Path) -> cc.FakeClaude:
    return cc.make_fake_claude(tmp_path / "bin", [{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])


@pytest.fixture
def supervisor(db, make_settings, validator, fake, target, tmp_path):
    def make(**overrides) -> Supervisor:
        settings = make_settings(fake, checks=checks_file(tmp_path, target.url), **overrides)
        return Supervisor(db, settings, validator)
    return make


async def cycle(sup: Supervisor) -> list[dict]:
    return [dict(link) for link in await sup.run_cycle(tier=0)]


async def test_a_healthy_cycle_runs_the_probe_only_and_costs_nothing(db, supervisor, fake):
    sup = supervisor()
    chain = await cycle(sup)
    assert [(s["tier"], s["model"], s["status"], s["source"]) for s in chain] == [
        (0, "tierops-probe", "completed", "structured_output")]
    assert chain[0]["cost_usd"] == 0 and chain[0]["escalation_needed"] is False
    assert fake.invocations() == []
    pk = chain[0]["id"]
    # ingested like any session: every stream line stored, the checks routed
    lines = [r[0] for r in await db.fetchall("SELECT type FROM activity WHERE session_pk = ? ORDER BY seq", (pk,))]
    # init, per check a tool_use and its tool_result (in the order the checks finish), the result
    assert lines[0] == "system" and lines[-1] == "result" and sorted(lines[1:-1]) == ["assistant"] * 2 + ["user"] * 2
    checks = await db.fetchall("SELECT name, status FROM check_results WHERE session_pk = ?", (pk,))
    assert sorted(tuple(r) for r in checks) == [("api-health", "healthy"), ("resolver", "healthy")]
    results = await incidents.latest_probe_results(db)
    assert {r["check_name"] for r in results} == {"api-health", "resolver"}
    assert all(r["latency_ms"] is not None for r in results)
    assert await incidents.list_incidents(db) == []


async def test_a_failure_opens_one_incident_escalates_once_then_counts(db, supervisor, fake, target):
    sup = supervisor()
    target.mode = "fail"
    first = await cycle(sup)
    assert [(s["tier"], s["status"]) for s in first] == [(0, "completed"), (1, "completed")]
    assert len(fake.invocations()) == 1
    system = fake.last()["parsed"]["append_system_prompt"]
    assert "check:api-health" in system and "HTTP 500" in system  # the incident, its key, its evidence
    assert "web-1" in system and "ops@web-1.internal" in system and "resolver" in system  # the inventory
    [inc] = await incidents.list_incidents(db)
    assert (inc["key"], inc["status"], inc["severity"], inc["occurrences"], inc["escalations"]) == (
        "check:api-health", "open", "critical", 1, 1)

    for _ in range(2):
        again = await cycle(sup)
        assert [s["tier"] for s in again] == [0]
        assert again[0]["escalation_needed"] is True and again[0]["escalated_to"] is None
        assert again[0]["escalation_gate"].startswith("not escalated: incident #")
        assert again[0]["attention"] is None
    assert len(fake.invocations()) == 1  # no new escalation
    [inc] = await incidents.list_incidents(db)
    assert (inc["occurrences"], inc["escalations"]) == (3, 1)

    target.mode = "ok"
    await cycle(sup)
    [inc] = await incidents.list_incidents(db)
    assert inc["status"] == "resolved" and inc["resolved_by"] == "auto" and inc["duration_s"] > 0
    kinds = [t["kind"] for t in await incidents.timeline(db, inc["id"])]
    assert kinds[0] == "opened" and kinds.count("escalated") == 1 and kinds.count("seen") >= 2
    assert kinds[-1] == "resolved"


async def test_recurring_past_the_threshold_escalates_again(db, supervisor, fake, target):
    sup = supervisor(escalate_after=2)
    target.mode = "fail"
    tiers = [[s["tier"] for s in await cycle(sup)] for _ in range(4)]
    assert tiers == [[0, 1], [0], [0, 1], [0]]
    [inc] = await incidents.list_incidents(db)
    assert (inc["occurrences"], inc["escalations"]) == (4, 2)


async def test_flapping_is_escalated_once(db, supervisor, fake, target):
    sup = supervisor(flap_count=1)
    tiers = []
    for mode in ("fail", "ok", "fail", "ok", "fail"):
        target.mode = mode
        tiers.append([s["tier"] for s in await cycle(sup)])
    # opens (escalates), resolves, reopens flapping (escalated for it), resolves, reopens: held
    assert tiers == [[0, 1], [0], [0, 1], [0], [0]]
    latest = (await incidents.list_incidents(db, status="open"))[0]
    assert latest["flapping"] and latest["escalations"] == 0


async def test_acknowledged_and_silenced_incidents_do_not_escalate(db, supervisor, fake, target):
    sup = supervisor(escalate_after=1)
    target.mode = "fail"
    await cycle(sup)
    [inc] = await incidents.list_incidents(db)
    await incidents.acknowledge(db, inc["id"], "alice via CLI", "known, fixing")
    assert [s["tier"] for s in await cycle(sup)] == [0]  # past the threshold, but acknowledged
    await incidents.silence(db, inc["id"], "2999-01-01T00:00:00.000Z", "alice via CLI", "maintenance")
    await incidents.resolve(db, inc["id"], "alice via CLI")
    chain = await cycle(sup)  # a new incident of the silenced key: not escalated
    assert [s["tier"] for s in chain] == [0] and "silenced until 2999" in chain[0]["escalation_gate"]
    assert len(fake.invocations()) == 1


async def test_without_the_claude_cli_tier0_alone_flags_the_incident(db, make_settings, validator, target, tmp_path):
    settings = make_settings(tmp_path / "no-such-claude", checks=checks_file(tmp_path, target.url))
    sup = Supervisor(db, settings, validator)
    target.mode = "fail"
    chain = await cycle(sup)
    assert [s["tier"] for s in chain] == [0]
    why = chain[0]["attention"]
    assert "check:api-health" in why and "opened" in why and "claude CLI not found" in why
    [inc] = await incidents.list_incidents(db)
    assert inc["status"] == "open" and "HTTP 500" in inc["evidence"]
    # a human was told once: the next failing cycle does not flag it again
    again = await cycle(sup)
    assert again[0]["attention"] is None and again[0]["escalation_gate"].startswith("not escalated")
    [inc] = await incidents.list_incidents(db)
    assert (inc["occurrences"], inc["escalations"]) == (2, 1)


async def test_tierops_run_tier0_prints_the_cycle_report(target, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIEROPS_")}
    env.update(TIEROPS_HOME=str(tmp_path / "home"), TIEROPS_CLAUDE_BIN=str(tmp_path / "absent"))
    path = checks_file(tmp_path, target.url)
    out = subprocess.run([sys.executable, "-m", "app", "run", "--tier", "0", "--checks", str(path), "--json"],
                         capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    [link] = json.loads(out.stdout)
    assert (link["tier"], link["model"], link["status"], link["cost_usd"]) == (0, "tierops-probe", "completed", 0)
    # and without a checks file, tier 0 is refused with what to do
    bad = subprocess.run([sys.executable, "-m", "app", "run", "--tier", "0"], capture_output=True, text=True,
                         env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert bad.returncode != 0 and "TIEROPS_CHECKS" in bad.stderr and "Traceback" not in bad.stderr


async def test_people_hear_of_the_incident_what_tierops_did_its_outcome_and_recovery(db, make_settings, validator,
                                                                                      fake, target, tmp_path):
    """End to end through real Apprise to a local receiver: one message per incident state change
    and one for the investigation's outcome, with the default minimum severity (warning). The
    opening says TierOps escalated (no separate escalation message), the outcome follows where the
    opening went, the recovery is sent although a resolution is no alarm; a second failing cycle
    sends nothing new."""
    from tests.receiver import Receiver

    async def received(count: int) -> list:
        for _ in range(750):  # the sender runs on this loop: wait without blocking it
            if len(receiver.requests) >= count:
                return list(receiver.requests)
            await asyncio.sleep(0.02)
        raise AssertionError(f"receiver got {[r.json()['title'] for r in receiver.requests]}, expected {count}")

    receiver = Receiver()
    try:
        settings = make_settings(fake, checks=checks_file(tmp_path, target.url),
                                 notify_urls=f"json://{receiver.address}/hook", public_url="https://tierops.example")
        sup = Supervisor(db, settings, validator)
        await sup.start()
        try:
            target.mode = "fail"
            await cycle(sup)
            titles = [r.json()["title"] for r in await received(2)]
            assert titles[0] == "[CRITICAL] api: api-health failing"
            assert titles[1] == "[CRITICAL] api: api-health — investigated by tier 1"
            first = receiver.requests[0].json()["message"]
            assert "HTTP 500" in first and "https://tierops.example/incidents/1" in first
            assert "Escalated to tier 1" in first
            assert "https://tierops.example/sessions/" in receiver.requests[1].json()["message"]
            await cycle(sup)  # still failing, already escalated: nothing new to say
            target.mode = "ok"
            await cycle(sup)
            got = await received(3)
            assert got[2].json()["title"].startswith("[RESOLVED] api: api-health recovered after")
            assert got[2].json()["type"] == "success"
            await asyncio.sleep(0.3)
            assert len(receiver.requests) == 3
        finally:
            await sup.shutdown()
    finally:
        receiver.close()


async def test_tier0_and_its_commands_hold_no_credentials(db, make_settings, validator, fake, tmp_path, monkeypatch):
    """The supervisor has the CLI's key; tier 0 must not: not in a command's environment (printed
    reversed it would pass redaction into the stored lines), not in the probe's own (a command can
    read /proc/$PPID/environ), not through the CLI's HOME (its stored login). A variable a check
    names is given to it, from the supervisor's environment."""
    key, pg = "sk-ant-api03-tier0-leak-0123456789abcdef", "pg-s3cret-horse-battery"
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    monkeypatch.setenv("PGPASSWORD", pg)
    state = tmp_path / "state"
    (state / "home" / ".claude").mkdir(parents=True)
    (state / "home" / ".claude" / ".credentials.json").write_text(json.dumps({"accessToken": key}))
    checks = tmp_path / "leaks.yaml"
    checks.write_text("""\
checks:
  - {name: cli-key, command: "bash -c 'rev <<< \\"$ANTHROPIC_API_KEY\\"'"}
  - {name: probe-env, command: "tr '\\\\0' '\\\\n' < /proc/$PPID/environ | rev"}
  - {name: cli-login, command: "echo home=$HOME; rev < $HOME/.claude/.credentials.json || true"}
  - {name: named, command: "bash -c 'rev <<< \\"$PGPASSWORD\\"'", env: [PGPASSWORD]}
""", encoding="utf-8")
    sup = Supervisor(db, make_settings(fake, checks=checks), validator)
    [link] = await cycle(sup)
    assert (link["tier"], link["status"]) == (0, "completed"), link
    stored = "\n".join(r[0] for r in await db.fetchall("SELECT raw FROM activity WHERE session_pk = ? ORDER BY seq",
                                                       (link["id"],)))
    assert "=HTAP" in stored  # the probe's environment was read (reversed: PATH=…)
    assert key[::-1][:16] not in stored and key[:16] not in stored
    assert f"home={state / 'probe-home'}" in stored  # a HOME of its own, not the CLI's
    assert pg[::-1] in stored  # named by its check: the operator's choice
    assert json.loads(stored.splitlines()[-1])["structured_output"]["events"] == []
