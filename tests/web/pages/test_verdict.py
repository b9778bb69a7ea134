"""The session page, verdict first: status with its reason, what was found, what was
decided, cost and wall-clock duration across every attempt; then the chain; then the transcript,
with badges on the lines that produced events, memories and cooldowns, and the raw JSON once.

Sessions come from real cycles: the supervisor runs the fake claude CLI (``app_server``), the
recorder stores and routes what it printed, the page reads it back."""

from __future__ import annotations

import re

import pytest

from app.store import incidents as incident_store
from app.store import sessions as session_store
from app.store.incidents import Finding, Observation
from app.web.pages.verdict import decisions, still_open
from tests.fakes import claude_control as cc
from tests.helpers import escalating, healthy, invalid
from tests.web.api.test_approvals import gate
from tests.web.api.test_approvals import stages as approval_stages

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


def _decided(verdict_html: str) -> str:
    """The verdict's "Decided" list."""
    return verdict_html[verdict_html.index('id="verdict-decided"'):verdict_html.index('id="verdict-cost"')]


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


def test_escalated_and_still_open(app_server):
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
    # tier 1 opened an incident (web-1, critical); tier 2 said no further escalation but never
    # reported web-1 healthy: neither verdict may call it resolved
    open_text = '<a href="/incidents/1">still open: incident #1 /var 99% used (critical, open)</a>'
    assert open_text in verdict
    assert verdict.index("escalated to #") < verdict.index("still open")
    child = _section(page(srv, second["id"]), "verdict")
    assert "resolved" not in _decided(child) and "nothing to do" not in child
    assert f'<li class="decision decision-open">{open_text}' in child
    assert ("<li>the next cycle&#39;s tiers look at it again; it resolves when a tier reports web-1 healthy or a "
            "human resolves it</li>") in child


def test_resolved_only_once_every_incident_it_touched_is(app_server):
    fixed = healthy("Cleaned /var.")
    fixed["services_checked"] = [{"name": "web-1", "status": "healthy", "detail": "/var 40%"}]
    srv = app_server(stages=[{"lines": cc.structured_stream(cc.new_session_id(), escalating())},
                             {"lines": cc.structured_stream(cc.new_session_id(), fixed)}])
    first, second = run(srv)
    child = _section(page(srv, second["id"]), "verdict")
    assert '<li class="decision decision-resolved">resolved: incident(s) #1 recovered</li>' in child
    assert "still open" not in child
    parent = _section(page(srv, first["id"]), "verdict")
    assert "still open" not in parent and f"escalated to #{second['id']}" in parent


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
    # the incident it reported stays open, and the approval is who must act on it
    still = _decided(verdict).split('class="decision decision-open"', 1)[1]
    assert still.startswith('><a href="/incidents/1">still open: incident #1 /var 99% used (critical, open)</a>')
    assert f'<li><a href="/approvals/{a["id"]}">waiting for approval #{a["id"]} to run tier 3</a></li>' in still


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


# -- the truth about what is still open ----------------------------------------------------------

def proposing(detail: str) -> dict:
    """Tier 1 finds api down and proposes a restart instead of doing it: no escalation."""
    return {"summary": "api down; a restart would fix it.",
            "events": [{"level": "critical", "service": "api", "message": "api answers 500"}],
            "memories": [], "services_checked": [{"name": "api", "status": "down", "detail": "HTTP 500"}],
            "escalation": {"needed": False, "reason": None, "context": None, "failed_checks": []},
            "actions": [{"kind": "restart", "service": "api", "result": "proposed", "detail": "systemctl restart api"},
                        {"kind": "<b>purge</b>", "service": "<img src=x onerror=alert(1)>", "result": "proposed",
                         "detail": detail}]}


def test_a_session_whose_incident_is_open_says_who_must_act_never_nothing_to_do(app_server):
    hostile = "<script>alert('x')</script>" + "q" * 100_000
    srv = app_server(stages=[{"lines": cc.structured_stream(cc.new_session_id(), proposing(hostile))}])
    (link,) = run(srv)
    pk = link["id"]
    [inc] = srv.run_async(lambda st: incident_store.session_incidents(st.db, pk))
    verdict = _section(page(srv, pk), "verdict")
    decided = _decided(verdict)
    assert "nothing to do" not in verdict and "resolved" not in decided
    assert (f'<a href="/incidents/{inc["id"]}">still open: incident #{inc["id"]} api answers 500 (critical, open)'
            "</a>") in decided
    assert (f'<li><a href="/incidents/{inc["id"]}#proposals">2 proposed actions await a human: restart api, '
            "&lt;b&gt;purge&lt;/b&gt; &lt;img src=x onerror=alert(1)&gt;</a></li>") in decided
    assert "the next cycle&#39;s tiers look at it again" in decided
    # the Proposed list, right after what was found: kind, service, detail; escaped and cut
    assert verdict.index('id="verdict-found"') < verdict.index('id="verdict-proposed"') < decided_at(verdict)
    proposed = verdict[verdict.index('id="verdict-proposed"'):verdict.index("<dt>Decided</dt>")]
    assert ('<strong class="proposal-kind">restart</strong> <span class="proposal-service">api</span> — '
            '<span class="proposal-detail">systemctl restart api</span>') in proposed
    assert "<b>" not in proposed and "<img" not in proposed and "<script>" not in proposed
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in proposed and "q" * 600 not in proposed
    assert proposed.count(f'href="/incidents/{inc["id"]}"') == 2  # each linked to the incident

    # a human flagged and acknowledged on the session: said, with who
    srv.run_async(lambda st: session_store.set_attention(st.db, pk, "look at api"))
    srv.run_async(lambda st: session_store.acknowledge_attention(st.db, pk, "bob"))
    decided = _decided(_section(page(srv, pk), "verdict"))
    assert f'<li><a href="/sessions/{pk}">a human: this session needs attention; acknowledged by bob</a></li>' \
        in decided and "still open" in decided

    # acknowledged, then silenced: the next step gives way to who holds it
    srv.run_async(lambda st: incident_store.acknowledge(st.db, inc["id"], "alice"))
    decided = _decided(_section(page(srv, pk), "verdict"))
    assert "(critical, acknowledged)" in decided
    assert "<li>a human: acknowledged by alice (it does not re-escalate while it stays open)</li>" in decided
    assert "the next cycle" not in decided
    until = srv.run_async(lambda st: incident_store.silence(st.db, inc["id"], "2999-01-01T00:00:00.000Z", "carol"))
    decided = _decided(_section(page(srv, pk), "verdict"))
    assert f"<li>silenced until {until['silenced_until']} by carol: no escalation until then</li>" in decided

    # resolved: nothing is open any more; the session's own flag still stands
    srv.run_async(lambda st: incident_store.resolve(st.db, inc["id"], "alice"))
    decided = _decided(_section(page(srv, pk), "verdict"))
    assert "still open" not in decided and 'id="attention"' in decided


