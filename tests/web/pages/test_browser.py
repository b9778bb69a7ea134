"""The dashboard in a real browser (Playwright driving Debian's chromium) against a real uvicorn.

What only a browser can show: app.js follows a running session over SSE (rows arrive one by one,
the page reloads into the outcome panel at the end), EventSource's own reconnect with
``Last-Event-ID`` replays exactly what was missed, hostile agent output stays inert text both
when inserted live and when rendered by the page, the Run Now form starts a cycle, and the login
cookie carries pages and the live stream.

Reconnects are forced with a tiny TCP proxy between the browser and uvicorn whose connections
the test cuts: the EventSource sees its response end, reconnects by itself after its retry delay
(Chromium: 3 s) and sends ``Last-Event-ID``, which the proxy records. An init script wraps
``window.EventSource`` to log every ``activity`` seq the server sends, so duplicates are caught
even though app.js would hide them in the DOM.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Page
from playwright.sync_api import Error as PlaywrightError

from tests.fakes.claude_control import (
    assistant_text,
    assistant_tool_use,
    init_line,
    new_session_id,
    result_success,
    structured_output_ack,
    tool_result,
)
from tests.helpers import healthy
from tests.web.conftest import LiveServer

SCREENSHOT = "/tmp/tierops-live-session.png"

# Logs what the server sends over every EventSource the page opens (app.js uses the wrapper
# transparently: it only calls `new EventSource(url)` and addEventListener).
WRAP_EVENTSOURCE = """
(() => {
  const Native = window.EventSource;
  window.__es = []; window.__seqs = []; window.__ends = 0; window.__urls = [];
  window.EventSource = class extends Native {
    constructor(url, init) {
      super(url, init);
      window.__es.push(this); window.__urls.push(String(url));
      this.addEventListener("activity", (e) => {
        try { window.__seqs.push(JSON.parse(e.data).seq); } catch (err) { window.__seqs.push("bad"); }
      });
      this.addEventListener("end", () => { window.__ends += 1; });
    }
  };
})();
"""

HOSTILE = ('Look: <script>window.__pwned=1</script> then <img src=x onerror="window.__pwned=2"> '
           'and [click](javascript:window.__pwned=3) and <a href="javascript:window.__pwned=4">x</a> '
           'and <svg onload="window.__pwned=5"></svg>\n\nevent: end\ndata: {}\n\n'
           'event: activity\ndata: {"seq": 999, "html": "<img src=x onerror=window.__pwned=6>"}\n\n')


# -- fixtures ------------------------------------------------------------------------------------

class Tab:
    """A page in a fresh context that records dialogs and uncaught page errors (both fail the test)."""

    def __init__(self, browser: Browser) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.context.add_init_script(WRAP_EVENTSOURCE)
        self.page: Page = self.context.new_page()
        self.page.set_default_timeout(15_000)
        self.dialogs: list[str] = []
        self.errors: list[str] = []

        def on_dialog(dialog: Any) -> None:
            self.dialogs.append(f"{dialog.type}: {dialog.message}")
            dialog.dismiss()

        self.page.on("dialog", on_dialog)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def tab(browser: Browser) -> Iterator[Tab]:
    t = Tab(browser)
    try:
        yield t
    finally:
        t.close()
    assert not t.dialogs, f"a dialog opened: {t.dialogs}"
    assert not t.errors, f"uncaught page errors: {t.errors}"


class CuttableProxy:
    """127.0.0.1 TCP proxy to the live server; ``cut()`` drops every open connection.

    Every byte the browser sends is kept per connection so the test can read request heads
    (for the reconnect's ``Last-Event-ID``)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.lock = threading.Lock()
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.sent: list[bytearray] = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True, name="cut-proxy").start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            log = bytearray()
            with self.lock:
                self.pairs.append((client, upstream))
                self.sent.append(log)
            threading.Thread(target=self._pipe, args=(client, upstream, log), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, None), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket, log: bytearray | None) -> None:
        try:
            while chunk := src.recv(65536):
                if log is not None:
                    log.extend(chunk)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> int:
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for pair in pairs:
            for s in pair:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()
        return len(pairs)

    def stream_requests(self, pk: int) -> list[str]:
        """Heads of the GET /sessions/{pk}/stream requests seen, oldest first."""
        with self.lock:
            blobs = [bytes(b) for b in self.sent]
        return [head for blob in blobs for head in blob.decode("latin-1").split("\r\n\r\n")
                if head.startswith(f"GET /sessions/{pk}/stream")]

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.listener.close()
        self.cut()


