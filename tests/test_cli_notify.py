"""``tierops notify test`` (issue #13) as a real subprocess (``python -m app``) sending through real
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

from tests.receiver import Receiver

ROOT = Path(__file__).resolve().parents[1]
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
    command = [sys.executable, "-m", "app", *args]
    if prelude:  # run code first, then the CLI as `python -m app` would
        command = [sys.executable, "-c", f"{prelude}\nfrom app.cli import main\nmain()", *args]
    return subprocess.run(command, capture_output=True, text=True, env=environ, timeout=90, cwd=tmp_path)


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
