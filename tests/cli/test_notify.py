"""``tierops notify test`` as a real subprocess (``python -m app``) sending through real
Apprise to a real HTTP receiver on 127.0.0.1: one line per URL (scheme and host only), exit 0,
1 or 2, and never a URL's secret on the terminal."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli import forkserver
from tests.receiver import Receiver

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "cli-s3cret-pass"
TOKEN = "PathToken0a1b2c3d4e"

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(fail={"/down": None})
    yield r
    r.close()


def tierops(tmp_path: Path, *args: str, prelude: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TIEROPS_")}
    environ.update(TIEROPS_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT), **env)
    if prelude:  # run code first, then the CLI as `python -m app` would
        command = [sys.executable, "-c", f"{prelude}\nfrom app.cli import main\nmain()", *args]
        return subprocess.run(command, capture_output=True, text=True, env=environ, timeout=90, cwd=tmp_path)
    return forkserver.run("app", args, env=environ, cwd=tmp_path, timeout=90, text=True)


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_url_gets_the_test_message(tmp_path, receiver):
    urls = f"json://ops:{PASSWORD}@{receiver.address}/hook/{TOKEN} form://{receiver.address}/form"
    out = tierops(tmp_path, "notify", "test", TIEROPS_NOTIFY_URLS=urls)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"json://{receiver.address}: ok", f"form://{receiver.address}: ok"]
    [as_json] = receiver.to("/hook/")
    assert as_json.json()["title"] == "[INFO] tierops: test notification"
    assert "tierops notify test" in as_json.json()["message"]
    assert receiver.to("/form")[0].form()["title"] == "[INFO] tierops: test notification"
    for secret in (PASSWORD, TOKEN):
        assert secret not in out.stdout + out.stderr
    assert not (tmp_path / "home" / "tierops.db").exists()  # nothing stored


def test_a_failing_url_is_named_and_exits_1(tmp_path, receiver):
    port = dead_port()
    urls = (f"json://{receiver.address}/ok,json://u:{PASSWORD}@127.0.0.1:{port}/x/{TOKEN},"
            f"form://{receiver.address}/down")
    out = tierops(tmp_path, "notify", "test", TIEROPS_NOTIFY_URLS=urls)
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"json://{receiver.address}: ok"
    assert lines[1].startswith(f"json://127.0.0.1:{port}: failed: ") and "onnection" in lines[1]
    assert lines[2].startswith(f"form://{receiver.address}: failed: ") and "500" in lines[2]
    assert "tierops: 2 of 3 notification URL(s) failed" in out.stderr
    for secret in (PASSWORD, TOKEN):
        assert secret not in out.stdout + out.stderr


def test_nothing_configured_exits_2(tmp_path):
    out = tierops(tmp_path, "notify", "test")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == ("tierops: error: no notification URL configured: set TIEROPS_NOTIFY_URLS "
                                  "(or TIEROPS_NOTIFY_URLS_FILE) to one or more Apprise URLs")


def test_an_unreadable_urls_file_exits_2(tmp_path):
    out = tierops(tmp_path, "notify", "test", TIEROPS_NOTIFY_URLS_FILE=str(tmp_path / "nope"))
    assert out.returncode == 2
    assert "tierops: error: TIEROPS_NOTIFY_URLS_FILE" in out.stderr and "No such file" in out.stderr
    assert "Traceback" not in out.stderr


def test_without_apprise_exits_2_with_the_fix(tmp_path):
    out = tierops(tmp_path, "notify", "test", prelude="import sys\nsys.modules['apprise'] = None",
                  TIEROPS_NOTIFY_URLS="json://127.0.0.1:9/x")
    assert out.returncode == 2, out.stderr
    assert "tierops: error: Apprise is not installed: install tierops[notify]" in out.stderr


ROUTES = ("[{name: page, match: {severity: critical}, to: [pager]},"
          " {name: team, match: {severity: warning}, to: [chat]}]")


def test_a_route_test_reaches_only_the_urls_of_that_route(tmp_path, receiver):
    urls = f"pager=json://{receiver.address}/pager/{TOKEN} chat=form://{receiver.address}/chat"
    out = tierops(tmp_path, "notify", "test", "--route", "page", TIEROPS_NOTIFY_URLS=urls,
                  TIEROPS_NOTIFY_ROUTES=ROUTES)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"json://{receiver.address}: ok"]
    assert receiver.paths() == [f"/pager/{TOKEN}"]
    assert "route page reaches this URL" in receiver.requests[0].json()["message"]
    unknown = tierops(tmp_path, "notify", "test", "--route", "nope", TIEROPS_NOTIFY_URLS=urls,
                      TIEROPS_NOTIFY_ROUTES=ROUTES)
    assert unknown.returncode == 2 and "no notification route 'nope'" in unknown.stderr
    assert "page, team, default" in unknown.stderr
    broken = tierops(tmp_path, "notify", "test", TIEROPS_NOTIFY_URLS=urls,
                     TIEROPS_NOTIFY_ROUTES="[{name: x, to: [a], match: {severity: urgent}}]")
    assert broken.returncode == 2 and "$[0].match.severity: unknown severity 'urgent'" in broken.stderr
    for text in (out.stdout, out.stderr, unknown.stderr, broken.stderr):
        assert TOKEN not in text


def _seed_incidents(tmp_path: Path) -> None:
    """Two incidents in the state dir's database, as a cycle would leave them."""
    import asyncio

    from app.store.db import Database
    from app.store.incidents import Finding, Observation, observe
    from app.store.sessions import create_session

    async def go() -> None:
        (tmp_path / "home").mkdir(exist_ok=True)
        async with await Database.open(tmp_path / "home" / "tierops.db") as db:
            pk = await create_session(db, tier=0, model="tierops-probe", trigger="schedule")
            await observe(db, pk, pk, Observation(findings=[
                Finding("check:db-health", "critical", "db-health failing: refused", "db", "db-health", "probe"),
                Finding("check:api-health", "warning", "api-health failing: HTTP 500", "api", "api-health", "probe")]),
                flap_count=3, flap_window_s=3600)

    asyncio.run(go())


