"""The `tierops` command, run as a real subprocess against a real SQLite file."""

from __future__ import annotations

import errno
import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import fixture_stream

TIEROPS = [sys.executable, "-m", "app.cli"]


def run(*args: str, db: Path | None = None, stdin: bytes | None = None, env: dict | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [*TIEROPS, *args] + (["--db", str(db)] if db else [])
    full_env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), **(env or {})}
    return subprocess.run(cmd, input=stdin, capture_output=True, env=full_env, cwd=cwd, timeout=60)


def test_ingest_json_report_fields(tmp_path):
    db = tmp_path / "t.db"
    out = run("ingest", str(fixture_stream("c_structured")), "--json", "--tier", "1", db=db)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    for key in ("session_id", "status", "is_error", "result_subtype", "source", "validation", "events", "memories",
                "escalation", "services_checked", "cost_usd", "num_turns", "activity_count"):
        assert key in report
    assert report["session_id"] == "dda04dfa-d3af-40df-bdc8-b3c9edee4b43"
    assert report["validation"] == {"valid": True, "errors": []}
    assert report["activity_count"] == 7 and report["tier"] == 1
    assert report["already_stored"] is False
    again = json.loads(run("ingest", str(fixture_stream("c_structured")), "--json", db=db).stdout)
    assert again["already_stored"] is True and again["id"] == report["id"]


def test_ingest_from_stdin_and_text_report(tmp_path):
    out = run("ingest", "-", db=tmp_path / "t.db", stdin=fixture_stream("d_invalid_structured").read_bytes())
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    assert "failed" in text and "$.events[0].level" in text and "error_max_structured_output_retries" in text


def test_listing_commands_json(tmp_path):
    db = tmp_path / "t.db"
    for scenario in ("c_structured", "f_api_500", "d_text_only"):
        assert run("ingest", str(fixture_stream(scenario)), "--tier", "2", db=db).returncode == 0
    sessions = json.loads(run("sessions", "--json", db=db).stdout)
    assert [s["status"] for s in sessions] == ["completed", "failed", "completed"]  # newest first
    for key in ("id", "session_id", "tier", "model", "status", "degraded", "source", "parent_session_id", "cost_usd"):
        assert key in sessions[0]
    assert [s["degraded"] for s in sessions] == [True, False, False]
    events = json.loads(run("events", "--json", "--level", "info", db=db).stdout)
    assert [(e["level"], e["service"], e["message"]) for e in events] == [("info", "nginx", "nginx active (running)")]
    assert events[0]["session_id"] == "dda04dfa-d3af-40df-bdc8-b3c9edee4b43"
    assert json.loads(run("events", "--json", "--level", "critical", db=db).stdout) == []
    memories = json.loads(run("memories", "--json", db=db).stdout)
    assert [(m["service"], m["category"], m["value"], m["confidence"], m["active"]) for m in memories] == [
        (None, "web-1.disk", "71% used on 2026-11-22", 0.7, True)]
    sqlite3.connect(tmp_path / "empty.db").close()  # an existing database without sessions (a 0-byte file)
    empty = run("sessions", db=tmp_path / "empty.db")
    assert empty.returncode == 0, empty.stderr
    assert "no sessions stored" in empty.stdout.decode()


