"""``session_runbooks`` (app/store/runbooks.py): the CHECK of its ``delivery`` is the module's
words, free text is redacted and cut, and the rows go with their session."""

from __future__ import annotations

import re

from app.store import runbooks as runbook_store
from app.store import sessions
from app.store.runbooks import DELIVERIES, TEXT_MAX, RunbookGiven


async def test_the_delivery_check_matches_and_rows_go_with_their_session(db):
    if db.dialect == "sqlite":  # the migration's text as SQLite keeps it
        sql = await db.fetchval("SELECT sql FROM sqlite_master WHERE name = 'session_runbooks'")
        listed = re.search(r"CHECK \(delivery IN \(([^)]*)\)\)", sql).group(1)
        assert tuple(p.strip().strip("'") for p in listed.split(",")) == DELIVERIES
    pk = await sessions.create_session(db, tier=1, trigger="manual")
    secret = "sk-ant-api03-" + "b" * 40
    await runbook_store.record_given(db, pk, [
        RunbookGiven(source="alert X", origin=f"https://wiki/rb?key={secret}", delivery="linked",
                     error=f"HTTP 401 for {secret}", title="t" * (TEXT_MAX + 50), incident_ids=(7, 8))])
    (row,) = await runbook_store.session_runbooks(db, pk)
    assert secret not in row["origin"] and secret not in row["error"] and len(row["title"]) == TEXT_MAX
    assert row["incident_ids"] == [7, 8] and row["truncated"] is False and row["chars_total"] is None
    await runbook_store.record_given(db, pk, [])  # nothing to write: no transaction
    async with db.write() as conn:
        await conn.execute("DELETE FROM sessions WHERE id = ?", (pk,))
    assert await runbook_store.session_runbooks(db, pk) == []
    assert await db.fetchval("SELECT count(*) FROM session_runbooks") == 0