# -- helpers -------------------------------------------------------------------------------------

def chatty_stage(n_text: int, delay: float, *, texts: Callable[[int], str] | None = None,
                 output: dict | None = None, middle: list[dict] | None = None,
                 sid: str | None = None, start_delay: float = 0.0) -> dict:
    """init, ``n_text`` assistant text lines (``middle`` lines after the first third), a valid
    StructuredOutput, its ack and result/success: 4 + n_text + len(middle) lines."""
    sid = sid or new_session_id()
    texts = texts or (lambda i: f"Checking step **{i}** of {n_text}: `systemctl is-active svc-{i}` → active.")
    body = [assistant_text(sid, texts(i)) for i in range(1, n_text + 1)]
    cut = n_text // 3
    body[cut:cut] = middle or []
    out = output or healthy()
    so = assistant_tool_use(sid, "StructuredOutput", out, input_tokens=19926)
    lines = [init_line(sid), *body, so, structured_output_ack(sid, so["message"]["content"][0]["id"]),
             result_success(sid, out, num_turns=len(body) + 1)]
    return {"lines": lines, "delay": delay, "start_delay": start_delay}


def start_run(srv: LiveServer, *, tier: int = 1, prompt: str | None = None) -> int:
    body: dict = {"tier": tier}
    if prompt is not None:
        body["prompt"] = prompt
    with srv.client() as c:
        r = c.post("/api/v1/runs", json=body)
    assert r.status_code == 202, r.text
    return int(r.json()["id"])


def wait_finished(srv: LiveServer, pk: int, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    with srv.client() as c:
        while True:
            row = c.get(f"/api/v1/sessions/{pk}").json()
            if row["status"] != "running" and not srv.state.supervisor.busy:
                return row
            assert time.monotonic() < deadline, f"session {pk} still {row['status']}"
            time.sleep(0.1)


def stored_seqs(srv: LiveServer, pk: int) -> list[int]:
    with srv.client() as c:
        return [r["seq"] for r in c.get(f"/api/v1/sessions/{pk}/activity", params={"limit": 5000}).json()]


def dom_seqs(page: Page) -> list[int]:
    return page.eval_on_selector_all("#transcript [data-seq]", "els => els.map(e => Number(e.dataset.seq))")


def row_count(page: Page) -> int | None:
    """Rows in the transcript, or None while the page is between documents (reloading)."""
    try:
        return page.evaluate("document.querySelectorAll('#transcript .act').length")
    except PlaywrightError:
        return None


def wait_for(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval)


def block_auto_reload(page: Page, pk: int) -> None:
    """Make app.js's end-of-session reload a no-op (its loop guard: 3 reloads a minute)."""
    page.evaluate("([k]) => sessionStorage.setItem(k, JSON.stringify({n: 3, t: Date.now()}))",
                  [f"tierops.reload.{pk}"])


def assert_inert(page: Page, where: str) -> None:
    """Nothing hostile ran or became markup anywhere in the document."""
    facts = page.evaluate("""() => ({
        pwned: typeof window.__pwned === "undefined" ? null : window.__pwned,
        scripts: [...document.scripts].map(s => s.src || ("inline:" + s.textContent.slice(0, 60))),
        transcriptScripts: document.querySelectorAll("#transcript script, main script").length,
        handlers: [...document.querySelectorAll("*")].flatMap(
            el => [...el.attributes].filter(a => a.name.startsWith("on")).map(a => el.tagName + " " + a.name)),
        imgs: document.querySelectorAll("main img").length,
        svgs: document.querySelectorAll("main svg").length,
        badLinks: [...document.querySelectorAll("a[href]")].map(a => a.getAttribute("href"))
            .filter(h => /^\\s*(javascript|vbscript|data):/i.test(h)),
        jsLinks: document.querySelectorAll('a[href^="javascript:" i]').length,
    })""")
    assert facts["pwned"] is None, f"{where}: hostile content executed: __pwned={facts['pwned']}"
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(page.url))
    assert facts["scripts"] == [f"{origin}/static/app.js"], (where, facts["scripts"])
    assert facts["transcriptScripts"] == 0, where
    assert facts["handlers"] == [], (where, facts["handlers"])
    assert facts["imgs"] == 0 and facts["svgs"] == 0, (where, facts)
    assert facts["badLinks"] == [] and facts["jsLinks"] == 0, (where, facts["badLinks"])


