"""``tierops guard`` as the CLI runs it (the hook's JSON on stdin, the answer on stdout or exit 2)
and ``tierops guard check``. Fail closed: every way it cannot decide is exit 2, a deny."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from pathlib import Path

from app.engine.guard import GuardPolicy
from app.store.db import Database
from tests.cli import forkserver
from tests.cli.helpers import one_error_line
from tests.fakes.claude_control import FIXTURES, REPO
from tests.store.test_guard import new_session

POLICY = GuardPolicy(tier=3, dry_run=True, allowed_tools=("Bash",))


def hook(db: Path, session: int, body: bytes | str, *extra: str):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return forkserver.run("app", ["guard", "--db", str(db), "--session", str(session), *extra], env=env,
                          stdin=body, timeout=30)


def call(command: str, tool_use_id: str = "toolu_01") -> str:
    return json.dumps({"session_id": "x", "hook_event_name": "PreToolUse", "tool_name": "Bash",
                       "tool_input": {"command": command, "description": "d"}, "tool_use_id": tool_use_id})


def seeded(tmp_path: Path) -> tuple[Path, int]:
    path = tmp_path / "g.db"

    async def go() -> int:
        async with await Database.open(path) as db:
            return await new_session(db, POLICY.as_json())

    return path, asyncio.run(go())


def test_a_denied_call_is_the_hook_protocols_deny_and_an_allowed_one_gets_no_answer(tmp_path) -> None:
    db, pk = seeded(tmp_path)
    out = hook(db, pk, call("sudo systemctl restart api"))
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)["hookSpecificOutput"]
    assert answer["hookEventName"] == "PreToolUse" and answer["permissionDecision"] == "deny"
    assert "[TierOps guard: dry-run]" in answer["permissionDecisionReason"]
    quiet = hook(db, pk, call("systemctl status api", "toolu_02"))
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, b"", b"")  # never "allow": the CLI's rules stay
    rows = sqlite3.connect(db).execute("SELECT tool_use_id, decision FROM guard_decisions ORDER BY id").fetchall()
    assert rows == [("toolu_01", "deny"), ("toolu_02", "allow")]


def test_the_captured_hook_input_of_the_pinned_cli_is_judged(tmp_path) -> None:
    """What 2.1.197 sends a PreToolUse hook (fixture o_pretooluse_hook_deny_json: it tries to
    ``touch …/MARKER-restart``), and the answer the CLI obeyed there: a deny in the same shape."""
    capture = FIXTURES / "o_pretooluse_hook_deny_json"
    db, pk = seeded(tmp_path)
    out = hook(db, pk, (capture / "hook-input.json").read_bytes())
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    obeyed = json.loads((capture / "hook.sh").read_text().split("echo '", 1)[1].split("'", 1)[0])
    assert answer.keys() == obeyed.keys() and answer["hookSpecificOutput"].keys() == obeyed["hookSpecificOutput"].keys()
    assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "`touch /srv/ops/o_pretooluse_hook_deny_json/MARKER-restart`" in answer["hookSpecificOutput"][
        "permissionDecisionReason"]
    row = sqlite3.connect(db).execute("SELECT tool_use_id, rule FROM guard_decisions").fetchone()
    assert row == ("toolu_fake_d155f8ce50144fc49b4a", "dry-run")


def test_whatever_goes_wrong_the_call_is_denied_with_exit_2(tmp_path) -> None:
    db, pk = seeded(tmp_path)
    for out in (hook(tmp_path / "missing.db", pk, call("ls")), hook(db, pk, b"{not json"), hook(db, pk, b"[1]"),
                hook(db, pk, b"\xff" * 10)):
        err = out.stderr.decode()
        assert out.returncode == 2 and err.startswith("TierOps guard denied this call: "), (out.returncode, err)
        assert "Traceback" not in err and out.stdout == b""
    assert not (tmp_path / "missing.db").exists()  # never creates a database


def test_a_locked_database_is_denied_at_the_deadline(tmp_path) -> None:
    db, pk = seeded(tmp_path)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # the writer is busy (5 s busy timeout), readers too
    try:
        started = time.monotonic()
        out = hook(db, pk, call("sudo systemctl restart api"), "--deadline", "1")
        took = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert out.returncode == 2 and b"no decision within 1 s" in out.stderr, out.stderr
    assert took < 4, took


def test_without_its_options_it_says_how_to_use_it(tmp_path) -> None:
    out = forkserver.run("app", ["guard"], env={**os.environ, "PYTHONPATH": str(REPO)}, stdin=b"{}", timeout=30)
    one_error_line(out, "--db (or --db-url-file) and --session", "tierops guard check")


def test_check_prints_the_decision_and_the_rule(tmp_path) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TIEROPS_")}, "PYTHONPATH": str(REPO),
           "TIEROPS_HOME": str(tmp_path / "home"), "TIEROPS_COOLDOWNS": "restart:2/4h"}
    out = forkserver.run("app", ["guard", "check", "sudo systemctl restart api", "--tier", "3", "--approved"],
                         env=env, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "ALLOW  rule: pass"
    assert "systemctl restart api (via sudo): changes state, restart api" in out.stdout
    assert "counted against the cooldown restart:2/4h for api" in out.stdout
    denied = forkserver.run("app", ["guard", "check", "ssh web-1 'docker restart api'", "--tier", "3", "--dry-run",
                                    "--json"], env=env, text=True)
    got = json.loads(denied.stdout)
    assert (got["decision"], got["rule"]) == ("deny", "dry-run")
    assert got["commands"][0]["remote_host"] == "web-1" and got["commands"][0]["kind"] == "restart"
    unapproved = forkserver.run("app", ["guard", "check", "systemctl restart api", "--tier", "3"], env=env, text=True)
    assert unapproved.stdout.startswith("DENY  rule: approval")  # tier 3 is manual by default
