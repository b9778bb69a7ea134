"""The console parts of the overview and the session page in a real browser (Playwright driving
Debian's chromium against a real uvicorn): the overview's headline in each of its states,
acknowledging a needs-attention item with the page's own button, and the session page's order
(verdict, chain, transcript) as laid out on the screen, not only in the HTML."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from app.store import sessions as session_store
from tests.fakes import claude_control as cc
from tests.helpers import escalating, healthy
from tests.web.api.test_incidents import seed_incidents

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield pg
    finally:
        context.close()
    assert not errors, f"uncaught page errors: {errors}"


def headline(page: Page) -> tuple[str | None, str]:
    box = page.locator("#headline")
    return box.get_attribute("data-state"), " ".join(box.inner_text().split())


def test_headline_states_and_acknowledging_attention(live_server, page: Page, tmp_path: Path) -> None:
    srv = live_server(stages=[{"lines": cc.structured_stream(cc.new_session_id(), healthy())}])
    srv.run_async(lambda st: st.supervisor.run_cycle())
    page.goto(srv.url + "/")
    state, text = headline(page)
    assert state == "clear" and text.startswith("✓ All clear") and "(completed" in text
    # the headline is the first thing on the page, above the fold
    assert page.locator("#headline").bounding_box()["y"] < page.locator("h2:text('Scheduler')").bounding_box()["y"]
    page.screenshot(path=str(tmp_path / "overview-clear.png"), full_page=True)

    srv.run_async(lambda st: seed_incidents(st.db))
    page.reload()
    state, text = headline(page)
    assert state == "incidents" and "2 open incidents" in text and "check:api" in text

    async def flag(st):
        pk = await session_store.create_session(st.db, tier=1)
        await session_store.set_attention(st.db, pk, "tier 1 failed: the API answered 529")
        return pk

    pk = srv.run_async(flag)
    srv.fake.path.unlink()  # the claude CLI goes missing: tier 0 runs, no language-model tier can
    page.reload()
    state, text = headline(page)
    assert state == "degraded" and text.startswith("⚠ Model tiers unavailable") and "the claude CLI is missing" in text
    assert "Also 2 open incidents" in text  # still shown under it
    amber = page.locator("#headline").evaluate("e => getComputedStyle(e).borderLeftColor")
    assert amber != page.locator("body").evaluate("e => getComputedStyle(e).color")  # coloured, besides the word
    page.screenshot(path=str(tmp_path / "overview-degraded.png"), full_page=True)

    other = sqlite3.connect(srv.settings.db_path, timeout=1, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")  # the database cannot be written: that is unhealthy
        page.reload()
        state, text = headline(page)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert state == "unhealthy" and text.startswith("✕ Monitor unhealthy") and "cannot be written" in text
    red = page.locator("#headline").evaluate("e => getComputedStyle(e).borderLeftColor")
    assert red != amber
    page.reload()
    assert headline(page)[0] == "degraded"

    item = page.locator(f"#attention-{pk}")
    assert "the API answered 529" in item.inner_text()
    with page.expect_navigation():
        item.locator("button", has_text="Acknowledge").click()
    assert page.url.endswith("/?notice=attention_acked#needs-attention")
    assert page.locator(f"#attention-{pk}").count() == 0
    page.goto(f"{srv.url}/sessions/{pk}")
    assert "acknowledged" in page.locator("#attention-acked").inner_text()


def test_session_page_reads_verdict_then_chain_then_transcript(live_server, page: Page, tmp_path: Path) -> None:
    srv = live_server(stages=[{"lines": cc.structured_stream(cc.new_session_id(), escalating())},
                              {"lines": cc.structured_stream(cc.new_session_id(), healthy("Cleaned /var."))}])
    first, second = srv.run_async(lambda st: st.supervisor.run_cycle())
    page.goto(f"{srv.url}/sessions/{first['id']}")
    ys = [page.locator(sel).bounding_box()["y"] for sel in ("#verdict", "#chain", "#transcript")]
    assert ys == sorted(ys) and len(set(ys)) == 3, ys
    order = page.evaluate("""() => {
        const [v, c, t] = ['verdict', 'chain', 'transcript'].map(id => document.getElementById(id));
        return [!!(v.compareDocumentPosition(c) & Node.DOCUMENT_POSITION_FOLLOWING),
                !!(c.compareDocumentPosition(t) & Node.DOCUMENT_POSITION_FOLLOWING)];
    }""")
    assert order == [True, True]
    assert f"escalated to #{second['id']}" in page.locator("#verdict-decided").inner_text()
    # the raw output stays folded until asked for
    raw = page.locator("#raw-output")
    assert raw.count() == 1 and raw.evaluate("d => d.open") is False
    page.locator(".badge.finding").first.wait_for()
    page.screenshot(path=str(tmp_path / "session-verdict.png"), full_page=True)
    with page.expect_navigation():
        page.locator(f"#verdict-decided a[href='/sessions/{second['id']}']").click()
    # tier 2 wanted no further escalation, but never reported web-1 healthy: its incident is open
    decided = page.locator("#verdict-decided").inner_text()
    assert "still open: incident #" in decided and "resolved:" not in decided
