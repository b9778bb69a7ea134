"""``app/store/approvals.py`` against a real SQLite file: an approval is created
pending, decided once (approved or rejected, with who and why), expires after its time, and every
decision is written on the escalating session in the same transaction."""

from __future__ import annotations

import pytest

from app.clock import shift
from app.store import approvals, sessions
from app.store.approvals import ApprovalStateError

T0 = "2026-11-23T09:00:00.000Z"


def at(seconds: float) -> str:
    return shift(T0, seconds)


async def escalated(db, tier: int = 2, *, timeout: float = 600, now: str = T0) -> tuple[int, dict]:
    """A session of tier ``tier`` - 1 whose escalation to ``tier`` waits for an approval."""
    pk = await sessions.create_session(db, tier=tier - 1, model="sonnet", trigger="schedule")
    row = await approvals.create_approval(db, session_pk=pk, chain_id=pk, tier=tier, handoff="## Escalation\nfix it",
                                          timeout_s=timeout, now=now)
    await sessions.set_escalation_gate(db, pk, approvals.waiting_gate(row["id"], tier))
    return pk, row


async def test_create_stores_a_pending_approval_with_its_expiry(db):
    pk, row = await escalated(db, tier=3, timeout=3600)
    assert (row["status"], row["tier"], row["session_pk"], row["chain_id"], row["handoff"]) == (
        "pending", 3, pk, pk, "## Escalation\nfix it")
    assert (row["created_at"], row["expires_at"]) == (T0, "2026-11-23T10:00:00.000Z")
    assert row["decided_at"] is row["decided_by"] is row["note"] is row["child_session_pk"] is None
    assert await approvals.get_approval(db, row["id"]) == row
    assert await approvals.get_approval(db, row["id"] + 1) is None
    gate = (await sessions.get_session(db, pk))["escalation_gate"]
    assert gate == f"waiting for approval #{row['id']} to run tier 3" and approvals.is_waiting(gate)
    assert not approvals.is_waiting(None) and not approvals.is_waiting("incident already escalated")


async def test_the_handoff_is_redacted_like_every_stored_text(db):
    pk = await sessions.create_session(db, tier=2)
    row = await approvals.create_approval(db, session_pk=pk, chain_id=pk, tier=3,
                                          handoff="token sk-ant-api03-" + "A" * 40, timeout_s=60)
    assert "A" * 40 not in row["handoff"]


async def test_approve_records_who_and_clears_the_gate(db):
    pk, row = await escalated(db)
    done = await approvals.decide(db, row["id"], "approved", "alice via API token", "go ahead", now=at(60))
    assert (done["status"], done["decided_by"], done["note"], done["decided_at"]) == (
        "approved", "alice via API token", "go ahead", at(60))
    s = await sessions.get_session(db, pk)
    assert s["escalation_gate"] is None and s["attention"] is None
    await approvals.set_child(db, row["id"], pk)
    assert (await approvals.get_approval(db, row["id"]))["child_session_pk"] == pk


async def test_reject_flags_the_session_with_who_and_why(db):
    pk, row = await escalated(db, tier=3)
    done = await approvals.decide(db, row["id"], "rejected", "bob via dashboard", "not at peak time", now=at(5))
    assert (done["status"], done["decided_by"], done["note"]) == ("rejected", "bob via dashboard", "not at peak time")
    s = await sessions.get_session(db, pk)
    why = f"approval #{row['id']} to run tier 3 rejected by bob via dashboard: not at peak time"
    assert s["attention"] == why and s["escalation_gate"] == why
    pk2, row2 = await escalated(db, tier=3)
    await approvals.decide(db, row2["id"], "rejected", "carol via CLI", now=at(5))
    assert (await sessions.get_session(db, pk2))["attention"] == (
        f"approval #{row2['id']} to run tier 3 rejected by carol via CLI")


@pytest.mark.parametrize("first", ["approved", "rejected"])
async def test_only_a_pending_approval_is_decided_once(db, first):
    _, row = await escalated(db)
    await approvals.decide(db, row["id"], first, "alice", now=at(1))
    for decision in ("approved", "rejected"):
        with pytest.raises(ApprovalStateError, match=f"already {first} by alice"):
            await approvals.decide(db, row["id"], decision, "bob", now=at(2))
    assert (await approvals.get_approval(db, row["id"]))["decided_by"] == "alice"
    with pytest.raises(LookupError, match="no approval 999"):
        await approvals.decide(db, 999, "approved", "bob")


async def test_expire_due_expires_only_what_is_past_its_time_and_tells_the_session(db):
    pk_late, late = await escalated(db, timeout=60)
    _, fresh = await escalated(db, timeout=3600)
    assert await approvals.expire_due(db, now=at(59)) == []
    [expired] = await approvals.expire_due(db, now=at(61))
    assert (expired["id"], expired["status"], expired["decided_at"], expired["decided_by"]) == (
        late["id"], "expired", at(61), None)
    s = await sessions.get_session(db, pk_late)
    assert s["attention"] == f"approval #{late['id']} to run tier 2 expired after 60 s" == s["escalation_gate"]
    assert (await approvals.get_approval(db, fresh["id"]))["status"] == "pending"
    assert await approvals.expire_due(db, now=at(120)) == []  # once


