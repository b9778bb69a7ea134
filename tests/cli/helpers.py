"""Running the `tierops` command as a process of its own (forked from a server that has imported the
package: ``forkserver.py``), and what every command test checks of it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.cli import forkserver
from tests.fakes.claude_control import REPO

TIEROPS = [sys.executable, "-m", "app.cli"]


def run(*args: str, db: Path | None = None, stdin: bytes | None = None, env: dict | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return forkserver.run("app.cli", [*args] + (["--db", str(db)] if db else []), env=full_env, cwd=cwd,
                          stdin=stdin, timeout=60)


def one_error_line(out: subprocess.CompletedProcess, *expected: str) -> str:
    """Bad input anywhere is one `tierops: error:` line, exit 2, no traceback."""
    err = out.stderr.decode()
    assert out.returncode == 2, (out.returncode, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("tierops: error: "), err
    for text in expected:
        assert text in err, (text, err)
    return err
