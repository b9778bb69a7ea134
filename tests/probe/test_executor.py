"""``python -m app probe`` as the supervisor runs it: a real subprocess with the claude
CLI's flags, its stdout read by the repo's own parser, its report checked against the bundled
agent-response schema and ingested by ``tierops ingest``; a broken checks file, unknown flags and
SIGTERM."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from jsonschema import Draft202012Validator

from app.paths import DEFAULT_SCHEMA_PATH
from app.probe.checks import CheckResult
from app.probe.executor import build_report, checks_argument
from app.probe.inventory import CheckSpec
from app.stream.parser import AssistantLine, ResultLine, SystemLine, UserLine, parse_line
from app.vocab import Level, ServiceStatus
from tests.fakes.claude_control import REPO
from tests.probe.local_targets import HttpTarget, closed_port

CLAUDE_FLAGS = ["-p", "x", "--model", "m", "--output-format", "stream-json", "--verbose", "--json-schema", "{}",
                "--append-system-prompt", "y", "--allowedTools", "Read", "--max-turns", "3"]
AGENT_RESPONSE = Draft202012Validator(json.loads(DEFAULT_SCHEMA_PATH.read_text()))


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k != "TIEROPS_CHECKS"}
    return {**base, "PYTHONPATH": str(REPO), **extra}


def probe(cwd: Path, *args: str, environ: dict[str, str] | None = None,
          timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", "probe", *args], cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, env=environ or env(), timeout=timeout)


def lines(stdout: str) -> list[Any]:
    parsed = [parse_line(raw) for raw in stdout.splitlines()]
    assert all(p is not None for p in parsed)
    return parsed


def write_checks(tmp_path: Path, web: HttpTarget) -> Path:
    path = tmp_path / "checks.yaml"
    path.write_text(f"""\
interval: 1m
hosts:
  - {{name: web-1, ssh: ops@web-1.internal}}
checks:
  - {{name: api-health, service: api, http: "{web.url('/ok', userinfo='ops:s3cretpw')}", contains: healthy,
     severity: critical}}
  - {{name: api-errors, service: api, http: "{web.url('/fail')}", status: 200, severity: critical}}
  - {{name: db-port, service: db, tcp: "127.0.0.1:{closed_port()}"}}
  - {{name: resolver, service: dns, dns: localhost}}
  - {{name: disk, service: host, command: "echo used 42%", contains: "%"}}
  - {{name: batch, service: jobs, command: "echo queue length 12; exit 2", severity: info}}
