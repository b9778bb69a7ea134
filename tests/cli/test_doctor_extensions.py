"""``tierops doctor`` on extensions and the runbooks folder: one line per extension with what it
brings; an extension checks file `checks validate` refuses fails the doctor, everything else an
extension gets wrong is a warning naming it; through the command once."""

from __future__ import annotations

from pathlib import Path

from app.cli.doctor_extensions import check_extensions
from app.config import Settings
from tests.cli.test_doctor import doctor, lines_by_check


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_each_extension_is_one_line_saying_what_it_brings_and_what_is_wrong(tmp_path):
    main = write(tmp_path / "checks.yaml", "checks:\n  - {name: disk, command: 'true'}\n")
    infra = tmp_path / "infra"
    write(infra / "checks" / "web.yaml", "hosts: [{name: web-1}]\nchecks:\n  - {name: api, command: 'true'}\n")
    write(infra / "runbooks" / "api.md", "---\nservices: [api]\n---\n")
    write(infra / "skills" / "restart-api" / "SKILL.md", "---\ndescription: restart\n---\n")
    write(infra / "mcp.json", "{}")
    broken = tmp_path / "broken"
    bad_file = write(broken / "checks" / "bad.yaml", "checks:\n  - {name: x, tcp: 'db:0'}\n")
    write(broken / "runbooks" / "notes.md", "no front matter\n")
    write(tmp_path / "runbooks" / "db.md", "---\nservices: [db]\n---\n")
    settings = Settings(db=tmp_path / "t.db", checks=main, runbooks=tmp_path / "runbooks",
                        extensions=f"{infra},{broken},{tmp_path / 'gone'}")
    found = {c.name: (c.status, c.detail) for c in check_extensions(settings)}
    assert found["extension infra"] == ("ok", f"{infra}: 1 check, 1 host, 1 runbook, 1 skill (infra-restart-api), "
                                              "mcp.json")
    status, detail = found["extension broken"]
    assert status == "fail" and detail.startswith(f"{broken}: 0 checks, 0 hosts, 0 runbooks, 0 skills, no mcp.json; "
                                                  "its checks files have problems (their checks do not run): "
                                                  f"{bad_file}:2: checks[0].tcp:")
    assert "see `tierops checks validate`; runbook runbooks/notes.md:1: no front matter" in detail
    assert found["extension gone"] == ("warn", f"{tmp_path / 'gone'}: not used; no such folder {tmp_path / 'gone'}; "
                                               "mount it or remove it from TIEROPS_EXTENSIONS")
    assert found["runbooks"] == ("ok", f"{tmp_path / 'runbooks'}: 1 runbook(s)")
    # without a checks file, an extension's checks run nowhere: said so
    idle = Settings(db=tmp_path / "t.db", extensions=str(infra))
    ((status, detail),) = [(c.status, c.detail) for c in check_extensions(idle)]
    assert status == "warn" and detail.endswith("its checks do not run: they join a checks file, and TIEROPS_CHECKS "
                                                "is not set")


def test_the_doctor_command_fails_for_a_broken_extension_checks_file(tmp_path):
    ext = tmp_path / "infra"
    write(ext / "checks" / "web.yaml", "checks:\n  - {name: api, command: 'true'}\n  - {name: api, command: 'x'}\n")
    out = doctor(tmp_path, env={"TIEROPS_EXTENSIONS": str(ext), "TIEROPS_CLAUDE_BIN": "/nonexistent/claude"})
    assert out.returncode == 1
    line = next(li for li in out.stdout.splitlines() if "extension infra" in li)
    assert line.startswith("fail  extension infra") and "duplicate check name 'api'" in line
    assert "extensions" not in lines_by_check(out.stdout)  # listed one by one instead
