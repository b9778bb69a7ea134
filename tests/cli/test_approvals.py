"""``tierops approvals``, run as real subprocesses against a real SQLite file and the
fake claude CLI. The approvals are made the real way: ``tierops run --tier 2`` whose tier 2
escalates to tier 3, which waits for an approval by default."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes import claude_control as cc
from tests.helpers import escalating, healthy
from tests.supervisor.test_cli_run import cli_env, tierops

pytestmark = pytest.mark.timeout(90)

OPERATOR = {"USER": "opsbot", "LOGNAME": "opsbot"}  # getpass.getuser() reads these first
REPO = Path(__file__).resolve().parents[2]


def one_error_line(out: subprocess.CompletedProcess, *expected: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith("tierops: error: "), out.stderr
    for text in expected:
        assert text in out.stderr, (text, out.stderr)


@pytest.fixture
def gated(tmp_path: Path) -> tuple[dict[str, str], cc.FakeClaude, dict]:
    """A chain stopped at a pending approval to run tier 3; the env to run tierops with."""
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), escalating("restart the stuck worker"), cost=0.02)},
        {"lines": cc.structured_stream(cc.new_session_id(), healthy("Worker restarted."), cost=0.05)}])
    env = cli_env(tmp_path, fake.path, TIEROPS_TIER3_TIMEOUT="30", **OPERATOR)
    out = tierops(tmp_path, env, "run", "--tier", "2")
    assert out.returncode == 0, out.stderr
    assert "waiting for approval #1 to run tier 3" in out.stdout
    listed = tierops(tmp_path, env, "approvals", "--json")
    assert listed.returncode == 0, listed.stderr
    [approval] = json.loads(listed.stdout)
    return env, fake, approval


def test_list_and_show(tmp_path, gated):
    env, _fake, a = gated
    assert (a["id"], a["status"], a["tier"]) == (1, "pending", 3)
    out = tierops(tmp_path, env, "approvals")
    assert out.returncode == 0, out.stderr
    head, row = out.stdout.splitlines()
    assert head.split()[:5] == ["ID", "STATUS", "TIER", "SESSION", "REQUESTED"]
    assert row.split()[:4] == ["1", "pending", "3", str(a["session_pk"])] and "expires" in row
    assert tierops(tmp_path, env, "approvals", "--status", "approved").stdout.strip() == "no approved approvals"
    shown = tierops(tmp_path, env, "approvals", "show", "1")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"approval 1: pending, run tier 3 after session {a['session_pk']}")
    assert "handoff:\n  ## Escalation from tier 2" in shown.stdout and "Reason: restart the stuck worker" in shown.stdout
    assert json.loads(tierops(tmp_path, env, "approvals", "show", "1", "--json").stdout) == a
    one_error_line(tierops(tmp_path, env, "approvals", "show", "7"), "no approval 7")


def test_approve_runs_the_rest_of_the_chain_and_prints_it(tmp_path, gated):
    env, fake, a = gated
    out = tierops(tmp_path, env, "approvals", "approve", "1", "--note", "go")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "approval 1 approved by opsbot via CLI"
    assert lines[1].startswith(f"tier 2 (sonnet) session {a['session_pk']} ")
    assert any(line.startswith("tier 3 (opus) session ") and ": completed" in line for line in lines)
    assert lines[-1] == "chain: 2 session(s), $0.0700"
    assert a["handoff"] in fake.last()["parsed"]["append_system_prompt"]
    done = json.loads(tierops(tmp_path, env, "approvals", "show", "1", "--json").stdout)
    assert (done["status"], done["decided_by"], done["note"]) == ("approved", "opsbot via CLI", "go")
    assert done["child_session_pk"] == a["session_pk"] + 1
    again = tierops(tmp_path, env, "approvals", "approve", "1")
    one_error_line(again, "approval #1 is already approved by opsbot via CLI")
    assert len(fake.invocations()) == 2


def test_approve_json_prints_the_chain(tmp_path, gated):
    env, _fake, a = gated
    out = tierops(tmp_path, env, "approvals", "approve", "1", "--json")
    assert out.returncode == 0, out.stderr
    chain = json.loads(out.stdout)
    assert [(s["tier"], s["status"]) for s in chain] == [(2, "completed"), (3, "completed")]
    assert chain[1]["parent_session_id"] == a["session_pk"] == chain[0]["id"]


def test_reject(tmp_path, gated):
    env, fake, a = gated
    out = tierops(tmp_path, env, "approvals", "reject", "1", "--note", "not now")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"approval 1 (tier 3 after session {a['session_pk']}) rejected by opsbot via CLI"
    sessions = json.loads(tierops(tmp_path, env, "sessions", "--json").stdout)
    [s] = [s for s in sessions if s["id"] == a["session_pk"]]
    assert s["attention"] == "approval #1 to run tier 3 rejected by opsbot via CLI: not now"
    one_error_line(tierops(tmp_path, env, "approvals", "approve", "1"), "already rejected")
    one_error_line(tierops(tmp_path, env, "approvals", "reject", "1"), "already rejected")
    assert len(fake.invocations()) == 1
    rejected = json.loads(tierops(tmp_path, env, "approvals", "--status", "rejected", "--json").stdout)
    assert [r["id"] for r in rejected] == [1]


HOLDER = """
import sys
from pathlib import Path
from app.supervisor.cycle_lock import CycleLock
lock = CycleLock(Path(sys.argv[1]))
lock.acquire("schedule cycle from tier 0 (a server)")
print("locked", flush=True)
sys.stdin.read()  # hold until the test closes our stdin
"""


def test_approve_while_a_cycle_runs_elsewhere_is_refused_and_stays_pending(tmp_path, gated):
    env, fake, _a = gated
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "state" / "cycle.lock")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"locked"
        out = tierops(tmp_path, env, "approvals", "approve", "1")
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert out.stderr.strip() == ("tierops: error: a cycle is running; approve again when it has finished "
                                      "(approval #1 stays pending)")
    finally:
        holder.communicate(b"", timeout=10)
    assert json.loads(tierops(tmp_path, env, "approvals", "show", "1", "--json").stdout)["status"] == "pending"
    assert len(fake.invocations()) == 1
    assert tierops(tmp_path, env, "approvals", "approve", "1").returncode == 0  # once the cycle is over


def test_bad_input_is_one_error_line(tmp_path, gated):
    env, _fake, _a = gated
    one_error_line(tierops(tmp_path, env, "approvals", "approve", "9"), "no approval 9")
    one_error_line(tierops(tmp_path, env, "approvals", "reject", "9"), "no approval 9")
    one_error_line(tierops(tmp_path, env, "approvals", "reject", "1", "--note", "x" * 2001), "--note is too long")
    one_error_line(tierops(tmp_path, env, "approvals", "--status", "maybe"), "--status")
    missing = tmp_path / "prompts-missing.md"
    out = tierops(tmp_path, {**env, "TIEROPS_TIER3_PROMPT_FILE": str(missing)}, "approvals", "approve", "1")
    one_error_line(out, "cannot read the tier 3 prompt file")
    assert json.loads(tierops(tmp_path, env, "approvals", "show", "1", "--json").stdout)["status"] == "pending"


def test_no_database_is_created(tmp_path):
    env = cli_env(tmp_path, "claude")
    one_error_line(tierops(tmp_path, env, "approvals"), "no database at")
    assert not (tmp_path / "tierops.db").exists()
