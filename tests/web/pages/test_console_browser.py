"""Every page of the console in a real browser, as a phone and a laptop show it.

One real uvicorn (with a token, so the login page and the log-out button are there) is seeded for
the module through the store and real cycles of the fake CLI: incidents from probe sessions, a
finished session with events, a session still running (its fake CLI hangs), a memory, a pending
approval. Then, for every page:

* at 390x844 (and 360 px): no horizontal page scroll, the navigation collapsed into a menu that
  opens and holds every link, every visible button at least 44 px tall, no failed request;
* axe-core: no serious or critical violation, light and dark scheme, phone and desktop width;
* with ``CONSOLE_SCREENSHOTS=DIR``, screenshots at 1280x800 and 390x844, both schemes, into DIR
  (for a person to look at; never committed). Without it none are taken: full-page PNGs are a
  good part of this module's time and nothing asserts on them.

Separately: the manifest, icons and favicon load with the right types (no credentials, as a
browser fetches them); the menu works from the keyboard; times show relative text in the
viewer's zone with JavaScript and absolute UTC without; Stop asks before it kills a process group.

axe-core comes from the npm registry (scripts/test.sh installs it and sets ``AXE_CORE_JS``); the
axe contexts bypass the CSP, because Playwright injects the script inline.
"""

from __future__ import annotations

import json
import os
import re
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Browser, BrowserContext, Page

from app.store import approvals as approval_store
from app.store import maintenance as maintenance_store
from app.store import memories as memory_store
from app.web.auth import COOKIE, new_cookie
from tests.fakes.claude_control import assistant_text, init_line, new_session_id
from tests.helpers import healthy
from tests.web.api.test_incidents import seed_incidents
from tests.web.conftest import LiveServer, build_app, serve
from tests.web.pages.test_browser import chatty_stage, start_run, wait_finished, wait_for

TOKEN = "console-browser-token-5f1c2a9e"
PHONE = {"width": 390, "height": 844}
NARROWEST = {"width": 360, "height": 740}
DESKTOP = {"width": 1280, "height": 800}
TOUCH_PX = 44
NAV = ["Overview", "Incidents", "Maintenance", "Sessions", "Chat", "Events", "Memories", "Cooldowns", "Stats", "Schemas", "Config",
       "API docs"]
PAGES = ["overview", "incidents", "incident", "sessions", "session-finished", "session-running", "events",
         "memories", "schemas", "approval", "login", "cooldowns", "stats", "config", "api-docs",
         "maintenance", "chat", "not-found"]

AXE_VERSION = "4.10.3"
AXE_INSTALL = f"npm install --prefix ~/.cache/tierops/axe-core-{AXE_VERSION} axe-core@{AXE_VERSION}"
AXE_CACHE = Path.home() / ".cache" / "tierops" / f"axe-core-{AXE_VERSION}" / "node_modules" / "axe-core" / "axe.min.js"
LONG_URL = "https://status.internal.example/api/v2/services/payments-gateway/health?" + "region=eu-west-1&" * 8


# -- the seeded server -------------------------------------------------------------------------

@dataclass
class Console:
    srv: LiveServer
    pages: dict[str, str]  # page key -> path
    running_pk: int


def _finished_output() -> dict:
    out = healthy("Two services degraded; nothing needs a human. See " + LONG_URL)
    out["events"] = [
        {"level": "critical", "service": "payments", "message": f"health check failed: {LONG_URL} answered 503"},
        {"level": "warning", "service": "web-1", "message": "/var at 91%, growing slowly"},
        {"level": "info", "service": "nginx", "message": "nginx active (running)"},
    ]
    out["services_checked"] = [
        {"name": "nginx", "status": "healthy", "detail": "active"},
        {"name": "web-1-disk", "status": "degraded", "detail": "/var 91%"},
        {"name": "payments", "status": "down", "detail": "HTTP 503"},
    ]
    return out


def _running_stage() -> dict:
    sid = new_session_id()
    lines = [init_line(sid), assistant_text(sid, f"Looking at `journalctl -u payments` and {LONG_URL} …")]
    return {"lines": lines, "mode": "hang", "after": len(lines)}


def _start(tmp: Path) -> LiveServer:
    """A real uvicorn for the whole module (tests/web/conftest.py's live_server is per test)."""
    app, settings, fake = build_app(tmp, 0, TOKEN, [chatty_stage(4, 0, output=_finished_output()), _running_stage()], {})
    return serve(app, settings, fake, TOKEN)