""")
    return path


def test_a_run_prints_the_claude_stream_and_a_valid_report(tmp_path):
    with HttpTarget() as web:
        checks = write_checks(tmp_path, web)
        run = probe(tmp_path, "--checks", str(checks), *CLAUDE_FLAGS)
    assert run.returncode == 0, run.stderr
    assert "s3cretpw" not in run.stdout and "s3cretpw" not in run.stderr
    parsed = lines(run.stdout)
    init, uses, results, final = parsed[0], parsed[1:7], parsed[7:13], parsed[13]
    assert len(parsed) == 14

    assert isinstance(init, SystemLine) and init.subtype == "init"
    assert (init.model, init.cwd) == ("tierops-probe", str(tmp_path))
    assert init.tools == ["http", "tcp", "dns", "tls", "command"]
    assert (init.cli_version or "").startswith("tierops-probe ")
    sid = init.session_id
    assert sid and all(p.session_id == sid for p in parsed)
    assert len({p.data["uuid"] for p in parsed}) == len(parsed)

    assert all(isinstance(u, AssistantLine) for u in uses)
    calls = [u.tool_uses()[0] for u in uses]
    assert [(c["id"], c["name"], c["input"]["check"]) for c in calls] == [
        ("toolu_probe_1", "http", "api-health"), ("toolu_probe_2", "http", "api-errors"),
        ("toolu_probe_3", "tcp", "db-port"), ("toolu_probe_4", "dns", "resolver"),
        ("toolu_probe_5", "command", "disk"), ("toolu_probe_6", "command", "batch")]
    assert calls[0]["input"]["target"] == web.url("/ok") and calls[0]["input"]["service"] == "api"
    assert calls[0]["input"]["timeout_s"] == 10.0
    assert uses[0].message["usage"]["output_tokens"] == 0 and uses[0].message["model"] == "tierops-probe"

    assert all(isinstance(r, UserLine) for r in results)
    by_id = {r.tool_results()[0]["tool_use_id"]: r for r in results}
    assert sorted(by_id) == [f"toolu_probe_{n}" for n in range(1, 7)]
    failed = {by_id[c["id"]].data["tool_use_result"]["check"] for c in calls
              if by_id[c["id"]].tool_results()[0]["is_error"]}
    assert failed == {"api-errors", "db-port", "batch"}
    errors = by_id["toolu_probe_2"]
    assert errors.tool_results()[0]["content"].startswith("down: HTTP 500 in ")
    assert errors.data["tool_use_result"]["status_code"] == 500 and errors.data["timestamp"].endswith("Z")
    assert errors.data["tool_use_result"]["ok"] is False and errors.data["tool_use_result"]["status"] == "down"

    assert isinstance(final, ResultLine) and not final.is_error and final.subtype == "success"
    assert (final.total_cost_usd, final.num_turns, final.stop_reason) == (0.0, 6, "end_turn")
    assert final.usage == {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
                           "cache_read_input_tokens": 0}
    report = final.structured_output
    assert list(AGENT_RESPONSE.iter_errors(report)) == []
    assert final.result_text == report["summary"]
    assert report["summary"].startswith("6 checks: 3 passing, 3 failing (api-errors: HTTP 500 in ")
    assert [(e["level"], e["service"], e["key"]) for e in report["events"]] == [
        ("critical", "api", "check:api-errors"), ("warning", "db", "check:db-port"), ("info", "jobs", "check:batch")]
    assert report["events"][0]["message"].startswith("api-errors failing: HTTP 500 in ")
    esc = report["escalation"]
    assert esc["needed"] is True and esc["failed_checks"] == ["api-errors", "db-port", "batch"]
    assert esc["reason"] == "3 check(s) failing: api-errors, db-port, batch"
    assert len(esc["context"].splitlines()) == 3 and "status_code=500" in esc["context"]
    assert "queue length 12" in esc["context"]
    assert [(s["name"], s["check"], s["service"], s["status"]) for s in report["services_checked"]] == [
        ("api-health", "api-health", "api", "healthy"), ("api-errors", "api-errors", "api", "down"),
        ("db-port", "db-port", "db", "unreachable"), ("resolver", "resolver", "dns", "healthy"),
        ("disk", "disk", "host", "healthy"), ("batch", "batch", "jobs", "down")]
    assert all(isinstance(s["latency_ms"], float) for s in report["services_checked"])
    assert report["memories"] == []
    assert run.stderr.strip() .startswith("tierops probe: 6 checks, 3 failing")


def test_unknown_flags_are_ignored_and_stdin_is_never_read(tmp_path):
    checks = tmp_path / "c.yaml"
    checks.write_text("checks:\n  - {name: lh, dns: localhost}\n")
    extra = ["--add-dir", "/a", "/b", "--resume", "abc", "--append-system-prompt-file", "f", "--disallowedTools",
             "Bash", "--brand-new-flag", "--another=1", "-z", "-h", "--help", "--version", "--", "trailing"]
    args = ["--append-system-prompt", "--checks", "--checks", str(checks), *CLAUDE_FLAGS, *extra]
    # stdin is an open pipe nobody writes to: reading it would hang until the timeout
    proc = subprocess.Popen([sys.executable, "-m", "app", "probe", *args], cwd=tmp_path, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    final = lines(out)[-1]
    assert isinstance(final, ResultLine) and final.structured_output["summary"] == "1 checks: 1 passing, 0 failing"


def test_the_checks_file_from_the_environment(tmp_path):
    checks = tmp_path / "c.yaml"
    checks.write_text("checks:\n  - {name: lh, dns: localhost}\n")
    run = probe(tmp_path, *CLAUDE_FLAGS, environ=env(TIEROPS_CHECKS=str(checks)))
    assert run.returncode == 0 and lines(run.stdout)[-1].structured_output["services_checked"][0]["name"] == "lh"


def test_a_broken_checks_file_is_a_failed_result(tmp_path):
    bad = tmp_path / "checks.yaml"
    bad.write_text("checks:\n  - {name: a, tcp: 'db:1', tmeout: 3}\n  - {name: a, dns: localhost}\n")
    run = probe(tmp_path, "--checks", str(bad), *CLAUDE_FLAGS)
    assert run.returncode == 1
    parsed = lines(run.stdout)
    assert [p.type for p in parsed] == ["system", "result"]
    final = parsed[1]
    assert final.is_error and final.subtype == "success" and not final.has_structured_output
    assert final.result_text.splitlines() == [
        f"{bad}:2: checks[0].tmeout: unknown key 'tmeout' (allowed: name, service, description, http, tcp, dns, "
        "tls, command, severity, timeout, max_ms, status, contains, method, headers, min_days, verify, env, runbook)",
        f"{bad}:3: checks[1].name: duplicate check name 'a' (first at line 2)"]
    assert f"{bad}:2:" in run.stderr
    for content, why in [("checks: []\n", "the list is empty"), (None, "no such file")]:
        path = tmp_path / "other.yaml"
        if content is not None:
            path.write_text(content)
        elif path.exists():
            path.unlink()
        out = probe(tmp_path, "--checks", str(path), *CLAUDE_FLAGS)
        assert out.returncode == 1 and why in lines(out.stdout)[-1].result_text
    none = probe(tmp_path, *CLAUDE_FLAGS)
    assert none.returncode == 1
    assert "pass --checks FILE or set TIEROPS_CHECKS" in lines(none.stdout)[-1].result_text


def test_the_stream_is_ingested_like_any_session(tmp_path):
    with HttpTarget() as web:
        run = probe(tmp_path, "--checks", str(write_checks(tmp_path, web)), *CLAUDE_FLAGS)
    stream = tmp_path / "stdout.jsonl"
    stream.write_text(run.stdout)
    ingest = subprocess.run([sys.executable, "-m", "app", "ingest", str(stream), "--json", "--no-progress"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env=env(TIEROPS_HOME=str(tmp_path / "home")))
    assert ingest.returncode == 0, ingest.stderr
    report = json.loads(ingest.stdout)
    assert (report["status"], report["source"], report["validation"]["valid"]) == ("completed", "structured_output",
                                                                                  True)
    assert report["cost_usd"] == 0 and report["num_turns"] == 6 and report["activity_count"] == 14
    assert [(e["level"], e["service"]) for e in report["events"]] == [("critical", "api"), ("warning", "db"),
                                                                     ("info", "jobs")]
    assert {(s["name"], s["status"]) for s in report["services_checked"]} == {
        ("api-health", "healthy"), ("api-errors", "down"), ("db-port", "unreachable"), ("resolver", "healthy"),
        ("disk", "healthy"), ("batch", "down")}
    assert report["escalation"]["needed"] is True


def test_sigterm_stops_it_and_kills_running_commands(tmp_path):
    pidfile = tmp_path / "child.pid"
    checks = tmp_path / "c.yaml"
    checks.write_text(f"checks:\n  - {{name: hang, command: 'sleep 120 & echo $! > {pidfile}; wait', timeout: 5m}}\n"
                      "  - {name: lh, dns: localhost}\n")
    proc = subprocess.Popen([sys.executable, "-m", "app", "probe", "--checks", str(checks), *CLAUDE_FLAGS],
                            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env())
    try:
        deadline = time.monotonic() + 30
        while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pidfile.read_text())
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert time.monotonic() - started < 5
    assert proc.returncode == 128 + signal.SIGTERM and "stopped by SIGTERM" in err
    assert [p.type for p in lines(out)][:3] == ["system", "assistant", "assistant"]
    assert "result" not in [p.type for p in lines(out)]
    with contextlib.suppress(psutil.NoSuchProcess):
        assert psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_checks_argument():
    assert checks_argument(["--checks", "a.yaml", "-p", "x"]) == "a.yaml"
    assert checks_argument(["-p", "x", "--checks=b.yaml"]) == "b.yaml"
    assert checks_argument(["--append-system-prompt", "--checks", "--checks", "c.yaml"]) == "c.yaml"
    assert checks_argument(["-p", "--checks", "d.yaml"]) == "d.yaml"  # -p without a prompt (on stdin)
    assert checks_argument(["-p", "x", "--", "--checks", "e.yaml"]) is None
    assert checks_argument(["--checks"]) is None and checks_argument([]) is None


def result(name: str, severity: Level, ok: bool, status: ServiceStatus) -> tuple[CheckSpec, CheckResult]:
    spec = CheckSpec(name=name, service="svc", kind="tcp", target="db:1", severity=severity)
    return spec, CheckResult(name=name, service="svc", kind="tcp", severity=severity, ok=ok, status=status,
                             latency_ms=None, summary=f"{name} said so", evidence={"error": "x"})


def test_only_warning_or_critical_failures_escalate():
    pairs = [result("a", Level.INFO, False, ServiceStatus.DOWN), result("b", Level.CRITICAL, True,
                                                                          ServiceStatus.HEALTHY)]
    report = build_report([s for s, _ in pairs], [r for _, r in pairs])
    assert list(AGENT_RESPONSE.iter_errors(report)) == []
    assert report["escalation"] == {"needed": False, "reason": "1 check(s) failing: a",
                                    "context": "a (svc; tcp db:1; info) down: a said so | error=x",
                                    "failed_checks": ["a"]}
    healthy = build_report([pairs[1][0]], [pairs[1][1]])
    assert healthy["escalation"] == {"needed": False, "reason": None, "context": None, "failed_checks": []}
    assert healthy["events"] == [] and healthy["summary"] == "1 checks: 1 passing, 0 failing"
    many = [result(f"c{i}", Level.WARNING, False, ServiceStatus.UNREACHABLE) for i in range(8)]
    summary = build_report([s for s, _ in many], [r for _, r in many])["summary"]
    assert summary.startswith("8 checks: 0 passing, 8 failing (c0: c0 said so;") and summary.endswith("; +3 more)")


def test_checks_the_probe_could_not_run_are_its_error_not_failures():
    spec, ok = result("up", Level.CRITICAL, True, ServiceStatus.HEALTHY)
    down_spec, down = result("down", Level.WARNING, False, ServiceStatus.DOWN)
    lost_spec = CheckSpec(name="lost", service="svc", kind="tcp", target="db:1", severity=Level.CRITICAL)
    lost = CheckResult(name="lost", service="svc", kind="tcp", severity=Level.CRITICAL, ok=False,
                       status=ServiceStatus.UNREACHABLE, latency_ms=None, summary="not checked: out of descriptors",
                       probe_error="out of descriptors")
    report = build_report([spec, down_spec, lost_spec], [ok, down, lost])
    assert list(AGENT_RESPONSE.iter_errors(report)) == []
    assert [s["name"] for s in report["services_checked"]] == ["up", "down"]  # "lost" neither passes nor fails
    assert [e["key"] for e in report["events"]] == ["check:down"] and report["escalation"]["failed_checks"] == ["down"]
    assert report["error"] == "probe error: 1 of 3 checks not checked (lost): out of descriptors"
    assert report["summary"] == ("3 checks: 1 passing, 1 failing, 1 not checked (down: down said so). "
                                 "Probe error: 1 of 3 checks not checked (lost): out of descriptors")
    assert "error" not in build_report([spec], [ok])
