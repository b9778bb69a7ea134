"""The /config page's "Change at run time" section: the form with the upstream's models as a
datalist (or why there are none), each setting's source, Save and Revert through the real form
posts, refusals shown on the page, the change log. The app in process, the fake Anthropic API on
loopback for the models."""

from __future__ import annotations

import html as htmllib
import re

from tests.fakes.fake_anthropic import FakeAnthropic
from tests.web.pages.test_config import rows

FORM = {"interval": "3600", "cron": "", "tier1_model": "haiku", "tier2_model": "sonnet", "tier3_model": "opus",
        "max_tier": "3", "dry_run": "false", "notify_min_severity": "warning"}


def block(page: str, name: str) -> str:
    found = re.search(rf'<div class="runtime-setting" id="runtime-{name}" data-source="([^"]+)">(.*?)\n    </div>',
                      page, re.DOTALL)
    assert found is not None, name
    return found.group(1) + " " + found.group(2)


def text(fragment: str) -> str:
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def post(c, path: str, data: dict[str, str]):
    return c.post(path, data=data, follow_redirects=False)


def test_the_form_saves_reverts_and_shows_sources_and_refusals(app_server, monkeypatch):
    srv = app_server()
    api = FakeAnthropic().start()
    try:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        with srv.client() as c:
            page = c.get("/config").text
            assert '<form id="runtime-form" method="post" action="/config">' in page
            datalist = re.search(r'<datalist id="upstream-models">(.*?)</datalist>', page, re.DOTALL).group(1)
            assert '<option value="claude-sonnet-4-5">Claude Sonnet 4.5</option>' in datalist
            tier1 = block(page, "tier1_model")
            assert tier1.startswith("default ") and 'list="upstream-models"' in tier1 and 'form="runtime-form"' in tier1
            assert 'value="haiku"' in tier1 and "Revert" not in tier1 and '<label for="rt-tier1_model">' in tier1
            assert "models-problem" not in page
            assert "No setting has been changed at run time." in page

            # a save: only what was edited is recorded (the form sends every field)
            r = post(c, "/config", {**FORM, "tier1_model": " claude-haiku-4-5 ", "dry_run": "true",
                                    "interval": "600"})
            assert r.status_code == 303 and r.headers["location"] == "/config?notice=settings_changed#runtime"
            page = c.get(r.headers["location"]).text
            assert "Saved: the next cycle uses the new values" in page
            tier1 = block(page, "tier1_model")
            assert tier1.startswith("run time ") and 'value="claude-haiku-4-5"' in tier1
            assert "changed at run time by local user (no token configured) from 127.0.0.1 at" in text(tier1)
            assert "reverts to haiku (default)" in text(tier1)
            assert 'aria-label="Revert TIEROPS_TIER1_MODEL to haiku"' in tier1
            assert block(page, "tier2_model").startswith("default ")
            log = re.search(r'<table class="runtime-changes".*?</table>', page, re.DOTALL).group(0)
            assert len(re.findall(r'<tr data-action="set">', log)) == 3
            assert '"haiku"</code> → <code>"claude-haiku-4-5"' in log
            # the "every setting" list says where the value in force came from
            assert rows(page)["TIEROPS_TIER1_MODEL"]["source"] == "run time"
            assert rows(page)["TIEROPS_TIER1_MODEL"]["value"] == "claude-haiku-4-5"
            assert srv.state.settings.tier(1).model == "claude-haiku-4-5" and srv.state.settings.interval == 600

            unchanged = post(c, "/config", {**FORM, "tier1_model": "claude-haiku-4-5", "dry_run": "true",
                                            "interval": "600"})
            assert unchanged.headers["location"] == "/config?notice=settings_unchanged#runtime"

            # refused: the page again with every problem and what was typed; nothing changed
            r = post(c, "/config", {**FORM, "tier1_model": "claude haiku", "interval": "5", "tier2_model": "x2"})
            assert r.status_code == 400
            assert "Nothing was changed:" in r.text
            tier1 = block(r.text, "tier1_model")
            assert 'value="claude haiku"' in tier1 and 'aria-invalid="true"' in tier1
            assert "TIEROPS_TIER1_MODEL: a model name is 1 to 200 characters" in text(tier1)
            assert "TIEROPS_INTERVAL: Input should be greater than or equal to 10" in text(block(r.text, "interval"))
            assert srv.state.settings.tier2_model == "sonnet"

            r = post(c, "/config/revert", {"name": "tier1_model"})
            assert r.status_code == 303 and r.headers["location"] == "/config?notice=setting_reverted#runtime"
            page = c.get("/config").text
            assert block(page, "tier1_model").startswith("default ") and srv.state.settings.tier1_model == "haiku"
            r = post(c, "/config/revert", {"name": "home"})
            assert r.status_code == 409 and "home needs a restart: set TIEROPS_HOME in the environment or .env" in r.text
            # a cross-site form post is refused by the security middleware, as every form
            assert c.post("/config", data=FORM, headers={"Origin": "https://evil.example",
                                                         "Sec-Fetch-Site": "cross-site"}).status_code == 403
    finally:
        api.stop()


