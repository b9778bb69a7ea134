"""``app/store/findings.py`` against a real SQLite file: routed findings written and read back."""

from __future__ import annotations

import pytest

from app.output.route import Routed
from app.store import activity, findings, memories, sessions
from app.store.sessions import SessionIdentity

NOW = "2026-01-01T00:00:00.000Z"


async def session(db, *, tier: int | None = 1, cli_id: str | None = None) -> int:
    pk = await sessions.create_session(db, tier=tier, trigger="manual")
    if cli_id:
        await activity.append_lines(db, pk, [], line_count=0, identity=SessionIdentity(cli_id, None, None, None))
    return pk


async def route(db, pk: int, routed: Routed, *, now: str = NOW, initial: float = 0.7, reinforce: float = 0.3) -> None:
    async with db.write() as conn:
        await findings.write_routed(conn, pk, routed, now, initial, reinforce)


async def add_events(db, pk: int, *events: tuple[str, str | None, str | None, str], source: str = "markers") -> None:
    await route(db, pk, Routed(source=source, events=list(events)))


# -- write_routed --------------------------------------------------------------------------------

async def test_write_routed_stores_events_checks_cooldowns_and_escalation(db):
    pk = await session(db)
    await route(db, pk, Routed(
        source="structured_output", summary="db slow",
        events=[("critical", None, "postgres", "p99 4s"), ("warning", "urgent", None, "odd")],
        checks=[("postgres", "degraded", "p99 4s"), ("nginx", "healthy", None)],
        cooldowns=[("restart", "nginx", "failure", "still down")],
        escalation={"needed": True, "reason": "db slow", "context": "p99", "failed_checks": ["pg_latency"]},
    ))
    events = await findings.session_events(db, pk)
    assert events == [
        {"level": "critical", "original_level": None, "service": "postgres", "message": "p99 4s"},
        {"level": "warning", "original_level": "urgent", "service": None, "message": "odd"},
    ]
    stored = await findings.list_events(db, session=pk)
    assert {e["source"] for e in stored} == {"structured_output"}
    assert {e["created_at"] for e in stored} == {NOW}
    assert await findings.session_checks(db, pk) == [
        {"name": "postgres", "status": "degraded", "detail": "p99 4s", "created_at": NOW, "session_pk": pk,
         "evidence_status": None, "evidence": None},
        {"name": "nginx", "status": "healthy", "detail": None, "created_at": NOW, "session_pk": pk,
         "evidence_status": None, "evidence": None},
    ]
    assert await findings.session_cooldowns(db, pk) == [
        {"action": "restart", "service": "nginx", "outcome": "failure", "note": "still down", "evidence_status": None,
         "evidence": None}]
    row = await sessions.get_session(db, pk)
    assert row["source"] == "structured_output"
    assert row["summary"] == "db slow"
    assert row["escalation_needed"] is True
    assert (row["escalation_reason"], row["escalation_context"]) == ("db slow", "p99")
    assert row["escalation_failed_checks"] == ["pg_latency"]


async def test_write_routed_without_escalation_leaves_the_decision_null(db):
    pk = await session(db)
    await route(db, pk, Routed(source="none"))
    row = await sessions.get_session(db, pk)
    assert row["source"] == "none"
    assert row["escalation_needed"] is None
    assert row["escalation_failed_checks"] is None
    assert await findings.session_events(db, pk) == []


async def test_write_routed_escalation_without_failed_checks_stores_an_empty_list(db):
    pk = await session(db)
    await route(db, pk, Routed(source="handoff", escalation={"needed": False, "failed_checks": None}))
    row = await sessions.get_session(db, pk)
    assert row["escalation_needed"] is False
    assert row["escalation_reason"] is None
    assert row["escalation_failed_checks"] == []


async def test_write_routed_rolls_back_with_the_callers_transaction(db):
    pk = await session(db)
    with pytest.raises(RuntimeError):
        async with db.write() as conn:
            await findings.write_routed(conn, pk, Routed(source="markers", events=[("info", None, None, "x")]),
                                        NOW, 0.7, 0.3)
            raise RuntimeError("caller fails after routing")
    assert await findings.session_events(db, pk) == []
    assert (await sessions.get_session(db, pk))["source"] is None


async def test_new_memory_gets_initial_confidence_and_provenance(db):
    pk = await session(db)
    await route(db, pk, Routed(source="markers", memories=[("postgres", "disk", "grows 2%/day"),
                                                             (None, "runbook", "restart db first")]))
    rows = {m["category"]: m for m in await memories.list_memories(db)}
    assert rows["disk"]["service"] == "postgres"
    assert rows["runbook"]["service"] is None
    for m in rows.values():
        assert m["confidence"] == pytest.approx(0.7)
        assert m["times_seen"] == 1
        assert m["created_by_session"] == pk
        assert m["reinforced_by_session"] is None
        assert m["active"] is True