# -- (a) live rows -------------------------------------------------------------------------------

def test_session_page_follows_a_running_session_live(live_server, tab: Tab) -> None:
    srv = live_server(stages=[chatty_stage(20, 0.3, start_delay=0.5)])
    pk = start_run(srv)
    page = tab.page
    page.goto(f"{srv.url}/sessions/{pk}")
    assert page.locator("#transcript").get_attribute("data-live") == "1"
    assert page.locator(".badge.live").is_visible()
    assert page.locator(".result-panel").count() == 0

    samples: list[int] = []
    shot = False
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            live = page.evaluate("document.getElementById('transcript')?.dataset.live === '1' && !window.__ends")
        except PlaywrightError:
            live = False
        if not live:
            break
        n = row_count(page)
        if n is not None:
            samples.append(n)
        if not shot and n is not None and n >= 10:
            page.screenshot(path=SCREENSHOT, full_page=True)
            shot = True
        time.sleep(0.1)
    assert shot, f"never saw 10 rows live: {samples}"
    distinct = sorted(set(samples))
    assert samples == sorted(samples), f"rows disappeared while live: {samples}"
    assert len(distinct) >= 8, f"rows did not arrive one by one: {distinct}"
    assert samples[0] < 12, f"most rows were already there at load: {samples[:5]}"

    # the end event reloads the page into the outcome panel
    page.wait_for_selector(".result-panel", timeout=15_000)
    assert page.locator("#transcript").get_attribute("data-live") == "0"
    assert page.locator(".badge.live").count() == 0
    assert page.locator("h1 .status").inner_text() == "completed"
    assert "All services healthy." in page.locator(".result-panel .summary").inner_text()
    want = stored_seqs(srv, pk)
    assert want == list(range(1, 25)), want  # init + 20 texts + StructuredOutput + ack + result
    assert dom_seqs(page) == want
    assert "Checking step 20 of 20" in page.locator("#transcript").inner_text()


# -- (b) reconnect -------------------------------------------------------------------------------