def test_tierops_db_env_and_default_path(tmp_path):
    env_db = tmp_path / "env.db"
    assert run("ingest", str(fixture_stream("a_plain")), env={"TIEROPS_DB": str(env_db)}).returncode == 0
    assert env_db.exists()
    # Without TIEROPS_HOME: the XDG state directory, the same from any working directory (issue #10).
    env = {k: v for k, v in os.environ.items() if k not in ("TIEROPS_DB", "TIEROPS_HOME")}
    env.update(HOME=str(tmp_path / "user"), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
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
                              "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
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


def test_ingest_shows_progress_on_a_terminal_only(tmp_path):
    import pty

    stream = fixture_stream("c_structured")
    quiet = run("ingest", str(stream), "--db", str(tmp_path / "q.db"))
    assert "lines" not in quiet.stderr.decode()  # stderr is a pipe: no bar
    forced = run("ingest", str(stream), "--db", str(tmp_path / "f.db"), "--progress")
    bar = forced.stderr.decode()
    assert "100%" in bar and "7 lines" in bar and bar.endswith("\n")
    # A real terminal: the bar appears without being asked, and not with --json.
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
        os.execv(sys.executable, [*TIEROPS, "ingest", str(stream), "--db", str(tmp_path / "t.db")])  # noqa: S606
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.waitpid(pid, 0)
    text = b"".join(chunks).decode()
    assert "100%" in text and "7 lines" in text and "session 1" in text


@pytest.mark.parametrize("setup,args,message", [
    (None, ["ingest", "{tmp}/missing.jsonl"], "stream file not found"),
    (None, ["ingest", "{tmp}"], "is a directory"),
    ("schema_missing", ["ingest", "{fixture}", "--schema", "{tmp}/nope.json"], "schema file not found"),
    ("schema_not_json", ["ingest", "{fixture}", "--schema", "{tmp}/s.json"], "is not valid JSON"),
    ("schema_invalid", ["ingest", "{fixture}", "--schema", "{tmp}/s.json"], "not a valid JSON Schema"),
])
def test_bad_input_is_one_line_exit_2_and_loses_nothing(tmp_path, setup, args, message):
    db = tmp_path / "t.db"
    assert run("ingest", str(fixture_stream("c_structured")), db=db).returncode == 0
    if setup == "schema_not_json":
        (tmp_path / "s.json").write_text("{nope")
    elif setup == "schema_invalid":
        (tmp_path / "s.json").write_text('{"type": "bogus"}')
    argv = [a.format(tmp=tmp_path, fixture=fixture_stream("a_plain")) for a in args]
    out = run(*argv, db=db)
    assert out.returncode == 2
    err = out.stderr.decode().strip()
    assert err.startswith("tierops: error:") and message in err and len(err.splitlines()) == 1
    sessions = json.loads(run("sessions", "--json", db=db).stdout)
    assert len(sessions) == 1 and sessions[0]["status"] == "completed"


def test_unusable_database_is_exit_2(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not a database" * 200)
    out = run("sessions", db=bad)
    assert out.returncode == 2 and "cannot open database" in out.stderr.decode()


# --- issue #9 §6: bad input anywhere is one `tierops: error:` line, exit 2, no traceback -------

def one_error_line(out: subprocess.CompletedProcess, *expected: str) -> str:
    err = out.stderr.decode()
    assert out.returncode == 2, (out.returncode, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("tierops: error: "), err
    for text in expected:
        assert text in err, (text, err)
    return err


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


NOT_STREAMS = {
    "image.png": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 40, "not a Claude Code stream-json file"),
    "notes.txt": (b"The servers looked fine today.\nnginx: ok\n", "not a Claude Code stream-json file"),
    "empty.jsonl": (b"", "is empty"),
    "blank.jsonl": (b"\n  \n\r\n", "is empty"),
    "numbers.json": (b"[1, 2, 3]\n", "not a Claude Code stream-json file"),
    "untyped.jsonl": (b'{"summary": "ok"}\n{"events": []}\n', "not a Claude Code stream-json file"),
}


@pytest.mark.parametrize("name", sorted(NOT_STREAMS))
def test_a_file_that_is_not_stream_json_is_refused_and_nothing_is_stored(tmp_path, name):
    data, message = NOT_STREAMS[name]
    path = tmp_path / name
    path.write_bytes(data)
    db = tmp_path / "t.db"
    one_error_line(run("ingest", str(path), db=db), message, str(path))
    one_error_line(run("ingest", "-", db=db, stdin=data), message, "stdin")
    assert json.loads(run("sessions", "--json", db=db).stdout) == []


def test_a_stream_with_garbage_lines_is_still_ingested(tmp_path):
    lines = fixture_stream("c_structured").read_bytes().splitlines()
    path = tmp_path / "noisy.jsonl"
    path.write_bytes(b"\n".join([b"warning: something odd", b"\x89PNG\x00", lines[0], b"[1, 2]", *lines[1:]]) + b"\n")
    out = run("ingest", str(path), "--json", db=tmp_path / "t.db")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["activity_count"] == len(lines) + 3 and report["status"] == "completed"


# A full disk: faults injected at the store's boundary (in process, so the store can be patched).

def _cli(monkeypatch, tmp_path, *args: str):
    from click.testing import CliRunner

    from app.cli import main

    for name in [n for n in os.environ if n.startswith("TIEROPS_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TIEROPS_STORAGE_RETRY_LIMIT", "0.3")  # retried writes give up quickly here
    return CliRunner().invoke(main, [*args, "--db", str(tmp_path / "t.db")])


def _disk_full(*_args, **_kwargs):
    raise sqlite3.OperationalError("database or disk is full")


def _enospc(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("target", ["app.store.sessions.create_session", "app.store.activity.append_lines",
                                    "app.store.sessions.set_stream_sha256", "app.store.sessions.finish_session"])
@pytest.mark.parametrize("fault", [_disk_full, _enospc], ids=["sqlite-full", "enospc"])
def test_a_full_disk_during_ingest_is_one_error_line(monkeypatch, tmp_path, target, fault):
    monkeypatch.setattr(target, fault)
    result = _cli(monkeypatch, tmp_path, "ingest", str(fixture_stream("c_structured")))
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    # One error line, last; before it only the log lines of the retries the operator waited for
    # (issue #10: one-shot commands log warnings and errors), never a traceback.
    err = lines[-1]
    assert err.startswith("tierops: error: ") and not any(x.startswith("tierops:") for x in lines[:-1]), lines
    assert all(" WARNING app." in x or " ERROR app." in x for x in lines[:-1]), lines
    assert "disk is full" in err or "No space left on device" in err, err
    assert "Traceback" not in result.output


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
