"""``tierops checks validate|list``, as subprocesses: exit 0 with a one-line summary,
or exit 2 with one ``FILE:LINE: message`` per problem; the file from FILE or TIEROPS_CHECKS."""

from __future__ import annotations

import json
import os
import resource
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.cli import forkserver
from tests.fakes.claude_control import REPO
from tests.probe.test_yamltext import laughs

GOOD = """\
interval: 5m
hosts:
  - name: web-1
    ssh: ops@web-1.internal
checks:
  - {name: api-health, service: api, http: "https://ops:pw123456@api.example.com/healthz", severity: critical}
  - {name: db-port, service: db, tcp: "db.internal:5432", timeout: 3}
  - {name: disk, service: host, command: "df -h /"}
"""
BAD = """\
checks:
  - name: api
    http: http://x/
    tmeout: 5
  - {name: api, tcp: "db:99999"}
"""


def tierops(tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120,
            preexec_fn: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "TIEROPS_CHECKS"}
    full = {**base, "PYTHONPATH": str(REPO), "TIEROPS_HOME": str(tmp_path / "home"), **(env or {})}
    return forkserver.run("app", args, env=full, cwd=tmp_path, timeout=timeout, text=True, preexec_fn=preexec_fn)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_validate_a_good_file(tmp_path):
    good = write(tmp_path, "checks.yaml", GOOD)
    out = tierops(tmp_path, "checks", "validate", str(good))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{good}: 3 checks, 1 hosts, interval 5m"
    as_json = json.loads(tierops(tmp_path, "checks", "validate", str(good), "--json").stdout)
    assert as_json == {"ok": True, "file": str(good), "checks": 3, "hosts": 1, "interval_s": 300.0, "problems": []}
    assert not (tmp_path / "home").exists()  # needs no database


def test_validate_reports_every_problem_at_its_line(tmp_path):
    bad = write(tmp_path, "checks.yaml", BAD)
    out = tierops(tmp_path, "checks", "validate", str(bad))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        f"{bad}:4: checks[0].tmeout: unknown key 'tmeout' (allowed: name, service, description, http, tcp, dns, "
        "tls, command, severity, timeout, max_ms, status, contains, method, headers, min_days, verify, env)",
        f"{bad}:5: checks[1].name: duplicate check name 'api' (first at line 2)",
        f"{bad}:5: checks[1].tcp: 'db:99999': the port must be a number from 1 to 65535",
    ]
    as_json = tierops(tmp_path, "checks", "validate", str(bad), "--json")
    assert as_json.returncode == 2
    assert [p["line"] for p in json.loads(as_json.stdout)["problems"]] == [4, 5, 5]


def test_validate_takes_the_file_from_the_environment(tmp_path):
    good = write(tmp_path, "env.yaml", GOOD.replace("interval: 5m\n", ""))
    out = tierops(tmp_path, "checks", "validate", env={"TIEROPS_CHECKS": str(good)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{good}: 3 checks, 1 hosts, no interval (the supervisor's schedule applies)"
    relative = tierops(tmp_path, "checks", "validate", env={"TIEROPS_CHECKS": "env.yaml"})
    assert relative.returncode == 0 and relative.stdout.startswith(f"{good}:")
    none = tierops(tmp_path, "checks", "validate")
    assert none.returncode == 2
    assert none.stderr.strip() == "tierops: error: no checks file: pass FILE or set TIEROPS_CHECKS"
    missing = tierops(tmp_path, "checks", "validate", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_list_shows_a_table_without_secrets(tmp_path):
    good = write(tmp_path, "checks.yaml", GOOD)
    out = tierops(tmp_path, "checks", "list", str(good))
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()]
    assert rows[0] == ["NAME", "SERVICE", "KIND", "TARGET", "SEVERITY", "TIMEOUT"]
    assert rows[1] == ["api-health", "api", "http", "https://api.example.com/healthz", "critical", "10s"]
    assert rows[2] == ["db-port", "db", "tcp", "db.internal:5432", "warning", "3s"]
    assert rows[3] == ["disk", "host", "command", "df", "-h", "/", "warning", "10s"]
    assert "pw123456" not in out.stdout
    listed = json.loads(tierops(tmp_path, "checks", "list", str(good), "--json").stdout)
    assert [(c["name"], c["line"]) for c in listed] == [("api-health", 6), ("db-port", 7), ("disk", 8)]
    bad = tierops(tmp_path, "checks", "list", str(write(tmp_path, "bad.yaml", BAD)))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 3


def test_probe_is_hidden_from_help(tmp_path):
    out = tierops(tmp_path, "--help")
    commands = [line.split()[0] for line in out.stdout.split("Commands:")[1].splitlines() if line.startswith("  ")]
    assert out.returncode == 0 and "checks" in commands and "probe" not in commands
    asked = tierops(tmp_path, "probe", "--help")
    assert asked.returncode == 0 and asked.stdout.startswith("Usage: tierops probe --checks FILE")


def _at_most_1_gib() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def test_validate_refuses_nested_aliases_within_bounded_memory(tmp_path):
    # A few hundred bytes standing for 10^8 nodes: run with 1 GiB of address space, so that a
    # loader that expands them fails here (MemoryError, or the timeout) instead of eating the host.
    bomb = write(tmp_path, "bomb.yaml", "checks:\n  - {name: a, tcp: 'db:1'}\nlaughs:\n" + laughs(indent="  "))
    out = tierops(tmp_path, "checks", "validate", str(bomb), timeout=60, preexec_fn=_at_most_1_gib)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.splitlines() == [f"{bomb}:5: found the alias *l0: YAML anchors and aliases are not accepted "
                                       "here (each would be expanded everywhere it is used); write the value out"]


def test_serve_refuses_a_broken_checks_file_without_quoting_its_secrets(tmp_path):
    """`serve` prints every problem before it refuses to start: a Bearer header value and a
    password mapping are named, never shown."""
    from tests.probe.test_inventory import FILE_SECRETS, SECRETS_FILE

    bad = write(tmp_path, "checks.yaml", SECRETS_FILE)
    out = tierops(tmp_path, "serve", "--checks", str(bad), "--port", "1", env={"TIEROPS_SCHEDULE": "false"})
    assert out.returncode == 2 and "has 9 problem(s)" in out.stderr, out.stderr
    assert "checks[0].headers: expected a mapping, got a string (not shown" in out.stderr
    for secret in FILE_SECRETS:
        assert secret not in out.stderr + out.stdout, secret