def _seed(srv: LiveServer) -> Console:
    ids = srv.run_async(lambda st: seed_incidents(st.db))
    finished = start_run(srv)
    wait_finished(srv, finished)
    running = start_run(srv)
    with srv.client() as c:
        wait_for(lambda: len(c.get(f"/api/v1/sessions/{running}/activity").json()) >= 2, 20,
                 "the running session's first lines")

    async def more(st: Any) -> int:
        await memory_store.create_memory(st.db, category="baseline", service="payments",
                                         value=f"answers 200 in under 300 ms; health page {LONG_URL}")
        row = await approval_store.create_approval(st.db, session_pk=finished, chain_id=finished, tier=3,
                                                   handoff="## Escalation\nrestart payments?", timeout_s=3600)
        starts, ends = maintenance_store.plan(duration="2h")
        await maintenance_store.create_window(st.db, starts_at=starts, ends_at=ends, created_by="alice via dashboard",
                                              reason=f"payments upgrade, see {LONG_URL}",
                                              services=["payments", "payments-*"])
        return int(row["id"])

    approval = srv.run_async(more)
    pages = {
        "overview": "/", "incidents": "/incidents", "incident": f"/incidents/{ids['api']}",
        "sessions": "/sessions", "session-finished": f"/sessions/{finished}",
        "session-running": f"/sessions/{running}", "events": "/events", "memories": "/memories",
        "schemas": "/schemas", "approval": f"/approvals/{approval}",
        "login": "/login", "cooldowns": "/cooldowns", "stats": "/stats", "config": "/config",
        "api-docs": "/api/docs", "maintenance": "/maintenance", "chat": f"/chat?incident={ids['api']}",
        "not-found": "/sessions/999999",  # the error page
    }
    return Console(srv, pages, running)


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    srv = _start(tmp_path_factory.mktemp("console"))
    try:
        yield _seed(srv)
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def shots(request: pytest.FixtureRequest) -> Iterator[Path | None]:
    """Where the screenshots go: CONSOLE_SCREENSHOTS, else None (no screenshots)."""
    if not os.environ.get("CONSOLE_SCREENSHOTS"):
        yield None
        return
    folder = Path(os.environ["CONSOLE_SCREENSHOTS"])
    folder.mkdir(parents=True, exist_ok=True)
    yield folder
    line = f"console screenshots ({len(list(folder.glob('*.png')))} PNG files): {folder}"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # shown even though output is captured
            reporter.write_line("\n" + line)
    else:
        print(line)


def _shot(page: Page, shots: Path | None, name: str, *, full_page: bool = True) -> None:
    if shots is not None:
        page.screenshot(path=str(shots / name), full_page=full_page)


def axe_path() -> Path:
    """axe.min.js: AXE_CORE_JS (set by scripts/test.sh, so a missing file fails there), else the cache."""
    configured = os.environ.get("AXE_CORE_JS")
    if configured:
        assert Path(configured).is_file(), f"AXE_CORE_JS={configured} does not exist; install it with: {AXE_INSTALL}"
        return Path(configured)
    if not AXE_CACHE.is_file():
        pytest.skip(f"axe-core is not installed (AXE_CORE_JS unset, {AXE_CACHE} absent): run `{AXE_INSTALL}` "
                    "or scripts/test.sh")
    return AXE_CACHE


# -- helpers -------------------------------------------------------------------------------------

def _context(browser: Browser, console: Console, viewport: dict, *, scheme: str = "light", login: bool = True,
             **kwargs: Any) -> BrowserContext:
    ctx = browser.new_context(viewport=viewport, color_scheme=scheme, **kwargs)
    if login:
        ctx.add_cookies([{"name": COOKIE, "value": new_cookie(TOKEN), "url": console.srv.url}])
    return ctx


def _open(ctx: BrowserContext, console: Console, key: str, failed: list[str] | None = None) -> Page:
    """The page ``key``, loaded; skips while a page another engineer builds answers 404. Requests
    answered 4xx/5xx while it loads are added to ``failed``."""
    path = console.pages[key]
    page = ctx.new_page()
    page.set_default_timeout(15_000)
    if failed is not None:  # the page itself aside (the error page answers 404 on purpose)
        page.on("response", lambda r: failed.append(f"{r.status} {r.url}")
                if r.status >= 400 and r.url != console.srv.url + path else None)
    page.on("dialog", lambda d: d.dismiss())
    response = page.goto(console.srv.url + path, wait_until="load")
    status = response.status if response else 0
    expected = 404 if key == "not-found" else 200
    assert status == expected, f"{path} answered {status}"
    return page


def _page_width(page: Page) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth"))


