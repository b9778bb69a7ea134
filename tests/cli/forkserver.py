"""Runs `python -m app …` as its own process without paying the interpreter start each time.

Hundreds of tests run the `tierops` command; most of each run's time is Python importing
pydantic, click and the package before the command does anything. A fork server imports them
once per pytest worker and forks a child per command: the child is a separate process with its
own stdin, stdout, stderr, working directory, environment (``TZ`` included) and exit status, and
runs ``python -m <module>`` exactly as the interpreter would (``runpy``), so the command sees
what a fresh process sees. What a fork cannot change is fixed at interpreter start (the ``-X``
options, ``PYTHON*`` variables); :func:`run` starts a real interpreter for a caller that needs a
``preexec_fn``, and ``tests/test_install.py`` and the startup tests always do.

The server is one single-threaded process per worker, so a fork never copies a lock held by
another thread; its children run one at a time, as a test runs its commands.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

# The server: reads one JSON request per line on stdin, answers the child's pid, then its status.
SERVER = r"""
import json, os, runpy, signal, sys, time
import app.cli.base
from app.cli.base import COMMAND_MODULES
import importlib
for name in COMMAND_MODULES.values():
    importlib.import_module(name)
requests, answers = sys.stdin.buffer, sys.stdout.buffer
sys.stdout.flush(); sys.stderr.flush()
for line in requests:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for fd, (path, flags) in enumerate(((req["stdin"], os.O_RDONLY),
                                                 (req["stdout"], os.O_WRONLY | os.O_TRUNC),
                                                 (req["stderr"], os.O_WRONLY | os.O_TRUNC))):
                opened = os.open(path, flags)
                os.dup2(opened, fd)
                os.close(opened)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as the interpreter sets it at start
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            time.tzset()
            sys.argv = [req["argv0"], *req["args"]]
            try:
                runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as exc:
                c = exc.code
                code = c if isinstance(c, int) else (0 if c is None else 1)
                if c is not None and not isinstance(c, int):
                    print(c, file=sys.stderr)
            except BaseException:
                import traceback
                traceback.print_exc()
                code = 1
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:
                code = code or 120
        finally:
            os._exit(code)
    answers.write(json.dumps({"id": req["id"], "pid": pid}).encode() + b"\n")
    answers.flush()
    _, status = os.waitpid(pid, 0)
    answers.write(json.dumps({"id": req["id"], "status": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
    answers.flush()
"""


class ForkServer:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.errors: Any = None
        self.requests = 0
        self.pending = b""  # read from the server, not yet taken as an answer
        atexit.register(self.close)

    def _server(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            self.pending = b""
            self.errors = tempfile.TemporaryFile()  # noqa: SIM115 (kept for the server's life)
            self.proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self.errors, env=env, cwd=REPO)
        return self.proc

    def close(self) -> None:
        """At the worker's exit: the server ends when its stdin closes."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self.errors is not None:
            self.errors.close()

    def _answer(self, proc: subprocess.Popen[bytes], request_id: int, key: str, wait: float) -> Any:
        """The server's ``key`` answer to request ``request_id`` (an answer to an earlier request,
        left unread by a caller that gave up, is skipped); None after ``wait`` seconds."""
        assert proc.stdout is not None
        deadline = time.monotonic() + wait
        while True:
            # Lines are split here from raw reads: a buffered readline could take the next answer
            # into its buffer, where select() cannot see it (the answers come in pairs, often at once).
            while b"\n" not in self.pending:
                ready, _, _ = select.select([proc.stdout.fileno()], [], [], max(0.0, deadline - time.monotonic()))
                if not ready:
                    return None
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    self.errors.seek(0)
                    said = self.errors.read().decode(errors="replace")[-3000:]
                    raise RuntimeError(f"the CLI fork server died (exit {proc.wait()}): {said}")
                self.pending += chunk
            line, self.pending = self.pending.split(b"\n", 1)
            answer = json.loads(line)
            if answer.get("id") == request_id and key in answer:
                return answer[key]

    def _give_up(self, pid: int | None, why: str) -> None:
        """A command that did not finish in time: say what it was doing, kill it, and start a new
        server for the next command (nothing of this one is carried over)."""
        if pid is not None:
            state = ""
            with contextlib.suppress(OSError):
                status = Path(f"/proc/{pid}/status").read_text()
                state = next((x for x in status.splitlines() if x.startswith("State:")), "")
                state += f", wchan {Path(f'/proc/{pid}/wchan').read_text()}"
            sys.stderr.write(f"forkserver: {why}: pid {pid} {state}\n")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.close()

    def run(self, module: str, args: list[str], *, env: Mapping[str, str], cwd: Path | str | None,
            stdin: bytes | None, timeout: float) -> subprocess.CompletedProcess[bytes]:
        with self.lock, tempfile.TemporaryDirectory(prefix="tierops-cli-") as tmp:
            paths = {name: os.path.join(tmp, name) for name in ("stdin", "stdout", "stderr")}
            if stdin is None:
                paths["stdin"] = os.devnull
            else:
                Path(paths["stdin"]).write_bytes(stdin)
            Path(paths["stdout"]).touch()
            Path(paths["stderr"]).touch()
            proc = self._server()
            assert proc.stdin is not None
            self.requests += 1
            request = {"id": self.requests, "module": module, "args": list(args), "argv0": sys.executable,
                       "env": dict(env), "cwd": str(cwd or os.getcwd()), **paths}
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
            pid = self._answer(proc, self.requests, "pid", 30)
            if pid is None:
                self._give_up(None, "no answer in 30 s")
                raise RuntimeError("the CLI fork server did not answer in 30 s")
            status = self._answer(proc, self.requests, "status", timeout)
            if status is None:  # as subprocess.run does: kill it, then raise
                self._give_up(pid, f"{module} {' '.join(args)[:200]} still running after {timeout:g} s")
                raise subprocess.TimeoutExpired([module, *args], timeout, Path(paths["stdout"]).read_bytes(),
                                                Path(paths["stderr"]).read_bytes())
            return subprocess.CompletedProcess([sys.executable, "-m", module, *args], status,
                                               Path(paths["stdout"]).read_bytes(),
                                               Path(paths["stderr"]).read_bytes())


SERVER_FOR_WORKER = ForkServer()


def run(module: str, args: list[str] | tuple[str, ...], *, env: Mapping[str, str], cwd: Path | str | None = None,
        stdin: bytes | str | None = None, timeout: float = 60, text: bool = False,
        preexec_fn: object = None) -> subprocess.CompletedProcess:
    """``subprocess.run([python, -m, module, *args], capture_output=True, …)``, forked from the
    worker's server; a ``preexec_fn`` starts a real interpreter instead."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    if preexec_fn is not None:
        out = subprocess.run([sys.executable, "-m", module, *args], input=data, capture_output=True, env=dict(env),
                             cwd=cwd, timeout=timeout, preexec_fn=preexec_fn,  # type: ignore[arg-type]
                             stdin=None if data is not None else subprocess.DEVNULL)
    else:
        out = SERVER_FOR_WORKER.run(module, list(args), env=env, cwd=cwd, stdin=data, timeout=timeout)
    if text:  # as text=True decodes: strictly, with universal newlines
        return subprocess.CompletedProcess(out.args, out.returncode, _text(out.stdout), _text(out.stderr))
    return out


def _text(data: bytes) -> str:
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")