def decided_at(verdict_html: str) -> int:
    return verdict_html.index('id="verdict-decided"')


def test_a_healthy_session_still_says_nothing_to_do_and_lists_no_proposals(app_server):
    srv = app_server(stages=[{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    (link,) = run(srv)
    verdict = _section(page(srv, link["id"]), "verdict")
    assert "nothing to do: everything checked was healthy" in verdict
    assert 'id="verdict-proposed"' not in verdict and "still open" not in verdict


async def _probe_incident(db, *, escalated: bool, cycles: int, severity: str = "critical"):
    """A tier-0 session's check incident, failing ``cycles`` cycles (escalated after the first)."""
    pk = await session_store.create_session(db, tier=0, model="tierops-probe", trigger="schedule")
    obs = Observation(findings=[Finding(key="check:api", severity=severity, message="HTTP 500", service="api",
                                        check_name="api", origin="probe")])
    [change] = await incident_store.observe(db, pk, 1, obs, flap_count=9, flap_window_s=60)
    if escalated:
        await incident_store.mark_escalated(db, [change.incident["id"]], pk, "escalated to tier 1")
    for chain in range(2, cycles + 1):
        [change] = await incident_store.observe(db, pk, chain, obs, flap_count=9, flap_window_s=60)
    row = await session_store.get_session(db, pk)
    return row, await incident_store.session_incidents(db, pk)


def _acts(decisions: list[dict]) -> list[str]:
    [open_now] = decisions
    assert open_now["kind"] == "open"
    return [a["text"] for a in open_now["acts"]]


async def test_a_check_incident_says_when_it_re_escalates(db):
    row, incs = await _probe_incident(db, escalated=True, cycles=2)
    assert _acts(still_open(row, incs, escalate_after=3)) == [
        "re-escalates after 2 more failing cycles (TIEROPS_ESCALATE_AFTER=3) or if it worsens; resolves when its "
        "check passes"]
    assert _acts(still_open(row, incs, escalate_after=2)) == [
        "re-escalates after 1 more failing cycle (TIEROPS_ESCALATE_AFTER=2) or if it worsens; resolves when its "
        "check passes"]
    assert _acts(still_open(row, incs, escalate_after=0)) == [
        "re-escalates only if it worsens (TIEROPS_ESCALATE_AFTER=0); resolves when its check passes"]
    name = incs[0].get("name") or incs[0]["title"]  # the check's name where the store records one
    assert still_open(row, incs, escalate_after=3)[0]["text"] == (
        f"still open: incident #{incs[0]['id']} {name} (critical, open)")


async def test_a_check_incident_not_escalated_yet_or_of_severity_info(db):
    row, incs = await _probe_incident(db, escalated=False, cycles=1)
    assert _acts(still_open(row, incs, escalate_after=3)) == [
        "escalates the next cycle its check fails; resolves when the check passes"]


async def test_info_incidents_never_escalate_and_the_verdict_says_so(db):
    row, incs = await _probe_incident(db, escalated=False, cycles=1, severity="info")
    assert _acts(still_open(row, incs, escalate_after=3)) == [
        "severity info: recorded, never escalated; a human resolves it"]


async def test_the_chain_s_pending_approval_and_attention_are_named(db):
    row, incs = await _probe_incident(db, escalated=True, cycles=1)
    other = {"id": row["id"] + 1, "attention": "tier 2 failed: " + "x" * 1000, "attention_acked_at": None,
             "attention_acked_by": None}
    acts = _acts(still_open(row, incs, pending=[{"id": 7, "tier": 3}], attention=[other], escalate_after=3))
    assert acts[0] == "waiting for approval #7 to run tier 3"
    assert acts[1].startswith(f"a human: session #{other['id']} needs attention: tier 2 failed: xxx")
    assert len(acts[1]) < 400  # another session's reason is cut
    await session_store.interrupt_running(db, "test data: no CLI ran")
    row = await session_store.get_session(db, row["id"])
    got = decisions(row, [], incs, [], open_now=still_open(row, incs, escalate_after=3))
    assert [d["kind"] for d in got] == ["failed", "open"]  # nothing was decided, and the incident is open
