"""``app/store/memories.py`` against a real SQLite file: the operator's side of memories."""

from __future__ import annotations

import pytest

from app.errors import TierOpsError
from app.store import memories
from app.store.memories import MemoryConflict


async def stamp(db, pk: int, updated_at: str) -> None:
    """Give a memory a known ``updated_at`` (utcnow has millisecond resolution: ties would hide order bugs)."""
    async with db.write() as conn:
        await conn.execute("UPDATE memories SET updated_at = ? WHERE id = ?", (updated_at, pk))


async def test_create_memory_returns_the_stored_row(db):
    m = await memories.create_memory(db, category="disk", value="  grows\n 2%/day ", service="postgres",
                                     confidence=0.9, active=False)
    assert m == await memories.get_memory(db, m["id"])
    assert (m["service"], m["category"], m["value"]) == ("postgres", "disk", "grows 2%/day")
    assert m["confidence"] == 0.9
    assert m["active"] is False
    assert m["times_seen"] == 1
    assert m["created_at"] == m["updated_at"]
    assert m["created_by_session"] is None
    assert m["reinforced_by_session"] is None


async def test_create_memory_defaults_and_empty_service_is_none(db):
    m = await memories.create_memory(db, category="runbook", value="restart db first", service="")
    assert m["service"] is None
    assert m["confidence"] == 0.7
    assert m["active"] is True


async def test_create_duplicate_memory_is_a_conflict(db):
    await memories.create_memory(db, category="disk", value="grows 2%/day", service="postgres")
    with pytest.raises(MemoryConflict, match="already exists"):
        await memories.create_memory(db, category="disk", value="grows   2%/day", service="postgres")
    await memories.create_memory(db, category="note", value="x")
    with pytest.raises(MemoryConflict):  # "" and None are the same (no) service
        await memories.create_memory(db, category="note", value="x", service="")
    assert issubclass(MemoryConflict, TierOpsError)
    assert len(await memories.list_memories(db)) == 2
    # another service is another memory
    await memories.create_memory(db, category="disk", value="grows 2%/day", service="mysql")


async def test_update_memory_returns_the_new_row(db):
    m = await memories.create_memory(db, category="disk", value="old", service="postgres")
    new = await memories.update_memory(db, m["id"], {"value": " new\t value ", "confidence": 0.2, "active": 0,
                                                      "category": "space"})
    assert new is not None
    assert (new["value"], new["confidence"], new["active"], new["category"]) == ("new value", 0.2, False, "space")
    assert new["service"] == "postgres"
    assert new["updated_at"] >= m["updated_at"]
    assert new == await memories.get_memory(db, m["id"], fresh=True)


async def test_update_memory_empty_service_becomes_none(db):
    m = await memories.create_memory(db, category="disk", value="v", service="postgres")
    new = await memories.update_memory(db, m["id"], {"service": ""})
    assert new["service"] is None


async def test_update_memory_ignores_keys_that_are_not_editable(db):
    m = await memories.create_memory(db, category="disk", value="v")
    unchanged = await memories.update_memory(db, m["id"], {"times_seen": 99, "id": 1234, "created_at": "x"})
    assert unchanged == m
    new = await memories.update_memory(db, m["id"], {"value": "w", "times_seen": 99, "created_by_session": 5})
    assert new["value"] == "w"
    assert new["times_seen"] == 1
    assert new["created_by_session"] is None
    assert new["id"] == m["id"]


async def test_update_unknown_memory_is_none(db):
    assert await memories.update_memory(db, 404, {"value": "x"}) is None
    assert await memories.update_memory(db, 404, {"ignored": 1}) is None


async def test_update_memory_into_another_is_a_conflict(db):
    await memories.create_memory(db, category="disk", value="grows 2%/day", service="postgres")
    other = await memories.create_memory(db, category="disk", value="other", service="postgres")
    with pytest.raises(MemoryConflict):
        await memories.update_memory(db, other["id"], {"value": "grows  2%/day"})
    assert (await memories.get_memory(db, other["id"]))["value"] == "other"


async def test_delete_memory(db):
    m = await memories.create_memory(db, category="disk", value="v")
    assert await memories.delete_memory(db, m["id"]) is True
    assert await memories.get_memory(db, m["id"]) is None
    assert await memories.delete_memory(db, m["id"]) is False


