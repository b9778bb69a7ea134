"""app/notify/policy.py: whether a message is sent and where; and the follow rule through a real store."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.config import Settings
from app.notify.messages import Notice
from app.notify.policy import Decision, Earlier, decide, in_quiet_hours, quiet_hours
from app.notify.routes import route_table
from app.notify.sender import Notifier
from app.store import notifications as store

NOON = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
URLS = ["pager=json://127.0.0.1:9/pager", "json://127.0.0.1:9/chat"]
ROUTES = "[{name: page, match: {severity: critical}, to: [pager]}, {name: nowhere, match: {service: noisy}, to: []}]"


def notice(severity: str = "warning", **about) -> Notice:
    return Notice("incident_opened", severity, "api: api-health failing", "x", None, None, **about)


def run(n: Notice, *, urls=URLS, routes=ROUTES, min_severity="warning", quiet=None, earlier=None,
        apprise=True, now=NOON) -> Decision:
    return decide(n, min_severity=min_severity, quiet=quiet, quiet_text="22-07", table=route_table(urls, routes),
                  config_error=None, apprise=lambda: apprise, now=now, earlier=earlier)


def test_routes_choose_the_urls():
    d = run(notice("critical", service="api"))
    assert d.status == "pending" and d.routes == ("page",) and d.targets == (0,)
    d = run(notice("warning", service="api"))
    assert d.routes == ("default",) and d.targets == (1,)


def test_what_is_not_sent_says_why():
    assert run(notice("info")).why == "below TIEROPS_NOTIFY_MIN_SEVERITY=warning"
    assert run(notice("warning", service="noisy")).why.startswith("route nowhere sends to no URL")
    assert run(notice(suppress="in maintenance window x")).why == "in maintenance window x"
    night = datetime(2026, 11, 26, 23, 0, tzinfo=UTC)
    assert run(notice(), quiet=(22, 7), now=night).why == "quiet hours (22-07 UTC): only critical is sent"
    assert run(notice("critical"), quiet=(22, 7), now=night).status == "pending"
    assert run(notice(), urls=[]).why == "no TIEROPS_NOTIFY_URLS"
    assert run(notice(), apprise=False).status == "failed"
    tagged_only = run(notice(), urls=["pager=json://127.0.0.1:9/p"])
    assert tagged_only.status == "suppressed" and "every URL carries a tag" in tagged_only.why


def test_a_follow_up_goes_where_its_opening_went_whatever_the_minimum():
    resolved = Notice("incident_resolved", "info", "[RESOLVED] api: api-health recovered", "", None, None,
                      follows=(7,))
    d = run(resolved, min_severity="critical", earlier=Earlier(True, ("page",)))
    assert d.status == "pending" and d.routes == ("page",) and d.targets == (0,)
    night = datetime(2026, 11, 26, 23, 0, tzinfo=UTC)
    assert run(resolved, quiet=(22, 7), now=night, earlier=Earlier(True, ("page",))).status == "pending"
    held = run(resolved, earlier=Earlier(False, why="quiet hours (22-07 UTC): only critical is sent"))
    assert held.status == "suppressed" and held.why.startswith("follows a message that was not sent (quiet hours")


def test_quiet_hours_all_day_and_refusals():
    assert quiet_hours("0-24") == (0, 24) and quiet_hours("24-24") == (0, 24)
    assert all(in_quiet_hours((0, 24), datetime(2026, 1, 1, h, tzinfo=UTC)) for h in range(24))
    assert quiet_hours("22-24") == (22, 24) and in_quiet_hours((22, 24), datetime(2026, 1, 1, 23, tzinfo=UTC))
    assert not in_quiet_hours((22, 24), datetime(2026, 1, 1, 0, tzinfo=UTC))
    assert quiet_hours("22-07") == (22, 7) and in_quiet_hours((22, 7), datetime(2026, 1, 1, 3, tzinfo=UTC))
    for bad in ("7-7", "0-0", "25-3", "night"):
        with pytest.raises(ValueError):
            quiet_hours(bad)


async def test_the_notifier_follows_what_the_store_recorded(db, tmp_path):
    settings = Settings(db=tmp_path / "tierops.db", home=tmp_path / "state", notify_urls=" ".join(URLS),
                        notify_routes=ROUTES)
    notifier = Notifier(db, settings)  # not started: decisions are recorded, nothing is sent
    await notifier.post(Notice("incident_opened", "critical", "api: api-health failing", "503", "/incidents/1",
                               "incident:1:opened", source="check", service="api", incident_id=None))
    opened = Notice("incident_opened", "warning", "db: db-port failing", "refused", None, "incident:2:opened",
                    service="db")
    await notifier.post(opened)
    rows = list(reversed(await store.recent(db, 10)))
    assert [(r["status"], r["routes"]) for r in rows] == [("pending", ["page"]), ("pending", ["default"])]
    # the monitor's "healthy again" follows "unhealthy" by its key
    await notifier.post(Notice("monitor", "critical", "tierops: monitor unhealthy", "x", "/", "monitor:unhealthy:1",
                               source="monitor"))
    healthy = Notice("monitor", "info", "tierops: monitor healthy again", "y", "/", "monitor:healthy:1",
                     source="monitor", follows_key="monitor:unhealthy:1")
    assert (await notifier.decision(healthy)).routes == ("page",)
    # a follow-up of nothing recorded is decided like any message
    lonely = Notice("incident_resolved", "info", "x", "y", None, "incident:99:resolved", follows=(99,))
    assert (await notifier.decision(lonely)).why == "below TIEROPS_NOTIFY_MIN_SEVERITY=warning"