async def test_repeated_memory_is_reinforced_not_duplicated(db):
    first = await session(db)
    second = await session(db)
    await route(db, first, Routed(source="markers", memories=[("postgres", "disk", "grows 2%/day")]))
    await route(db, second, Routed(source="markers", memories=[("postgres", "disk", "grows  2%/day\n")]),
                now="2026-01-02T00:00:00.000Z")
    (m,) = await memories.list_memories(db)
    assert m["times_seen"] == 2
    assert m["confidence"] == pytest.approx(0.7 + (1 - 0.7) * 0.3)
    assert m["created_by_session"] == first
    assert m["reinforced_by_session"] == second
    assert m["value"] == "grows 2%/day"
    assert m["created_at"] == NOW
    assert m["updated_at"] == "2026-01-02T00:00:00.000Z"


async def test_reinforcement_moves_confidence_toward_one_and_never_past_it(db):
    pk = await session(db)
    expected = 0.5
    for _ in range(4):
        await route(db, pk, Routed(source="markers", memories=[(None, "fact", "x")]), initial=0.5, reinforce=0.5)
    for _ in range(3):
        expected += (1 - expected) * 0.5
    (m,) = await memories.list_memories(db)
    assert m["times_seen"] == 4
    assert m["confidence"] == pytest.approx(expected)
    await route(db, pk, Routed(source="markers", memories=[(None, "fact", "x")]), reinforce=5.0)
    (m,) = await memories.list_memories(db)
    assert m["confidence"] == pytest.approx(1.0)


async def test_memory_identity_includes_service_and_category(db):
    pk = await session(db)
    await route(db, pk, Routed(source="markers", memories=[
        ("postgres", "disk", "grows"), ("mysql", "disk", "grows"), (None, "disk", "grows"), ("postgres", "cpu", "grows"),
    ]))
    rows = await memories.list_memories(db)
    assert len(rows) == 4
    assert {m["times_seen"] for m in rows} == {1}


async def test_reinforcement_leaves_an_operators_deactivation_alone(db):
    pk = await session(db)
    await route(db, pk, Routed(source="markers", memories=[(None, "fact", "x")]))
    (m,) = await memories.list_memories(db)
    await memories.update_memory(db, m["id"], {"active": False})
    await route(db, pk, Routed(source="markers", memories=[(None, "fact", "x")]))
    (m,) = await memories.list_memories(db)
    assert m["active"] is False
    assert m["times_seen"] == 2


# -- events --------------------------------------------------------------------------------------

async def test_list_events_newest_first_with_session_fields(db):
    one = await session(db, tier=1, cli_id="cli-one")
    two = await session(db, tier=None)
    await add_events(db, one, ("info", None, "nginx", "a"), ("critical", None, "postgres", "b"))
    await add_events(db, two, ("warning", None, "nginx", "c"))
    rows = await findings.list_events(db)
    assert [e["message"] for e in rows] == ["c", "b", "a"]
    assert [(e["session_pk"], e["session_id"], e["tier"]) for e in rows] == [
        (two, None, None), (one, "cli-one", 1), (one, "cli-one", 1)]
    assert rows[0]["id"] > rows[1]["id"] > rows[2]["id"]
    assert set(rows[0]) == {"id", "session_pk", "session_id", "tier", "level", "original_level", "service",
                            "message", "source", "created_at", "evidence_status", "evidence"}


async def test_list_events_filters_and_pages(db):
    one = await session(db)
    two = await session(db)
    await add_events(db, one, ("info", None, "nginx", "a"), ("critical", None, "postgres", "b"),
                     ("critical", None, "nginx", "c"))
    await add_events(db, two, ("critical", None, "nginx", "d"))
    assert [e["message"] for e in await findings.list_events(db, level="critical")] == ["d", "c", "b"]
    assert [e["message"] for e in await findings.list_events(db, service="nginx")] == ["d", "c", "a"]
    assert [e["message"] for e in await findings.list_events(db, session=one)] == ["c", "b", "a"]
    assert [e["message"] for e in await findings.list_events(db, level="critical", service="nginx", session=one)] \
        == ["c"]
    assert [e["message"] for e in await findings.list_events(db, limit=2)] == ["d", "c"]
    assert [e["message"] for e in await findings.list_events(db, limit=2, offset=2)] == ["b", "a"]
    assert await findings.list_events(db, level="warning") == []