def test_preview_shows_which_message_would_go_where(tmp_path):
    _seed_incidents(tmp_path)
    urls = f"pager=json://u:{PASSWORD}@127.0.0.1:9/p chat=json://127.0.0.1:9/c"
    out = tierops(tmp_path, "notify", "preview", TIEROPS_NOTIFY_URLS=urls, TIEROPS_NOTIFY_ROUTES=ROUTES)
    assert out.returncode == 0, out.stderr
    assert "[CRITICAL] db: db-health failing" in out.stdout and "→ page: json://127.0.0.1:9" in out.stdout
    assert "[WARNING] api: api-health failing" in out.stdout and "→ team: json://127.0.0.1:9" in out.stdout
    assert PASSWORD not in out.stdout + out.stderr
    as_json = tierops(tmp_path, "notify", "preview", "--json", "--last", "1", TIEROPS_NOTIFY_URLS=urls,
                      TIEROPS_NOTIFY_ROUTES=ROUTES, TIEROPS_NOTIFY_MIN_SEVERITY="critical")
    import json
    body = json.loads(as_json.stdout)
    [incident] = body["incidents"]
    [opened] = incident["messages"]
    assert [r["name"] for r in body["routes"]] == ["page", "team", "default"]
    if incident["incident"]["severity"] == "warning":
        assert not opened["sent"] and opened["why"] == "below TIEROPS_NOTIFY_MIN_SEVERITY=critical"
    else:
        assert opened["sent"] and opened["routes"] == ["page"]
    (tmp_path / "none").mkdir()
    empty = tierops(tmp_path / "none", "notify", "preview")
    assert empty.returncode == 2 and "no database" in empty.stderr
