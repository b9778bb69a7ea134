"""End-to-end: the supervisor runs the REAL claude CLI (2.1.197) against the fake Messages API.

Nothing between the supervisor and the CLI is faked: ``Supervisor.run_cycle`` builds the argv
(``--json-schema`` with the wire schema, ``--append-system-prompt``, ``--allowedTools`` ...),
the child environment (from ``os.environ``), the session cwd and HOME under the state dir,
spawns the binary, streams its stdout into SQLite, resumes it for output recovery and kills it on
timeout. Only the model is scripted (``tests/fakes/fake_anthropic.py``).

Scripts are chosen by text unique to each tier prompt file (``prompts/tier{1,2}-*.md``), which
the CLI sends as the user prompt; the operator prompt given to ``run_cycle`` is the same for
every tier of a chain, so it cannot tell tiers apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from app.config import READ_ONLY_TOOLS, Settings
from app.output.validate import OutputValidator
from app.store.db import Database
from app.supervisor.scheduler import Supervisor
from tests.fakes.fake_anthropic import FakeAnthropic, bash, hang, structured, text

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(90)]

TIER1_MATCH = "# TierOps tier 1: observe"  # first line of prompts/tier1-observe.md
TIER2_MATCH = "# TierOps tier 2: investigate"  # first line of prompts/tier2-investigate.md
OPERATOR_PROMPT = "MARKER-E2E-OPERATOR: check the host"
DISABLE_VARS = ("DISABLE_AUTOUPDATER", "DISABLE_TELEMETRY", "DISABLE_ERROR_REPORTING")

HEALTHY = {
    "summary": "SUMMARY-HEALTHY: the host is fine; echo ok answered.",
    "events": [{"level": "info", "service": None, "message": "echo ok answered"}],
    "memories": [{"key": "host:baseline", "value": "echo ok answers instantly"}],
    "escalation": {"needed": False, "reason": None, "context": None, "failed_checks": []},
    "services_checked": [{"name": "host", "status": "healthy", "detail": "echo ok"}],
}
ESCALATE = {
    "summary": "SUMMARY-T1-7c2e: nginx is down on web-1.",
    "events": [{"level": "critical", "service": "nginx", "message": "nginx.service failed"}],
    "escalation": {
        "needed": True,
        "reason": "REASON-T1-4f1a nginx.service is failed",
        "context": "CONTEXT-T1-9b3d started failing at 03:12 UTC after a config reload",
        "failed_checks": ["FAILED-CHECK-T1-51aa nginx.service: failed (exit-code) per systemctl --failed"],
    },
    "services_checked": [{"name": "nginx", "status": "down", "detail": "exit-code"}],
}


@pytest.fixture
def child_env(monkeypatch: pytest.MonkeyPatch, fake_api: FakeAnthropic) -> None:
    """The supervisor builds the child env from os.environ: set exactly what the CLI needs, and
    drop any ANTHROPIC_*/CLAUDE_CODE_* the host shell has (they would reach the child too)."""
    for name in list(os.environ):
        if name.startswith(("ANTHROPIC_", "CLAUDE_CODE_")) or name.startswith("TIEROPS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_api.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-dummy")
    monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "1")
    monkeypatch.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
    for name in DISABLE_VARS:
        monkeypatch.setenv(name, "1")


def make_settings(claude_bin: str, tmp_path: Path, **overrides) -> Settings:
    values = {
        "claude_bin": claude_bin,
        "home": tmp_path / "state",
        "db": tmp_path / "t.db",
        "child_env_allow": ",".join(DISABLE_VARS),
        "tier1_allowed_tools": "Bash",
        "tier2_allowed_tools": "Bash",
        "tier1_timeout": 60,
        "tier2_timeout": 60,
        "kill_grace": 2,
    }
    values.update(overrides)
    return Settings(**values)


@contextlib.asynccontextmanager
async def open_supervisor(settings: Settings) -> AsyncIterator[tuple[Supervisor, Database]]:
    db = await Database.open(settings.db)
    try:
        yield Supervisor(db, settings, OutputValidator.from_file()), db
    finally:
        await db.close()


async def activity(db: Database, session_pk: int) -> list[dict]:
    rows = await db.fetchall("SELECT * FROM activity WHERE session_pk = ? ORDER BY seq", (session_pk,))
    return [dict(r) for r in rows]


async def session_row(db: Database, session_pk: int) -> dict:
    return dict(await db.fetchone("SELECT * FROM sessions WHERE id = ?", (session_pk,)))


def requests_of(fake: FakeAnthropic, match: str) -> list[dict]:
    return [r for r in fake.message_requests if r.get("script") == match]


# --------------------------------------------------------------------------- (a)


async def test_tier1_healthy_structured_output(claude_bin, fake_api, child_env, tmp_path) -> None:
    fake_api.script(TIER1_MATCH, [bash("echo ok", text="Checking the host."), structured(HEALTHY)])
    settings = make_settings(claude_bin, tmp_path)

    async with open_supervisor(settings) as (sup, db):
        chain = await sup.run_cycle(prompt=OPERATOR_PROMPT)

        assert len(chain) == 1, chain
        s = chain[0]
        row = await session_row(db, s["id"])
        assert s["status"] == "completed", (s, row["stderr_tail"])
        assert s["source"] == "structured_output"
        assert s["degraded"] is False
        assert s["attempts"] == 1
        assert s["escalated_to"] is None and s["parent_session_id"] is None
        assert s["escalation_needed"] is False and s["attention"] is None
        assert row["exit_code"] == 0 and row["is_error"] == 0 and row["result_subtype"] == "success"
        assert json.loads(row["structured_output"]) == HEALTHY
        assert row["cli_version"] == "2.1.197"
        assert row["session_id"] == fake_api.message_requests[0]["session_id"]
        assert row["cwd"] == str((tmp_path / "state" / "sessions" / str(s["id"])).resolve())

        # the findings were routed from the structured output
        events = await db.fetchall("SELECT level, message, source FROM events WHERE session_pk = ?", (s["id"],))
        assert [(e["level"], e["message"], e["source"]) for e in events] == [
            ("info", "echo ok answered", "structured_output")]
        checks = await db.fetchall("SELECT name, status FROM check_results WHERE session_pk = ?", (s["id"],))
        assert [(c["name"], c["status"]) for c in checks] == [("host", "healthy")]

        # activity: every stdout line stored, in order, init first and result last
        rows = await activity(db, s["id"])
        assert len(rows) >= 5 and len(rows) == row["line_count"]
        assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
        assert (rows[0]["type"], rows[0]["subtype"]) == ("system", "init")
        assert rows[-1]["type"] == "result"
        init = json.loads(rows[0]["raw"])
        # The CLI silently ignores a --json-schema it cannot compile (reference §5.5); the
        # StructuredOutput tool in init proves the wire schema was accepted.
        assert "StructuredOutput" in init["tools"], init["tools"]
        assert init["cwd"] == row["cwd"]
        # the Bash tool really ran in the child and its output was recorded
        tool_results = [json.loads(r["raw"]) for r in rows if r["type"] == "user"]
        assert any(isinstance(t.get("tool_use_result"), dict) and t["tool_use_result"]["stdout"] == "ok"
                   for t in tool_results), tool_results

    reqs = fake_api.message_requests
    assert len(reqs) == 2 and all(r["script"] == TIER1_MATCH for r in reqs)
    first = reqs[0]
    assert "StructuredOutput" in FakeAnthropic.tool_names(first)
    assert FakeAnthropic.prompt_text(first).endswith(OPERATOR_PROMPT)
    assert FakeAnthropic.system_text(first).rstrip().endswith(row["system_prompt"].rstrip())
    assert "You are TierOps tier 1 (observe)" in FakeAnthropic.system_text(first)
    assert first["headers"]["x-api-key"] == "sk-test-dummy"
    # the schema the CLI offered the model is TierOps' own schema
    so_tool = next(t for t in first["body"]["tools"] if t["name"] == "StructuredOutput")
    assert set(so_tool["input_schema"]["required"]) == {"summary", "events", "escalation", "services_checked"}


# --------------------------------------------------------------------------- (b)


async def test_tier1_escalates_to_tier2_with_handoff(claude_bin, fake_api, child_env, tmp_path) -> None:
    fake_api.script(TIER1_MATCH, [structured(ESCALATE)])
    fake_api.script(TIER2_MATCH, [bash("echo ok"), structured(HEALTHY)])
    settings = make_settings(claude_bin, tmp_path)

    async with open_supervisor(settings) as (sup, db):
        chain = await sup.run_cycle(prompt=OPERATOR_PROMPT)

        assert [(s["tier"], s["status"], s["source"]) for s in chain] == [
            (1, "completed", "structured_output"), (2, "completed", "structured_output")], chain
        t1, t2 = chain
        assert t1["escalation_needed"] is True and t1["escalation_reason"] == ESCALATE["escalation"]["reason"]
        assert t1["escalated_to"] == t2["id"] and t1["escalated_to_session_id"] == t2["session_id"]
        assert t2["parent_session_id"] == t1["id"]
        assert t2["escalation_needed"] is False and t2["attention"] is None
        assert t1["session_id"] != t2["session_id"]
        row2 = await session_row(db, t2["id"])
        assert row2["trigger"] == "escalation" and row2["chain_id"] == t1["id"]

    t2_reqs = requests_of(fake_api, TIER2_MATCH)
    assert len(t2_reqs) == 2, [r["script"] for r in fake_api.message_requests]
    sys_text = FakeAnthropic.system_text(t2_reqs[0])
    esc = ESCALATE["escalation"]
    # the handoff travels in --append-system-prompt, at the end of the system prompt
    for needle in (esc["reason"], esc["context"], *esc["failed_checks"], ESCALATE["summary"],
                   "You are TierOps tier 2 (investigate)", f"## Escalation from tier 1 (session {t1['id']})",
                   "- nginx: down — exit-code"):
        assert needle in sys_text, needle
    assert sys_text.rstrip().endswith(row2["system_prompt"].rstrip())
    # tier 2 is told its own prompt file plus the same operator request
    assert FakeAnthropic.prompt_text(t2_reqs[0]).startswith(TIER2_MATCH)
    assert OPERATOR_PROMPT in FakeAnthropic.prompt_text(t2_reqs[0])
    # tier 1 got no handoff
    t1_sys = FakeAnthropic.system_text(requests_of(fake_api, TIER1_MATCH)[0])
    assert "Escalation from tier" not in t1_sys and esc["reason"] not in t1_sys


# --------------------------------------------------------------------------- (c)


async def test_text_only_answer_recovered_by_resume(claude_bin, fake_api, child_env, tmp_path) -> None:
    # 1st run: text, the CLI's one nudge, text again → success without structured_output.
    # 2nd run (--resume, same CLI session id, so the fake continues the same script): valid output.
    fake_api.script(TIER1_MATCH, [text("TEXT-ONLY-1: all fine."), text("TEXT-ONLY-2: still fine."),
                                  structured(HEALTHY)])
    settings = make_settings(claude_bin, tmp_path)

    async with open_supervisor(settings) as (sup, db):
        chain = await sup.run_cycle(prompt=OPERATOR_PROMPT)

        assert len(chain) == 1, chain
        s = chain[0]
        row = await session_row(db, s["id"])
        assert s["status"] == "completed", (s, row["stderr_tail"])
        assert s["attempts"] == 2
        assert s["degraded"] is False
        assert s["source"] == "structured_output"
        assert json.loads(row["structured_output"]) == HEALTHY
        attempts = [dict(r) for r in await db.fetchall(
            "SELECT attempt, kind, result_subtype, has_output, valid FROM output_attempts"
            " WHERE session_pk = ? ORDER BY attempt", (s["id"],))]
        assert attempts == [
            {"attempt": 1, "kind": "stream", "result_subtype": "success", "has_output": 0, "valid": 0},
            {"attempt": 2, "kind": "resume", "result_subtype": "success", "has_output": 1, "valid": 1},
        ]
        rows = await activity(db, s["id"])
        assert {r["attempt"] for r in rows} == {1, 2}
        inits = [json.loads(r["raw"]) for r in rows if (r["type"], r["subtype"]) == ("system", "init")]
        assert len(inits) == 2 and inits[0]["session_id"] == inits[1]["session_id"] == row["session_id"]
        # the schema was passed again on resume (the CLI does not remember it)
        assert all("StructuredOutput" in i["tools"] for i in inits)

    reqs = fake_api.message_requests
    assert [r["turn_index"] for r in reqs] == [0, 1, 2], [(r["turn_index"], r["session_id"]) for r in reqs]
    assert len({r["session_id"] for r in reqs}) == 1
    resumed = reqs[2]
    assert "[structured-output-enforce]" in FakeAnthropic.last_prompt_text(reqs[1])  # the CLI's own nudge
    last_prompt = FakeAnthropic.last_prompt_text(resumed)
    assert "did not call the StructuredOutput tool" in last_prompt, last_prompt
    assert "TEXT-ONLY-2" in json.dumps(resumed["body"]["messages"])  # the old conversation is replayed
    # The CLI forgets --append-system-prompt on resume: the supervisor must have passed it again.
    sys_text = FakeAnthropic.system_text(resumed)
    assert "You are TierOps tier 1 (observe)" in sys_text
    assert sys_text.rstrip().endswith(row["system_prompt"].rstrip())
    assert "StructuredOutput" in FakeAnthropic.tool_names(resumed)


# --------------------------------------------------------------------------- (d)


def _procs_under(path: Path) -> list[psutil.Process]:
    """Live processes whose cwd or command line mention ``path`` (zombies excluded)."""
    needle = str(path)
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.pid == os.getpid() or p.status() == psutil.STATUS_ZOMBIE:
                continue
            if needle in p.cwd() or any(needle in a for a in p.cmdline()):
                found.append(p)
    return found


async def test_timeout_kills_the_cli_and_leaves_nothing(claude_bin, fake_api, child_env, tmp_path) -> None:
    fake_api.script(TIER1_MATCH, [hang(60)])
    # 8 s: long enough for the CLI to start and print init on a loaded machine (it takes ~1 s idle).
    settings = make_settings(claude_bin, tmp_path, tier1_timeout=8, kill_grace=1)
    me = psutil.Process()
    seen: dict[int, str] = {}
    before = {child.pid for child in me.children(recursive=True)}  # the worker's own helpers, not this run's

    async def watch() -> None:
        while True:
            for child in me.children(recursive=True):
                if child.pid in before:
                    continue
                with contextlib.suppress(psutil.Error):
                    seen.setdefault(child.pid, " ".join(child.cmdline())[:200])
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch())
    started = time.monotonic()
    try:
        async with open_supervisor(settings) as (sup, db):
            chain = await sup.run_cycle(prompt=OPERATOR_PROMPT)
            elapsed = time.monotonic() - started
            assert len(chain) == 1, chain
            s = chain[0]
            row = await session_row(db, s["id"])
            assert s["status"] == "failed"
            assert "timed out" in s["status_reason"], s["status_reason"]
            assert s["attention"] and "timed out" in s["attention"]
            assert s["escalated_to"] is None
            assert row["line_count"] >= 1  # init was recorded before the API hung
            assert row["session_id"]
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher

    assert 8 <= elapsed < 30, elapsed
    assert fake_api.message_requests, "the CLI never reached the (hanging) API"
    assert any(claude_bin in cmd for cmd in seen.values()), seen
    alive = []
    for pid in seen:
        with contextlib.suppress(psutil.NoSuchProcess):
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.append((pid, seen[pid]))
    assert not alive, f"processes left behind: {alive}"
    assert not _procs_under(tmp_path), _procs_under(tmp_path)


# --------------------------------------------------------------------------- default tier 1 rules


async def test_default_tier1_allow_rules_reach_the_cli(claude_bin, fake_api, child_env, tmp_path) -> None:
    """The default READ_ONLY_TOOLS rules (``Bash(curl *)``, ``Bash(ps *)``, with spaces inside the
    parentheses, comma-joined after the variadic ``--allowedTools``) are honoured by the real CLI:
    without them, both commands are refused in -p mode ("This command requires approval")."""
    url = f"{fake_api.url}/health"
    fake_api.script(TIER1_MATCH, [
        bash(f"curl -sS -m 5 -o /dev/null -w '%{{http_code}}' {url}"),
        bash("ps -eo pid,comm"),
        structured(HEALTHY),
    ])
    settings = make_settings(claude_bin, tmp_path, tier1_allowed_tools=READ_ONLY_TOOLS)

    async with open_supervisor(settings) as (sup, db):
        [s] = await sup.run_cycle(prompt=OPERATOR_PROMPT)
        row = await session_row(db, s["id"])
        assert s["status"] == "completed" and s["source"] == "structured_output", (s, row["stderr_tail"])
        assert json.loads(row["permission_denials"]) == []
        results = [b for r in await activity(db, s["id"]) if r["type"] == "user"
                   for b in json.loads(r["raw"])["message"]["content"] if b.get("type") == "tool_result"]
        assert [b.get("is_error") for b in results[:2]] == [False, False], results
        assert results[0]["content"] == "404"  # the fake answers GET /health with 404
    assert any(r["method"] == "GET" and r["path"] == "/health" for r in fake_api.requests)


async def test_tier1_can_read_a_host_file_outside_its_cwd(claude_bin, fake_api, child_env, tmp_path) -> None:
    """Regression: the CLI blocks cat/tail/head/grep outside its working directories whatever the
    allow rules say; TIEROPS_ADD_DIRS (default /) is passed as --add-dir."""
    log = tmp_path / "host" / "app.log"
    log.parent.mkdir()
    log.write_text("first line\nLAST-LOG-LINE-3d9e\n")
    fake_api.script(TIER1_MATCH, [bash(f"tail -n 1 {log}"), structured(HEALTHY)])
    settings = make_settings(claude_bin, tmp_path, tier1_allowed_tools=READ_ONLY_TOOLS)

    async with open_supervisor(settings) as (sup, db):
        [s] = await sup.run_cycle(prompt=OPERATOR_PROMPT)
        row = await session_row(db, s["id"])
        assert s["status"] == "completed", (s, row["stderr_tail"])
        results = [b for r in await activity(db, s["id"]) if r["type"] == "user"
                   for b in json.loads(r["raw"])["message"]["content"] if b.get("type") == "tool_result"]
        # today: is_error true, "tail in '…/app.log' was blocked. For security, Claude Code may only
        # read the end of files from the allowed working directories for this session: '…/sessions/1'."
        assert results and results[0].get("is_error") is False, results[0]
        assert results[0]["content"] == "LAST-LOG-LINE-3d9e"
        assert json.loads(row["permission_denials"]) == []


# --------------------------------------------------------------- tier 0 and incidents


async def test_tier0_probe_failure_escalates_once_to_the_real_cli_with_the_evidence(
        claude_bin, fake_api, child_env, tmp_path) -> None:
    """The probe finds a closed port; tier 1 (the real CLI) is started once with the incident's
    key, its evidence and the inventory in the system prompt the model receives; a second failing
    cycle runs the probe only."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    closed = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    checks = tmp_path / "checks.yaml"
    checks.write_text(f"""\
hosts:
  - name: db-host-7f3a
    ssh: ops@db-host-7f3a.internal
checks:
  - {{name: db-port, service: postgres, tcp: "127.0.0.1:{closed}", severity: critical, timeout: 3s}}
  - {{name: resolver, service: dns, dns: localhost}}
""", encoding="utf-8")
    answer = {**HEALTHY, "events": [{"level": "critical", "service": "postgres", "key": "check:db-port",
                                     "message": "postgres is not listening"}]}
    fake_api.script(TIER1_MATCH, [structured(answer)])
    settings = make_settings(claude_bin, tmp_path, checks=checks)

    async with open_supervisor(settings) as (sup, db):
        first = await sup.run_cycle(tier=0)
        assert [(s["tier"], s["status"]) for s in first] == [(0, "completed"), (1, "completed")], first
        second = await sup.run_cycle(tier=0)
        assert [s["tier"] for s in second] == [0] and second[0]["escalation_gate"]
        rows = await db.fetchall("SELECT key, status, occurrences, escalations FROM incidents")
        # tier 1 reported under the incident's key: still one incident
        assert [tuple(r) for r in rows] == [("check:db-port", "open", 2, 1)]

    reqs = requests_of(fake_api, TIER1_MATCH)
    assert len(reqs) == 1
    system = FakeAnthropic.system_text(reqs[0])
    assert "check:db-port" in system and f"127.0.0.1:{closed}" in system
    assert "refused" in system.lower()  # the probe's evidence
    assert "db-host-7f3a" in system and "ops@db-host-7f3a.internal" in system  # the inventory
