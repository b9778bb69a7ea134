"""A second TierOps process on the same state directory, for the cross-process tests (live view, Stop, the cycle lock).

``start_run(db, home, stages)`` starts ``python -m app run`` (a real ``tierops run``) with its own
fake claude CLI (tests/fakes) against the database ``db`` and state dir ``home`` that the test's
own Supervisor or server also uses; :func:`wait_running` waits until its session row exists with
its CLI recorded. Rows are read with plain ``sqlite3``, as a third process would.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fakes import claude_control as cc
from tests.helpers import healthy, kill_leftovers

REPO = Path(__file__).resolve().parents[1]


def slow_stage(n_text: int, delay: float, *, hang: bool = False) -> dict:
    """init, ``n_text`` assistant texts ``delay`` s apart, then StructuredOutput, its ack and the
    result (``n_text + 4`` lines); with ``hang`` it prints init and the texts, then hangs."""
    sid = cc.new_session_id()
    out = healthy()
    body = [cc.assistant_text(sid, f"Checking step {i} of {n_text}.") for i in range(1, n_text + 1)]
    so = cc.assistant_tool_use(sid, "StructuredOutput", out, input_tokens=19926)
    lines = [cc.init_line(sid), *body, so, cc.structured_output_ack(sid, so["message"]["content"][0]["id"]),
             cc.result_success(sid, out, num_turns=2)]
    stage: dict[str, Any] = {"lines": lines, "delay": delay}
    if hang:
        stage.update(mode="hang", after=n_text + 1)
    return stage


@dataclass
class SecondRun:
    proc: subprocess.Popen
    fake: cc.FakeClaude
    db: Path
    _output: tuple[str, str] | None = None

    def rows(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        with contextlib.closing(sqlite3.connect(self.db, timeout=10)) as conn:
            conn.row_factory = sqlite3.Row
            return conn.execute(sql, params).fetchall()

    def session(self, pk: int) -> sqlite3.Row:
        return self.rows("SELECT * FROM sessions WHERE id = ?", (pk,))[0]

    def output(self) -> tuple[str, str]:
        """What it printed (stdout, stderr), once it has exited."""
        if self._output is None:
            self._output = self.proc.communicate(timeout=30)
        return self._output

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
            self.output()
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        kill_leftovers(self.fake)


def start_run(tmp_path: Path, db: Path, home: Path, stages: list[dict], *args: str) -> SecondRun:
    fake = cc.make_fake_claude(tmp_path / "second-bin", stages)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIEROPS_")}
    env.update({"PYTHONPATH": str(REPO), "TIEROPS_CLAUDE_BIN": str(fake.path), "TIEROPS_HOME": str(home),
                "TIEROPS_DB": str(db), "TIEROPS_KILL_GRACE": "1", "TIEROPS_TIER1_TIMEOUT": "60"})
    proc = subprocess.Popen([sys.executable, "-m", "app", "run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    return SecondRun(proc, fake, db)


def wait_running(run: SecondRun, timeout: float = 30) -> sqlite3.Row:
    """The second process's session row once it is running with its CLI recorded."""
    deadline = time.monotonic() + timeout
    while True:
        rows: list[sqlite3.Row] = []
        with contextlib.suppress(sqlite3.OperationalError):  # the tables may not exist yet
            rows = run.rows("SELECT * FROM sessions WHERE status = 'running' AND cli_pid IS NOT NULL"
                            " AND cli_start_time IS NOT NULL ORDER BY id DESC LIMIT 1")
        if rows:
            return rows[0]
        if run.proc.poll() is not None:
            out, err = run.output()
            raise AssertionError(f"tierops run ended before its session ran (exit {run.proc.returncode}): {out}\n{err}")
        assert time.monotonic() < deadline, "the second process's session never started"
        time.sleep(0.05)


def wait_exit(run: SecondRun, timeout: float = 30) -> int:
    try:
        return run.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"tierops run (pid {run.proc.pid}) did not exit within {timeout} s") from None


def sigkill(run: SecondRun) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(run.proc.pid, signal.SIGKILL)
    run.proc.wait(timeout=10)


def wait_lines(run: SecondRun, pk: int, n: int, timeout: float = 30) -> None:
    """Until session ``pk`` has ``n`` lines stored (its CLI is past its start-up)."""
    deadline = time.monotonic() + timeout
    while run.session(pk)["line_count"] < n:
        assert time.monotonic() < deadline, f"session {pk} never stored {n} lines"
        time.sleep(0.05)
