"""The session page, verdict first (issue #14): status with its reason, what was found, what was
decided, cost and wall-clock duration across every attempt; then the chain; then the transcript,
with badges on the lines that produced events, memories and cooldowns, and the raw JSON once.

Sessions come from real cycles: the supervisor runs the fake claude CLI (``app_server``), the
recorder stores and routes what it printed, the page reads it back."""

from __future__ import annotations

import re

import pytest

from app.store import sessions as session_store
from tests.fakes import claude_control as cc
from tests.helpers import escalating, healthy, invalid
from tests.web.test_approvals import gate
from tests.web.test_approvals import stages as approval_stages

pytestmark = pytest.mark.timeout(120)


def _section(html: str, element_id: str) -> str:
    start = html.index(f'id="{element_id}"')
    return html[start:html.index("</section>", start)]


def _line(html: str, seq: int) -> str:
    """The transcript line ``seq`` (its meta and body)."""
    start = html.index(f'id="act-{seq}"')
    nxt = html.find('<div class="act ', start + 1)
    return html[start:nxt if nxt != -1 else len(html)]


def _badged(html: str) -> dict[int, list[tuple[str, str]]]:
    """Per transcript seq, the finding badges it carries as (kind, text)."""
    found: dict[int, list[tuple[str, str]]] = {}
    for m in re.finditer(r'id="act-(\d+)"', html):
        seq = int(m.group(1))
        line = _line(html, seq)
        badges = re.findall(r'<a class="badge finding finding-\w+" href="#verdict" data-finding="(\w+)" '
                            r'data-count="\d+" title="[^"]*">([^<]+)</a>', line)
        if badges:
            found[seq] = badges
    return found


def run(srv) -> list[dict]:
    """One cycle; its chain (oldest first)."""
    return srv.run_async(lambda st: st.supervisor.run_cycle())


def page(srv, pk: int) -> str:
    with srv.client() as cl:
        r = cl.get(f"/sessions/{pk}")
        assert r.status_code == 200, r.text
        return r.text


def seqs_of(srv, pk: int, kind: str) -> list[int]:
    async def read(st):
        rows = await st.db.fetchall("SELECT seq FROM activity WHERE session_pk = ? AND type = ? ORDER BY seq",
                                    (pk, kind))
        return [r[0] for r in rows]

    return srv.run_async(read)


def test_a_completed_session_verdict_order_badge_and_raw_json_once(app_server):
    srv = app_server(stages=[{"lines": cc.structured_stream(cc.new_session_id(), healthy(), cost=0.0125)}])
    (link,) = run(srv)
    html = page(srv, link["id"])
    # the order: verdict, chain, transcript
    assert html.index('id="verdict"') < html.index('id="chain"') < html.index('id="transcript"')
    assert html.index('id="transcript"') < html.index('id="details"')
    verdict = _section(html, "verdict")
    assert re.search(r'<span class="status status-completed">completed</span>: [^<]+', verdict)
    assert '<p class="summary">All services healthy.</p>' in verdict
    assert "1 check, all healthy." in _section(html, "verdict")
    assert re.search(r'<span class="level">info</span> 1</a>', verdict)
    assert "nothing to do: everything checked was healthy" in verdict
    assert '<dd id="verdict-cost">$0.0125</dd>' in verdict
    assert re.search(r'<dd id="verdict-duration">\d+\.\d s wall clock', verdict)
    assert 'class="card verdict result-panel"' in html and html.count("result-panel") == 1
    # the badge sits on the result line that carried the accepted output, and nowhere else
    (result_seq,) = seqs_of(srv, link["id"], "result")
    assert _badged(html) == {result_seq: [("events", "1 event")]}
    # raw JSON: collapsed once; the result line does not repeat the output as its text
    assert html.count('class="raw-json"') == 1 and '<details class="raw-json" id="raw-output">' in html
    result_line = _line(html, result_seq)
    assert "result-is-output" in result_line and "Result text</summary>" not in result_line