def _wide_elements(page: Page, width: int) -> list[str]:
    """What sticks out past the viewport (for the failure message)."""
    return page.evaluate("""(w) => [...document.querySelectorAll("body *")].filter(el => {
        const r = el.getBoundingClientRect();
        if (r.right <= w + 1 || r.width === 0) return false;
        for (let p = el.parentElement; p; p = p.parentElement) {
            const s = getComputedStyle(p);
            if (/(auto|scroll|hidden)/.test(s.overflowX) && p.getBoundingClientRect().right <= w + 1) return false;
        }
        return true;
    }).slice(0, 8).map(el => el.tagName.toLowerCase() + (el.className ? "." + String(el.className).replace(/ /g, ".") : "")
        + " right=" + Math.round(el.getBoundingClientRect().right))""", width)


SMALL_BUTTONS = """() => [...document.querySelectorAll(
    'button, input[type=submit], input[type=button], input[type=reset], #nav-menu > summary')]
  .filter(el => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0 &&
                  getComputedStyle(el).visibility !== "hidden"; })
  .filter(el => el.getBoundingClientRect().height < 44 - 0.5)
  .map(el => el.outerHTML.slice(0, 100) + " -> " + el.getBoundingClientRect().height.toFixed(1) + " px")"""


def _slug(key: str, width: str, scheme: str) -> str:
    return f"{key}-{width}-{scheme}.png"


# -- every page on a phone -----------------------------------------------------------------------

@pytest.mark.parametrize("key", PAGES)
def test_page_fits_a_phone(browser: Browser, console: Console, shots: Path | None, key: str) -> None:
    ctx = _context(browser, console, PHONE, login=key != "login", has_touch=True, is_mobile=True)
    try:
        failed: list[str] = []
        page = _open(ctx, console, key, failed)
        assert _page_width(page) <= PHONE["width"], (
            f"{console.pages[key]} scrolls sideways at 390 px: scrollWidth {_page_width(page)}; "
            f"too wide: {_wide_elements(page, PHONE['width'])}")
        _shot(page, shots, _slug(key, "phone", "light"))
        small = page.evaluate(SMALL_BUTTONS)
        assert small == [], f"{console.pages[key]}: buttons under {TOUCH_PX} px on a phone: {small}"

        if key != "login":  # the login page has no navigation
            menu = page.locator("#nav-menu")
            summary = menu.locator("summary")
            assert summary.is_visible() and menu.get_attribute("open") is None, "the menu is not collapsed"
            assert not page.get_by_role("link", name="Sessions", exact=True).is_visible()
            summary.click()
            assert menu.get_attribute("open") is not None
            for label in NAV:
                link = page.locator("#nav-menu nav").get_by_role("link", name=label, exact=True)
                assert link.is_visible(), f"{label} is not in the opened menu"
                box = link.bounding_box()
                assert box and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"] + 0.5, (label, box)
                assert box["height"] >= TOUCH_PX - 0.5, f"menu entry {label} is {box['height']} px tall"
            assert _page_width(page) <= PHONE["width"], "the open menu widens the page"
            _shot(page, shots, _slug(key + "-menu", "phone", "light"), full_page=False)
            page.keyboard.press("Escape")
            assert menu.get_attribute("open") is None, "Escape does not close the menu"

        page.set_viewport_size(NARROWEST)
        page.wait_for_timeout(100)
        assert _page_width(page) <= NARROWEST["width"], (
            f"{console.pages[key]} scrolls sideways at 360 px: {_wide_elements(page, NARROWEST['width'])}")
        assert failed == [], f"requests failed while showing {console.pages[key]}: {failed}"
    finally:
        ctx.close()


# -- accessibility (axe-core) --------------------------------------------------------------------