async def test_events_after_and_last_event_id(db):
    assert await findings.last_event_id(db) == 0
    pk = await session(db)
    await add_events(db, pk, *[("info", None, None, f"m{i}") for i in range(5)])
    rows = await findings.list_events(db)
    ids = sorted(e["id"] for e in rows)
    assert await findings.last_event_id(db) == ids[-1]
    after = await findings.events_after(db, ids[1], 2)
    assert [e["id"] for e in after] == ids[2:4]  # oldest first, limited
    assert [e["message"] for e in after] == ["m2", "m3"]
    assert await findings.events_after(db, ids[-1], 10) == []


async def test_recent_alerts_only_critical_and_warning_newest_first_up_to_limit(db):
    pk = await session(db, cli_id="cli-a")
    levels = ["critical", "info", "warning", "critical", "info", "warning", "warning", "critical"]
    await add_events(db, pk, *[(lvl, None, None, f"{i}-{lvl}") for i, lvl in enumerate(levels)])
    alerts = await findings.recent_alerts(db, limit=4)
    assert [e["message"] for e in alerts] == ["7-critical", "6-warning", "5-warning", "3-critical"]
    assert all(e["session_id"] == "cli-a" for e in alerts)
    every = await findings.recent_alerts(db)
    assert [e["message"] for e in every] == [f"{i}-{lvl}" for i, lvl in reversed(list(enumerate(levels)))
                                             if lvl != "info"]


async def test_recent_alerts_limit_applies_across_levels(db):
    pk = await session(db)
    await add_events(db, pk, *[("warning", None, None, f"w{i}") for i in range(3)])
    await add_events(db, pk, *[("critical", None, None, f"c{i}") for i in range(3)])
    assert [e["message"] for e in await findings.recent_alerts(db, limit=2)] == ["c2", "c1"]


async def test_event_services_are_distinct_and_sorted(db):
    pk = await session(db)
    await add_events(db, pk, ("info", None, "nginx", "a"), ("info", None, None, "b"), ("info", None, "api", "c"),
                     ("warning", None, "nginx", "d"))
    assert await findings.event_services(db) == ["api", "nginx"]
    assert await findings.event_services(db, limit=1) == ["api"]


# -- checks and cooldowns ------------------------------------------------------------------------

async def test_latest_checks_gives_the_newest_result_per_name(db):
    old = await session(db)
    new = await session(db)
    await route(db, old, Routed(source="markers", checks=[("nginx", "down", "refused"), ("postgres", "healthy", None)]))
    await route(db, new, Routed(source="markers", checks=[("nginx", "healthy", "ok")]), now="2026-01-02T00:00:00.000Z")
    assert await findings.latest_checks(db) == [
        {"name": "nginx", "status": "healthy", "detail": "ok", "created_at": "2026-01-02T00:00:00.000Z",
         "session_pk": new, "evidence_status": None, "evidence": None},
        {"name": "postgres", "status": "healthy", "detail": None, "created_at": NOW, "session_pk": old,
         "evidence_status": None, "evidence": None},
    ]


async def test_session_checks_and_cooldowns_keep_routing_order(db):
    pk = await session(db)
    other = await session(db)
    await route(db, pk, Routed(
        source="markers",
        checks=[("zeta", "healthy", None), ("alpha", "down", None), ("mid", "degraded", None)],
        cooldowns=[("restart", "zeta", "success", ""), ("redeployment", "alpha", "failure", "x")]))
    await route(db, other, Routed(source="markers", checks=[("other", "healthy", None)],
                                  cooldowns=[("restart", "other", "success", "")]))
    assert [c["name"] for c in await findings.session_checks(db, pk)] == ["zeta", "alpha", "mid"]
    assert [c["name"] for c in await findings.session_checks(db, pk, fresh=True)] == ["zeta", "alpha", "mid"]
    assert [c["service"] for c in await findings.session_cooldowns(db, pk)] == ["zeta", "alpha"]


async def test_deleting_a_session_drops_its_events_but_a_pruned_one_keeps_them(db):
    """delete_session replaces a half-done ingest: its events go with it. A prune deletes the row
    only (migration 0004, ON DELETE SET NULL): the events stay, without a session."""
    replaced, pruned = await session(db), await session(db)
    await add_events(db, replaced, ("warning", None, "nginx", "slow"))
    await add_events(db, pruned, ("critical", None, "db", "down"))
    await sessions.delete_session(db, replaced)
    async with db.write() as conn:
        await conn.execute("DELETE FROM sessions WHERE id = ?", (pruned,))
    left = await findings.list_events(db)
    assert [(e["message"], e["session_pk"]) for e in left] == [("down", None)]
