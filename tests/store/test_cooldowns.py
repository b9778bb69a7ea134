"""``app/store/cooldowns.py`` and the actions part of ``app/store/findings.py`` against a real SQLite
file: which actions are written to ``cooldowns`` (a dry-run session's as dry runs), the window
query, a session's taken actions, the newest actions, proposals and their incidents, and events
TierOps raises itself."""

from __future__ import annotations

from app.output.route import Routed
from app.redact import Redactor
from app.store import cooldowns, findings, incidents, sessions
from app.store.findings import redact_routed
from app.store.incidents import Finding, Observation

NOW = "2026-03-01T12:00:00.000Z"


async def session(db, *, tier: int = 2) -> int:
    return await sessions.create_session(db, tier=tier, trigger="manual")


async def route(db, pk: int, routed: Routed, *, now: str = NOW) -> None:
    async with db.write() as conn:
        await findings.write_routed(conn, pk, routed, now, 0.7, 0.3)


async def rows(db) -> list[dict]:
    return [dict(r) for r in await db.fetchall(
        "SELECT session_pk, action, service, outcome, note, created_at FROM cooldowns ORDER BY id")]


async def test_every_reported_action_is_written_proposed_ones_included(db):
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
        {"session_pk": pk, "action": "restart", "service": "db", "outcome": "proposed", "note": "cooldown",
         "created_at": NOW},
    ]
    # a proposal is recorded, never taken
    assert [(r["action"], r["service"]) for r in await cooldowns.session_taken(db, pk)] == [
        ("restart", "api"), ("restart", "api"), ("redeploy", "web")]


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
                                                          "note", "created_at", "incident_id"}


async def test_recent_actions_leave_proposals_to_their_own_read(db):
    pk = await session(db)
    await route(db, pk, Routed(source="structured_output", actions=[
        ("restart", "api", "done", None), ("restart", "api", "proposed", "again, later")]))
    assert [r["outcome"] for r in await cooldowns.recent_actions(db, 10)] == ["done"]
    [p] = await cooldowns.proposals(db)
    assert (p["kind"], p["service"], p["detail"], p["session_pk"], p["tier"]) == (
        "restart", "api", "again, later", pk, 2)


# -- a dry-run session's actions -----------------------------------------------------------------

async def dry_session(db) -> int:
    return await sessions.create_session(db, tier=2, trigger="manual", dry_run=True)


async def test_a_dry_run_session_s_taken_actions_are_stored_as_dry_runs_with_the_claim_kept(db):
    pk = await dry_session(db)
    await route(db, pk, Routed(source="structured_output", actions=[
        ("restart", "api", "done", "systemctl restart api"),
        ("redeploy", "web", "failed", None),
        ("cleanup", None, "dry-run", "would vacuum"),
        ("restart", "db", "proposed", "after the backup"),
    ]))
    assert [(r["action"], r["outcome"], r["note"]) for r in await rows(db)] == [
        ("restart", "dry-run", "reported done in a dry run: systemctl restart api"),
        ("redeploy", "dry-run", "reported failed in a dry run"),
        ("cleanup", "dry-run", "would vacuum"),
        ("restart", "proposed", "after the backup"),  # a proposal stays a proposal
    ]
    assert await cooldowns.session_taken(db, pk, fresh=True) == []
    assert await cooldowns.taken_between(db, "2026-01-01T00:00:00.000Z", NOW) == []
    [p] = await cooldowns.proposals(db, session_pk=pk)
    assert p["dry_run"] is True


async def test_a_dry_run_session_s_markers_never_count_either(db):
    pk = await dry_session(db)
    await route(db, pk, Routed(source="markers", cooldowns=[("restart", "api", "success", "— restarted once"),
                                                             ("redeployment", "web", "failure", None)]))
    assert [(r["action"], r["outcome"], r["note"]) for r in await rows(db)] == [
        ("restart", "dry-run", "reported success in a dry run: — restarted once"),
        ("redeployment", "dry-run", "reported failure in a dry run"),
    ]
    assert await cooldowns.session_taken(db, pk, fresh=True) == []


async def test_the_same_actions_of_a_session_that_is_not_dry_count(db):
    pk = await session(db)
    await route(db, pk, Routed(source="markers", cooldowns=[("restart", "api", "success", None)]))
    await route(db, pk, Routed(source="structured_output", actions=[("restart", "api", "done", None)]))
    assert [r["outcome"] for r in await cooldowns.session_taken(db, pk, fresh=True)] == ["success", "done"]


# -- proposals -----------------------------------------------------------------------------------

async def propose(db, pk: int, *actions: tuple[str, str | None, str | None], now: str = NOW) -> None:
    await route(db, pk, Routed(source="structured_output",
                               actions=[(k, s, "proposed", d) for k, s, d in actions]), now=now)


