"""``tierops probe``: the checks of an inventory, printed as the claude CLI's stream-json.

Why a module of its own: tier 0 must reach the supervisor through the one path every tier takes
(spawn, stream, store, validate, route, escalate), so the probe keeps the CLI's contract: it takes
the same command line (every claude flag is accepted and ignored; only ``--checks FILE`` or
``TIEROPS_CHECKS``, and ``--extension DIR`` for each extension, matter; stdin is never read) and prints, one JSON object per line, flushed per
line, ``system/init``, an ``assistant`` ``tool_use`` as each check starts and a ``user``
``tool_result`` as it ends, then a ``result`` at $0 whose ``structured_output`` is an
agent-response report (the lines in full: ARCHITECTURE.md, "Tier 0, the probe"). Exit 0, whatever
the checks found; a check that could not run for lack of file descriptors is the probe's own
failure, left out of the report's lists and named in its ``error``.

At start the probe raises its open-files limit (``limits.py``) and becomes a child subreaper
(``reaper.py``); it runs with the minimal environment the supervisor gives it (``environment.py``).
A checks file that cannot be used ends with an ``is_error`` result holding the problems and exit
1. SIGTERM and SIGINT stop the probe at once (command checks' process groups are killed first),
without a result line: exit 128 + the signal.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from app import __version__
from app.clock import utcnow
from app.config import PROBE_MODEL
from app.probe import reaper
from app.probe.checks import CheckResult, run_all
from app.probe.extensions import load_merged
from app.probe.inventory import CheckSpec, InventoryError
from app.probe.inventory_rules import KINDS, Problem
from app.probe.limits import concurrency, open_files_limit, raise_open_files
from app.vocab import Level

log = logging.getLogger(__name__)

__all__ = ["build_report", "checks_argument", "extension_arguments", "main", "run_probe"]

ENV_CHECKS = "TIEROPS_CHECKS"
ZERO_USAGE = {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
# claude flags whose next word is their value: skipped, so that a value is never taken for --checks.
_VALUE_FLAGS = frozenset({
    "--model", "--output-format", "--input-format", "--json-schema", "--append-system-prompt",
    "--append-system-prompt-file", "--system-prompt", "--system-prompt-file", "--allowedTools", "--allowed-tools",
    "--disallowedTools", "--disallowed-tools", "--tools", "--max-turns", "--resume", "-r", "--session-id",
    "--permission-mode", "--settings", "--setting-sources", "--mcp-config", "--fallback-model", "--add-dir",
    "--agents", "--max-budget-usd", "--debug-file"})
CONTEXT_LINE_MAX = 600
SUMMARY_FAILING_SHOWN = 5


def checks_argument(argv: Sequence[str]) -> str | None:
    """The value of ``--checks FILE`` / ``--checks=FILE`` in a claude-style command line, ignoring
    everything else (the values of claude's own flags included)."""
    found = _flag_values(argv, "--checks", first=True)
    return found[0] if found else None


def extension_arguments(argv: Sequence[str]) -> list[str]:
    """Every ``--extension DIR`` of a claude-style command line (``config.tier(0)`` passes one per
    ``TIEROPS_EXTENSIONS`` folder: the probe's environment holds no ``TIEROPS_*`` variable)."""
    return _flag_values(argv, "--extension")


def _flag_values(argv: Sequence[str], flag: str, *, first: bool = False) -> list[str]:
    found: list[str] = []
    i = 0
    while i < len(argv) and not (first and found):
        word = argv[i]
        if word == "--":
            break
        if word == flag:
            if i + 1 >= len(argv):
                break
            found.append(argv[i + 1])
            i += 1
        elif word.startswith(f"{flag}="):
            found.append(word.split("=", 1)[1])
        elif word in _VALUE_FLAGS or (word in ("-p", "--print") and i + 1 < len(argv)
                                      and not argv[i + 1].startswith("-")):
            i += 1  # its value
        i += 1
    return found


class _Stream:
    """Writes stream-json lines to ``out``, flushed one by one; a closed pipe (the reader is gone)
    cancels the probe instead of raising inside a check."""

    def __init__(self, out: BinaryIO, session_id: str, on_gone: Callable[[], object]) -> None:
        self.out = out
        self.session_id = session_id
        self.on_gone = on_gone
        self.gone = False

    def emit(self, obj: dict[str, Any]) -> None:
        if self.gone:
            return
        obj.setdefault("session_id", self.session_id)
        obj.setdefault("uuid", str(uuid.uuid4()))
        try:
            self.out.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n")
            self.out.flush()
        except (BrokenPipeError, ValueError):  # ValueError: the file is closed
            self.gone = True
            self.on_gone()

    def init(self) -> None:
        self.emit({"type": "system", "subtype": "init", "cwd": os.getcwd(), "session_id": self.session_id,
                   "tools": list(KINDS), "mcp_servers": [], "model": PROBE_MODEL, "permissionMode": "default",
                   "apiKeySource": "none", "claude_code_version": f"{PROBE_MODEL} {__version__}",
                   "output_style": "default"})

    def tool_use(self, i: int, spec: CheckSpec) -> None:
        self.emit({"type": "assistant", "message": {
            "id": f"msg_probe_{i + 1}", "type": "message", "role": "assistant", "model": PROBE_MODEL,
            "content": [{"type": "tool_use", "id": f"toolu_probe_{i + 1}", "name": spec.kind,
                         "input": {"check": spec.name, "service": spec.service, "target": spec.shown_target,
                                   "timeout_s": spec.timeout_s}}],
            "stop_reason": None, "stop_sequence": None, "usage": dict(ZERO_USAGE)},
            "parent_tool_use_id": None, "session_id": self.session_id})

    def tool_result(self, i: int, result: CheckResult) -> None:
        self.emit({"type": "user", "message": {"role": "user", "content": [{
            "tool_use_id": f"toolu_probe_{i + 1}", "type": "tool_result", "content": result_text(result),
            "is_error": not result.ok}]},
            "parent_tool_use_id": None, "session_id": self.session_id, "uuid": str(uuid.uuid4()),
            "timestamp": utcnow(), "tool_use_result": {
                "check": result.name, "service": result.service, "kind": result.kind, "ok": result.ok,
                "status": "not checked" if result.probe_error else result.status.value,
                "latency_ms": result.latency_ms, "summary": result.summary, **result.evidence}})

    def result(self, started: float, *, turns: int, text: str, report: dict[str, Any] | None) -> None:
        line: dict[str, Any] = {
            "type": "result", "subtype": "success", "is_error": report is None,
            "duration_ms": round((time.monotonic() - started) * 1000), "duration_api_ms": 0, "num_turns": turns,
            "result": text, "stop_reason": "end_turn", "session_id": self.session_id, "total_cost_usd": 0,
            "usage": dict(ZERO_USAGE), "modelUsage": {}, "permission_denials": []}
        if report is not None:
            line["structured_output"] = report
        self.emit(line)


def result_text(result: CheckResult) -> str:
    """A check's tool_result text: its summary, then its evidence, one ``key: value`` a line."""
    lines = [result.summary if result.probe_error else f"{result.status.value}: {result.summary}"]
    for key, value in result.evidence.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        lines.append(f"{key}: {shown}")
    return "\n".join(lines)


def _context_line(spec: CheckSpec, result: CheckResult) -> str:
    facts = " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
                     for k, v in result.evidence.items() if k != "output_tail")
    tail = result.evidence.get("output_tail")
    if isinstance(tail, str) and tail.strip():
        facts += " output_tail=" + json.dumps(tail.strip()[-300:], ensure_ascii=False)
    line = (f"{spec.name} ({spec.service}; {spec.kind} {spec.shown_target}; {spec.severity.value}) "
            f"{result.status.value}: {result.summary} | {facts}")
    line = " ".join(line.split())
    return line if len(line) <= CONTEXT_LINE_MAX else line[: CONTEXT_LINE_MAX - 1] + "…"