async def test_a_late_decision_expires_the_approval_instead(db):
    pk, row = await escalated(db, timeout=60)
    with pytest.raises(ApprovalStateError, match=r"expired at .* before it was approved"):
        await approvals.decide(db, row["id"], "approved", "alice", now=at(61))
    assert (await approvals.get_approval(db, row["id"]))["status"] == "expired"  # kept, not rolled back
    assert "expired after 60 s" in (await sessions.get_session(db, pk))["attention"]


async def test_approving_needs_the_escalating_session(db):
    pk, row = await escalated(db)
    async with db.write() as conn:  # what a prune does to an old session (ON DELETE SET NULL)
        await conn.execute("DELETE FROM sessions WHERE id = ?", (pk,))
    with pytest.raises(ApprovalStateError, match="no longer exists"):
        await approvals.decide(db, row["id"], "approved", "alice", now=at(1))
    rejected = await approvals.decide(db, row["id"], "rejected", "alice", now=at(1))
    assert rejected["status"] == "rejected" and rejected["session_pk"] is None


async def test_list_filters_by_status_and_session(db):
    pk1, a = await escalated(db)
    pk2, b = await escalated(db)
    _, c = await escalated(db)
    await approvals.decide(db, b["id"], "rejected", "x", now=at(1))
    assert [r["id"] for r in await approvals.list_approvals(db, status="pending")] == [a["id"], c["id"]]  # oldest first
    assert [r["id"] for r in await approvals.list_approvals(db)] == [c["id"], b["id"], a["id"]]  # newest first
    assert [r["id"] for r in await approvals.list_approvals(db, status="rejected")] == [b["id"]]
    assert [r["id"] for r in await approvals.list_approvals(db, session_pk=pk2)] == [b["id"]]
    assert [r["id"] for r in await approvals.list_approvals(db, status="pending", limit=1, offset=1)] == [c["id"]]
    assert await approvals.list_approvals(db, session_pk=pk1, status="approved") == []


async def _incident(db, key: str = "check:api") -> int:
    from app.store.incidents import Finding, Observation, observe

    pk = await sessions.create_session(db, tier=0, model="tierops-probe", trigger="schedule")
    [change] = await observe(db, pk, pk, Observation(findings=[Finding(key, "critical", "HTTP 500", "api", key[6:],
                                                                       "probe")]),
                             flap_count=3, flap_window_s=3600, now=T0)
    return change.incident["id"]


async def _request(db, incident_ids: list[int], tier: int = 3, handoff: str = "restart api", now: str = T0):
    pk = await sessions.create_session(db, tier=tier - 1, model="sonnet", trigger="escalation")
    return pk, await approvals.request_approval(db, session_pk=pk, chain_id=pk, tier=tier, handoff=handoff,
                                                timeout_s=3600, incident_ids=incident_ids, now=now)


async def test_one_pending_approval_per_incident_and_tier_later_escalations_attach(db):
    api = await _incident(db)
    _, (first, attached) = await _request(db, [api], handoff="first look: restart api")
    assert not attached and first["attached"] == 0
    second_pk, (again, attached) = await _request(db, [api], handoff="second look: still 500", now=at(600))
    assert attached and again["id"] == first["id"] and again["attached"] == 1
    assert again["handoff"].startswith("first look: restart api")
    assert f"## Also escalated by session #{second_pk} at {at(600)}" in again["handoff"]
    assert "second look: still 500" in again["handoff"] and again["expires_at"] == first["expires_at"]
    # another tier, or another incident, is another approval
    _, (other_tier, attached) = await _request(db, [api], tier=2)
    assert not attached and other_tier["id"] != first["id"]
    db_inc = await _incident(db, "check:db")
    _, (other_incident, attached) = await _request(db, [db_inc])
    assert not attached and other_incident["id"] != first["id"]
    assert await approvals.incident_ids(db, first["id"]) == [api]
    assert len(await approvals.list_approvals(db, status="pending")) == 3


async def test_an_approval_whose_incidents_all_resolved_expires_with_that_reason(db):
    from app.store import incidents

    api = await _incident(db)
    pk, (row, _) = await _request(db, [api])
    assert await approvals.expire_due(db, now=at(60)) == []  # still open, not yet due
    await incidents.resolve(db, api, "alice", now=at(120))
    [expired] = await approvals.expire_due(db, now=at(180))
    assert expired["id"] == row["id"] and expired["status"] == "expired"
    assert expired["note"] == f"its incidents resolved before anyone decided (incident #{api})"
    session = await sessions.get_session(db, pk)
    assert "incidents resolved" in session["escalation_gate"] and session["attention"] is None  # no human needed


async def test_approving_an_approval_whose_incident_resolved_is_refused_and_expires_it(db):
    from app.store import incidents

    api = await _incident(db)
    _, (row, _) = await _request(db, [api])
    await incidents.resolve(db, api, "alice", now=at(60))
    with pytest.raises(ApprovalStateError, match="its incidents resolved before anyone decided; nothing is left to approve"):
        await approvals.decide(db, row["id"], "approved", "bob", now=at(90))
    assert (await approvals.get_approval(db, row["id"]))["status"] == "expired"
