"""``app/cli/base.py``: stored text reaches the operator's terminal through one path (``echo``,
``shown``), so no alert, model or sender text can drive the terminal; ``--json`` keeps it exact.

Every command is run as a real subprocess against a real SQLite file whose rows were stored by
the real paths: a stream ingested by ``tierops ingest`` (a model's summary, events, memories,
actions and escalation reason), incidents observed by the store, an approval requested by the
store, a maintenance window added by ``tierops maintenance add``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from app.store import approvals as approval_store
from app.store import incidents as incident_store
from app.store import sessions as session_store
from app.store.db import Database
from app.store.incidents import Finding, Observation, ProbeResult
from tests.fakes import claude_control as cc
from tests.test_cli import run

# OSC 52 (writes the clipboard), OSC 8 (a link whose text hides its target), BEL, an 8-bit CSI
# (U+009B), CSI clear-screen, DEL, a carriage return that would overwrite the line, and a newline
# followed by what looks like a line of the command's own output.
HOSTILE = ("ok\x1b]52;c;cm0gLXJmIH4=\x07 \x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\ "
           "\x9b31mred\x1b[2J\x7f\rFORGED\n    42  2031-01-01  FAKE ROW")
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\x7f", "\r")


def _agent_output() -> dict:
    return {
        "summary": HOSTILE,
        "events": [{"level": "critical", "service": f"api{HOSTILE}", "message": HOSTILE}],
        "memories": [{"key": "api:quirk", "value": HOSTILE}],
        "escalation": {"needed": True, "reason": HOSTILE, "context": HOSTILE, "failed_checks": [HOSTILE]},
        "services_checked": [{"name": HOSTILE, "status": "down", "detail": HOSTILE}],
        "actions": [{"kind": "restart", "service": HOSTILE, "result": "done", "detail": HOSTILE}],
    }


@pytest.fixture
def hostile_db(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    db = tmp_path / "hostile.db"
    stream = tmp_path / "stream.jsonl"
    stream.write_text("\n".join(json.dumps(line) for line in cc.structured_stream(cc.new_session_id(), _agent_output()))
                      + "\n", encoding="utf-8")
    out = run("ingest", str(stream), "--tier", "1", db=db)
    assert out.returncode == 0, out.stderr
    assert not any(c in out.stdout.decode() for c in RAW_CONTROLS)  # ingest's own report

    async def seed() -> dict[str, int]:
        store = await Database.open(db)
        try:
            pk = await session_store.create_session(store, tier=0, model="tierops-probe", prompt="x", trigger="schedule")
            obs = Observation(findings=[Finding(key="check:api", severity="critical", message=HOSTILE, service=HOSTILE,
                                                check_name="api", origin="probe")],
                              probe_results=[ProbeResult("api", "down", HOSTILE, 12.0, HOSTILE)], passing_checks=[])
            [change] = await incident_store.observe(store, pk, pk, obs, flap_count=3, flap_window_s=3600)
            await session_store.interrupt_running(store, "test data: no CLI ran")
            approval, _ = await approval_store.request_approval(store, session_pk=pk, chain_id=pk, tier=2,
                                                                handoff=HOSTILE, timeout_s=3600,
                                                                incident_ids=[change.incident["id"]])
            return {"incident": change.incident["id"], "approval": approval["id"]}
        finally:
            await store.close()

    ids = asyncio.run(seed())
    out = run("maintenance", "add", "--duration", "1h", "--service", "api", "--reason", HOSTILE, db=db)
    assert out.returncode == 0, out.stderr
    return db, ids


def test_no_command_prints_a_control_character_from_stored_text(hostile_db):
    db, ids = hostile_db
    commands = [("sessions",), ("events",), ("memories",), ("cooldowns",), ("incidents",),
                ("incidents", "show", str(ids["incident"])), ("approvals", "--status", "all"),
                ("approvals", "show", str(ids["approval"])), ("maintenance",), ("notify", "preview")]
    for command in commands:
        out = run(*command, db=db)
        assert out.returncode == 0, (command, out.stderr)
        text = out.stdout.decode()
        assert not [c for c in RAW_CONTROLS if c in text], (command, text)
        assert not any(line.startswith("    42  2031") for line in text.splitlines()), (command, text)
        if command not in {("sessions",), ("approvals", "--status", "all")}:  # lists without model text
            assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in text, (command, text)  # visible, never obeyed


def test_inline_fields_stay_on_their_line_and_blocks_keep_their_layout(hostile_db):
    db, ids = hostile_db
    events = run("events", db=db).stdout.decode().splitlines()
    assert len(events) == 1 and events[0].endswith("\\rFORGED\\n    42  2031-01-01  FAKE ROW")
    shown = run("incidents", "show", str(ids["incident"]), db=db).stdout.decode()
    assert "  title: ok\\x1b]52;c;cm0gLXJmIH4=\\x07 \\x1b]8;;https://evil.example/\\x1b\\click" in shown
    approval = run("approvals", "show", str(ids["approval"]), db=db).stdout.decode().splitlines()
    handoff = approval[approval.index("handoff:") + 1:]
    assert handoff[-1] == "      42  2031-01-01  FAKE ROW"  # the handoff's own lines, indented under it


def test_json_output_is_the_stored_text_exactly(hostile_db):
    db, ids = hostile_db
    for command, read in [(("events",), lambda v: v[0]["message"]),
                          (("incidents", "show", str(ids["incident"])), lambda v: v["service"]),
                          (("approvals", "show", str(ids["approval"])), lambda v: v["handoff"])]:
        out = run(*command, "--json", db=db)
        assert out.returncode == 0, (command, out.stderr)
        assert not [c for c in RAW_CONTROLS if c in out.stdout.decode()], command  # JSON escapes, C1 too
        assert read(json.loads(out.stdout)) == HOSTILE, command