def test_reconnect_replays_without_gaps_or_duplicates(live_server, tab: Tab) -> None:
    srv = live_server(stages=[chatty_stage(36, 0.2)])
    proxy = CuttableProxy(int(srv.url.rsplit(":", 1)[1]))
    try:
        pk = start_run(srv)
        page = tab.page
        page.goto(f"{proxy.url}/sessions/{pk}")
        block_auto_reload(page, pk)
        first_after = int(re.search(r"after=(\d+)", page.evaluate("window.__urls[0]")).group(1))
        wait_for(lambda: (row_count(page) or 0) >= first_after + 4, 10, "live rows before the cut")

        assert proxy.cut() >= 1
        seen_at_cut = len(page.evaluate("window.__seqs"))
        # EventSource reconnects by itself (after ~3 s) and says where it stopped
        heads = wait_for(lambda: len(proxy.stream_requests(pk)) >= 2 and proxy.stream_requests(pk), 10,
                         "the EventSource to reconnect")
        last_id = re.search(r"(?im)^last-event-id:\s*(\d+)\s*$", heads[1])
        assert last_id, f"reconnect without Last-Event-ID:\n{heads[1]}"
        assert page.evaluate("window.__es.length") == 1, "app.js opened a second EventSource"
        wait_for(lambda: len(page.evaluate("window.__seqs")) > seen_at_cut + 2, 10, "rows after the reconnect")

        mid = dom_seqs(page)
        assert mid == list(range(1, len(mid) + 1)), f"gap or duplicate after reconnect: {mid}"
        sent = page.evaluate("window.__seqs")
        assert sent == list(range(first_after + 1, first_after + 1 + len(sent))), \
            f"server sent a gap or a duplicate across the reconnect (Last-Event-ID {last_id.group(1)}): {sent}"

        # a reload mid-stream (navigate away and back) resumes with ?after= from the rendered rows
        still_running = page.evaluate("!window.__ends")
        if still_running:
            page.reload()
            after = int(re.search(r"after=(\d+)", page.evaluate("window.__urls[0]")).group(1))
            assert after >= len(mid), (after, len(mid))  # rendered at least what was shown live

        wait_for(lambda: page.evaluate("window.__ends") >= 1, 20, "the end event")
        want = stored_seqs(srv, pk)
        assert want == list(range(1, 41)), want
        assert dom_seqs(page) == want, "live transcript differs from the stored one"
        sent = page.evaluate("window.__seqs")
        start = int(re.search(r"after=(\d+)", page.evaluate("window.__urls[0]")).group(1))
        assert sent == list(range(start + 1, 41)), f"server sent gaps/duplicates: {sent}"
    finally:
        proxy.close()
    wait_finished(srv, pk)


# -- (c) hostile content -------------------------------------------------------------------------

def test_hostile_output_renders_as_text_live_and_after_reload(live_server, tab: Tab) -> None:
    sid = new_session_id()
    use = assistant_tool_use(sid, "Bash", {"command": "cat /srv/www/index.html # <script>window.__pwned=7</script>",
                                           "description": '<img src=x onerror="window.__pwned=8">'})
    middle = [assistant_text(sid, HOSTILE), use,
              tool_result(sid, use["message"]["content"][0]["id"], HOSTILE),
              tool_result(sid, use["message"]["content"][0]["id"], "failed: " + HOSTILE, is_error=True),
              "not json: <script>window.__pwned=9</script>\nevent: end"]
    out = healthy(summary=HOSTILE)
    out["events"] = [{"level": "warning", "service": "<b>nginx</b>", "message": HOSTILE}]
    out["services_checked"] = [{"name": "<script>x</script>", "status": "degraded", "detail": HOSTILE}]
    srv = live_server(stages=[chatty_stage(12, 0.3, middle=middle, output=out, sid=sid, start_delay=0.5)])
    pk = start_run(srv)
    page = tab.page
    page.goto(f"{srv.url}/sessions/{pk}")
    page.evaluate("window.__sameDocument = true")
    initial = row_count(page) or 0

    # live: the hostile rows are inserted by app.js, and rows after them keep arriving in the
    # same document (the SSE-looking text did not end or fake the stream)
    wait_for(lambda: page.evaluate("window.__sameDocument === true && "
                                   "document.querySelectorAll('#transcript .act').length >= 14"), 15,
             "rows after the hostile ones, live")
    assert initial < 9, f"the hostile rows were server-rendered, not live (had {initial} rows at load)"
    assert page.evaluate("window.__ends") == 0
    assert 999 not in page.evaluate("window.__seqs")
    assert_inert(page, "live")
    text = page.locator("#transcript").inner_text()
    assert "<script>window.__pwned=1</script>" in text
    assert '<a href="javascript:window.__pwned=4">x</a>' in text
    # inside the (closed) tool-result <details>: present as text, one <pre>, not a new event
    assert "event: end\ndata: {}" in page.locator("#transcript .act.user pre").first.text_content()
    live_seqs = dom_seqs(page)
    assert live_seqs == list(range(1, len(live_seqs) + 1))

    # after the end: the reload renders the same rows server-side, plus the outcome panel
    page.wait_for_selector(".result-panel", timeout=20_000)
    assert_inert(page, "after reload")
    assert "<script>window.__pwned=1</script>" in page.locator("#transcript").inner_text()
    assert "<script>window.__pwned=1</script>" in page.locator(".result-panel .summary").inner_text()
    assert "<script>x</script>" in page.locator(".result-panel").inner_text()
    # 4 + 12 texts + 5 middle lines, one of which the fake prints as two (it holds a newline)
    assert dom_seqs(page) == stored_seqs(srv, pk) == list(range(1, 23))
    md_links = page.eval_on_selector_all("#transcript .md a", "as => as.map(a => a.getAttribute('href'))")
    assert md_links == [], md_links  # the javascript: markdown link stays text
    wait_finished(srv, pk)
    for path in ("/", "/events", "/sessions"):
        page.goto(srv.url + path)
        assert_inert(page, path)
    page.goto(srv.url + "/events")
    assert "<b>nginx</b>" in page.locator("#events").inner_text()


