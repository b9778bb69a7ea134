#!/usr/bin/env python3
"""Takes docs/overview.png, the README's screenshot: a realistic overview at 1280x800.

``tierops serve --checks`` runs a small inventory of local targets (an API answering 503, a queue
check over its bound, a cache that fails for two cycles, healthy services) with the tests' fake
claude CLI standing in for the model tiers (tier 1 escalates, tier 2 proposes a restart, tier 3
waits for approval). After ~20 tier-0 cycles (10 s apart, about 4 minutes) Debian's chromium,
through Playwright as the browser tests drive it, shows the overview at 75 % zoom (headline,
incidents, the approval and the service grid fit) with the handoff folded.

    python scripts/overview-screenshot.py [OUTPUT.png] [CYCLES]
"""
import http.server
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import httpx  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

from tests.fakes.claude_control import make_fake_claude, new_session_id, structured_stream  # noqa: E402
from tests.web.conftest import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

ZOOM = 0.75  # the headline, incidents, the approval and the service grid fit in 1280x800
CYCLE_S = 10

tier1 = {
    "summary": "payments answers 503 on /payments/health since the last deploy; its database pool is exhausted "
               "(40 of 40 connections busy). The queue backlog follows from it. Escalating to tier 2.",
    "events": [{"level": "critical", "service": "payments", "message": "HTTP 503: upstream db pool exhausted",
                "key": "check:payments-health"},
               {"level": "warning", "service": "queue", "message": "queue depth 1450 over its bound of 1000",
                "key": "check:queue-depth"}],
    "memories": [{"key": "payments:baseline", "value": "answers 200 in under 300 ms with a pool of 40"}],
    "escalation": {"needed": True, "reason": "payments down: db pool exhausted",
                   "context": "40/40 connections busy; queue backing up", "failed_checks": ["payments-health"]},
    "services_checked": [{"name": "payments", "status": "down", "detail": "HTTP 503"},
                         {"name": "queue", "status": "degraded", "detail": "depth 1450"},
                         {"name": "db", "status": "healthy", "detail": "port open"}],
}
tier2 = {
    "summary": "A leaked connection per failed checkout exhausts the payments pool. Restarting payments frees it; "
               "the restart needs approval (tier 3).",
    "events": [{"level": "critical", "service": "payments", "message": "connection leak on failed checkout",
                "key": "check:payments-health"}],
    "memories": [{"key": "payments:quirk", "value": "leaks a db connection per failed checkout (v2.14)"}],
    "escalation": {"needed": True, "reason": "restart payments to free the pool", "context": "leak confirmed",
                   "failed_checks": ["payments-health"]},
    "services_checked": [{"name": "payments", "status": "down", "detail": "pool 40/40"}],
    "actions": [{"kind": "restart", "service": "payments", "result": "proposed",
                 "detail": "systemctl restart payments (frees the pool; the leak stays until v2.15)"}],
}
tier1_cache = {
    "summary": "cache was unreachable for two cycles and answers again; nothing to do.",
    "events": [{"level": "info", "service": "cache", "message": "cache answers again", "key": "check:cache-ping"}],
    "memories": [],
    "escalation": {"needed": False, "reason": None, "context": None, "failed_checks": []},
    "services_checked": [{"name": "cache", "status": "healthy", "detail": "ping ok"}],
}


