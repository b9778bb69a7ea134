"""The memories page shows provenance and decay: the session that wrote a memory and
the one that last reinforced it, as links; when it was last seen, its confidence after decay and
when it turns stale. Memories taught by real cycles (the fake CLI's structured output)."""

from __future__ import annotations

import re

import pytest

from app.clock import shift, utcnow
from app.store import memories as memory_store
from tests.fakes import claude_control as cc
from tests.helpers import healthy

pytestmark = pytest.mark.timeout(120)


def teaching(summary: str) -> dict:
    out = healthy(summary)
    out["memories"] = [{"key": "api:port", "value": "8080"}]
    return out


def _row(html: str, pk: int) -> str:
    start = html.index(f'<tr id="memory-{pk}"')
    return html[start:html.index("</tr>", start)]


def test_provenance_links_and_decay(app_server):
    srv = app_server(memory_half_life_days=30, memory_floor=0.2,
                     stages=[{"lines": cc.structured_stream(cc.new_session_id(), teaching("first"))},
                             {"lines": cc.structured_stream(cc.new_session_id(), teaching("second"))}])
    (first,) = srv.run_async(lambda st: st.supervisor.run_cycle())
    (second,) = srv.run_async(lambda st: st.supervisor.run_cycle())
    (memory,) = srv.run_async(lambda st: memory_store.list_memories(st.db))
    assert memory["created_by_session"] == first["id"] and memory["reinforced_by_session"] == second["id"]
    with srv.client() as cl:
        html = cl.get("/memories").text
        session = cl.get(f"/sessions/{second['id']}").text
    row = _row(html, memory["id"])
    assert f'written by <a class="provenance-created" href="/sessions/{first["id"]}">session #{first["id"]}</a>' in row
    assert (f'last reinforced by <a class="provenance-reinforced" href="/sessions/{second["id"]}">'
            f'session #{second["id"]}</a>') in row
    assert "Confidence halves every 30.0 days" in html and "below 0.2 (TIEROPS_MEMORY_FLOOR)" in html
    assert re.search(r'data-effective="0\.\d{4}"', row) and "stale from" in row
    # the session that taught it shows where: its result line carries the memory badge
    assert 'data-finding="memories" data-count="1"' in session

    async def age(st):  # last seen a year ago: decayed far below the floor
        async with st.db.write() as conn:
            await conn.execute("UPDATE memories SET last_seen_at = ?", (shift(utcnow(), -365 * 86400),))

    srv.run_async(age)
    with srv.client() as cl:
        row = _row(cl.get("/memories").text, memory["id"])
    assert 'class="stale"' in row and ">stale</span>" in row  # the page's sweep marked it
    effective = float(re.search(r'data-effective="([0-9.]+)"', row).group(1))
    assert effective < 0.2 and "stale from" not in row