# -- (d) Run Now ---------------------------------------------------------------------------------

def test_run_now_form_starts_a_session(live_server, tab: Tab) -> None:
    srv = live_server(stages=[chatty_stage(6, 0.2)])
    page = tab.page
    page.goto(srv.url + "/")
    assert page.locator("h1").inner_text() == "Overview"
    page.select_option("#run-tier", "1")
    ask = "Operator note 7f3a: also look at the flux capacitor."
    page.fill("#run-prompt", ask)
    with page.expect_navigation():
        page.click("form[action='/run'] button[type=submit]")
    m = re.search(r"/sessions/(\d+)$", page.url)
    assert m, page.url
    pk = int(m.group(1))
    assert page.locator("h1").inner_text().startswith(f"Session #{pk}")
    page.wait_for_selector(".result-panel", timeout=15_000)
    [inv] = srv.fake.invocations()
    prompt = inv["parsed"]["prompt"]
    assert ask in prompt and "Operator request for this run" in prompt, prompt
    row = wait_finished(srv, pk)
    assert row["trigger"] == "manual" and row["tier"] == 1 and row["status"] == "completed"
    page.goto(srv.url + "/sessions")
    assert page.locator(f"a[href='/sessions/{pk}']").count() >= 1


# -- (e) token -----------------------------------------------------------------------------------

def test_login_then_pages_and_live_stream_with_the_cookie(live_server, tab: Tab) -> None:
    token = "tok-123456789"
    srv = live_server(token=token, stages=[chatty_stage(14, 0.25)])
    page = tab.page
    for path in ("/", "/sessions", "/events"):
        page.goto(srv.url + path)
        assert page.url.startswith(f"{srv.url}/login?next="), page.url
        assert page.locator("#token").count() == 1

    page.goto(srv.url + "/")
    assert "/login" in page.url
    page.fill("#token", "wrong-token")
    page.click("form[action='/login'] button[type=submit]")
    assert page.locator(".banner.error").inner_text() == "Wrong token."
    page.fill("#token", token)
    with page.expect_navigation():
        page.click("form[action='/login'] button[type=submit]")
    assert page.url == srv.url + "/"
    assert page.locator("h1").inner_text() == "Overview"
    cookies = {c["name"]: c for c in tab.context.cookies()}
    assert cookies["tierops_session"]["httpOnly"] is True

    pk = start_run(srv)  # bearer token from srv.client()
    with httpx.Client(base_url=srv.url) as anon:
        assert anon.get(f"/sessions/{pk}/stream").status_code == 401
    page.goto(f"{srv.url}/sessions/{pk}")
    assert page.url == f"{srv.url}/sessions/{pk}"
    at_load = row_count(page) or 0
    wait_for(lambda: (row_count(page) or 0) >= at_load + 3, 10, "live rows over the cookie-authenticated stream")
    assert len(page.evaluate("window.__seqs")) >= 3
    page.wait_for_selector(".result-panel", timeout=15_000)
    assert dom_seqs(page) == stored_seqs(srv, pk) == list(range(1, 19))
    wait_finished(srv, pk)

