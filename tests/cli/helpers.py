"""Running the `tierops` command as a real subprocess, and what every command test checks of it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.fakes.claude_control import REPO

TIEROPS = [sys.executable, "-m", "app.cli"]


def run(*args: str, db: Path | None = None, stdin: bytes | None = None, env: dict | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [*TIEROPS, *args] + (["--db", str(db)] if db else [])
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(cmd, input=stdin, capture_output=True, env=full_env, cwd=cwd, timeout=60)


def one_error_line(out: subprocess.CompletedProcess, *expected: str) -> str:
    """Bad input anywhere is one `tierops: error:` line, exit 2, no traceback."""
    err = out.stderr.decode()
    assert out.returncode == 2, (out.returncode, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("tierops: error: "), err
    for text in expected:
        assert text in err, (text, err)
    return err
