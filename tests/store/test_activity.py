"""``app/store/activity.py`` against a real SQLite file: stored stream lines and their paging."""

from __future__ import annotations

from app.store import activity, sessions
from app.store.sessions import SessionIdentity


def line(pk: int, seq: int, raw: str | None = None, *, attempt: int = 1, type_: str = "assistant",
         subtype: str | None = None) -> activity.LineTuple:
    return (pk, seq, attempt, f"2026-01-01T00:00:{seq % 60:02d}.000Z", type_, subtype, f"display {seq}",
            raw if raw is not None else f'{{"seq":{seq}}}')


async def stored(db, n: int) -> int:
    pk = await sessions.create_session(db)
    await activity.append_lines(db, pk, [line(pk, i) for i in range(1, n + 1)], line_count=n)
    return pk


def test_as_row_maps_the_tuple_to_named_columns():
    assert activity.as_row((4, 9, 2, "ts", "system", "init", "shown", "{}")) == {
        "session_pk": 4, "seq": 9, "attempt": 2, "ts": "ts", "type": "system", "subtype": "init",
        "display": "shown", "raw": "{}"}


async def test_append_lines_stores_lines_and_the_line_count(db):
    pk = await sessions.create_session(db)
    batch = [line(pk, 1, type_="system", subtype="init"), line(pk, 2, attempt=2)]
    await activity.append_lines(db, pk, batch, line_count=2)
    assert await activity.lines_after(db, pk, 0, 10) == [activity.as_row(t) for t in batch]
    assert (await sessions.get_session(db, pk))["line_count"] == 2
    await activity.append_lines(db, pk, [line(pk, 3)], line_count=3)
    assert (await sessions.get_session(db, pk))["line_count"] == 3
    assert await activity.count_lines(db, pk) == 3


async def test_append_lines_with_no_lines_still_updates_the_count(db):
    pk = await sessions.create_session(db)
    await activity.append_lines(db, pk, [], line_count=42)
    assert (await sessions.get_session(db, pk))["line_count"] == 42
    assert await activity.count_lines(db, pk) == 0


async def test_append_lines_with_identity_records_the_cli_session(db):
    pk = await sessions.create_session(db)
    ident = SessionIdentity("sid-1", "claude-x", "2.1.197", "/init/cwd")
    await activity.append_lines(db, pk, [line(pk, 1)], line_count=1, identity=ident)
    row = await sessions.get_session(db, pk)
    assert (row["session_id"], row["cli_model"], row["cli_version"], row["cwd"]) == (
        "sid-1", "claude-x", "2.1.197", "/init/cwd")


async def test_append_lines_identity_keeps_a_launch_cwd(db):
    pk = await sessions.create_session(db, cwd="/launch")
    await activity.append_lines(db, pk, [], line_count=0, identity=SessionIdentity("sid-1", "m", "v", "/init"))
    assert (await sessions.get_session(db, pk))["cwd"] == "/launch"


async def test_append_lines_identity_is_stored_once(db):
    pk = await sessions.create_session(db)
    await activity.append_lines(db, pk, [line(pk, 1)], line_count=1,
                                identity=SessionIdentity("sid-1", "first-model", "1", None))
    await activity.append_lines(db, pk, [line(pk, 2)], line_count=2,
                                identity=SessionIdentity("sid-1", "second-model", "2", None))
    row = await sessions.get_session(db, pk)
    assert (row["session_id"], row["cli_model"], row["cli_version"]) == ("sid-1", "first-model", "1")
    assert row["line_count"] == 2
    assert await activity.count_lines(db, pk) == 2


async def test_append_lines_leaves_out_a_session_id_another_row_has(db):
    first = await sessions.create_session(db)
    await activity.append_lines(db, first, [], line_count=0, identity=SessionIdentity("dup", "m", "v", None))
    second = await sessions.create_session(db)
    # no IntegrityError on the UNIQUE session_id: the lines and count are still stored
    await activity.append_lines(db, second, [line(second, 1)], line_count=1,
                                identity=SessionIdentity("dup", "m2", "v2", "/c"))
    row = await sessions.get_session(db, second)
    assert row["session_id"] is None
    assert row["line_count"] == 1
    assert await activity.count_lines(db, second) == 1
    assert (await sessions.get_session(db, first))["session_id"] == "dup"


async def test_lines_after_pages_oldest_first_within_one_session(db):
    pk = await stored(db, 7)
    other = await stored(db, 3)
    page1 = await activity.lines_after(db, pk, 0, 3)
    assert [r["seq"] for r in page1] == [1, 2, 3]
    page2 = await activity.lines_after(db, pk, page1[-1]["seq"], 3)
    assert [r["seq"] for r in page2] == [4, 5, 6]
    assert [r["seq"] for r in await activity.lines_after(db, pk, 6, 3)] == [7]
    assert await activity.lines_after(db, pk, 7, 3) == []
    assert {r["session_pk"] for r in await activity.lines_after(db, other, 0, 100)} == {other}


async def test_transcript_page_is_newest_first_and_pages_with_before(db):
    pk = await stored(db, 5)
    await stored(db, 9)  # another session's lines never show up
    newest = await activity.transcript_page(db, pk, before=None, limit=2, raw_limit=1000)
    assert [r["seq"] for r in newest] == [5, 4]
    older = await activity.transcript_page(db, pk, before=newest[-1]["seq"], limit=2, raw_limit=1000)
    assert [r["seq"] for r in older] == [3, 2]
    assert [r["seq"] for r in await activity.transcript_page(db, pk, before=2, limit=2, raw_limit=1000)] == [1]
    assert await activity.transcript_page(db, pk, before=1, limit=2, raw_limit=1000) == []


async def test_transcript_page_drops_raw_above_the_limit_but_keeps_its_length(db):
    pk = await sessions.create_session(db)
    big = '{"x":"' + "a" * 500 + '"}'
    small = '{"x":1}'
    await activity.append_lines(db, pk, [line(pk, 1, small), line(pk, 2, big), line(pk, 3, "é" * 100)],
                                line_count=3)
    rows = await activity.transcript_page(db, pk, before=None, limit=10, raw_limit=100)
    by_seq = {r["seq"]: r for r in rows}
    assert by_seq[2]["raw"] is None
    assert by_seq[2]["raw_len"] == len(big)
    assert by_seq[2]["display"] == "display 2"
    assert by_seq[1]["raw"] == small
    assert by_seq[1]["raw_len"] == len(small)
    # the limit counts characters, not bytes
    assert by_seq[3]["raw"] == "é" * 100
    assert by_seq[3]["raw_len"] == 100


async def test_count_lines_counts_one_session(db):
    pk = await stored(db, 4)
    await stored(db, 2)
    assert await activity.count_lines(db, pk) == 4
    assert await activity.count_lines(db, 999) == 0
