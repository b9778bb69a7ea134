"""``app/store/cooldowns.py`` and the actions part of ``app/store/findings.py`` against a real SQLite
file: which actions are written to ``cooldowns``, the window query, a session's taken actions, the
newest actions, and events TierOps raises itself (issue #13)."""

from __future__ import annotations

from app.output.route import Routed
from app.redact import Redactor
from app.store import cooldowns, findings, sessions
from app.store.findings import redact_routed

NOW = "2026-03-01T12:00:00.000Z"


async def session(db, *, tier: int = 2) -> int:
    return await sessions.create_session(db, tier=tier, trigger="manual")


async def route(db, pk: int, routed: Routed, *, now: str = NOW) -> None:
    async with db.write() as conn:
        await findings.write_routed(conn, pk, routed, now, 0.7, 0.3)


async def rows(db) -> list[dict]:
    return [dict(r) for r in await db.fetchall(
        "SELECT session_pk, action, service, outcome, note, created_at FROM cooldowns ORDER BY id")]


async def test_taken_and_dry_run_actions_are_written_proposed_ones_are_not(db):
    pk = await session(db)
    await route(db, pk, Routed(source="structured_output", actions=[
        ("restart", "api", "done", "systemctl restart api"),
        ("redeploy", "web", "failed", None),
        ("cleanup", None, "dry-run", "journalctl --vacuum-size=500M"),
        ("restart", "db", "proposed", "cooldown"),
    ], cooldowns=[("restart", "api", "success", "marker")]))
    assert await rows(db) == [
        {"session_pk": pk, "action": "restart", "service": "api", "outcome": "success", "note": "marker",
         "created_at": NOW},
        {"session_pk": pk, "action": "restart", "service": "api", "outcome": "done", "note": "systemctl restart api",
         "created_at": NOW},
        {"session_pk": pk, "action": "redeploy", "service": "web", "outcome": "failed", "note": None,
         "created_at": NOW},
        {"session_pk": pk, "action": "cleanup", "service": "", "outcome": "dry-run",  # "" = host-wide
         "note": "journalctl --vacuum-size=500M", "created_at": NOW},
    ]


def test_redaction_covers_the_actions():
    routed = Routed(source="structured_output", actions=[("restart", "api-sk-SECRET123", "done",
                                                          "curl -H 'token: sk-SECRET123'")])
    [(kind, service, result, detail)] = redact_routed(routed, Redactor(["sk-SECRET123"])).actions
    assert (kind, result) == ("restart", "done")
    assert "sk-SECRET123" not in service and "sk-SECRET123" not in detail


async def test_taken_between_bounds_outcomes_and_order(db):
    a, b = await session(db, tier=2), await session(db, tier=3)
    await route(db, a, Routed(source="structured_output", actions=[("restart", "api", "done", None)]),
                now="2026-03-01T08:00:00.000Z")
    await route(db, b, Routed(source="markers", cooldowns=[("redeployment", "web", "failure", "x")]),
                now="2026-03-01T10:00:00.000Z")
    await route(db, a, Routed(source="structured_output", actions=[("restart", "api", "dry-run", None)]),
                now="2026-03-01T11:00:00.000Z")
    await route(db, b, Routed(source="structured_output", actions=[("restart", "api", "failed", None)]),
                now="2026-03-01T12:00:00.000Z")
    got = await cooldowns.taken_between(db, "2026-03-01T08:00:00.000Z", NOW)
    assert [(r["action"], r["outcome"], r["created_at"], r["tier"]) for r in got] == [
        ("redeployment", "failure", "2026-03-01T10:00:00.000Z", 3),  # 08:00 is not after `after`
        ("restart", "failed", NOW, 3),  # `until` is included; the dry run never is
    ]
    assert len(await cooldowns.taken_between(db, "2026-03-01T07:59:59.999Z", NOW, fresh=True)) == 3
    assert await cooldowns.taken_between(db, NOW, "2026-03-02T00:00:00.000Z") == []


async def test_session_taken_and_recent_actions(db):
    a, b = await session(db), await session(db)
    await route(db, a, Routed(source="structured_output", actions=[
        ("restart", "api", "done", None), ("cleanup", None, "dry-run", None), ("restart", "web", "failed", "n")]))
    await route(db, b, Routed(source="markers", cooldowns=[("restart", "db", "success", "")]))
    assert [(r["service"], r["outcome"]) for r in await cooldowns.session_taken(db, a)] == [
        ("api", "done"), ("web", "failed")]
    assert [r["service"] for r in await cooldowns.session_taken(db, b, fresh=True)] == ["db"]
    recent = await cooldowns.recent_actions(db, 3)
    assert [(r["session_pk"], r["action"], r["service"], r["outcome"]) for r in recent] == [
        (b, "restart", "db", "success"), (a, "restart", "web", "failed"), (a, "cleanup", "", "dry-run")]
    assert recent[0]["tier"] == 2 and set(recent[0]) == {"id", "session_pk", "tier", "action", "service", "outcome",
                                                          "note", "created_at"}


async def test_add_event_is_a_tierops_event_of_the_session(db):
    pk = await session(db)
    event_id = await findings.add_event(db, pk, "warning", "api", "restart of api exceeded its cooldown limit 2/4h")
    [event] = await findings.list_events(db, session=pk)
    assert event["id"] == event_id
    assert (event["level"], event["service"], event["source"], event["original_level"]) == (
        "warning", "api", "tierops", None)
    assert event["message"] == "restart of api exceeded its cooldown limit 2/4h"
    assert (await findings.recent_alerts(db))[0]["id"] == event_id