async def test_list_memories_filters_and_orders_by_update_then_id(db):
    a = await memories.create_memory(db, category="disk", value="a", service="postgres")
    b = await memories.create_memory(db, category="cpu", value="b", service="postgres")
    c = await memories.create_memory(db, category="disk", value="c", service="nginx", active=False)
    d = await memories.create_memory(db, category="disk", value="d")
    await stamp(db, a["id"], "2026-01-03T00:00:00.000Z")
    await stamp(db, b["id"], "2026-01-01T00:00:00.000Z")
    await stamp(db, c["id"], "2026-01-02T00:00:00.000Z")
    await stamp(db, d["id"], "2026-01-02T00:00:00.000Z")

    def values(rows):
        return [m["value"] for m in rows]

    assert values(await memories.list_memories(db)) == ["a", "d", "c", "b"]
    assert values(await memories.list_memories(db, service="postgres")) == ["a", "b"]
    assert values(await memories.list_memories(db, category="disk")) == ["a", "d", "c"]
    assert values(await memories.list_memories(db, active=False)) == ["c"]
    assert values(await memories.list_memories(db, active=True, category="disk")) == ["a", "d"]
    assert values(await memories.list_memories(db, limit=2, offset=1)) == ["d", "c"]


async def test_prompt_memories_only_active_by_confidence_then_recency(db):
    low = await memories.create_memory(db, category="k", value="low", confidence=0.3)
    older = await memories.create_memory(db, category="k", value="older", confidence=0.8, service="svc")
    newer = await memories.create_memory(db, category="k", value="newer", confidence=0.8)
    await memories.create_memory(db, category="k", value="inactive", confidence=1.0, active=False)
    await stamp(db, older["id"], "2026-01-01T00:00:00.000Z")
    await stamp(db, newer["id"], "2026-01-02T00:00:00.000Z")
    await stamp(db, low["id"], "2026-01-09T00:00:00.000Z")
    rows = await memories.prompt_memories(db)
    assert [m["value"] for m in rows] == ["newer", "older", "low"]
    assert rows[1] == {"service": "svc", "category": "k", "value": "older", "confidence": 0.8}
    assert [m["value"] for m in await memories.prompt_memories(db, limit=1)] == ["newer"]


async def test_memory_services_and_categories_are_distinct_and_sorted(db):
    await memories.create_memory(db, category="disk", value="1", service="postgres")
    await memories.create_memory(db, category="cpu", value="2", service="api")
    await memories.create_memory(db, category="disk", value="3", service="postgres")
    await memories.create_memory(db, category="runbook", value="4")
    assert await memories.memory_services(db) == ["api", "postgres"]
    assert await memories.memory_categories(db) == ["cpu", "disk", "runbook"]
    assert await memories.memory_categories(db, limit=2) == ["cpu", "disk"]


async def test_a_memory_carries_its_lifecycle_fields(db):
    """Last seen (decay counts from it), stale and the contradiction link, in every row."""
    m = await memories.create_memory(db, category="disk", value="v", service="db")
    assert (m["last_seen_at"], m["stale"], m["replaced_by"]) == (m["created_at"], False, None)
    assert set(m) == {"id", "service", "category", "value", "confidence", "active", "times_seen", "created_at",
                      "updated_at", "created_by_session", "reinforced_by_session", "last_seen_at", "stale",
                      "replaced_by"}
    for rows in (await memories.list_memories(db), [await memories.get_memory(db, m["id"])],
                 [await memories.update_memory(db, m["id"], {"value": "w"})]):
        assert type(rows[0]["stale"]) is bool and set(rows[0]) == set(m)


async def test_list_memories_filters_on_stale(db):
    fresh = await memories.create_memory(db, category="k", value="fresh")
    old = await memories.create_memory(db, category="k", value="old")
    async with db.write() as conn:
        await conn.execute("UPDATE memories SET stale = 1 WHERE id = ?", (old["id"],))
    assert [m["id"] for m in await memories.list_memories(db, stale=True)] == [old["id"]]
    assert [m["id"] for m in await memories.list_memories(db, stale=False)] == [fresh["id"]]
    assert [m["value"] for m in await memories.prompt_memories(db)] == ["fresh"]  # stale: never in a prompt


async def test_effective_confidences_by_id(db):
    m = await memories.create_memory(db, category="k", value="v", confidence=0.8)
    async with db.write() as conn:
        await conn.execute("UPDATE memories SET last_seen_at = '2026-01-01T00:00:00.000Z' WHERE id = ?", (m["id"],))
    rows = await memories.list_memories(db)
    life = memories.MemoryLifecycle(half_life_days=10, floor=0.3)
    assert memories.effective_confidences(rows, life, "2026-01-21T00:00:00.000Z") == {m["id"]: pytest.approx(0.2)}