def test_escalated_and_resolved(app_server):
    srv = app_server(stages=[{"lines": cc.structured_stream(cc.new_session_id(), escalating())},
                             {"lines": cc.structured_stream(cc.new_session_id(), healthy("Cleaned /var."))}])
    first, second = run(srv)
    html = page(srv, first["id"])
    verdict = _section(html, "verdict")
    assert f'<a href="/sessions/{second["id"]}">escalated to #{second["id"]}</a>' in verdict
    # the degraded check reported, and the one the escalation names beside it
    assert '2 failed checks</strong> <span class="muted">(2 checks reported)</span>' in verdict and "web-1-disk — /var 99%" in verdict
    assert "disk_space_web1 <span class=\"muted small\">(named in the escalation)</span>" in verdict
    assert re.search(r'<span class="level">critical</span> 1</a>', verdict)
    chain = _section(html, "chain")
    assert f'href="/sessions/{second["id"]}">#{second["id"]}</a>' in chain and "tier 2" in chain
    child = _section(page(srv, second["id"]), "verdict")
    assert f"resolved: no further escalation needed after #{first['id']}" in child


def test_a_failed_session_needs_a_human_with_the_reason_in_words(app_server):
    srv = app_server(stages=[{"lines": [], "mode": "crash"}])
    (link,) = run(srv)
    html = page(srv, link["id"])
    verdict = _section(html, "verdict")
    row = srv.run_async(lambda st: session_store.get_session(st.db, link["id"]))
    assert row["status"] == "failed" and row["status_reason"]
    assert f'<span class="status status-failed">failed</span>: {row["status_reason"]}' in verdict.replace(
        "&#39;", "'")
    assert '<li class="decision decision-attention" id="attention"><strong>Needs a human:</strong> tier 1 failed' \
        in verdict
    assert f'action="/sessions/{link["id"]}/attention/ack"' in verdict
    assert "no service checks reported." in verdict and '<span class="muted">no events</span>' in verdict


def test_the_escalation_gate_and_a_pending_approval_are_decisions(app_server):
    srv = app_server(stages=[{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    (link,) = run(srv)
    why = "not escalated: incident #1 (check:api): already escalated"
    srv.run_async(lambda st: session_store.set_escalation_gate(st.db, link["id"], why))
    verdict = _section(page(srv, link["id"]), "verdict")
    assert f'id="escalation-gate"><strong>Escalation not started:</strong> {why}' in verdict
    assert "nothing to do" not in verdict

    srv2 = app_server(stages=approval_stages())
    a = gate(srv2)
    verdict = _section(page(srv2, a["session_pk"]), "verdict")
    assert f'<a href="/approvals/{a["id"]}">waiting for approval #{a["id"]} to run tier 3</a>' in verdict


def test_markers_are_badged_on_the_lines_that_first_wrote_them(app_server):
    sid = cc.new_session_id()
    lines = [cc.init_line(sid),
             cc.assistant_text(sid, "Found two:\n[EVENT:warning:api] slow answers\n[EVENT:critical:db] down"),
             cc.assistant_text(sid, "Looking closer."),
             cc.assistant_text(sid, "[MEMORY:port:api] 8080\nAgain: [EVENT:warning:api] slow answers"),
             cc.assistant_text(sid, "[COOLDOWN:restart:api] success — restarted once"),
             cc.result_success(sid, None, result_text="done")]
    srv = app_server(output_max_retries=0, stages=[{"lines": lines}])
    (link,) = run(srv)
    row = srv.run_async(lambda st: session_store.get_session(st.db, link["id"]))
    assert row["source"] == "markers"
    html = page(srv, link["id"])
    first, _, third, fourth = seqs_of(srv, link["id"], "assistant")
    assert _badged(html) == {first: [("events", "2 events")], third: [("memories", "1 memory")],
                             fourth: [("cooldowns", "cooldown")]}


def test_cost_and_duration_across_attempts_and_the_badge_on_the_accepted_run(app_server):
    srv = app_server(stages=[{"lines": cc.structured_stream(cc.new_session_id(), invalid(), cost=0.01)},
                             {"lines": cc.structured_stream(cc.new_session_id(), healthy(), cost=0.02)}])
    (link,) = run(srv)
    html = page(srv, link["id"])
    verdict = _section(html, "verdict")
    assert '<dd id="verdict-cost">$0.0300 across 2 CLI runs</dd>' in verdict
    _, second_result = seqs_of(srv, link["id"], "result")
    assert _badged(html) == {second_result: [("events", "1 event")]}  # not on the rejected run's result


def test_a_running_session_says_so_and_stop_asks_first(app_server):
    srv = app_server()
    pk = srv.run_async(lambda st: session_store.create_session(st.db, tier=1, trigger="manual"))
    html = page(srv, pk)
    verdict = _section(html, "verdict")
    assert "nothing yet: the session is still running" in verdict and "so far" in verdict
    assert "result-panel" not in html
    assert f'data-confirm="Stop session #{pk}? Its process group is killed."' in html