def _axe(page: Page, script: Path, within: str | None = None) -> list[dict]:
    """axe's serious and critical violations on the page, or only in the element ``within`` selects."""
    if not page.evaluate("typeof axe !== 'undefined'"):
        page.add_script_tag(path=str(script))
    result = page.evaluate("""async (within) => {
        const r = await axe.run(within ? document.querySelector(within) : document, {resultTypes: ["violations"]});
        return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.slice(0, 4).map(n => ({target: n.target.join(" "), html: n.html.slice(0, 160),
                                                 why: (n.failureSummary || "").slice(0, 300)}))}));
    }""", within)
    return [v for v in result if v["impact"] in ("serious", "critical")]


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("key", PAGES)
def test_page_has_no_serious_accessibility_violations(browser: Browser, console: Console, shots: Path | None,
                                                      key: str, scheme: str) -> None:
    script = axe_path()
    problems: dict[str, list[dict]] = {}
    # One page, checked at desktop width and again after shrinking it to a phone's: the layout
    # follows the viewport through media queries, as it does when a window is resized.
    ctx = _context(browser, console, DESKTOP, scheme=scheme, login=key != "login", bypass_csp=True)
    try:
        page = _open(ctx, console, key)
        if key == "api-docs":
            # Every operation and schema renders through the same loop of the same template: axe reads
            # two tag sections of three operations each and three schemas (the whole page took 20 s a
            # scheme and width, and grows with every route).
            page.evaluate("""() => {
                document.querySelectorAll('main section:not(#schemas)').forEach((section, i) => {
                    if (i >= 2) section.remove();
                    else section.querySelectorAll('article').forEach((a, j) => { if (j >= 3) a.remove(); });
                });
                document.querySelectorAll('#schemas details').forEach((d, i) => { if (i >= 3) d.remove(); });
            }""")
            assert page.locator("main article").count() >= 4 and page.locator("#schemas details").count() == 3
        page.emulate_media(color_scheme=scheme)
        assert page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches") == (scheme == "dark")
        for name, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
            if name == "phone":
                page.set_viewport_size(viewport)
                assert page.evaluate("innerWidth") == PHONE["width"]
                page.wait_for_timeout(500)  # app.js re-marks scrolling boxes 200 ms after a resize
            if name == "desktop" or scheme == "dark":  # the light phone shot comes from the test above
                _shot(page, shots, _slug(key, name, scheme))
            if found := _axe(page, script):
                problems[name] = found
    finally:
        ctx.close()
    assert problems == {}, f"{console.pages[key]} ({scheme}): axe found serious/critical violations:\n" + \
        json.dumps(problems, indent=1)


# -- manifest, icons, favicon -------------------------------------------------------------------

def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_manifest_icons_and_favicon_load_without_credentials(console: Console) -> None:
    with console.srv.client(auth=False) as c:  # browsers fetch these without the login cookie
        head = c.get("/login").text
        for link in ('rel="manifest" href="/static/manifest.webmanifest"', 'rel="apple-touch-icon"',
                     'rel="icon" href="/favicon.ico"', 'rel="icon" href="/static/icon.svg"', 'name="theme-color"'):
            assert link in head, link
        r = c.get("/static/manifest.webmanifest")
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/manifest+json")
        manifest = r.json()
        assert manifest["name"] == "TierOps" and manifest["start_url"] == "/" and manifest["display"] == "standalone"
        assert re.fullmatch(r"#[0-9a-f]{6}", manifest["theme_color"]) and manifest["background_color"]
        sizes = set()
        for icon in manifest["icons"]:
            got = c.get(icon["src"])
            assert got.status_code == 200, icon
            assert got.headers["content-type"].split(";")[0] == icon["type"], (icon, got.headers["content-type"])
            if icon["type"] == "image/png":
                w, h = _png_size(got.content)
                assert icon["sizes"] == f"{w}x{h}", icon
                sizes.add((w, icon["purpose"]))
            else:
                assert got.text.startswith("<svg") and icon["sizes"] == "any"
        assert {(192, "any"), (512, "any"), (512, "maskable")} <= sizes
        fav = c.get("/favicon.ico")
        assert fav.status_code == 200 and fav.headers["content-type"] in ("image/x-icon", "image/vnd.microsoft.icon")
        assert struct.unpack("<HHH", fav.content[:6])[:2] == (0, 1)  # an ICO
        touch = c.get("/static/apple-touch-icon.png")
        assert touch.status_code == 200 and _png_size(touch.content) == (180, 180)
        assert c.get("/sessions").status_code == 303  # everything else still needs the login


# -- keyboard, times, Stop -------------------------------------------------------------------------

def test_menu_works_from_the_keyboard(browser: Browser, console: Console) -> None:
    ctx = _context(browser, console, PHONE)
    try:
        page = _open(ctx, console, "overview")
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.className") == "skip-link"
        assert page.locator(".skip-link").bounding_box()["x"] >= 0  # shown when focused
        page.keyboard.press("Tab")  # the brand
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.tagName") == "SUMMARY"
        page.keyboard.press("Enter")
        assert page.locator("#nav-menu").get_attribute("open") is not None
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.textContent") == "Overview"
        assert page.evaluate("document.activeElement.getAttribute('aria-current')") == "page"
        page.keyboard.press("Tab")
        page.keyboard.press("Enter")  # Incidents
        page.wait_for_url(re.compile(r"/incidents$"))
        assert page.locator("#nav-menu").get_attribute("open") is None  # a new page starts collapsed
        # on a wide screen the links are inline: no menu button
        page.set_viewport_size(DESKTOP)
        page.wait_for_timeout(100)
        assert not page.locator("#nav-menu > summary").is_visible()
        assert page.locator("#nav-menu nav").get_by_role("link", name="Config", exact=True).is_visible()
        assert page.locator('#nav-menu nav a[aria-current="page"]').inner_text() == "Incidents"
    finally:
        ctx.close()


