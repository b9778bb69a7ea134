"""The guard's rows (``app/store/guard.py``): a session's policy, decisions, claimed cooldown slots,
and a claimed slot settled by the result the session reports (one row, not two)."""

from __future__ import annotations

from typing import Any

from app.output.route import Routed
from app.store import guard as store
from app.store.db import Database
from app.store.findings import write_routed


async def new_session(db: Database, policy: dict[str, Any] | None) -> int:
    async with db.write() as conn:
        cur = await conn.execute(
            "INSERT INTO sessions (status, tier, started_at, trigger) VALUES ('running', 3, '2026-01-01T00:00:00Z', 'manual')")
        pk = int(cur.lastrowid or 0)
    if policy is not None:
        await store.set_policy(db, pk, policy)
    return pk


async def test_a_claimed_slot_is_settled_by_the_reported_result(tmp_path) -> None:
    async with await Database.open(tmp_path / "g.db") as db:
        pk = await new_session(db, {"tier": 3})
        args = {"kind": "redeploy", "service": "api", "after": "2026-01-01T00:00:00Z", "limit": 1,
                "counts": lambda action: action in ("redeploy", "redeployment"), "note": "allowed by the guard"}
        assert await store.claim_action(db, pk, now="2026-01-01T00:10:00Z", **args) == (True, [])
        assert await store.claim_action(db, pk, now="2026-01-01T00:20:00Z", **args) == (
            False, ["2026-01-01T00:10:00Z"])
        routed = Routed(source="structured_output", cooldowns=[("redeployment", "api", "success", "done by hand")],
                        actions=[("restart", "api", "done", None)])
        async with db.write() as conn:
            await write_routed(conn, pk, routed, "2026-01-01T00:30:00Z", 0.5, 0.1)
        rows = await db.fetchall("SELECT action, service, outcome, note, created_at FROM cooldowns"
                                 " WHERE session_pk = ? ORDER BY id", (pk,))
        assert [tuple(r) for r in rows] == [
            ("redeploy", "api", "success", "done by hand", "2026-01-01T00:10:00Z"),  # settled, time kept
            ("restart", "api", "done", None, "2026-01-01T00:30:00Z")]  # nothing started: a row of its own


async def test_decisions_and_counts(tmp_path) -> None:
    async with await Database.open(tmp_path / "g.db") as db:
        pk = await new_session(db, {"tier": 3})
        for decision, rule in (("deny", "dry-run"), ("allow", "pass"), ("deny", "dry-run")):
            await store.record_decision(db, pk, tool_use_id="toolu_1", tool_name="Bash", command="x" * 5000,
                                        decision=decision, rule=rule, reason="because", mutating=True, kind=None,
                                        service=None)
        rows = await store.decisions(db, pk)
        assert [r["decision"] for r in rows] == ["deny", "allow", "deny"]
        assert len(rows[0]["command"] or "") == store.COMMAND_MAX and rows[0]["mutating"] is True
        assert len(await store.denials_for_sessions(db, [pk])) == 2
        assert sorted((c["decision"], c["rule"], c["count"]) for c in await store.counts(db)) == [
            ("allow", "pass", 1), ("deny", "dry-run", 2)]
