"""What a person sees of the evidence: the session page's "N of M findings verified", each event,
service check, action and the escalation marked with its status and linked to the transcript line of
the call its quote was found in, that line's badges back to the findings, and the incident page's
findings with their statuses.

Sessions are hand-made streams stored and routed by the real recorder into the app's own SQLite file
(``tests/engine/test_evidence_check.py`` has the streams); the pages are read in process."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from app.config import Settings
from app.engine.evidence import tool_calls_of
from app.engine.ingest import ingest_path
from app.store import findings
from app.store import guard as guard_store
from app.store import incidents as incident_store
from app.store.evidence import session_tool_lines
from app.store.incidents import Finding, Observation
from app.web.app import create_app
from tests.engine.test_evidence_check import ingest, output
from tests.helpers import fixture_stream


def _row(html: str, element_id: str) -> str:
    start = html.index(f'id="{element_id}"')
    return html[start:html.index("</tr>", start)]


def _line(html: str, seq: int) -> str:
    start = html.index(f'id="act-{seq}"')
    nxt = html.find('<div class="act ', start + 1)
    return html[start:nxt if nxt != -1 else len(html)]


async def test_session_and_incident_pages_show_each_findings_evidence(tmp_path: Path, validator) -> None:
    settings = Settings(db=tmp_path / "web.db", home=tmp_path / "state", schedule=False, retention_days=0)
    streams = tmp_path / "streams"
    streams.mkdir()
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        db = app.state.tierops.db
        report, _ = await ingest_path(db, fixture_stream("c_structured"), validator, settings, tier=1)
        foreign_id = tool_calls_of(await session_tool_lines(db, int(report["id"])))[0].tool_use_id
        pk = await ingest(streams, db, validator, settings, output(foreign_id))
        off = await ingest(streams, db, validator, settings.model_copy(update={"evidence_policy": "off"}),
                           output(foreign_id))
        seq = (await guard_store.tool_call_lines(db, pk, ["toolu_A"]))["toolu_A"]
        events = sorted(await findings.list_events(db, session=pk), key=lambda e: e["id"])
        nginx, lag, foreign, plain = (e["id"] for e in events)
        changes = await incident_store.observe(db, pk, None, Observation(findings=[
            Finding(key="agent:nginx", severity="critical", message="nginx failed", service="nginx"),
            Finding(key="agent:postgres", severity="warning", message="lag", service="postgres")]),
            flap_count=99, flap_window_s=60)
        by_service = {c.incident["service"]: c.incident["id"] for c in changes}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as cl:
            page = (await cl.get(f"/sessions/{pk}")).text
            off_page = (await cl.get(f"/sessions/{off}")).text
            nginx_page = (await cl.get(f"/incidents/{by_service['nginx']}")).text
            lag_page = (await cl.get(f"/incidents/{by_service['postgres']}")).text

    # the verdict counts events, service checks and actions: 3 of 6 verified
    summary = page[page.index('id="verdict-evidence"'):]
    summary = summary[:summary.index("</div>")]
    assert "3 of 6 findings verified" in summary and "2 unsupported" in summary and "1 uncited" in summary
    # each row: its status, and where it holds a link to the line of the call it was found in
    link = f'href="#act-{seq}">line #{seq}</a>'
    verified = _row(page, f"event-{nginx}")
    assert "✓ verified" in verified and link in verified
    assert 'title="the quote is not in any tool result of this session">unsupported' in _row(page, f"event-{lag}")
    assert f'title="no tool call {foreign_id} in this session">unsupported' in _row(page, f"event-{foreign}")
    assert ">uncited</span>" in _row(page, f"event-{plain}") and "#act-" not in _row(page, f"event-{plain}")
    for element in ("check-0", "action-0"):
        assert "✓ verified" in _row(page, element) and link in _row(page, element)
    escalation = page[page.index('id="escalation-evidence"'):]
    assert "✓ verified" in escalation[:escalation.index("</dd>")]
    # the cited call's line names every finding that cites it, each linking back
    cited = dict((label, anchor) for anchor, label in re.findall(
        r'<a class="badge cited" href="#([\w-]+)"[^>]*>cited by ([^<]+)</a>', _line(page, seq)))
    assert cited == {f"event #{nginx}": f"event-{nginx}", "check nginx": "check-0", "action restart": "action-0",
                     "escalation": "escalation-evidence"}
    assert page.count('class="badge cited"') == 4  # and no other line: the unsupported quotes were found nowhere
    # not checked (policy off): no count, no mark, no badge
    assert 'id="verdict-evidence"' not in off_page and 'class="evidence ' not in off_page
    assert 'class="badge cited"' not in off_page

    # the incident page: its service's warning+ findings of the sessions that worked on it
    section = nginx_page[nginx_page.index('id="incident-evidence"'):]
    section = section[:section.index("</section>")]
    assert "2 of 2 verified" in section and section.count("✓ verified") == 2
    assert f'href="/sessions/{pk}#event-{nginx}"' in section and f'href="/sessions/{pk}#session-checks"' in section
    assert "postgres" not in section
    section = lag_page[lag_page.index('id="incident-evidence"'):]
    section = section[:section.index("</section>")]
    assert "0 of 1 verified" in section
    assert 'title="the quote is not in any tool result of this session">unsupported' in section
