"""Runbooks and extensions on the pages: a session's page and an incident's list the runbooks the
session was given (title, origin, whether it was cut or only linked); the session API carries
them; ``/config`` lists each extension with what it brings and its problems."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.store import runbooks as runbook_store
from app.store import sessions as session_store
from app.store.runbooks import RunbookGiven
from tests.web.api.test_incidents import seed_incidents


def _section(html: str, element_id: str) -> str:
    start = html.index(f'id="{element_id}"')
    return html[start:html.index("</section>", start)]


async def _seed(db: Any) -> dict[str, int]:
    ids = await seed_incidents(db)
    pk = await session_store.create_session(db, tier=1, trigger="escalation")
    await runbook_store.record_given(db, pk, [
        RunbookGiven(source="extension infra", origin="runbooks/api.md", delivery="file", title="API <restarts>",
                     chars_given=1200, chars_total=1200, incident_ids=(ids["api"],)),
        RunbookGiven(source="the runbooks folder", origin="db.md", delivery="file", title=None, chars_given=300,
                     chars_total=9000, truncated=True, incident_ids=(ids["disk"],)),
        RunbookGiven(source="alert HighLatency", origin="http://127.0.0.1:9/rb?token=sk-ant-api03-" + "a" * 40,
                     delivery="linked", error="cannot fetch it: [Errno 111] Connection refused",
                     incident_ids=(ids["api"],)),
    ])
    return {**ids, "tier1": pk}


def test_session_and_incident_pages_list_the_runbooks_given(app_server):
    srv = app_server()
    ids = srv.run_async(lambda st: _seed(st.db))
    with srv.client() as cl:
        page = cl.get(f"/sessions/{ids['tier1']}")
        assert page.status_code == 200
        table = _section(page.text, "runbooks")
        assert "Runbooks given" in table and "API &lt;restarts&gt;" in table and "<restarts>" not in table
        assert "<code>runbooks/api.md</code>" in table and "whole, 1,200 characters" in table
        assert "truncated</span> 300 of 9,000 characters" in table
        assert "link only</span> cannot fetch it: [Errno 111] Connection refused" in table
        assert "sk-ant-api03" not in page.text  # the stored origin was redacted
        incident = _section(cl.get(f"/incidents/{ids['api']}").text, "runbooks")
        assert "runbooks/api.md" in incident and "http://127.0.0.1:9/rb" in incident and "db.md" not in incident
        assert f'href="/sessions/{ids["tier1"]}#runbooks">#{ids["tier1"]}</a> <span class="muted">tier 1' in incident
        assert 'id="runbooks"' not in cl.get(f"/incidents/{ids['cache']}").text  # none given for it
        assert 'id="runbooks"' not in cl.get(f"/sessions/{ids['session1']}").text
        body = cl.get(f"/api/v1/sessions/{ids['tier1']}").json()
        assert [(r["source"], r["delivery"], r["truncated"], r["incident_ids"]) for r in body["runbooks"]] == [
            ("extension infra", "file", False, [ids["api"]]), ("the runbooks folder", "file", True, [ids["disk"]]),
            ("alert HighLatency", "linked", False, [ids["api"]])]
        assert cl.get(f"/api/v1/sessions/{ids['session1']}").json()["runbooks"] == []


def test_config_lists_each_extension_with_what_it_brings(app_server, tmp_path: Path):
    infra = tmp_path / "repos" / "infra"
    (infra / "checks").mkdir(parents=True)
    (infra / "checks" / "web.yaml").write_text("checks:\n  - {name: api, command: 'true'}\n")
    (infra / "runbooks").mkdir()
    (infra / "runbooks" / "api.md").write_text("---\nservices: [api]\n---\n")
    (infra / "runbooks" / "bad.md").write_text("no front matter\n")
    (infra / "skills" / "restart-api").mkdir(parents=True)
    (infra / "skills" / "restart-api" / "SKILL.md").write_text("---\ndescription: restart\n---\n")
    (infra / "mcp.json").write_text('{"mcpServers": {}}')
    srv = app_server(extensions=f"{infra},{tmp_path / 'gone'}")
    with srv.client() as cl:
        section = _section(cl.get("/config").text, "extensions")
    assert "1 check, 0 hosts, 1 runbook, 1 skill (infra-restart-api), mcp.json" in section
    assert "checks idle: no TIEROPS_CHECKS" in section  # no checks file for them to join
    assert "runbook runbooks/bad.md:1: no front matter" in section
    assert f"no such folder {tmp_path / 'gone'}" in section and 'id="extension-gone"' in section
