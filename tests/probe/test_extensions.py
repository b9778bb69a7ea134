"""Extensions: what a folder brings, its checks merged under prefixed names with their origin, a
checks entry's ``runbook:`` held to its rules, and a broken extension reported without stopping
the others."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.probe.executor import extension_arguments
from app.probe.extensions import discover, load_merged
from app.probe.inventory import InventoryError, load_inventory
from app.probe.inventory_rules import RUNBOOK_MAX_BYTES
from tests.fakes.claude_control import REPO

MAIN = "checks:\n  - {name: disk, service: host, command: 'true'}\n"
WEB = """\
hosts:
  - {name: web-1, ssh: ops@web-1.internal}
checks:
  - name: api-health
    service: api
    http: http://127.0.0.1:1/healthz
    runbook: ../runbooks/api.md
  - {name: db-port, service: db, tcp: "127.0.0.1:5432"}
"""


def extension(root: Path, name: str, files: dict[str, str]) -> Path:
    folder = root / name
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def skill(description: str = "restart the API safely", extra: str = "") -> str:
    return f"---\ndescription: {description}\n{extra}---\nSteps.\n"


def test_checks_are_merged_with_prefixed_names_and_their_origin(tmp_path):
    main = tmp_path / "checks.yaml"
    main.write_text(MAIN)
    infra = extension(tmp_path, "infra", {"checks/web.yaml": WEB, "runbooks/api.md": "---\nservices: [api]\n---\n"})
    extension(tmp_path, "storage", {"checks/disk.yml": "checks:\n  - {name: disk, tcp: '127.0.0.1:9'}\n"})
    merged = load_merged(main, [infra, tmp_path / "storage"])
    inv = merged.inventory
    assert inv is not None and merged.errors == () and merged.problems() == []
    assert [(c.name, c.service, c.extension, c.origin) for c in inv.checks] == [
        ("disk", "host", None, "checks.yaml:2"),
        ("infra/api-health", "api", "infra", "extension infra (checks/web.yaml:4)"),
        ("infra/db-port", "db", "infra", "extension infra (checks/web.yaml:8)"),
        ("storage/disk", "disk", "storage", "extension storage (checks/disk.yml:2)"),  # services stay as written
    ]
    assert inv.checks[1].runbook == str((infra / "runbooks" / "api.md").resolve())
    assert [(h.name, h.extension) for h in inv.hosts] == [("infra/web-1", "infra")]
    assert merged.counts == {"infra": (2, 1), "storage": (1, 0)}
    assert inv.path == main and load_inventory(main).checks == inv.checks[:1]


def test_a_broken_extension_is_reported_and_the_others_still_count(tmp_path):
    main = tmp_path / "checks.yaml"
    main.write_text(MAIN)
    good = extension(tmp_path, "good", {"checks/a.yaml": "checks:\n  - {name: a, command: 'true'}\n"})
    bad = extension(tmp_path, "bad", {
        "checks/ok.yaml": "checks:\n  - {name: fine, command: 'true'}\n",
        "checks/broken.yaml": "interval: 10s\nchecks:\n  - name: x\n    tcp: 'db:99999'\n    tmeout: 3\n",
        "checks/yaml.yaml": "checks: [\n"})
    twin = extension(tmp_path / "elsewhere", "good", {"checks/a.yaml": "checks:\n  - {name: b, command: 'true'}\n"})
    merged = load_merged(main, [tmp_path / "missing", good, bad, twin, main])
    assert [c.name for c in merged.inventory.checks] == ["disk", "good/a", "bad/fine"]
    by_file = {err.path.name: str(err) for err in merged.errors}
    assert set(by_file) == {"broken.yaml", "yaml.yaml"}
    broken = bad / "checks" / "broken.yaml"
    assert by_file["broken.yaml"].splitlines() == [
        f"{broken}:1: interval: belongs to the operator's checks file (TIEROPS_CHECKS); an extension's checks file "
        "holds checks and hosts only",
        f"{broken}:4: checks[0].tcp: 'db:99999': the port must be a number from 1 to 65535",
        f"{broken}:5: checks[0].tmeout: unknown key 'tmeout' (allowed: name, service, description, http, tcp, dns, "
        "tls, command, severity, timeout, max_ms, status, contains, method, headers, min_days, verify, env, runbook)",
    ]
    assert by_file["yaml.yaml"].startswith(f"{bad / 'checks' / 'yaml.yaml'}:2: YAML syntax error")
    usable = {e.path: (e.usable, e.problems) for e in merged.extensions}
    assert usable[(tmp_path / "missing").absolute()] == (False, [
        f"no such folder {tmp_path / 'missing'}; mount it or remove it from TIEROPS_EXTENSIONS"])
    assert usable[twin][0] is False and "another extension is already named 'good'" in usable[twin][1][0]
    assert usable[main][1] == [f"{main} is not a folder; TIEROPS_EXTENSIONS lists folders"]
    problems = merged.problems()
    assert any(p.startswith("extension missing: no such folder") for p in problems)
    assert any(p.startswith(f"extension checks file {broken}:4:") for p in problems)


def test_a_check_name_repeated_across_an_extensions_files_is_an_error_at_the_second(tmp_path):
    ext = extension(tmp_path, "infra", {"checks/a.yaml": "checks:\n  - {name: api, command: 'true'}\n",
                                        "checks/b.yaml": "checks:\n  - {name: x, command: 'true'}\n"
                                                         "  - {name: api, command: 'true'}\n"})
    merged = load_merged(None, [ext])
    assert merged.inventory is None and merged.counts == {"infra": (1, 0)}
    assert [str(e) for e in merged.errors] == [
        f"{ext / 'checks' / 'b.yaml'}:3: checks[1].name: duplicate check name 'api' (first in checks/a.yaml:2)"]


@pytest.mark.parametrize("runbook, words", [
    ("../../outside.md", "leaves the extension's folder"),
    ("/etc/hostname", "an extension names its runbook by a path relative to this file"),
    ("../runbooks/nope.md", "no such file"),
    ("../runbooks", "is a folder; name the runbook file itself"),
    ("../runbooks/big.md", f"bytes; a runbook is at most {RUNBOOK_MAX_BYTES // 1024} KiB"),
    ("ftp://example.com/rb.md", "is not an http:// or https:// URL"),
])
def test_a_runbook_entry_is_checked_at_load_time_with_its_line(tmp_path, runbook, words):
    (tmp_path / "outside.md").write_text("x")
    ext = extension(tmp_path, "infra", {
        "checks/web.yaml": f"checks:\n  - name: api\n    command: 'true'\n    runbook: {runbook}\n",
        "runbooks/big.md": "x" * (RUNBOOK_MAX_BYTES + 1)})
    merged = load_merged(None, [ext])
    assert len(merged.errors) == 1 and len(merged.errors[0].problems) == 1
    problem = merged.errors[0].problems[0]
    assert problem.line == 4 and problem.message.startswith("checks[0].runbook: ") and words in problem.message


def test_the_checks_files_runbook_may_be_a_url_or_any_readable_file(tmp_path):
    (tmp_path / "rb").mkdir()
    (tmp_path / "rb" / "api.md").write_text("# API\n")
    main = tmp_path / "etc" / "checks.yaml"
    main.parent.mkdir()
    main.write_text("checks:\n  - {name: a, command: 'true', runbook: ../rb/api.md}\n"
                    "  - {name: b, command: 'true', runbook: 'https://wiki.example.com/b'}\n"
                    "  - {name: c, command: 'true', runbook: missing.md}\n")
    with pytest.raises(InventoryError) as exc:
        load_inventory(main)
    assert str(exc.value) == (f"{main}:4: checks[2].runbook: no such file {main.parent / 'missing.md'}; give the "
                              "runbook's path relative to this checks file")
    main.write_text(main.read_text().splitlines()[0] + "\n" + main.read_text().splitlines()[1] + "\n"
                    + main.read_text().splitlines()[2] + "\n")
    inv = load_inventory(main)
    assert [c.runbook for c in inv.checks] == [str((tmp_path / "rb" / "api.md").resolve()),
                                               "https://wiki.example.com/b"]


def test_discovery_lists_runbooks_skills_and_mcp_and_refuses_skills_that_ask_for_power(tmp_path):
    ext = extension(tmp_path, "infra", {
        "runbooks/api.md": "---\nservices: [api]\n---\n",
        "mcp.json": "{}",
        "skills/restart-api/SKILL.md": skill(),
        "skills/restart-api/scripts/run.sh": "echo",
        "skills/no-front/SKILL.md": "just text\n",
        "skills/tools/SKILL.md": skill(extra="allowed-tools: Bash(rm *)\nhooks: {}\n"),
        "skills/empty/README.md": "x",
        "skills/bad name!/SKILL.md": skill(),
    })
    os.symlink(tmp_path / "elsewhere.md", ext / "skills" / "empty" / "SKILL.md")
    (found,) = discover([ext])
    assert found.usable and found.runbooks_dir == ext / "runbooks" and found.mcp_config == ext / "mcp.json"
    assert [(s.name, s.description, found.skill_folder(s)) for s in found.skills] == [
        ("restart-api", "restart the API safely", "infra-restart-api")]
    assert sorted(found.problems) == [
        "skill bad name!: its folder name must be 1-64 letters, digits, '.', '_' or '-'; left out",
        "skill empty: no SKILL.md file in its folder; left out",
        "skill no-front: SKILL.md needs a front matter with a description (the CLI takes nothing else for a "
        "skill); left out",
        "skill tools: its front matter asks for allowed-tools, hooks; an extension's skill may only describe "
        "itself (argument-hint, description, license, metadata, name, version, when_to_use): tool rules and hooks "
        "are TierOps' own; left out",
    ]
    (empty,) = discover([extension(tmp_path, "bare", {"README.md": "x"})])
    assert empty.usable and empty.problems == ["brings nothing: no checks/*.yaml, runbooks/, skills/ or mcp.json"]


def test_the_probe_runs_the_extensions_checks_given_as_arguments(tmp_path):
    """``tierops probe --checks F --extension D``: the extension's checks run under their prefixed
    names; a broken extension is told on stderr and the run goes on."""
    assert extension_arguments(["--checks", "c", "--extension", "/a", "-p", "--model", "--extension",
                                "--extension=/b", "--", "--extension", "/c"]) == ["/a", "/b"]
    main = tmp_path / "checks.yaml"
    main.write_text("checks:\n  - {name: local, command: 'true'}\n")
    infra = extension(tmp_path, "infra", {"checks/web.yaml": "checks:\n  - {name: web, command: 'exit 3'}\n"})
    broken = extension(tmp_path, "broken", {"checks/x.yaml": "checks: [\n"})
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIEROPS_")}
    out = subprocess.run([sys.executable, "-m", "app", "probe", "--checks", str(main), "--extension", str(infra),
                          "--extension", str(broken), "-p", "--model", "tierops-probe"], cwd=tmp_path,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                         env={**env, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    checked = {c["name"]: c["status"] for c in result["structured_output"]["services_checked"]}
    assert checked == {"local": "healthy", "infra/web": "down"}
    assert f"tierops probe: extension checks file {broken / 'checks' / 'x.yaml'}:2: YAML syntax error" in out.stderr
