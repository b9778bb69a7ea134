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
    assert as_json == {"ok": True, "file": str(good), "checks": 3, "hosts": 1, "interval_s": 300.0, "problems": [],
                       "extensions": {}}
    assert not (tmp_path / "home").exists()  # needs no database


def test_validate_reports_every_problem_at_its_line(tmp_path):
    bad = write(tmp_path, "checks.yaml", BAD)
    out = tierops(tmp_path, "checks", "validate", str(bad))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        f"{bad}:4: checks[0].tmeout: unknown key 'tmeout' (allowed: name, service, description, http, tcp, dns, "
        "tls, command, severity, timeout, max_ms, status, contains, method, headers, min_days, verify, env, runbook)",
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
    assert rows[0] == ["NAME", "SERVICE", "KIND", "TARGET", "SEVERITY", "TIMEOUT", "ORIGIN"]
    assert rows[1] == ["api-health", "api", "http", "https://api.example.com/healthz", "critical", "10s",
                       "checks.yaml:6"]
    assert rows[2] == ["db-port", "db", "tcp", "db.internal:5432", "warning", "3s", "checks.yaml:7"]
    assert rows[3] == ["disk", "host", "command", "df", "-h", "/", "warning", "10s", "checks.yaml:8"]
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


def test_extensions_checks_are_listed_with_their_origin_and_validated_with_their_file(tmp_path):
    main = write(tmp_path, "checks.yaml", "checks:\n  - {name: disk, service: host, command: 'true'}\n")
    infra = tmp_path / "repos" / "infra"
    (infra / "checks").mkdir(parents=True)
    (infra / "runbooks").mkdir()
    (infra / "runbooks" / "api.md").write_text("---\nservices: [api]\n---\n# API\n")
    web = infra / "checks" / "web.yaml"
    web.write_text("checks:\n  - name: api-health\n    service: api\n    http: http://127.0.0.1:1/healthz\n"
                   "    runbook: ../runbooks/api.md\n")
    env = {"TIEROPS_EXTENSIONS": f"{infra},{tmp_path / 'gone'}"}
    out = tierops(tmp_path, "checks", "list", str(main), env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["NAME", "SERVICE", "KIND", "TARGET", "SEVERITY", "TIMEOUT", "ORIGIN"]
    assert lines[1].split() == ["disk", "host", "command", "true", "warning", "10s", "checks.yaml:2"]
    assert lines[2].split() == ["infra/api-health", "api", "http", "http://127.0.0.1:1/healthz", "warning", "10s",
                                "extension", "infra", "(checks/web.yaml:2)"]
    assert out.stderr.strip() == (f"warning: extension gone: no such folder {tmp_path / 'gone'}; mount it or remove "
                                  "it from TIEROPS_EXTENSIONS")
    listed = json.loads(tierops(tmp_path, "checks", "list", "--json", env={**env, "TIEROPS_CHECKS": str(main)}).stdout)
    assert [(c["name"], c["origin"], c["extension"], c["file"]) for c in listed] == [
        ("disk", "checks.yaml:2", None, str(main)),
        ("infra/api-health", "extension infra (checks/web.yaml:2)", "infra", str(web))]
    assert listed[1]["runbook"] == str(infra.resolve() / "runbooks" / "api.md")
    # validate: a missing extension folder fails it (exit 2) with the folder named
    gone = tierops(tmp_path, "checks", "validate", str(main), env=env)
    assert gone.returncode == 2 and gone.stderr.strip() == (
        f"{tmp_path / 'gone'}: no such folder {tmp_path / 'gone'}; mount it or remove it from TIEROPS_EXTENSIONS")
    env = {"TIEROPS_EXTENSIONS": str(infra)}
    good = tierops(tmp_path, "checks", "validate", str(main), env=env)
    assert good.returncode == 0 and good.stdout.strip() == (
        f"{main}: 2 checks, 1 from extension infra, 0 hosts, no interval (the supervisor's schedule applies)")
    # an error in the extension's file: its own name and line, exit 2; the checks file itself is fine
    web.write_text(web.read_text().replace("../runbooks/api.md", "../runbooks/nope.md") + "interval: 5m\n")
    bad = tierops(tmp_path, "checks", "validate", str(main), env=env)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.splitlines() == [
        f"{web}:5: checks[0].runbook: no such file {infra.resolve() / 'runbooks' / 'nope.md'}; give the runbook's "
        "path relative to this checks file",
        f"{web}:6: interval: belongs to the operator's checks file (TIEROPS_CHECKS); an extension's checks file "
        "holds checks and hosts only"]
    as_json = json.loads(tierops(tmp_path, "checks", "validate", str(main), "--json", env=env).stdout)
    assert as_json["ok"] is False and [(p["file"], p["line"]) for p in as_json["problems"]] == [(str(web), 5),
                                                                                                (str(web), 6)]
    # list still runs the others: the broken file's checks are left out, with a warning naming the file
    listed = tierops(tmp_path, "checks", "list", str(main), env=env)
    assert listed.returncode == 0 and "infra/api-health" not in listed.stdout
    assert f"warning: extension checks file {web}:5:" in listed.stderr
