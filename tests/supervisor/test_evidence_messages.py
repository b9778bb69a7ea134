"""Message text of findings by their evidence: through the real chain (the fake ``claude``
executable, a real SQLite file), an incident opened by a finding resting only on unsupported or
uncited evidence says "(unverified)", a verified one reads as before; the outcome lists such
findings marked and marks itself when all its findings are (``app/supervisor/news.py``,
``app/notify/messages.py``)."""

from __future__ import annotations

import pytest

from app.notify.messages import Notice
from app.store import incidents as incident_store
from app.supervisor import news
from app.supervisor.chain import run_chain
from tests.fakes import claude_control as cc
from tests.supervisor.test_evidence import INVENTED, REAL, cited_stage

pytestmark = pytest.mark.timeout(60)


class Sink:
    def __init__(self) -> None:
        self.notices: list[Notice] = []

    async def post(self, notice: Notice) -> None:
        self.notices.append(notice)


def report(*events: dict) -> dict:
    return {"summary": "looked", "events": list(events), "services_checked": [],
            "escalation": {"needed": False, "reason": None, "context": None, "failed_checks": []}}


def event(level: str, service: str, message: str, *cites: dict) -> dict:
    return {"level": level, "service": service, "message": message, "evidence": list(cites)}


async def test_unverified_findings_are_marked_in_incident_and_outcome_messages(db, make_settings, validator,
                                                                              tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [
        cited_stage(report(event("critical", "nginx", "nginx failed", {"quote": REAL}),
                           event("warning", "postgres", "postgres lags", {"quote": INVENTED}),
                           event("warning", "disk", "disk nearly full")), tool_id=cc.tool_use_id()),
        cited_stage(report(event("critical", "cache", "cache evicting", {"quote": "evicted 9000 keys"}),
                           event("warning", "queue", "queue backed up")), tool_id=cc.tool_use_id()),
    ])
    settings = make_settings(fake)
    sink = Sink()
    links = await run_chain(db, settings, validator, None, notifier=sink)
    opened = sorted(n.title for n in sink.notices if n.kind == "incident_opened")
    assert opened == ["disk: disk nearly full (unverified)", "nginx: nginx failed",
                      "postgres: postgres lags (unverified)"]
    ids = [i["id"] for i in await incident_store.list_incidents(db)]
    mixed = await news.outcome(db, links, ids)
    assert mixed is not None and "(unverified)" not in mixed.title  # one verified finding: not unverified
    assert "- [critical] nginx: nginx failed\n" in mixed.body
    assert "- [warning] postgres: (unverified) postgres lags\n" in mixed.body
    assert "- [warning] disk: (unverified) disk nearly full\n" in mixed.body

    sink.notices.clear()
    links = await run_chain(db, settings, validator, None, notifier=sink)
    opened = sorted(n.title for n in sink.notices if n.kind == "incident_opened")
    assert opened == ["cache: cache evicting (unverified)", "queue: queue backed up (unverified)"]
    alone = await news.outcome(db, links, [])
    assert alone is not None and alone.title.endswith("— investigated by tier 1 (unverified)")
    assert "- [critical] cache: (unverified) cache evicting" in alone.body

    # the off policy checks nothing: no mark anywhere
    fake = cc.make_fake_claude(tmp_path / "bin2", [
        cited_stage(report(event("critical", "mail", "mail down", {"quote": INVENTED})), tool_id=cc.tool_use_id())])
    sink.notices.clear()
    links = await run_chain(db, make_settings(fake, evidence_policy="off"), validator, None, notifier=sink)
    assert [n.title for n in sink.notices if n.kind == "incident_opened"] == ["mail: mail down"]
    plain = await news.outcome(db, links, [])
    assert plain is not None and "unverified" not in plain.title + plain.body


async def test_hold_records_an_unverified_page_without_sending_it_and_asks_a_human(db, make_settings, validator,
                                                                                   tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [
        cited_stage(report(event("critical", "nginx", "nginx failed", {"quote": REAL}),
                           event("critical", "postgres", "postgres lags", {"quote": INVENTED})),
                    tool_id=cc.tool_use_id())])
    sink = Sink()
    links = await run_chain(db, make_settings(fake, evidence_policy="hold"), validator, None, notifier=sink)
    opened = {n.title: n.suppress for n in sink.notices if n.kind == "incident_opened"}
    assert opened == {"nginx: nginx failed": None, "postgres: postgres lags (unverified)": news.HELD_UNVERIFIED}
    postgres = next(i for i in await incident_store.list_incidents(db) if i["service"] == "postgres")
    session = await db.fetchone("SELECT attention FROM sessions WHERE id = ?", (links[0]["id"],))
    assert session["attention"] == (f"not paged (TIEROPS_EVIDENCE_POLICY=hold): incident #{postgres['id']} rests on "
                                    "findings no tool output of this session shows")
