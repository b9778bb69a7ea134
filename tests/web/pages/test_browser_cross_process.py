"""Another process's session in a real browser (Playwright driving Debian's chromium): the page of a
session that a second real process (``python -m app run``, same state directory) writes goes
live — rows arrive while it runs — and its Stop button stops it: the page ends showing the
session interrupted by an operator, and the other process exits."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from app.cli.cycles import EXIT_INTERRUPTED
from tests.helpers import wait_gone
from tests.second_process import slow_stage, start_run, wait_exit, wait_running
from tests.web.conftest import CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def page() -> Iterator[tuple[Page, list[str]]]:
    with sync_playwright() as p:
        browser: Browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            pg = context.new_page()
            pg.set_default_timeout(15_000)
            errors: list[str] = []
            pg.on("pageerror", lambda exc: errors.append(str(exc)))
            yield pg, errors
        finally:
            browser.close()


def rows(page: Page) -> int | None:
    try:
        return page.evaluate("document.querySelectorAll('#transcript [data-seq]').length")
    except PlaywrightError:  # between documents
        return None


def body_text(page: Page) -> str:
    try:
        return page.locator("body").inner_text(timeout=2_000)
    except PlaywrightError:  # between documents
        return ""


def test_a_session_of_another_process_goes_live_and_is_stopped_from_its_page(live_server, tmp_path, page):
    pg, errors = page
    srv = live_server()
    # 40 texts 0.25 s apart, then it hangs: a Stop is the only way it ends
    run = start_run(tmp_path, srv.settings.db_path, srv.settings.state_dir, [slow_stage(40, 0.25, hang=True)])
    try:
        row = wait_running(run)
        pk, cli = row["id"], row["cli_pid"]
        pg.goto(f"{srv.url}/sessions/{pk}")
        assert pg.locator("#transcript").get_attribute("data-live") == "1"
        first = rows(pg) or 0
        deadline = time.monotonic() + 20
        while (rows(pg) or 0) < first + 5:  # rows appear without a reload
            assert time.monotonic() < deadline, f"the page did not go live: {first} → {rows(pg)} rows"
            time.sleep(0.1)
        dialogs: list[str] = []

        def accept(dialog: Any) -> None:  # app.js may confirm before Stop
            dialogs.append(dialog.message)
            dialog.accept()

        pg.on("dialog", accept)
        button = pg.locator(f"form[action='/sessions/{pk}/stop'] button")
        assert button.get_attribute("title") is None  # stoppable from here: no "not started by …"
        button.click()
        deadline = time.monotonic() + 30
        while "stopped by an operator" not in body_text(pg):  # the page reloads at the stream's end
            assert time.monotonic() < deadline, f"the page never showed the stop: {body_text(pg)[:500]}"
            time.sleep(0.1)
        assert "interrupted" in body_text(pg)
        assert len(dialogs) <= 1, dialogs  # at most the confirmation before Stop
        assert pg.locator("#transcript").get_attribute("data-live") != "1"
        assert wait_gone([cli], 10) == []
        assert wait_exit(run) == EXIT_INTERRUPTED, run.output()  # its session was stopped
        assert run.session(pk)["status"] == "interrupted"
    finally:
        run.cleanup()
    assert not errors, errors
