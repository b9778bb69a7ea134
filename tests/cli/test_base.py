"""``app/cli/base.py``: what every command shares, run as a real subprocess.

* Settings and the state directory: ``--home``/``--db``/``TIEROPS_HOME`` found the same way from
  any working directory, a read command never creates a database, unknown and invalid settings.
* Bad input anywhere is one ``tierops: error:`` line, exit 2, no traceback.
* Stored text reaches the operator's terminal through one path (``echo``, ``shown``), so no
  alert, model or sender text can drive the terminal; ``--json`` keeps it exact.

Every command is run as a real subprocess against a real SQLite file whose rows were stored by
the real paths: a stream ingested by ``tierops ingest`` (a model's summary, events, memories,
actions and escalation reason), incidents observed by the store, an approval requested by the
store, a maintenance window added by ``tierops maintenance add``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from app.store import approvals as approval_store
from app.store import incidents as incident_store
from app.store import sessions as session_store
from app.store.db import Database
from app.store.incidents import Finding, Observation, ProbeResult
from tests.cli.helpers import TIEROPS, one_error_line, run
from tests.fakes import claude_control as cc
from tests.fakes.claude_control import REPO
from tests.helpers import fixture_stream

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


# -- settings and the state directory ------------------------------------------------------

def test_tierops_db_env_and_default_path(tmp_path):
    env_db = tmp_path / "env.db"
    assert run("ingest", str(fixture_stream("a_plain")), env={"TIEROPS_DB": str(env_db)}).returncode == 0
    assert env_db.exists()
    # Without TIEROPS_HOME: the XDG state directory, the same from any working directory.
    env = {k: v for k, v in os.environ.items() if k not in ("TIEROPS_DB", "TIEROPS_HOME")}
    env.update(HOME=str(tmp_path / "user"), PYTHONPATH=str(REPO))
    for cwd in (tmp_path, Path("/")):
        out = subprocess.run([*TIEROPS, "ingest", str(fixture_stream("a_plain"))], cwd=cwd, capture_output=True,
                             env=env, timeout=60)
        assert out.returncode == 0, out.stderr
    assert (tmp_path / "user" / ".local" / "state" / "tierops" / "tierops.db").is_file()
    assert not (tmp_path / "state").exists()
    listed = subprocess.run([*TIEROPS, "sessions", "--json"], cwd=Path("/"), capture_output=True, env=env, timeout=60)
    assert len(json.loads(listed.stdout)) == 1  # the second ingest found the first one's stream
    xdg = subprocess.run([*TIEROPS, "ingest", str(fixture_stream("a_plain"))], capture_output=True, timeout=60,
                         env={**env, "XDG_STATE_HOME": str(tmp_path / "xdg")})
    assert xdg.returncode == 0 and (tmp_path / "xdg" / "tierops" / "tierops.db").is_file()


def test_a_read_command_never_creates_a_database(tmp_path):
    home = tmp_path / "elsewhere"
    for command in ("sessions", "events", "memories"):
        out = run(command, "--home", str(home))
        assert out.returncode == 2
        err = out.stderr.decode()
        assert err.startswith("tierops: error: no database at ") and str(home / "tierops.db") in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not home.exists()
    out = run("sessions", "--db", str(tmp_path / "nope.db"))
    assert out.returncode == 2 and "TIEROPS_DB=" in out.stderr.decode()
    assert not (tmp_path / "nope.db").exists()


def test_help_names_the_database_in_use(tmp_path):
    home = tmp_path / "h"
    out = run("sessions", "--help", env={"TIEROPS_HOME": str(home)})
    text = "".join(out.stdout.decode().split())  # click wraps long paths, at hyphens too
    assert f"[now:{home / 'tierops.db'},notcreatedyet]" in text
    assert run("ingest", str(fixture_stream("a_plain")), env={"TIEROPS_HOME": str(home)}).returncode == 0
    text = "".join(run("events", "--help", env={"TIEROPS_HOME": str(home)}).stdout.decode().split())
    assert f"[now:{home / 'tierops.db'},exists]" in text


def test_home_flag_and_renamed_state_dir(tmp_path):
    assert run("ingest", str(fixture_stream("a_plain")), "--home", str(tmp_path / "a")).returncode == 0
    assert (tmp_path / "a" / "tierops.db").is_file()
    env = {k: v for k, v in os.environ.items() if k != "TIEROPS_HOME"}
    out = subprocess.run([*TIEROPS, "sessions"], capture_output=True, timeout=60,
                         env={**env, "TIEROPS_STATE_DIR": str(tmp_path / "a"),
                              "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert "was renamed TIEROPS_HOME" in out.stderr.decode()


def test_an_unknown_setting_is_warned_about_with_the_closest_name(tmp_path):
    assert run("ingest", str(fixture_stream("a_plain"))).returncode == 0
    out = run("sessions", env={"TIEROPS_INTERVALS": "60"})
    assert out.returncode == 0
    assert ("tierops: warning: TIEROPS_INTERVALS (in the environment) is not a TierOps setting and is ignored; "
            "did you mean TIEROPS_INTERVAL?") in out.stderr.decode()
    (tmp_path / ".env").write_text("# comment\nexport TIEROPS_RETENTON_DAYS=3\n")
    out = run("sessions", cwd=tmp_path)
    assert "TIEROPS_RETENTON_DAYS (in .env)" in out.stderr.decode()
    assert "did you mean TIEROPS_RETENTION_DAYS?" in out.stderr.decode()


def test_an_invalid_setting_in_dot_env_is_one_line(tmp_path):
    (tmp_path / ".env").write_text("TIEROPS_TIER2_TIMEOUT=soon\n")
    out = run("sessions", cwd=tmp_path)
    assert out.returncode == 2
    err = out.stderr.decode().strip()
    assert err.startswith("tierops: error: TIEROPS_TIER2_TIMEOUT: ") and "'soon'" in err
    assert len(err.splitlines()) == 1


# -- bad input anywhere is one `tierops: error:` line, exit 2, no traceback -------------------

@pytest.mark.parametrize("name,value,message", [
    ("TIEROPS_TIER1_TIMEOUT", "abc", "TIEROPS_TIER1_TIMEOUT: Input should be a valid integer"),
    ("TIEROPS_TIER2_MAX_TURNS", "0", "TIEROPS_TIER2_MAX_TURNS: Input should be greater than or equal to 1"),
    ("TIEROPS_CRON", "every day", "TIEROPS_CRON: not a valid cron expression"),
    ("TIEROPS_SCHEDULE", "perhaps", "TIEROPS_SCHEDULE: Input should be a valid boolean"),
])
def test_an_invalid_setting_is_named_by_its_environment_variable(tmp_path, name, value, message):
    out = run("sessions", db=tmp_path / "t.db", env={name: value})
    err = one_error_line(out, message)
    assert repr(value) in err  # what was given
    assert not (tmp_path / "t.db").exists()


def test_an_invalid_token_setting_is_not_echoed(tmp_path):
    out = run("sessions", db=tmp_path / "t.db", env={"TIEROPS_TOKEN_FILE": "", "TIEROPS_TIER1_TIMEOUT": "x",
                                                     "TIEROPS_TOKEN": "s3cret-token-value"})
    assert "s3cret" not in one_error_line(out, "TIEROPS_TIER1_TIMEOUT")


@pytest.mark.parametrize("args,message", [
    (["ingest", "{fixture}", "--tier", "99"], "Invalid value for '--tier'"),
    (["ingest", "{fixture}", "--tier", "x"], "Invalid value for '--tier'"),
    (["ingest"], "Missing argument 'FILE.jsonl'"),
    (["sessions", "--limit", "0"], "Invalid value for '--limit'"),
    (["sessions", "--status", "bogus"], "Invalid value for '--status'"),
    (["sessions", "--colour"], "No such option '--colour'"),
    (["events", "--session", "one"], "Invalid value for '--session'"),
    (["serve", "--port", "70000"], "Invalid value for '--port'"),
    (["frobnicate"], "No such command 'frobnicate'"),
])
def test_a_bad_flag_is_one_error_line(tmp_path, args, message):
    argv = [a.format(fixture=fixture_stream("c_structured")) for a in args]
    err = one_error_line(run(*argv), message)
    if argv[0] != "frobnicate":
        assert f"tierops {argv[0]} --help" in err


def test_help_and_version_still_exit_0():
    assert run("--help").returncode == 0 and b"ingest" in run("--help").stdout
    assert run("ingest", "--help").returncode == 0
    out = run("--version")
    assert out.returncode == 0 and b"version" in out.stdout


# -- commands load on demand -----------------------------------------------------------------

def test_every_command_is_in_the_lazy_table_and_a_command_loads_only_its_module():
    """``COMMAND_MODULES`` names each command's module: a command missing from it would vanish from
    ``tierops --help``, a wrong module would fail only when that command runs."""
    code = ("import sys, importlib, pkgutil, app.cli, app.cli.base as b\n"
            "before = set(sys.modules)\n"
            "b.main.get_command(None, 'incidents')\n"
            "loaded = sorted(m for m in set(sys.modules) - before if m.startswith('app.cli.'))\n"
            "for m in pkgutil.iter_modules(app.cli.__path__):\n"
            "    if m.name != '__main__': importlib.import_module('app.cli.' + m.name)\n"
            "import json; print(json.dumps({'loaded': loaded, 'table': b.COMMAND_MODULES,"
            " 'registered': {n: c.callback.__module__ for n, c in b.main.commands.items()}}))\n")
    out = subprocess.run([*TIEROPS[:1], "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)
    seen = json.loads(out.stdout)
    assert seen["registered"] == seen["table"]
    assert seen["loaded"] == ["app.cli.cooldowns", "app.cli.incidents"]  # incidents shows cooldown limits
    assert "app.engine.ingest" not in seen["loaded"]