class Handler(http.server.BaseHTTPRequestHandler):
    """The API (200 on /healthz) and payments (503), answering in about 12 ms."""

    def do_GET(self) -> None:
        time.sleep(0.012)
        code, body = (503, b"upstream db pool exhausted") if self.path.startswith("/payments") else (200, b"ok")
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def targets(tmp: Path) -> Path:
    """Start the local targets and write the checks file that watches them."""
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    wport = web.server_address[1]
    db = socket.socket()
    db.bind(("127.0.0.1", 0))
    db.listen(50)
    dport = db.getsockname()[1]
    threading.Thread(target=lambda: [db.accept()[0].close() for _ in iter(int, 1)], daemon=True).start()
    cache_down = tmp / "cache-down"
    lines = [
        f"interval: {CYCLE_S}s",
        "hosts:",
        "  - {name: app-1, ssh: ops@app-1.internal, description: API and payments}",
        "  - {name: db-1, ssh: ops@db-1.internal}",
        "checks:",
        '  - {name: tierops-health, service: tierops, http: "${TIEROPS_SERVE_URL:-http://127.0.0.1:8080}/healthz"}',
        f'  - {{name: api-health, service: api, http: "http://127.0.0.1:{wport}/healthz", contains: ok, '
        "max_ms: 500, severity: critical}",
        f'  - {{name: payments-health, service: payments, http: "http://127.0.0.1:{wport}/payments/health", '
        "status: 200, severity: critical}",
        f'  - {{name: db-port, service: db, tcp: "127.0.0.1:{dport}", severity: critical}}',
        f'  - {{name: cache-ping, service: cache, command: "test ! -f {cache_down}", severity: warning}}',
        "  - {name: queue-depth, service: queue, command: \"echo 'depth 1450 (bound 1000)'; exit 1\"}",
        "  - {name: resolver, service: dns, dns: localhost, timeout: 5s}",
        '  - {name: disk-root, service: host, command: "test $(df --output=pcent / | tail -1 | tr -dc 0-9) -lt 99"}',
    ]
    checks = tmp / "checks.yaml"
    checks.write_text("\n".join(lines) + "\n")
    return checks


def run(out: Path, cycles: int) -> None:
    with tempfile.TemporaryDirectory(prefix="tierops-overview-") as folder:
        tmp = Path(folder)
        checks = targets(tmp)
        fake = make_fake_claude(tmp / "fake", [
            {"lines": structured_stream(new_session_id(), tier1, text="Looking at payments and the queue.",
                                        command="curl -s -o /dev/null -w '%{http_code}' http://app-1/payments/health",
                                        command_output="503", cost=0.0213), "delay": 0.05},
            {"lines": structured_stream(new_session_id(), tier2, text="Checking the payments connection pool.",
                                        command="ss -tnp | grep -c 5432", command_output="40", cost=0.1842), "delay": 0.05},
            {"lines": structured_stream(new_session_id(), tier1_cache, text="Checking cache.", command="redis-cli ping",
                                        command_output="PONG", cost=0.0098)},
        ], check_argv=False)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TIEROPS_", "ANTHROPIC_", "CLAUDE_CODE_"))}
        env.update(TIEROPS_HOME=str(tmp / "home"), TIEROPS_CLAUDE_BIN=str(fake.path), PYTHONPATH=str(ROOT),
                   TIEROPS_ESCALATE_AFTER="0", TIEROPS_ACCESS_LOG="false")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with open(tmp / "serve.log", "w") as log:
            # this interpreter running this checkout's `tierops serve`
            server = subprocess.Popen(  # noqa: S603
                [sys.executable, "-m", "app", "serve", "--checks", str(checks), "--port", str(port)],
                env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=log)
            try:
                watch(url, tmp / "cache-down", cycles)
                shoot(url, out)
            finally:
                server.terminate()
                server.wait(30)


def watch(url: str, cache_down: Path, cycles: int) -> None:
    """Wait for the server, then let ``cycles`` cycles run; the cache is down for two of them."""
    for _ in range(100):
        try:
            httpx.get(url + "/healthz", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.2)
    start = time.time()
    while (elapsed := time.time() - start) < cycles * (CYCLE_S + 0.5):
        if 6 * CYCLE_S <= elapsed < 8 * CYCLE_S + 2:
            cache_down.touch()
        else:
            cache_down.unlink(missing_ok=True)
        time.sleep(1)


def shoot(url: str, out: Path) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        ctx = browser.new_context(viewport={"width": round(1280 / ZOOM), "height": round(800 / ZOOM)},
                                  device_scale_factor=ZOOM)
        page = ctx.new_page()
        page.goto(url + "/", wait_until="load")
        page.wait_for_timeout(1000)
        page.evaluate("document.querySelectorAll('details[open]').forEach(d => { d.open = false; })")
        page.wait_for_timeout(300)
        page.screenshot(path=str(out))
        browser.close()


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "overview.png"
    run(out, int(sys.argv[2]) if len(sys.argv) > 2 else 20)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
