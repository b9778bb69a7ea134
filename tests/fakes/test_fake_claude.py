"""The fake claude binary does what the tests rely on (each mode, via subprocess)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

try:
    from . import claude_control as cc
except ImportError:  # tests/fakes not imported as a package
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import claude_control as cc

pytestmark = pytest.mark.timeout(30)

SID = "11111111-2222-4333-8444-555555555555"
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent-home"}
ARGS = ["-p", "check things", "--model", "claude-haiku-4-5", "--output-format", "stream-json",
        "--verbose", "--json-schema", '{"type":"object"}', "--allowedTools", "Bash", "Read",
        "--append-system-prompt", "ctx"]
C_STRUCTURED = cc.fixture("c_structured")


def run(fake: cc.FakeClaude, args=ARGS, *, stdin=subprocess.DEVNULL, env=ENV, cwd=None, timeout=10):
    return subprocess.run([str(fake.path), *args], stdin=stdin, capture_output=True, env=env,
                          cwd=cwd, timeout=timeout)


def jlines(out: bytes) -> list[dict]:
    return [json.loads(x) for x in out.decode().splitlines() if x.strip()]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


@pytest.fixture
def simple_lines():
    return [cc.init_line(SID, cwd="/srv"), cc.assistant_text(SID, "hi"),
            cc.result_success(SID, result_text="hi", num_turns=1)]


# --- basics -----------------------------------------------------------------------------

def test_version(tmp_path):
    fake = cc.make_fake_claude(tmp_path, [{"lines": []}])
    for flag in ("--version", "-v"):
        proc = run(fake, [flag], env={})
        assert proc.returncode == 0
        assert proc.stdout == b"2.1.197 (Claude Code)\n"
    assert [inv["version_probe"] for inv in fake.invocations()] == [True, True]
    # version probes do not consume stages
    assert json.loads(fake.state_path.read_text()) == {"count": 0}


def test_normal_prints_lines_and_logs_invocation(tmp_path, simple_lines):
    workdir = tmp_path / "work"
    workdir.mkdir()
    fake = cc.make_fake_claude(tmp_path / "bin", [{"lines": [*simple_lines, "not json {"], "exit_code": 0}])
    proc = run(fake, cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode().splitlines()
    assert out[-1] == "not json {"
    assert [json.loads(x) for x in out[:-1]] == simple_lines
    # dicts are dumped compactly, like the CLI
    assert out[0] == json.dumps(simple_lines[0], separators=(",", ":"))

    [inv] = fake.invocations()
    assert inv["argv"] == ARGS
    assert inv["cwd"] == str(workdir)
    assert inv["env"] == ENV  # exactly what was passed: the wrapper adds nothing
    assert inv["stdin_is_devnull"] is True and inv["stdin_kind"] == "devnull"
    assert inv["pgid"] == os.getpgrp()
    assert inv["invocation"] == 0 and inv["stage_index"] == 0
    parsed = inv["parsed"]
    assert parsed["prompt"] == "check things"
    assert parsed["model"] == "claude-haiku-4-5"
    assert parsed["allowed_tools"] == ["Bash", "Read"]
    assert parsed["append_system_prompt"] == "ctx"
    assert json.loads(parsed["json_schema"]) == {"type": "object"}


def test_pid_and_pgid_and_empty_env(tmp_path, simple_lines):
    fake = cc.make_fake_claude(tmp_path, [{"lines": simple_lines}])
    with subprocess.Popen([str(fake.path), *ARGS], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          env={}, start_new_session=True) as proc:
        proc.communicate(timeout=10)
    inv = fake.last()
    assert inv["pid"] == proc.pid
    assert inv["pgid"] == proc.pid  # its own process group, as the supervisor starts it
    assert inv["env"] == {}


def test_stdin_pipe_is_not_devnull(tmp_path, simple_lines):
    fake = cc.make_fake_claude(tmp_path, [{"lines": simple_lines}])
    proc = subprocess.run([str(fake.path), *ARGS], input=b"", capture_output=True, env=ENV, timeout=10)
    assert proc.returncode == 0
    inv = fake.last()
    assert inv["stdin_is_devnull"] is False and inv["stdin_kind"] == "pipe"


def test_the_prompt_and_system_prompt_are_read_as_the_real_cli_reads_them(tmp_path, simple_lines):
    """No prompt argument: the prompt is what came on stdin; --append-system-prompt-file: its
    content is the appended system prompt. The argv is logged exactly as it was."""
    fake = cc.make_fake_claude(tmp_path, [{"lines": simple_lines}])
    system = tmp_path / "system.md"
    system.write_text("SYSTEM TEXT")
    argv = ["-p", "--output-format", "stream-json", "--verbose", "--append-system-prompt-file", str(system)]
    proc = subprocess.run([str(fake.path), *argv], input=b"PROMPT TEXT", capture_output=True, env=ENV, timeout=10)
    assert proc.returncode == 0, proc.stderr
    inv = fake.last()
    assert inv["argv"] == argv and inv["usage_error"] is None
    assert (inv["parsed"]["prompt"], inv["parsed"]["prompt_from"]) == ("PROMPT TEXT", "stdin")
    assert inv["parsed"]["append_system_prompt"] == "SYSTEM TEXT"
    nothing = subprocess.run([str(fake.path), *argv], stdin=subprocess.DEVNULL, capture_output=True, env=ENV,
                             timeout=10)
    assert nothing.returncode == 1 and b"Input must be provided" in nothing.stderr  # as the real CLI says


def test_stages_advance_and_last_repeats(tmp_path):
    fake = cc.make_fake_claude(tmp_path, [{"lines": ["one"]}, {"lines": ["two"], "exit_code": 3}])
    results = [run(fake) for _ in range(3)]
    assert [r.stdout for r in results] == [b"one\n", b"two\n", b"two\n"]
    assert [r.returncode for r in results] == [0, 3, 3]
    assert [i["stage_index"] for i in fake.invocations()] == [0, 1, 1]
    fake.set_stages([{"lines": ["again"]}])
    assert run(fake).stdout == b"again\n"


def test_control_file_next_to_argv0_without_env(tmp_path):
    link = tmp_path / "claude"
    link.symlink_to(cc.FAKE_CLAUDE)
    (tmp_path / "fake-claude.json").write_text(json.dumps(
        {"log": "log.jsonl", "stages": [{"lines": ["from fallback"], "stderr": "warn\n"}]}))
    proc = subprocess.run([sys.executable, str(link), "-p", "x"], stdin=subprocess.DEVNULL,
                          capture_output=True, env={}, timeout=10)
    assert proc.stdout == b"from fallback\n"
    assert proc.stderr == b"warn\n"
    assert json.loads((tmp_path / "log.jsonl").read_text())["argv"] == ["-p", "x"]


# --- replay and session ids -------------------------------------------------------------

def test_replay_is_verbatim(tmp_path):
    fake = cc.make_fake_claude(tmp_path, [{"replay": str(C_STRUCTURED)}])
    proc = run(fake)
    assert proc.returncode == 0
    assert proc.stdout == C_STRUCTURED.read_bytes()


def test_session_id_substitution(tmp_path):
    fake = cc.make_fake_claude(tmp_path, [{"replay": str(C_STRUCTURED), "session_id": SID}])
    proc = run(fake)
    original = cc.fixture_lines("c_structured")
    lines = jlines(proc.stdout)
    assert {line["session_id"] for line in lines} == {SID}
    # nothing else changed
    for got, want in zip(lines, original, strict=True):
        assert {**got, "session_id": None} == {**want, "session_id": None}


def test_resume_and_session_id_flags_set_the_id(tmp_path, simple_lines):
    fake = cc.make_fake_claude(tmp_path, [{"lines": simple_lines}])
    other = "99999999-8888-4777-8666-555555555555"
    proc = run(fake, ["--resume", other, *ARGS])
    assert {line["session_id"] for line in jlines(proc.stdout)} == {other}
    assert fake.last()["session_id"] == other
    proc = run(fake, [*ARGS, "--session-id", other])
    assert {line["session_id"] for line in jlines(proc.stdout)} == {other}
    # an explicit stage session_id wins
    fake.set_stages([{"lines": simple_lines, "session_id": "abc"}])
    proc = run(fake, ["--resume", other, *ARGS])
    assert {line["session_id"] for line in jlines(proc.stdout)} == {"abc"}


def test_resume_unknown_replay_rewrites_error_text(tmp_path):
    fake = cc.make_fake_claude(tmp_path, [{"replay": str(cc.fixture("e_resume_unknown_id")), "exit_code": 1}])
    proc = run(fake, ["--resume", SID, *ARGS])
    [line] = jlines(proc.stdout)
    assert proc.returncode == 1
    assert line["session_id"] == SID
    assert line["errors"] == [f"No conversation found with session ID: {SID}"]


# --- timing -----------------------------------------------------------------------------

def test_delay_streams_lines_incrementally(tmp_path, simple_lines):
    fake = cc.make_fake_claude(tmp_path, [{"lines": simple_lines, "delay": 0.3}])
    start = time.monotonic()
    with subprocess.Popen([str(fake.path), *ARGS], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          env=ENV) as proc:
        first = proc.stdout.readline()
        assert json.loads(first)["subtype"] == "init"
        assert proc.poll() is None  # flushed before the process finished
        rest = proc.stdout.read()
        assert proc.wait(timeout=10) == 0
    assert time.monotonic() - start >= 0.6
    assert len(rest.splitlines()) == 2


# --- failure modes ----------------------------------------------------------------------

def test_crash(tmp_path):
    fake = cc.make_fake_claude(tmp_path, [
        {"replay": str(C_STRUCTURED), "mode": "crash", "after": 2, "stderr": "boom\n"},
        {"replay": str(C_STRUCTURED), "mode": "crash", "after": 1, "exit_code": 7, "partial_line": '{"type":"ass'},
        {"replay": str(C_STRUCTURED), "mode": "crash", "after": 0, "signal": "SIGSEGV"},
    ])
    first = run(fake)
    assert first.returncode == 139
    assert first.stdout.splitlines() == C_STRUCTURED.read_bytes().splitlines()[:2]
    assert first.stderr == b"boom\n"
    second = run(fake)
    assert second.returncode == 7
    assert second.stdout.endswith(b'\n{"type":"ass')
    third = run(fake)
    assert third.returncode == -signal.SIGSEGV and third.stdout == b""


def _start_hang(fake):
    return subprocess.Popen([str(fake.path), *ARGS], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=ENV, start_new_session=True)


def test_hang_then_sigterm(tmp_path):
    fake = cc.make_fake_claude(tmp_path, [{"replay": str(C_STRUCTURED), "mode": "hang", "after": 3}])
    with _start_hang(fake) as proc:
        try:
            got = [proc.stdout.readline() for _ in range(3)]
            assert got == C_STRUCTURED.read_bytes().splitlines(keepends=True)[:3]
            time.sleep(0.2)
            assert proc.poll() is None
            os.killpg(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=5) == -signal.SIGTERM
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)


def test_hang_ignoring_sigterm_needs_sigkill(tmp_path):
    fake = cc.make_fake_claude(tmp_path, [{"replay": str(C_STRUCTURED), "mode": "hang",
                                           "ignore_sigterm": True}])
    with _start_hang(fake) as proc:
        try:
            assert json.loads(proc.stdout.readline())["subtype"] == "init"  # after=1 by default
            os.killpg(proc.pid, signal.SIGTERM)
            with pytest.raises(subprocess.TimeoutExpired):
                proc.wait(timeout=0.5)
            os.killpg(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=5) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)


def test_hang_with_grandchild_in_same_group(tmp_path):
    fake = cc.make_fake_claude(tmp_path, [{"replay": str(C_STRUCTURED), "mode": "hang",
                                           "spawn_child": True}])
    with _start_hang(fake) as proc:
        try:
            proc.stdout.readline()
            child = fake.last()["child_pid"]
            assert alive(child)
            assert os.getpgid(child) == proc.pid
            # killing only the direct child leaves the grandchild holding stdout open
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
            assert alive(child)
            os.killpg(proc.pid, signal.SIGKILL)
            assert proc.stdout.read() == b""  # EOF only once the grandchild is gone too
            deadline = time.monotonic() + 5
            while alive(child) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert not alive(child)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def test_huge_line(tmp_path):
    size = 3 * 1024 * 1024
    fake = cc.make_fake_claude(tmp_path, [
        {"replay": str(C_STRUCTURED), "mode": "huge_line", "size": size, "session_id": SID},
        {"lines": [cc.init_line(SID)], "mode": "huge_line"},
    ])
    proc = run(fake)
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert len(lines) == len(C_STRUCTURED.read_bytes().splitlines()) + 1
    huge = json.loads(lines[1])
    assert huge["type"] == "assistant" and huge["session_id"] == SID
    assert len(huge["message"]["content"][0]["text"].encode()) == size
    assert json.loads(lines[-1])["type"] == "result"
    # default size: 20 MiB
    lines = run(fake).stdout.splitlines()
    assert len(lines) == 2
    assert len(json.loads(lines[1])["message"]["content"][0]["text"]) == 20 * 1024 * 1024
    assert len(lines[1]) > 20 * 1024 * 1024


def test_no_result(tmp_path):
    fake = cc.make_fake_claude(tmp_path, [{"replay": str(C_STRUCTURED), "mode": "no_result"}])
    proc = run(fake)
    assert proc.returncode == 1
    types = [line["type"] for line in jlines(proc.stdout)]
    assert "result" not in types and len(types) == 6


def test_no_structured(tmp_path):
    fake = cc.make_fake_claude(tmp_path, [{"replay": str(C_STRUCTURED), "mode": "no_structured"}])
    proc = run(fake)
    assert proc.returncode == 0
    result = jlines(proc.stdout)[-1]
    assert result["type"] == "result" and result["is_error"] is False
    assert "structured_output" not in result
    assert list(result)[-3:] == ["terminal_reason", "fast_mode_state", "uuid"]


# --- emulated usage errors --------------------------------------------------------------

@pytest.mark.parametrize(("args", "message"), [
    (["-p", "hi", "--output-format", "stream-json"],
     "Error: When using --print, --output-format=stream-json requires --verbose"),
    (["-p", "hi", "--output-format", "stream-json", "--verbose", "--json-schema", "/tmp/schema.json"],
     "Error: --json-schema is not valid JSON"),
    (["-p", "hi", "--output-format", "stream-json", "--verbose", "--json-schema", "[1,2]"],
     "Error: --json-schema must be a JSON object"),
    (["-p", "--output-format", "stream-json", "--verbose", "--allowedTools", "Bash", "say hi"],
     "Error: Input must be provided either through stdin or as a prompt argument when using --print"),
])
def test_usage_errors_like_the_real_cli(tmp_path, simple_lines, args, message):
    fake = cc.make_fake_claude(tmp_path, [{"lines": simple_lines}])
    proc = run(fake, args)
    assert proc.returncode == 1 and proc.stdout == b""
    assert proc.stderr.decode().startswith(message)
    assert fake.last()["usage_error"].startswith(message)


def test_usage_check_can_be_disabled(tmp_path, simple_lines):
    fake = cc.make_fake_claude(tmp_path, [{"lines": simple_lines}], check_argv=False)
    proc = run(fake, ["-p", "hi", "--output-format", "stream-json"])
    assert proc.returncode == 0 and len(jlines(proc.stdout)) == 3


# --- builders match the real lines -------------------------------------------------------

def shape(value):
    """Field names and order, recursively, with scalar types (lists: first element)."""
    if isinstance(value, dict):
        return [(k, shape(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [shape(v) for v in value[:1]]
    return type(value).__name__


def test_builders_match_fixture_shapes():
    c = cc.fixture_lines("c_structured")
    so = c[6]["structured_output"]
    tool_use = c[2]["message"]["content"][0]
    assert shape(cc.init_line(SID, cwd="/srv/x")) == shape(c[0])
    assert shape(cc.assistant_text(SID, "Checking services.")) == shape(c[1])
    assert shape(cc.assistant_tool_use(SID, "Bash", tool_use["input"])) == shape(c[2])
    assert shape(cc.tool_result(SID, "toolu_x", "ok")) == shape(c[3])
    assert shape(cc.structured_output_ack(SID, "toolu_y")) == shape(c[5])
    assert shape(cc.result_success(SID, so, cost=0.203025)) == shape(c[6])
    built = cc.result_success(SID, so)
    assert built["result"] == c[6]["result"] and built["stop_reason"] == "tool_use"

    failing = cc.fixture_lines("b_tool_fails")
    [user] = [x for x in failing if x["type"] == "user"]
    err = cc.tool_result(SID, "toolu_z", "Exit code 3\nto-stdout\nto-stderr", is_error=True)
    assert shape(err) == shape(user) and err["tool_use_result"] == user["tool_use_result"]

    d = cc.fixture_lines("d_invalid_structured")[-1]
    built = cc.result_error(SID, "error_max_structured_output_retries", d["errors"])
    assert shape(built) == shape(d)
    g = cc.fixture_lines("g_max_turns_1")[-1]
    built = cc.result_error(SID, "error_max_turns", g["errors"][0], cost=0.5)
    assert shape(built) == shape(g) and built["terminal_reason"] == "max_turns"
    e = cc.fixture_lines("e_resume_unknown_id")[-1]
    built = cc.result_error(SID, "error_during_execution", e["errors"])
    assert shape(built) == shape(e) and built["stop_reason"] is None

    f500 = cc.fixture_lines("f_api_500")
    assert shape(cc.api_error_result(SID, 500, f500[-1]["result"])) == shape(f500[-1])
    assert shape(cc.synthetic_api_error(SID, "x")) == shape(f500[-2])
    assert shape(cc.api_retry(SID, 1)) == shape(f500[1])
    f529 = cc.fixture_lines("f_api_529")
    assert shape(cc.api_error_result(SID, None, "x")) == shape(f529[-1])

    for status, scenario in ((500, "f_api_500"), (529, "f_api_529"), (401, "f_api_401"), (400, "f_api_400")):
        real = cc.fixture_lines(scenario)
        built = cc.api_error_stream(SID, status)
        assert [shape(x) for x in built[1:]] == [shape(x) for x in real[1:]], scenario
        assert built[-1]["api_error_status"] == real[-1]["api_error_status"]
        assert built[-1]["result"] == real[-1]["result"]


def test_structured_stream_through_the_fake(tmp_path):
    real = cc.fixture_lines("c_structured")
    output = real[-1]["structured_output"]
    stream = cc.structured_stream(SID, output)
    assert [shape(x) for x in stream] == [shape(x) for x in real]
    fake = cc.make_fake_claude(tmp_path, [{"lines": stream}])
    lines = jlines(run(fake).stdout)
    assert lines == stream
    assert lines[-1]["result"] == real[-1]["result"]
    assert lines[4]["message"]["content"][0]["id"] == lines[5]["message"]["content"][0]["tool_use_id"]


def test_make_fake_claude_rejects_bad_stages(tmp_path):
    with pytest.raises(ValueError):
        cc.make_fake_claude(tmp_path, [{"mode": "explode"}])
    with pytest.raises(ValueError):
        cc.make_fake_claude(tmp_path, [{"line": []}])
    with pytest.raises(FileNotFoundError):
        cc.make_fake_claude(tmp_path, [{"replay": str(tmp_path / "missing.jsonl")}])
