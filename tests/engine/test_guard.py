"""The guard's decisions (``app/engine/guard.py``): each rule, in order, on real command shapes;
and :func:`judge` against a real database (policy read, cooldown slots claimed, every decision
recorded)."""

from __future__ import annotations

import asyncio

import pytest

from app.config import READ_ONLY_TOOLS
from app.engine.guard import (
    APPROVAL,
    COOLDOWN,
    DRY_RUN,
    MCP,
    NO_POLICY,
    OBSERVE,
    PASS,
    TOOL_RULES,
    UNREADABLE,
    GuardPolicy,
    decide,
    judge,
)
from app.store import guard as store
from app.store.db import Database
from tests.store.test_guard import new_session

READ_ONLY = tuple(r.strip() for r in READ_ONLY_TOOLS.split(","))
LIVE3 = GuardPolicy(tier=3, allowed_tools=("Bash",), approved_by="an operator")
DRY3 = GuardPolicy(tier=3, dry_run=True, allowed_tools=READ_ONLY)
TIER1 = GuardPolicy(tier=1, allowed_tools=("Bash",))
UNAPPROVED3 = GuardPolicy(tier=3, allowed_tools=("Bash",), approval_required=True, pending_approval=7)
RULED2 = GuardPolicy(tier=2, allowed_tools=("Read", "Bash(systemctl *)", "Bash(journalctl *)"),
                     disallowed_tools=("Bash(systemctl stop *)",))
MCP2 = GuardPolicy(tier=2, mcp_tools=("mcp__grafana__query_*", "mcp__ops__*"))


@pytest.mark.parametrize(("policy", "tool", "given", "allow", "rule"), [
    (LIVE3, "Bash", "sudo systemctl restart api", True, PASS),
    (LIVE3, "Bash", "systemctl status api", True, PASS),
    (DRY3, "Bash", "sudo systemctl restart api", False, DRY_RUN),
    (DRY3, "Bash", "ssh web-1 'docker restart api'", False, DRY_RUN),
    (DRY3, "Bash", 'bash -c "cd /srv && docker compose up -d"', False, DRY_RUN),
    (DRY3, "Bash", "systemctl status api", True, PASS),
    (DRY3, "Bash", "journalctl -u api | grep error", False, TOOL_RULES),  # the CLI's own rules, read the same way
    (DRY3, "Bash", "echo $(systemctl restart api)", False, DRY_RUN),
    (TIER1, "Bash", "curl -X POST http://localhost/admin/restart", False, OBSERVE),
    (TIER1, "Bash", "curl -s http://localhost/health", True, PASS),
    (UNAPPROVED3, "Bash", "systemctl restart api", False, APPROVAL),
    (UNAPPROVED3, "Bash", "systemctl status api", True, PASS),
    (RULED2, "Bash", "systemctl restart api", True, PASS),
    (RULED2, "Bash", "systemctl stop api", False, TOOL_RULES),
    (RULED2, "Bash", "cd /srv && systemctl restart api", False, TOOL_RULES),  # cd is not among its rules
    (RULED2, "Bash", "journalctl -u api; rm -rf /var/lib/api", False, TOOL_RULES),
    (LIVE3, "Bash", "cat <<EOF\nx\nEOF", False, UNREADABLE),
    (LIVE3, "Bash", 'echo "unterminated', False, UNREADABLE),
    (LIVE3, "Bash", None, False, UNREADABLE),
    (DRY3, "Edit", "/etc/nginx/nginx.conf", False, DRY_RUN),
    (TIER1, "Write", "/etc/motd", False, OBSERVE),
    (UNAPPROVED3, "Write", "/etc/motd", False, APPROVAL),
    (LIVE3, "Edit", "/etc/nginx/nginx.conf", True, PASS),
    (MCP2, "mcp__grafana__query_range", None, True, PASS),
    (MCP2, "mcp__grafana__delete_dashboard", None, False, MCP),
    (MCP2, "mcp__ops__service_status", None, True, PASS),
    (GuardPolicy(tier=2, mcp_tools=("mcp__ops",)), "mcp__ops__restart", None, True, PASS),  # a whole server
    (TIER1, "mcp__ops__service_status", None, False, MCP),
    (LIVE3, "Read", "/etc/hosts", True, PASS),
])
def test_decide(policy: GuardPolicy, tool: str, given: str | None, allow: bool, rule: str) -> None:
    tool_input = {"command": given} if tool == "Bash" else {"file_path": given}
    decision = decide(policy, tool, tool_input)
    assert (decision.allow, decision.rule) == (allow, rule), decision
    assert decision.reason


def test_reasons_say_what_and_what_to_do() -> None:
    dry = decide(DRY3, "Bash", {"command": "sudo systemctl restart api"})
    assert "`systemctl restart api`" in dry.reason and "result dry-run" in dry.reason
    waiting = decide(UNAPPROVED3, "Bash", {"command": "systemctl restart api"})
    assert "waiting for approval #7" in waiting.reason
    live = decide(LIVE3, "Bash", {"command": "ssh web-1 'sudo systemctl restart nginx' && docker restart api"})
    assert live.allow and live.counted == [("restart", "nginx"), ("restart", "api")]


def test_a_policy_round_trips_and_ignores_unknown_keys() -> None:
    data = {**UNAPPROVED3.as_json(), "added_later": True}
    assert GuardPolicy.from_json(data) == UNAPPROVED3


async def test_judge_claims_cooldown_slots_and_records_every_decision(tmp_path) -> None:
    policy = GuardPolicy(tier=3, allowed_tools=("Bash",), cooldowns="restart:2/1h", approved_by="an operator")
    async with await Database.open(tmp_path / "g.db") as db:
        pk = await new_session(db, policy.as_json())
        hooks = [{"tool_name": "Bash", "tool_use_id": f"toolu_{n}",
                  "tool_input": {"command": f"systemctl restart api # {n}"}} for n in range(4)]
        # at once: two parallel calls cannot both take the last slot
        first = await asyncio.gather(*(judge(db, pk, h) for h in hooks[:3]))
        assert sorted(d.allow for d in first) == [False, True, True]
        assert [d.rule for d in first if not d.allow] == [COOLDOWN]
        later = await judge(db, pk, hooks[3])
        assert not later.allow and "2 of 2 in 1h used" in later.reason
        rows = await store.decisions(db, pk, fresh=True)
        assert len(rows) == 4 and {r["tool_use_id"] for r in rows} == {h["tool_use_id"] for h in hooks}
        started = await db.fetchval("SELECT COUNT(*) FROM cooldowns WHERE session_pk = ? AND outcome = 'started'", (pk,))
        assert started == 2
        # no policy: denied, and said so
        other = await new_session(db, None)
        refused = await judge(db, other, hooks[0])
        assert (refused.allow, refused.rule) == (False, NO_POLICY)
        assert not (await judge(db, 999, hooks[0])).allow
