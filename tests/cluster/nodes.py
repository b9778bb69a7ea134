"""Real ``tierops serve`` processes sharing one PostgreSQL store, for the several-nodes tests and
``bench/cluster.py``: start them, read their /healthz, kill them, send them an alert storm, read
the database."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from tests.fakes import claude_control as cc
from tests.helpers import escalating, healthy

REPO = Path(__file__).resolve().parents[2]
STORM_TOKEN = "storm-webhook-token"  # TIEROPS_WEBHOOK_TOKEN of the storm's nodes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class NodeProcess:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def health(self, timeout: float = 2.0) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:  # 503 still has the body
            with contextlib.suppress(Exception):
                return json.loads(exc.read())
            return None
        except Exception:
            return None

    def node_id(self) -> str | None:
        body = self.health()
        return body["node"]["id"] if body and "node" in body else None

    def leads(self) -> bool:
        body = self.health()
        return bool(body and body.get("node", {}).get("leader"))

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


def start_nodes(count: int, folder: Path, url: str, claude_bin: str, **settings: str) -> list[NodeProcess]:
    folder.mkdir(parents=True, exist_ok=True)
    nodes = []
    for i in range(count):
        port = free_port()
        env = {**{k: v for k, v in os.environ.items() if not k.startswith(("TIEROPS_", "ANTHROPIC_"))},
               "PYTHONPATH": str(REPO), "TIEROPS_HOME": str(folder / f"node{i}"), "TIEROPS_DATABASE_URL": url,
               "TIEROPS_CLAUDE_BIN": claude_bin, "TIEROPS_ACCESS_LOG": "false", "TIEROPS_KILL_GRACE": "1",
               "ANTHROPIC_BASE_URL": "http://127.0.0.1:9", **settings}
        log = folder / f"node{i}.log"
        with log.open("wb") as out:  # the child keeps its own descriptor
            proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--host", "127.0.0.1",
                                     "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        nodes.append(NodeProcess(f"node{i}", port, proc, log))
    deadline = time.monotonic() + 60
    for node in nodes:
        while node.health() is None:
            if node.proc.poll() is not None or time.monotonic() > deadline:
                for other in nodes:
                    other.stop()
                raise RuntimeError(f"{node.name} did not start:\n{node.log.read_text()[-3000:]}")
            time.sleep(0.1)
    return nodes


def leaders(nodes: list[NodeProcess]) -> list[NodeProcess]:
    return [n for n in nodes if n.proc.poll() is None and n.leads()]


def wait_for(what: str, check: Any, timeout: float, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(every)


def storm_fake(directory, tier1_s: float = 5.0, tier2_s: float = 1.0) -> cc.FakeClaude:
    out = escalating("needs a fix")
    out["events"] = []  # the chain works on its alert's incident (its service) alone
    tier1 = {"lines": cc.structured_stream(cc.new_session_id(), out), "start_delay": tier1_s}
    tier2 = {"lines": cc.structured_stream(cc.new_session_id(), healthy("fixed")), "start_delay": tier2_s}
    return cc.make_fake_claude(directory, [tier1], by_model={"haiku": tier1, "sonnet": tier2})


def send_alert(node: NodeProcess, service: str, title: str) -> dict:
    body = json.dumps({"title": title, "service": service, "severity": "error", "details": title,
                       "status": "firing"}).encode()
    req = urllib.request.Request(f"{node.url}/api/v1/alerts", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {STORM_TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def rows(url: str, sql: str) -> list[dict]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql)
        names = [d.name for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def storm(nodes: list[NodeProcess], incidents: int, services: int = 10) -> list[str]:
    """Send ``incidents`` alerts on ``services`` services, to the nodes in turn; the titles sent
    ("svc-N alert K")."""
    titles = []
    for n in range(incidents):
        service = f"svc-{n % services}"
        titles.append(f"{service} alert {n // services}")
        send_alert(nodes[n % len(nodes)], service, titles[-1])
    return titles


def settled(url: str) -> bool:
    """Nothing runs and nothing waits."""
    busy = rows(url, "SELECT (SELECT count(*) FROM sessions WHERE status = 'running') AS running,"
                     " (SELECT count(*) FROM run_queue WHERE status = 'queued') AS queued")[0]
    return busy["running"] == 0 and busy["queued"] == 0
