"""Tier 0 holds no secrets: a command check runs with a minimal environment (plus what its
``env:`` names), and the probe is started with the CLI's environment less every credential of
the CLI and of TierOps, with a HOME of its own. The command checks here are real ``/bin/sh``
processes; the key is printed reversed, which redaction cannot recognise."""

from __future__ import annotations

import stat
from pathlib import Path

from app.probe.checks import run_check
from app.probe.environment import PROBE_HOME, command_environment, named_variables, probe_environment
from app.probe.inventory import CheckSpec

KEY = "sk-ant-api03-probe-test-0123456789abcdef"
PG = "pg-s3cret-horse-battery"


def command(target: str, **kw: object) -> CheckSpec:
    return CheckSpec(name="c", service="svc", kind="command", target=target, **kw)  # type: ignore[arg-type]


async def test_a_command_never_sees_the_cli_credentials_even_transformed(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", "oauth-" + KEY)
    monkeypatch.setenv("TIEROPS_TOKEN", "dashboard-" + KEY)
    monkeypatch.setenv("PGPASSWORD", PG)
    r = await run_check(command("""bash -c 'rev <<< "$ANTHROPIC_API_KEY$CLAUDE_CODE_OAUTH_TOKEN$TIEROPS_TOKEN"'; """
                                "env | cut -d= -f1 | sort | tr '\\n' ' '; echo"))
    assert r.ok, r
    shown = r.evidence["output_tail"]
    assert KEY[::-1][:12] not in shown and "ANTHROPIC" not in shown and "CLAUDE_CODE" not in shown
    assert "PGPASSWORD" not in shown  # not named by this check
    names = set(shown.split())
    assert names <= {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "PWD", "SHLVL", "_", "TIEROPS_PROBE_CHECK",
                     "TIEROPS_SERVE_URL", "TIEROPS_SERVE_HOST", "TIEROPS_SERVE_PORT", "OLDPWD"}, names


async def test_a_variable_the_check_names_is_given_to_it(monkeypatch):
    monkeypatch.setenv("PGPASSWORD", PG)
    r = await run_check(command("""bash -c 'rev <<< "$PGPASSWORD"'""", env=("PGPASSWORD", "NOT_SET")))
    assert r.ok and PG[::-1] in r.evidence["output_tail"], r  # explicitly named: the operator's choice


def test_the_minimal_environment_of_a_command():
    source = {"PATH": "/usr/bin", "HOME": "/var/lib/tierops/probe-home", "LANG": "C.UTF-8", "TZ": "UTC",
              "LC_ALL": "C", "TIEROPS_SERVE_URL": "http://127.0.0.1:8080", "ANTHROPIC_API_KEY": KEY,
              "CLAUDE_CODE_USE_BEDROCK": "1", "TIEROPS_TOKEN": "t" * 20, "AWS_SECRET_ACCESS_KEY": "a" * 40,
              "PGPASSWORD": PG, "EDITOR": "vi"}
    assert command_environment(source=source) == {
        "PATH": "/usr/bin", "HOME": "/var/lib/tierops/probe-home", "LANG": "C.UTF-8", "TZ": "UTC", "LC_ALL": "C",
        "TIEROPS_SERVE_URL": "http://127.0.0.1:8080"}
    named = command_environment(["PGPASSWORD", "ANTHROPIC_API_KEY", "MISSING"], source)
    assert named["PGPASSWORD"] == PG and "ANTHROPIC_API_KEY" not in named and "MISSING" not in named
    assert command_environment(source={})["PATH"]  # a PATH whatever happens


def test_the_probe_is_started_without_credentials_and_with_a_home_of_its_own(tmp_path: Path):
    cli_home = tmp_path / "state" / "home"
    cli_home.mkdir(parents=True)
    checks = tmp_path / "checks.yaml"
    checks.write_text("checks:\n  - {name: pg, command: pg_isready, env: [PGPASSWORD, PGHOST]}\n"
                      "  - {name: lh, dns: localhost}\n")
    # what launch.child_env gives the CLI (TIEROPS_CHILD_ENV_ALLOW=HTTPS_PROXY,SSL_CERT_FILE,MY_TOKEN),
    # plus what session.py adds for tier 0
    cli_env = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "TZ": "UTC", "HOME": str(cli_home),
               "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "CLAUDE_CODE_OAUTH_TOKEN": "o" * 20,
               "HTTPS_PROXY": "http://ops:pr0xy-pass@proxy:3128", "SSL_CERT_FILE": "/etc/ssl/ca.pem",
               "MY_TOKEN": "m" * 20, "PYTHONPATH": "/opt/tierops", "TIEROPS_SERVE_PORT": "9000"}
    supervisor_env = {**cli_env, "PGPASSWORD": PG, "PGHOST": "db", "TIEROPS_TOKEN": "t" * 20, "OTHER": "x"}
    env = probe_environment(cli_env, supervisor_env, str(checks))
    assert env == {"PATH": "/usr/bin", "LANG": "C.UTF-8", "TZ": "UTC", "HOME": str(tmp_path / "state" / PROBE_HOME),
                   "SSL_CERT_FILE": "/etc/ssl/ca.pem", "PYTHONPATH": "/opt/tierops", "TIEROPS_SERVE_PORT": "9000",
                   "PGPASSWORD": PG, "PGHOST": "db"}
    home = Path(env["HOME"])
    assert home.is_dir() and stat.S_IMODE(home.stat().st_mode) == 0o700
    # no checks file, or one that cannot be used: nothing named (the probe reports the file itself)
    assert "PGPASSWORD" not in probe_environment(cli_env, supervisor_env, None)
    broken = tmp_path / "broken.yaml"
    broken.write_text("checks: [\n")
    assert named_variables(broken) == frozenset() and named_variables(None) == frozenset()
    assert named_variables(checks) == {"PGPASSWORD", "PGHOST"}
