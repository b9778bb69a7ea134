"""The memory lifecycle over simulated time: decay, stale and revived, contradiction.

Time is simulated by the ``now`` every step takes (the session's end for what sessions teach, the
reader's clock for decay), so months pass in milliseconds.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

import pytest

from app.output.route import Routed
from app.store import findings, memories, sessions
from app.store.db import Database
from app.store.memories import MemoryLifecycle, accumulates
from app.store.migrations import MIGRATIONS
from app.supervisor.context import memories_block

T0 = datetime(2026, 3, 1, tzinfo=UTC)
LIFE = MemoryLifecycle(half_life_days=30.0, floor=0.3)


def day(n: float) -> str:
    """T0 plus ``n`` days, as TierOps stores time."""
    return (T0 + timedelta(days=n)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def teach(db, when: str, *taught: tuple[str | None, str, str], pk: int | None = None) -> int:
    """A session that ended at ``when`` and taught ``taught`` (service, category, value)."""
    pk = pk or await sessions.create_session(db, tier=1, trigger="manual")
    async with db.write() as conn:
        await findings.write_routed(conn, pk, Routed(source="markers", memories=list(taught)), when, 0.7, 0.3)
    return pk


async def by_value(db) -> dict[str, dict]:
    return {m["value"]: m for m in await memories.list_memories(db)}


# -- decay ------------------------------------------------------------------------------------------

def test_decay_formula_halves_every_half_life():
    assert LIFE.effective(0.8, day(0), day(0)) == pytest.approx(0.8)
    assert LIFE.effective(0.8, day(0), day(30)) == pytest.approx(0.4)
    assert LIFE.effective(0.8, day(0), day(60)) == pytest.approx(0.2)
    assert LIFE.effective(0.8, day(0), day(15)) == pytest.approx(0.8 * 2 ** -0.5)
    assert MemoryLifecycle(half_life_days=0, floor=0.3).effective(0.8, day(0), day(3650)) == 0.8  # 0 = no decay
    assert LIFE.effective(0.8, day(10), day(0)) == 0.8  # seen "in the future" (a clock step): no growth, no decay
    assert LIFE.effective(0.8, None, day(100)) == 0.8 and LIFE.effective(0.8, "garbage", day(100)) == 0.8
    assert LIFE.effective(0.8, "2026-03-01T00:00:00", day(30)) == pytest.approx(0.4)  # naive text is UTC


def test_defaults_are_the_settings_defaults(settings):
    assert MemoryLifecycle() == MemoryLifecycle.from_settings(settings) == MemoryLifecycle(30.0, 0.3)
    assert MemoryLifecycle.from_settings(settings.model_copy(update={"memory_half_life_days": 7.0,
                                                                     "memory_floor": 0.5})) == MemoryLifecycle(7, 0.5)


async def test_a_taught_memory_decays_in_the_prompt_and_goes_stale_below_the_floor(db):
    await teach(db, day(0), ("db", "version", "postgres 16"))
    (m,) = await memories.list_memories(db)
    assert (m["last_seen_at"], m["stale"], m["replaced_by"]) == (day(0), False, None)

    (p,) = await memories.prompt_memories(db, lifecycle=LIFE, now=day(30))
    assert p["confidence"] == pytest.approx(0.35)  # 0.7 halved after one half-life
    # day 37: 0.7 * 0.5 ** (37/30) = 0.298 < 0.3, out of the prompt even before a sweep marks it
    assert await memories.prompt_memories(db, lifecycle=LIFE, now=day(37)) == []
    assert await memories.sweep_stale(db, LIFE, now=day(36)) == []  # 0.305: not yet
    assert await memories.sweep_stale(db, LIFE, now=day(37)) == [m["id"]]
    assert await memories.sweep_stale(db, LIFE, now=day(38)) == []  # once
    (m,) = await memories.list_memories(db)
    assert m["stale"] is True and m["active"] is True  # still listed, still the operator's "active"
    assert m["confidence"] == pytest.approx(0.7)  # decay is derived, never written back
    assert [x["id"] for x in await memories.list_memories(db, stale=True)] == [m["id"]]
    assert await memories.list_memories(db, stale=False) == []
    # a stale memory is not given, even to a caller without a lifecycle
    assert await memories.prompt_memories(db) == []


async def test_a_stale_memory_is_revived_when_seen_again(db):
    first = await teach(db, day(0), ("db", "version", "postgres 16"))
    await memories.sweep_stale(db, LIFE, now=day(40))
    second = await teach(db, day(41), ("db", "version", "postgres   16"))
    (m,) = await memories.list_memories(db)
    assert (m["stale"], m["last_seen_at"], m["times_seen"]) == (False, day(41), 2)
    assert (m["created_by_session"], m["reinforced_by_session"]) == (first, second)
    # reinforced from the stored confidence: being seen again cancels the decay
    assert m["confidence"] == pytest.approx(0.7 + 0.3 * 0.3)
    (p,) = await memories.prompt_memories(db, lifecycle=LIFE, now=day(41))
    assert p["confidence"] == pytest.approx(0.79)


async def test_reinforcement_restarts_the_decay_clock(db):
    await teach(db, day(0), (None, "backups", "nightly at 02:00"))
    await teach(db, day(20), (None, "backups", "nightly at 02:00"))
    (p,) = await memories.prompt_memories(db, lifecycle=LIFE, now=day(50))
    assert p["confidence"] == pytest.approx(0.79 * 0.5 ** (30 / 30))


async def test_an_older_session_ingested_late_does_not_move_last_seen_back(db):
    await teach(db, day(10), (None, "backups", "nightly"))
    await teach(db, day(2), (None, "backups", "nightly"))
    (m,) = await memories.list_memories(db)
    assert m["last_seen_at"] == day(10) and m["times_seen"] == 2


async def test_prompt_order_follows_the_decayed_confidence(db):
    await teach(db, day(0), ("a", "k", "old but confident"))
    async with db.write() as conn:
        await conn.execute("UPDATE memories SET confidence = 0.9")
    await teach(db, day(29), ("b", "k", "fresh"))
    rows = await memories.prompt_memories(db, lifecycle=LIFE, now=day(30))
    assert [r["value"] for r in rows] == ["fresh", "old but confident"]  # 0.68 before 0.45
    assert [r["value"] for r in await memories.prompt_memories(db)] == ["old but confident", "fresh"]  # stored
    assert len(await memories.prompt_memories(db, 1, lifecycle=LIFE, now=day(30))) == 1


async def test_floor_applies_without_decay_and_floor_zero_never_stales(db):
    await memories.create_memory(db, category="k", value="weak", confidence=0.2)
    no_decay = MemoryLifecycle(half_life_days=0, floor=0.3)
    assert await memories.prompt_memories(db, lifecycle=no_decay) == []
    assert len(await memories.sweep_stale(db, no_decay)) == 1
    await memories.create_memory(db, category="k", value="ancient", confidence=0.9)
    assert await memories.sweep_stale(db, MemoryLifecycle(half_life_days=1, floor=0.0), now=day(3650)) == []


async def test_the_sweep_leaves_a_memory_reinforced_meanwhile(db):
    await teach(db, day(0), ("db", "version", "postgres 16"))
    (m,) = await memories.list_memories(db)
    rows = await db.fetchall("SELECT id, confidence, last_seen_at, updated_at FROM memories")
    await teach(db, day(40), ("db", "version", "postgres 16"))  # between the sweep's read and its write

    async def stale_fetch(*_args, **_kwargs):
        return rows

    db.fetchall, real = stale_fetch, db.fetchall
    try:
        assert await memories.sweep_stale(db, LIFE, now=day(40)) == []
    finally:
        db.fetchall = real
    assert (await memories.get_memory(db, m["id"]))["stale"] is False


async def test_the_operator_renews_a_memory_by_editing_or_activating_it(db):
    m = await memories.create_memory(db, category="k", value="v")
    async with db.write() as conn:
        await conn.execute("UPDATE memories SET last_seen_at = ?, stale = 1 WHERE id = ?", (day(0), m["id"]))
    off = await memories.update_memory(db, m["id"], {"active": False})
    assert (off["active"], off["stale"], off["last_seen_at"]) == (False, True, day(0))  # a deactivation renews nothing
    on = await memories.update_memory(db, m["id"], {"active": True})
    assert on["stale"] is False and on["last_seen_at"] > day(0)
    async with db.write() as conn:
        await conn.execute("UPDATE memories SET last_seen_at = ?, stale = 1 WHERE id = ?", (day(0), m["id"]))
    edited = await memories.update_memory(db, m["id"], {"confidence": 0.9})
    assert edited["stale"] is False and edited["last_seen_at"] > day(0)


# -- contradiction ----------------------------------------------------------------------------------

async def test_a_new_value_for_the_same_service_and_category_replaces_the_active_one(db):
    await teach(db, day(0), ("nginx", "port", "listens on 8080"), ("nginx", "version", "1.24"))
    later = await teach(db, day(5), ("nginx", "port", "listens on 8081"))
    rows = await by_value(db)
    old, new = rows["listens on 8080"], rows["listens on 8081"]
    assert (old["active"], old["replaced_by"], old["updated_at"]) == (False, new["id"], day(5))
    assert (new["active"], new["replaced_by"], new["created_by_session"]) == (True, None, later)
    assert rows["1.24"]["active"] is True  # another category is another fact
    prompt = await memories.prompt_memories(db, lifecycle=LIFE, now=day(5))
    assert sorted(p["value"] for p in prompt) == ["1.24", "listens on 8081"]


async def test_the_old_value_taught_again_comes_back_and_replaces_the_newer(db):
    await teach(db, day(0), ("nginx", "port", "8080"))
    await teach(db, day(5), ("nginx", "port", "8081"))
    await teach(db, day(9), ("nginx", "port", "8080"))
    rows = await by_value(db)
    assert (rows["8080"]["active"], rows["8080"]["replaced_by"], rows["8080"]["times_seen"]) == (True, None, 2)
    assert (rows["8081"]["active"], rows["8081"]["replaced_by"]) == (False, rows["8080"]["id"])


async def test_scope_is_service_and_category(db):
    await teach(db, day(0), ("nginx", "port", "8080"), ("haproxy", "port", "8080"), (None, "port", "80"))
    await teach(db, day(1), ("nginx", "port", "8443"))
    rows = await memories.list_memories(db)
    assert {(m["service"], m["value"]): m["active"] for m in rows} == {
        ("nginx", "8080"): False, ("nginx", "8443"): True, ("haproxy", "8080"): True, (None, "80"): True}
    await teach(db, day(2), (None, "port", "443"))  # a host-wide fact is contradicted like any other
    assert {m["value"]: m["active"] for m in await memories.list_memories(db, service=None) if m["service"] is None} \
        == {"80": False, "443": True}


async def test_values_taught_by_one_session_do_not_contradict_each_other(db):
    await teach(db, day(0), ("api", "dependency", "redis"))
    pk = await teach(db, day(1), ("api", "dependency", "postgres"), ("api", "dependency", "kafka"))
    rows = await by_value(db)
    assert rows["postgres"]["active"] and rows["kafka"]["active"]  # a list, not a contradiction
    assert (rows["redis"]["active"], rows["redis"]["replaced_by"]) == (False, rows["postgres"]["id"])
    # the same session repeating the old value alongside the new one keeps both
    await teach(db, day(2), ("api", "dependency", "kafka"), ("api", "dependency", "redis"), pk=pk)
    rows = await by_value(db)
    assert rows["redis"]["active"] and rows["kafka"]["active"]
    assert (rows["postgres"]["active"], rows["postgres"]["replaced_by"]) == (False, rows["kafka"]["id"])


@pytest.mark.parametrize("category", ["quirk", "Quirks", "root_cause", "root cause", "pattern", "note", "restart",
                                      "config-change", "runbook"])
async def test_accumulating_categories_never_contradict(db, category):
    assert accumulates(category)
    await teach(db, day(0), ("nginx", category, "ipv6 disabled"))
    await teach(db, day(1), ("nginx", category, "gzip breaks /export"))
    assert all(m["active"] and m["replaced_by"] is None for m in await memories.list_memories(db))


@pytest.mark.parametrize("category", ["port", "version", "baseline", "disk", "backups", "status", "access"])
def test_fact_categories_hold_one_value(category):
    assert not accumulates(category)


async def test_operator_deactivations_and_edits_are_not_contradictions(db):
    await teach(db, day(0), ("nginx", "port", "8080"))
    (m,) = await memories.list_memories(db)
    await memories.update_memory(db, m["id"], {"active": False})
    await teach(db, day(1), ("nginx", "port", "8080"))  # reinforced, stays the operator's inactive
    await teach(db, day(2), ("nginx", "port", "8081"))  # an inactive memory is not replaced either
    rows = await by_value(db)
    assert (rows["8080"]["active"], rows["8080"]["replaced_by"], rows["8080"]["times_seen"]) == (False, None, 2)
    assert rows["8081"]["active"] is True
    await memories.create_memory(db, service="nginx", category="port", value="9090")  # the operator's own
    assert (await by_value(db))["8081"]["active"] is True


async def test_an_operator_activating_a_replaced_memory_clears_its_link(db):
    await teach(db, day(0), ("nginx", "port", "8080"))
    await teach(db, day(1), ("nginx", "port", "8081"))
    old = (await by_value(db))["8080"]
    back = await memories.update_memory(db, old["id"], {"active": True})
    assert (back["active"], back["replaced_by"]) == (True, None)


async def test_deleting_the_replacement_unlinks_the_replaced(db):
    await teach(db, day(0), ("nginx", "port", "8080"))
    await teach(db, day(1), ("nginx", "port", "8081"))
    rows = await by_value(db)
    assert await memories.delete_memory(db, rows["8081"]["id"])
    (m,) = await memories.list_memories(db)
    assert (m["value"], m["active"], m["replaced_by"]) == ("8080", False, None)


# -- the prompt over months -----------------------------------------------------------------------

async def test_memories_block_over_simulated_months(db):
    await teach(db, day(0), ("nginx", "port", "8080"), (None, "backups", "nightly at 02:00"))
    await teach(db, day(20), ("nginx", "port", "8081"))
    block = await memories_block(db, 4000, LIFE, now=day(20))
    assert "- [0.70] nginx:port: 8081" in block and "8080" not in block
    assert "- [0.44] backups: nightly at 02:00" in block  # 0.7 * 0.5 ** (20/30)
    block = await memories_block(db, 4000, LIFE, now=day(40))  # backups: 0.7 * 0.5 ** (40/30) = 0.28
    assert "backups" not in block and "- [0.44] nginx:port: 8081" in block
    stale = await memories.list_memories(db, stale=True)
    assert [m["value"] for m in stale] == ["nightly at 02:00"]  # the block's sweep marked it
    await teach(db, day(41), (None, "backups", "nightly at 02:00"))
    assert "- [0.79] backups: nightly at 02:00" in await memories_block(db, 4000, LIFE, now=day(41))


# -- the migration --------------------------------------------------------------------------------

async def test_migration_0006_backfills_last_seen_from_the_last_update(tmp_path):
    path = tmp_path / "old.db"
    names = [name for name, _ in MIGRATIONS]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    for name, sql in MIGRATIONS[: names.index("0006_memory_lifecycle")]:
        for statement in (s for s in sql.split(";") if s.strip()):
            conn.execute(statement)
        conn.execute("INSERT INTO migrations VALUES (?, '2026-01-01T00:00:00.000Z')", (name,))
    conn.execute("INSERT INTO memories (service, category, value, confidence, created_at, updated_at)"
                 " VALUES ('db', 'version', '16', 0.8, ?, ?)", (day(0), day(3)))
    conn.close()
    async with await Database.open(path) as db:
        (m,) = await memories.list_memories(db)
        assert (m["last_seen_at"], m["stale"], m["replaced_by"]) == (day(3), False, None)
        fk = {(r["table"], r["from"], r["on_delete"]) for r in await db.fetchall("PRAGMA foreign_key_list(memories)")}
        assert ("memories", "replaced_by", "SET NULL") in fk
        indexes = {r[0] for r in await db.fetchall("SELECT name FROM sqlite_master WHERE tbl_name = 'memories'"
                                                    " AND type = 'index'")}
        assert "memories_replaced_by" in indexes
        assert await db.fetchval("PRAGMA integrity_check") == "ok"


# -- the memories page --------------------------------------------------------------------------

async def test_the_memories_page_shows_decay_stale_and_replacement(tmp_path):
    """Showing the page sweeps (with the server's settings) and shows what the lifecycle did."""
    import httpx

    from app.config import Settings
    from app.web.app import create_app  # here: the web layer is not this module's subject

    settings = Settings(db=tmp_path / "web.db", home=tmp_path / "state", schedule=False, retention_days=0,
                        memory_half_life_days=30, memory_floor=0.3)
    now = datetime.now(UTC)

    def ago(days: float) -> str:
        return (now - timedelta(days=days)).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def row(html: str, pk: int) -> str:
        start = html.index(f'<tr id="memory-{pk}"')
        return html[start:html.index("</tr>", start)]

    app = create_app(settings)
    async with app.router.lifespan_context(app):
        db = app.state.tierops.db
        await teach(db, ago(60), (None, "backups", "nightly at 02:00"))  # 0.7 / 4: stale
        await teach(db, ago(2), ("nginx", "port", "8080"))
        await teach(db, ago(1), ("nginx", "port", "8081"))
        rows = await by_value(db)
        backups, old, new = (rows[v]["id"] for v in ("nightly at 02:00", "8080", "8081"))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as cl:
            page = await cl.get("/memories")
            assert page.status_code == 200, page.text
            stale_row = row(page.text, backups)
            assert 'class="stale"' in stale_row and ">stale</span>" in stale_row and "0.17" in stale_row
            old_row = row(page.text, old)
            assert 'class="inactive"' in old_row and ">replaced</span>" in old_row
            assert f'replaced by <a href="#memory-{new}">memory {new}</a>' in old_row
            assert f'replaces <a href="#memory-{old}">memory {old}</a>' in row(page.text, new)
            only_stale = (await cl.get("/memories?stale=1")).text
            assert f'id="memory-{backups}"' in only_stale and f'id="memory-{new}"' not in only_stale
            assert (await cl.get("/memories?stale=maybe")).status_code == 422
            api = {m["id"]: m for m in (await cl.get("/api/v1/memories")).json()}
    assert api[backups]["stale"] is True and api[old]["replaced_by"] == new and api[new]["stale"] is False
