"""``tierops serve`` (``app/cli/cycles.py``), run as a real subprocess: an address it cannot listen
on is one error line, exit 2."""

from __future__ import annotations

import socket

from tests.cli.helpers import one_error_line, run


def test_a_port_in_use_is_one_error_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = run("serve", "--port", str(port), db=tmp_path / "t.db", env={"TIEROPS_SCHEDULE": "false"})
    one_error_line(out, f"cannot listen on 127.0.0.1 port {port}")


def test_an_unknown_host_is_one_error_line(tmp_path):
    out = run("serve", "--host", "no-such-host.invalid", db=tmp_path / "t.db",
              env={"TIEROPS_SCHEDULE": "false", "TIEROPS_TOKEN": "t" * 32})
    one_error_line(out, "--host 'no-such-host.invalid'")