def build_report(specs: Sequence[CheckSpec], results: Sequence[CheckResult]) -> dict[str, Any]:
    """The agent-response report (schemas/agent-response.json) of one probe run. A check the probe
    could not run (:attr:`CheckResult.probe_error`) is in neither ``events`` nor ``services_checked``
    — its incident neither opens nor resolves — but in the report's ``error`` and summary."""
    pairs = [(s, r) for s, r in zip(specs, results, strict=True) if r.probe_error is None]
    unchecked = [r for r in results if r.probe_error is not None]
    failing = [(s, r) for s, r in pairs if not r.ok]
    names = [r.name for _, r in failing]
    summary = f"{len(results)} checks: {len(pairs) - len(failing)} passing, {len(failing)} failing"
    if unchecked:
        summary += f", {len(unchecked)} not checked"
    if failing:
        shown = "; ".join(f"{r.name}: {r.summary}" for _, r in failing[:SUMMARY_FAILING_SHOWN])
        more = len(failing) - SUMMARY_FAILING_SHOWN
        summary += f" ({shown}{f'; +{more} more' if more > 0 else ''})"
    error = (f"probe error: {len(unchecked)} of {len(results)} checks not checked "
             f"({', '.join(r.name for r in unchecked[:SUMMARY_FAILING_SHOWN])}"
             f"{f', +{len(unchecked) - SUMMARY_FAILING_SHOWN} more' if len(unchecked) > SUMMARY_FAILING_SHOWN else ''})"
             f": {unchecked[0].probe_error}") if unchecked else None
    if error:
        summary += f". {error[0].upper()}{error[1:]}"
    report: dict[str, Any] = {
        "summary": summary,
        "events": [{"level": r.severity.value, "service": r.service, "message": f"{r.name} failing: {r.summary}",
                    "key": f"check:{r.name}"} for _, r in failing],
        "memories": [],
        "escalation": {
            "needed": any(r.severity in (Level.WARNING, Level.CRITICAL) for _, r in failing),
            "reason": f"{len(failing)} check(s) failing: {', '.join(names)}" if failing else None,
            "context": "\n".join(_context_line(s, r) for s, r in failing) or None,
            "failed_checks": names,
        },
        "services_checked": [{"name": r.name, "check": r.name, "service": r.service, "status": r.status.value,
                              "detail": r.summary, "latency_ms": r.latency_ms} for _, r in pairs],
    }
    if error:
        report["error"] = error
    return report