def test_times_are_relative_in_the_viewers_zone_and_utc_without_javascript(browser: Browser,
                                                                            console: Console) -> None:
    zone = "Asia/Kolkata"  # UTC+05:30: no clock in UTC reads the same
    ctx = _context(browser, console, DESKTOP, timezone_id=zone)
    plain = _context(browser, console, DESKTOP, java_script_enabled=False)
    try:
        page = _open(ctx, console, "sessions")
        first = page.locator("time.when").first
        stamp = datetime.fromisoformat(first.get_attribute("datetime").replace("Z", "+00:00"))
        assert re.fullmatch(r"just now|\d+ min ago|\d+ h ago", first.inner_text()), first.inner_text()
        assert stamp.astimezone(ZoneInfo(zone)).strftime("%H:%M:%S") in first.get_attribute("title")
        # the transcript's HH:MM:SS follows the viewer's zone too
        session = _open(ctx, console, "session-finished")
        line = session.locator("#transcript .act time").first
        at = datetime.fromisoformat(line.get_attribute("datetime").replace("Z", "+00:00"))
        assert line.inner_text() == at.astimezone(ZoneInfo(zone)).strftime("%H:%M:%S")

        bare = _open(plain, console, "sessions")
        raw = bare.locator("time.when").first
        utc = datetime.fromisoformat(raw.get_attribute("datetime").replace("Z", "+00:00")).astimezone(UTC)
        assert raw.inner_text() == utc.strftime("%Y-%m-%d %H:%M:%S")
        assert raw.get_attribute("title") == utc.strftime("%Y-%m-%d %H:%M:%S UTC")
        # without JavaScript the navigation still shows inline on a wide screen, and opens on a phone
        assert bare.locator("#nav-menu nav").get_by_role("link", name="Config", exact=True).is_visible()
        bare.set_viewport_size(PHONE)
        assert not bare.locator("#nav-menu nav").get_by_role("link", name="Config", exact=True).is_visible()
        bare.locator("#nav-menu > summary").click()
        assert bare.locator("#nav-menu nav").get_by_role("link", name="Config", exact=True).is_visible()
    finally:
        ctx.close()
        plain.close()


def test_stop_asks_first_and_a_live_row_gets_local_time(browser: Browser, live_server: Any) -> None:
    sid = new_session_id()
    lines = [init_line(sid), *[assistant_text(sid, f"step {i}") for i in range(1, 7)]]
    srv = live_server(stages=[{"lines": lines, "mode": "hang", "after": len(lines), "delay": 0.4}])
    pk = start_run(srv)
    ctx = browser.new_context(viewport=PHONE, timezone_id="America/St_Johns", has_touch=True)  # UTC-03:30
    try:
        page = ctx.new_page()
        page.set_default_timeout(15_000)
        dialogs: list[str] = []
        answer = {"accept": False}

        def on_dialog(dialog: Any) -> None:
            dialogs.append(dialog.message)
            (dialog.accept if answer["accept"] else dialog.dismiss)()

        page.on("dialog", on_dialog)
        page.goto(f"{srv.url}/sessions/{pk}")
        wait_for(lambda: page.locator("#transcript .act").count() >= 5, 20, "rows arriving live")
        # Both read from one element at once: rows keep arriving, and a locator's ``.last`` is
        # looked up again on every call.
        stamp, shown_text = page.locator("#transcript .act time").last.evaluate(
            "el => [el.getAttribute('datetime'), el.innerText]")
        at = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        assert shown_text == at.astimezone(ZoneInfo("America/St_Johns")).strftime("%H:%M:%S")

        stop = page.locator(f'form[action="/sessions/{pk}/stop"] button')
        assert stop.bounding_box()["height"] >= TOUCH_PX - 0.5
        stop.click()
        assert dialogs == [f"Stop session #{pk}? Its process group is killed."]
        time.sleep(0.5)
        with srv.client() as c:
            assert c.get(f"/api/v1/sessions/{pk}").json()["status"] == "running"  # dismissed: nothing sent
        answer["accept"] = True
        stop.click()
        assert len(dialogs) == 2
        row = wait_finished(srv, pk)
        assert row["status"] == "interrupted"
    finally:
        ctx.close()
