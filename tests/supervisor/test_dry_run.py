"""Dry runs: every language-model tier of the chain runs with the read-only rules only,
the editing tools removed, and a system-prompt section saying to change nothing; the rows say so.

The fake CLI (tests/fakes/fake_claude.py) logs each command line as the real CLI would parse it;
the supervisor, the store and the chain are the real code.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator

import pytest

from app.config import READ_ONLY_TOOLS
from app.supervisor.chain import run_chain
from app.supervisor.context import DRY_RUN_BLOCK
from app.supervisor.scheduler import Supervisor
from tests.fakes import claude_control as cc
from tests.helpers import escalating, healthy
from tests.supervisor.test_cli_run import cli_env, tierops
from tests.supervisor.test_probe_cycles import Target, checks_file

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def target() -> Iterator[Target]:
    """A local HTTP service for tier 0's checks (tests/supervisor/test_probe_cycles.py)."""
    t = Target()
    yield t
    t.close()

def flag(inv: dict, name: str) -> str | None:
    """The value after ``name`` on the logged command line (the fake's parse splits rules on spaces)."""
    argv = inv["argv"]
    return argv[argv.index(name) + 1] if name in argv else None


def stage(output: dict) -> dict:
    return {"lines": cc.structured_stream(cc.new_session_id(), output)}


async def rows(db) -> list[dict]:
    return [dict(r) for r in await db.fetchall("SELECT id, tier, dry_run, system_prompt FROM sessions ORDER BY id")]


async def test_every_tier_of_a_dry_run_chain_gets_read_only_tools_and_the_section(db, make_settings, validator,
                                                                                  tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating("one")), stage(escalating("two")),
                                                  stage(healthy())])
    settings = make_settings(fake, tier3_approval="auto")  # the chain goes on to tier 3 by itself
    chain = await run_chain(db, settings, validator, None, dry_run=True)

    assert [(s["tier"], s["status"], s["dry_run"]) for s in chain] == [
        (1, "completed", True), (2, "completed", True), (3, "completed", True)]  # the chain went on
    first, second, third = fake.invocations()
    for inv in (first, second, third):
        assert inv["usage_error"] is None and inv["parsed"]["prompt"]  # no variadic list ate the prompt
        assert flag(inv, "--allowedTools") == READ_ONLY_TOOLS
        assert "Bash" not in flag(inv, "--allowedTools").split(",")  # tiers 2-3 allow a general Bash otherwise
        assert inv["parsed"]["append_system_prompt"].split("\n\n")[2] == DRY_RUN_BLOCK  # right after the role
    # the editing tools removed, plus each tier's own disallowed ones (tests/supervisor/conftest.py FAST)
    assert flag(first, "--disallowedTools") == "Edit,Write,NotebookEdit"
    assert flag(second, "--disallowedTools") == "Edit,Write,NotebookEdit,WebFetch"
    assert flag(third, "--disallowedTools") == "Edit,Write,NotebookEdit,WebSearch"
    stored = await rows(db)
    assert [r["dry_run"] for r in stored] == [1, 1, 1]
    assert all(DRY_RUN_BLOCK in r["system_prompt"] for r in stored)
    assert 'starts with "would have: "' in DRY_RUN_BLOCK and 'result "dry-run"' in DRY_RUN_BLOCK


async def test_a_run_that_is_not_dry_keeps_each_tier_s_own_tools(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating()), stage(healthy())])
    chain = await run_chain(db, make_settings(fake), validator, None)
    assert [(s["tier"], s["dry_run"]) for s in chain] == [(1, False), (2, False)]
    first, second = fake.invocations()
    assert flag(first, "--allowedTools") == "Read,Bash(df *)"
    assert flag(second, "--allowedTools") == "Read,Bash"
    assert flag(second, "--disallowedTools") == "WebFetch"
    assert all(DRY_RUN_BLOCK not in inv["parsed"]["append_system_prompt"] for inv in (first, second))
    assert [r["dry_run"] for r in await rows(db)] == [0, 0]


async def test_tierops_dry_run_makes_every_run_dry(db, make_settings, validator, tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating()), stage(healthy())])
    chain = await run_chain(db, make_settings(fake, dry_run=True), validator, None, dry_run=False)
    assert [s["dry_run"] for s in chain] == [True, True]
    assert flag(fake.invocations()[1], "--allowedTools") == READ_ONLY_TOOLS


async def test_tier_0_runs_as_always_and_the_tiers_it_escalates_to_are_dry(db, make_settings, validator, target,
                                                                            tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(healthy())])
    target.mode = "fail"  # an incident opens: tier 0 escalates to tier 1
    sup = Supervisor(db, make_settings(fake, checks=checks_file(tmp_path, target.url)), validator)
    chain = await sup.run_cycle(tier=0, dry_run=True)
    assert [(s["tier"], s["status"], s["dry_run"]) for s in chain] == [(0, "completed", False), (1, "completed", True)]
    probe = json.loads((await db.fetchone("SELECT argv FROM sessions WHERE tier = 0"))["argv"])
    assert "--allowedTools" not in probe and DRY_RUN_BLOCK not in (await rows(db))[0]["system_prompt"]
    assert flag(fake.last(), "--allowedTools") == READ_ONLY_TOOLS


def test_tierops_run_dry_run_reports_it(tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [stage(escalating()), stage(healthy())])
    env = cli_env(tmp_path, fake.path)
    out = tierops(tmp_path, env, "run", "--dry-run")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("tier 1 (haiku) session 1 [") and ": completed DRY RUN, source" in lines[0]
    assert any(line.startswith("tier 2 (sonnet) session 2 [") and "completed DRY RUN" in line for line in lines)
    assert [flag(inv, "--allowedTools") for inv in fake.invocations()] == [READ_ONLY_TOOLS, READ_ONLY_TOOLS]

    fake.set_stages([stage(healthy())])
    out = tierops(tmp_path, env, "run", "--json")
    assert out.returncode == 0, out.stderr
    assert [link["dry_run"] for link in json.loads(out.stdout)] == [False]
    with sqlite3.connect(tmp_path / "tierops.db") as conn:
        assert conn.execute("SELECT dry_run FROM sessions ORDER BY id").fetchall() == [(1,), (1,), (0,)]

    fake.set_stages([stage(healthy())])
    out = tierops(tmp_path, {**env, "TIEROPS_DRY_RUN": "1"}, "run", "--json")
    assert [link["dry_run"] for link in json.loads(out.stdout)] == [True]