async def test_proposals_by_session_in_its_order_and_otherwise_newest_first(db):
    a, b = await session(db, tier=2), await session(db, tier=3)
    await propose(db, a, ("restart", "api", "first"), ("cleanup", None, None))
    await propose(db, b, ("redeploy", "web", "x"), now="2026-03-01T13:00:00.000Z")
    mine = await cooldowns.proposals(db, session_pk=a)
    assert [(p["kind"], p["service"], p["detail"]) for p in mine] == [("restart", "api", "first"),
                                                                       ("cleanup", None, None)]  # host-wide: None
    assert set(mine[0]) == {"id", "session_pk", "tier", "dry_run", "kind", "service", "detail", "created_at",
                            "incident_id"}
    assert mine[0]["dry_run"] is False and mine[0]["incident_id"] is None
    assert [(p["session_pk"], p["tier"], p["kind"]) for p in await cooldowns.proposals(db)] == [
        (b, 3, "redeploy"), (a, 2, "cleanup"), (a, 2, "restart")]
    assert len(await cooldowns.proposals(db, limit=1)) == 1
    assert await cooldowns.proposals(db, incident_id=1) == []


async def test_hostile_proposals_are_stored_whole_and_read_back_as_written(db):
    pk = await session(db)
    detail = "<script>alert(1)</script>" + "x" * 100_000
    await propose(db, pk, ("<b>restart</b>", "<img src=x onerror=alert(1)>", detail))
    [p] = await cooldowns.proposals(db, session_pk=pk)
    assert (p["kind"], p["service"], p["detail"]) == ("<b>restart</b>", "<img src=x onerror=alert(1)>", detail)


def incident(pk: int, service: str | None, *, status: str = "open", severity: str = "critical") -> dict:
    return {"id": pk, "service": service, "status": status, "severity": severity}


def test_incident_for_picks_the_same_service_else_the_only_one():
    api, web = incident(1, "api"), incident(2, "web")
    assert cooldowns.incident_for("api", [api, web]) == 1
    assert cooldowns.incident_for(" API ", [api, web]) == 1  # whitespace and case folded
    assert cooldowns.incident_for("db", [api, web]) is None  # two others: no guess
    assert cooldowns.incident_for("db", [api]) == 1  # the only one touched
    assert cooldowns.incident_for(None, [web, web]) == 2  # the same incident twice is one
    assert cooldowns.incident_for("api", []) is None
    # several of the same service: unresolved first, then the most severe, then the newest
    many = [incident(3, "api", status="resolved"), incident(4, "api", severity="warning"), incident(5, "api"),
            incident(6, "api", severity="warning")]
    assert cooldowns.incident_for("api", many) == 5
    assert cooldowns.incident_for("api", [incident(3, "api", status="resolved"), incident(4, "api",
                                                                                          severity="warning")]) == 4


async def test_link_proposals_sets_the_incident_of_unlinked_proposals_only(db):
    pk = await session(db)
    await propose(db, pk, ("restart", "api", None), ("restart", "web", None), ("cleanup", None, None))
    await route(db, pk, Routed(source="structured_output", actions=[("restart", "api", "done", None)]))
    changes = await incidents.observe(db, pk, None, Observation(findings=[
        Finding(key="api:down", severity="critical", message="down", service="api"),
        Finding(key="web:slow", severity="warning", message="slow", service="web")]), flap_count=3, flap_window_s=60)
    api, web = (ch.incident for ch in changes)
    assert await cooldowns.link_proposals(db, pk, [api, web]) == 2
    got = {p["service"]: p["incident_id"] for p in await cooldowns.proposals(db, session_pk=pk)}
    assert got == {"api": api["id"], "web": web["id"], None: None}  # host-wide: two incidents, no guess
    assert [p["kind"] for p in await cooldowns.proposals(db, incident_id=api["id"])] == ["restart"]
    # taken actions are never linked; linking again changes nothing
    assert await cooldowns.link_proposals(db, pk, [web]) == 1  # the host-wide one: web is now the only one
    assert {p["service"]: p["incident_id"] for p in await cooldowns.proposals(db, session_pk=pk)} == {
        "api": api["id"], "web": web["id"], None: web["id"]}
    assert await cooldowns.link_proposals(db, pk, []) == 0
    assert [r["incident_id"] for r in await cooldowns.session_taken(db, pk)] == [None]


async def test_add_event_is_a_tierops_event_of_the_session(db):
    pk = await session(db)
    event_id = await findings.add_event(db, pk, "warning", "api", "restart of api exceeded its cooldown limit 2/4h")
    [event] = await findings.list_events(db, session=pk)
    assert event["id"] == event_id
    assert (event["level"], event["service"], event["source"], event["original_level"]) == (
        "warning", "api", "tierops", None)
    assert event["message"] == "restart of api exceeded its cooldown limit 2/4h"
    assert (await findings.recent_alerts(db))[0]["id"] == event_id