def test_without_the_models_list_the_page_says_why_and_text_still_works(app_server):
    srv = app_server()  # ANTHROPIC_BASE_URL: a closed port (tests/web/conftest.py)
    with srv.client() as c:
        page = c.get("/config").text
        problem = re.search(r'<p class="banner attention" role="status" id="models-problem">(.*?)</p>', page).group(1)
        assert text(problem).startswith("The models the upstream offers are not available: cannot reach "
                                        "http://127.0.0.1:")
        assert "Connection refused. Any model name can be typed." in text(problem)
        assert "models-problem" in block(page, "tier2_model")  # the input points at why
        r = post(c, "/config", {**FORM, "tier2_model": "claude-sonnet-4-5-20250929"})
        assert r.status_code == 303
        assert srv.state.settings.tier(2).model == "claude-sonnet-4-5-20250929"


def test_in_a_browser_enter_saves_and_the_changed_state_is_accessible(browser, live_server):
    """Enter in a field submits Save (never a Revert button); with a change, a refusal and the log
    shown, the section fits a phone and axe finds nothing serious, light and dark."""
    from tests.web.pages.test_console_browser import PHONE, SMALL_BUTTONS, _axe, _page_width, axe_path

    script = axe_path()
    srv = live_server()
    ctx = browser.new_context(viewport=PHONE, bypass_csp=True, has_touch=True, is_mobile=True)
    try:
        page = ctx.new_page()
        page.goto(srv.url + "/config#runtime")
        page.fill("#rt-tier1_model", "claude-haiku-4-5")
        page.press("#rt-tier1_model", "Enter")
        page.wait_for_url("**/config?notice=settings_changed#runtime")
        assert page.locator("#runtime-tier1_model").get_attribute("data-source") == "run time"
        assert srv.state.settings.tier1_model == "claude-haiku-4-5"
        page.fill("#rt-interval", "12")
        page.fill("#rt-cron", "not a cron")
        page.press("#rt-cron", "Enter")
        page.wait_for_load_state()
        assert "TIEROPS_CRON: not a valid cron expression" in page.inner_text("#runtime-cron")
        assert srv.state.settings.cron == "" and srv.state.settings.interval == 3600
        assert _page_width(page) <= PHONE["width"]
        assert page.evaluate(SMALL_BUTTONS) == []
        for scheme in ("light", "dark"):  # the section this state changes (the whole page: the console test)
            page.emulate_media(color_scheme=scheme)
            assert _axe(page, script, "#runtime") == [], scheme
        page.get_by_role("button", name="Revert TIEROPS_TIER1_MODEL to haiku").click()
        page.wait_for_url("**/config?notice=setting_reverted#runtime")
        assert srv.state.settings.tier1_model == "haiku"
    finally:
        ctx.close()
