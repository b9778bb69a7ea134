"""``tierops ingest``, ``sessions``, ``events`` and ``memories`` (``app/cli/ingest.py``,
``app/cli/records.py``), run as a real subprocess against a real SQLite file: reports, listings, the progress bar, and input that is
refused (one error line, nothing stored) or taken (garbage lines kept, a full disk reported)."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import sys

import pytest

from tests.cli.helpers import TIEROPS, one_error_line, run
from tests.fakes.claude_control import REPO
from tests.helpers import fixture_stream


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
        os.environ["PYTHONPATH"] = str(REPO)
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
    # (one-shot commands log warnings and errors), never a traceback.
    err = lines[-1]
    assert err.startswith("tierops: error: ") and not any(x.startswith("tierops:") for x in lines[:-1]), lines
    assert all(" WARNING app." in x or " ERROR app." in x for x in lines[:-1]), lines
    assert "disk is full" in err or "No space left on device" in err, err
    assert "Traceback" not in result.output
