"""``tierops schemas …`` and ``tierops run --schema/--schema-name``, as subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.cli import forkserver
from tests.fakes import claude_control as cc
from tests.fakes.claude_control import REPO

VERDICT = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}


def tierops(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO), "TIEROPS_HOME": str(tmp_path / "home"), **(env or {})}
    return forkserver.run("app", args, env=full, cwd=tmp_path, timeout=120, stdin=stdin, text=True)


def write(tmp_path: Path, name: str, value: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(value) if not isinstance(value, str) else value)
    return path


def test_add_list_show_rm(tmp_path):
    f = write(tmp_path, "verdict.json", VERDICT)
    assert tierops(tmp_path, "schemas", "list").returncode == 2  # no database yet: not created by a read
    out = tierops(tmp_path, "schemas", "add", str(f), "--name", "verdict", "--description", "yes/no")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("stored schema verdict (sha256 ")
    again = tierops(tmp_path, "schemas", "add", str(f), "--name", "verdict")
    assert again.returncode == 2 and "already exists" in again.stderr
    listed = json.loads(tierops(tmp_path, "schemas", "list", "--json").stdout)
    assert [(s["name"], s["description"]) for s in listed] == [("verdict", "yes/no")]
    shown = tierops(tmp_path, "schemas", "show", "verdict")
    assert json.loads(shown.stdout) == VERDICT and "sha256" in shown.stderr
    assert tierops(tmp_path, "schemas", "rm", "verdict").stdout.strip() == "removed schema verdict"
    gone = tierops(tmp_path, "schemas", "show", "verdict")
    assert gone.returncode == 2 and gone.stderr.startswith("tierops: error: no schema named 'verdict'")


def test_add_refuses_bad_files_and_names_in_one_line(tmp_path):
    cases = [
        (["schemas", "add", str(tmp_path / "missing.json"), "--name", "a"], "schema file not found"),
        (["schemas", "add", str(write(tmp_path, "x.json", "{nope")), "--name", "a"], "is not valid JSON"),
        (["schemas", "add", str(write(tmp_path, "v.json", VERDICT)), "--name", "bad name"], "--name 'bad name'"),
        (["schemas", "add", str(write(tmp_path, "arr.json", {"type": "array"})), "--name", "a"], "is refused: $"),
    ]
    for args, message in cases:
        out = tierops(tmp_path, *args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert out.stderr.startswith("tierops: error: ") and message in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_check_runs_the_preflight_alone(tmp_path):
    ok = tierops(tmp_path, "schemas", "check", str(write(tmp_path, "v.json", VERDICT)))
    assert ok.returncode == 0 and ok.stdout.strip().endswith(": ok")
    bad_file = write(tmp_path, "arr.json", {"type": "array"})
    bad = tierops(tmp_path, "schemas", "check", str(bad_file))
    assert bad.returncode == 2 and bad.stderr.startswith(f"{bad_file}: $.type: ")
    as_json = json.loads(tierops(tmp_path, "schemas", "check", str(bad_file), "--json").stdout)
    assert as_json["ok"] is False and as_json["problems"][0]["path"] == "$.type"
    assert as_json["problems"][0]["rule"] == "root-type-not-object"
    uri = write(tmp_path, "uri.json", {"type": "object", "properties": {"u": {"type": "string", "format": "uri"}}})
    dropped = tierops(tmp_path, "schemas", "check", str(uri))
    assert dropped.returncode == 2 and "$.properties.u.format" in dropped.stderr
    assert "[format-dropped-by-cli]" in dropped.stderr
    assert not (tmp_path / "home").exists()  # check needs no database


def test_run_with_a_schema_file_and_a_schema_name(tmp_path):
    fake = cc.make_fake_claude(tmp_path / "bin", [
        {"lines": cc.structured_stream(cc.new_session_id(), {"ok": True})},
        {"lines": cc.structured_stream(cc.new_session_id(), {"ok": False})}])
    env = {"TIEROPS_CLAUDE_BIN": str(fake.path)}
    f = write(tmp_path, "verdict.json", VERDICT)
    out = tierops(tmp_path, "run", "--schema", str(f), "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(fake.last()["parsed"]["json_schema"]) == VERDICT
    assert tierops(tmp_path, "schemas", "add", str(f), "--name", "verdict").returncode == 0
    out = tierops(tmp_path, "run", "--schema-name", "verdict", "--json", env=env)
    assert out.returncode == 0, out.stderr
    sessions = json.loads(tierops(tmp_path, "sessions", "--json").stdout)
    assert len(sessions) == 2
    unknown = tierops(tmp_path, "run", "--schema-name", "nope", env=env)
    assert unknown.returncode == 2 and "no schema named 'nope'" in unknown.stderr
    refused = tierops(tmp_path, "run", "--schema", str(write(tmp_path, "a.json", {"type": "array"})), env=env)
    assert refused.returncode == 2 and "is refused" in refused.stderr
    assert len(fake.invocations()) == 2  # the refused runs started no CLI


def test_revalidate_reports_and_changes_nothing(tmp_path):
    from tests.helpers import fixture_stream

    for scenario in ("c_structured", "d_invalid_structured"):
        assert tierops(tmp_path, "ingest", str(fixture_stream(scenario))).returncode == 0
    db = tmp_path / "home" / "tierops.db"

    def rows() -> list:
        import sqlite3

        with sqlite3.connect(db) as conn:
            return [conn.execute(f"SELECT * FROM {t} ORDER BY id").fetchall()
                    for t in ("sessions", "output_attempts", "events", "memories")]

    before = rows()
    out = tierops(tmp_path, "revalidate")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("checked 2 stored output(s) against each session's own schema: 1 fail now")
    strict = write(tmp_path, "strict.json", {"type": "object", "required": ["incidents"]})
    report = json.loads(tierops(tmp_path, "revalidate", "--schema", str(strict), "--json").stdout)
    assert report["checked"] == 2 and report["now_failing"] == 2 and report["newly_failing"] == 1
    assert tierops(tmp_path, "revalidate", "--since", "yesterday").returncode == 2
    assert tierops(tmp_path, "revalidate", "--schema-name", "nope").returncode == 2
    assert rows() == before  # nothing stored was changed