async def run_probe(checks: str | None, out: BinaryIO, extensions: Sequence[str] = ()) -> int:
    """One probe run: the stream on ``out``; returns the exit code (0 ran, 1 unusable checks file).
    ``extensions``: folders whose checks join the file's (a broken one is told on stderr and left out)."""
    started = time.monotonic()
    task = asyncio.current_task()
    stream = _Stream(out, str(uuid.uuid4()), on_gone=task.cancel if task is not None else lambda: None)
    stream.init()
    try:
        if not checks:
            raise InventoryError(Path("probe"), [Problem(None, f"no checks file: pass --checks FILE or set "
                                                              f"{ENV_CHECKS}")])
        merged = load_merged(Path(checks), [Path(d) for d in extensions])
        inv = merged.inventory
        if inv is None:  # pragma: no cover - a checks file always gives one
            raise InventoryError(Path(checks), [Problem(None, "no inventory")])
    except InventoryError as exc:
        text = str(exc)
        print(text, file=sys.stderr)
        stream.result(started, turns=0, text=text, report=None)
        return 1
    for problem in merged.problems():
        print(f"tierops probe: {problem}", file=sys.stderr)
    at_once = concurrency(inv.concurrency)
    capped = ""
    if at_once < len(inv.checks):
        why = ("the checks file's concurrency" if at_once == inv.concurrency
               else f"open-files limit {open_files_limit()}")
        capped = f", at most {at_once} at once ({why})"
        log.info("%d checks%s", len(inv.checks), capped)
    results = await run_all(inv.checks, on_start=stream.tool_use, on_result=stream.tool_result,
                            concurrency=at_once)
    report = build_report(inv.checks, results)
    stream.result(started, turns=len(results), text=report["summary"], report=report)
    failing = sum(not r.ok and r.probe_error is None for r in results)
    unchecked = sum(r.probe_error is not None for r in results)
    print(f"tierops probe: {len(results)} checks, {failing} failing, "
          + (f"{unchecked} not checked (out of file descriptors), " if unchecked else "")
          + f"{time.monotonic() - started:.1f} s{capped}", file=sys.stderr)
    return 0


def main(argv: Sequence[str]) -> int:
    """``tierops probe ARGS…``: run, and return the exit code."""
    checks = checks_argument(argv) or os.environ.get(ENV_CHECKS) or None
    stopped: list[int] = []

    async def go() -> int:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, _stop, sig, task, stopped)
        return await run_probe(checks, sys.stdout.buffer, extension_arguments(argv))

    raise_open_files()  # systemd's soft limit of 1024 is too few for a large checks file (limits.py)
    reaper.adopt_orphans()  # what a command check detaches stays within reach (reaper.py)
    try:
        return asyncio.run(go())
    except asyncio.CancelledError:
        if stopped:
            print(f"tierops probe: stopped by {signal.Signals(stopped[0]).name}", file=sys.stderr)
            return 128 + stopped[0]
        # the stdout pipe closed: nobody reads the stream any more
        _silence_stdout()
        return 1
    finally:
        reaper.sweep_all()  # every process a command check left behind, whatever ended the run


def _stop(sig: int, task: asyncio.Task[Any] | None, stopped: list[int]) -> None:
    stopped.append(sig)
    if task is not None:
        task.cancel()


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
