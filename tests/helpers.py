"""Helpers shared by the test modules: the real CLI captures, agent outputs, running one session,
process checks. Fixtures live in the conftest.py files; plain functions live here."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from app.config import Settings
from app.output.validate import OutputValidator
from app.store.db import Database
from app.supervisor.hub import Hub
from app.supervisor.session import SessionHandle, SessionResult, TierRequest, run_tier_session
from tests.fakes.claude_control import FIXTURES, FakeClaude

# --- the real CLI captures (tests/fixtures via claude_control.FIXTURES) -----------------------

SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if (p / "stdout.jsonl").is_file()) if FIXTURES.is_dir() else []


def fixture_stream(name: str) -> Path:
    """The captured stdout.jsonl of one scenario."""
    return FIXTURES / name / "stdout.jsonl"


# --- agent outputs ------------------------------------------------------------------------

def healthy(summary: str = "All services healthy.") -> dict:
    return {
        "summary": summary,
        "events": [{"level": "info", "service": "nginx", "message": "nginx active (running)"}],
        "memories": [],
        "escalation": {"needed": False, "reason": None, "context": None, "failed_checks": []},
        "services_checked": [{"name": "nginx", "status": "healthy", "detail": "active"}],
    }


def escalating(reason: str = "disk almost full on web-1", *, context: str = "/var at 99%, growing 1%/h",
               failed: tuple[str, ...] = ("disk_space_web1",), summary: str = "web-1 disk nearly full.") -> dict:
    return {
        "summary": summary,
        "events": [{"level": "critical", "service": "web-1", "message": "/var 99% used"}],
        "memories": [],
        "escalation": {"needed": True, "reason": reason, "context": context, "failed_checks": list(failed)},
        "services_checked": [
            {"name": "web-1-disk", "status": "degraded", "detail": "/var 99%"},
            {"name": "nginx", "status": "healthy", "detail": None},
        ],
    }


def invalid() -> dict:
    """Fails the schema in two places: $.events[0].level and $.services_checked[0].status."""
    out = healthy()
    out["events"][0]["level"] = "bogus"
    out["services_checked"][0]["status"] = "fine"
    return out


# --- processes ----------------------------------------------------------------------------

def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_gone(pids: list[int], timeout: float = 5.0) -> list[int]:
    """Pids still alive after ``timeout`` seconds (reparented zombies may need a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def kill_leftovers(fake: FakeClaude) -> None:
    """Test cleanup: SIGKILL the process group of every fake run that is still alive."""
    for inv in fake.invocations():
        for pid in (inv.get("pid"), inv.get("child_pid")):
            if pid and alive(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(inv["pgid"], signal.SIGKILL)


async def wait_until(cond: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def run_session(db: Database, settings: Settings, validator: OutputValidator, *, tier: int = 1,
                      prompt: str = "Check the services.", system: str = "You are a test tier.",
                      hub: Hub | None = None, handle: SessionHandle | None = None) -> tuple[SessionResult, dict]:
    """Run one tier session through the real supervisor code; return its result and its row."""
    req = TierRequest(tier=tier, prompt=prompt, system_prompt=system, trigger="manual")
    result = await run_tier_session(db, settings, validator, hub, req, handle=handle)
    row = await db.fetchone("SELECT * FROM sessions WHERE id = ?", (result.pk,))
    return result, dict(row)
