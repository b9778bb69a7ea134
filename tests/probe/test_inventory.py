"""The checks file: the documented example loads; every kind of mistake is reported
at its ``FILE:LINE``, all at once; the prompt view hides secrets and stays small."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app.paths import BUNDLED_DIR
from app.probe.inventory import CheckSpec, Host, InventoryError, inventory_text, load_inventory
from app.probe.inventory_rules import Problem
from app.probe.targets import DURATION_PATTERN, NAME_PATTERN, format_duration, parse_duration, split_host_port
from app.vocab import Level
from tests.probe.test_yamltext import laughs

EXAMPLE = """\
interval: 5m                  # tier-0 cycle interval (optional; "30s", "5m", "1h", "1h30m" or a number of seconds; min 10s)
hosts:                        # optional: what the language-model tiers may reach, and how
  - name: web-1
    ssh: ops@web-1.internal
checks:
  - name: api-health          # unique
    service: api
    http: http://127.0.0.1:8000/healthz
    status: 200               # default: any 2xx/3xx
    contains: ok              # optional body substring
    max_ms: 500               # optional latency bound
    severity: critical        # info | warning | critical (default warning)
  - {name: db-port, service: db, tcp: "127.0.0.1:5432"}
  - {name: resolver, service: dns, dns: example.internal}
  - {name: cert, service: api, tls: "api.example.com:443", min_days: 14}
  - {name: disk, service: host, command: "test $(df --output=pcent / | tail -1 | tr -dc 0-9) -lt 90"}
"""


def write(tmp_path: Path, text: str, name: str = "checks.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def problems(path: Path) -> list[str]:
    """The error's lines, ``FILE:`` removed: ``12: checks[2]...``."""
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    text = str(caught.value)
    assert all(line.startswith(f"{path}:") for line in text.splitlines()), text
    return [line.removeprefix(f"{path}:") for line in text.splitlines()]


def test_the_documented_example_loads(tmp_path):
    path = write(tmp_path, EXAMPLE)
    inv = load_inventory(path)
    assert inv.path == path and inv.interval_s == 300
    assert inv.hosts == (Host(name="web-1", ssh="ops@web-1.internal", description=None),)
    assert [(c.name, c.service, c.kind) for c in inv.checks] == [
        ("api-health", "api", "http"), ("db-port", "db", "tcp"), ("resolver", "dns", "dns"),
        ("cert", "api", "tls"), ("disk", "host", "command")]
    api = inv.checks[0]
    assert api == CheckSpec(name="api-health", service="api", kind="http", target="http://127.0.0.1:8000/healthz",
                            severity=Level.CRITICAL, timeout_s=10.0, expect_status=(200,), contains="ok",
                            max_ms=500.0, min_days=None, verify=True, method="GET", headers=(), description=None,
                            line=6)
    db, _, cert, disk = inv.checks[1:]
    assert (db.severity, db.timeout_s, db.expect_status, db.line) == (Level.WARNING, 10.0, (), 13)
    assert cert.min_days == 14 and cert.verify is True
    assert disk.target.startswith("test $(df") and disk.contains is None


def test_defaults_and_extras(tmp_path):
    inv = load_inventory(write(tmp_path, """\
hosts:
  - {name: db-1, description: primary database}
checks:
  - name: home
    description: the landing page
    http: https://example.com/
    method: HEAD
    headers: {X-Probe: tierops}
    status: [200, 204]
    verify: false
    timeout: 1m30s
  - {name: self-signed, tls: internal.example, verify: false, timeout: 500ms}
  - {name: plain, tcp: "[::1]:22", timeout: 2.5, max_ms: 50}
"""))
    assert inv.interval_s is None and inv.hosts[0] == Host("db-1", None, "primary database")
    home, tls, plain = inv.checks
    assert (home.service, home.method, home.headers, home.expect_status) == ("home", "HEAD", (("X-Probe", "tierops"),),
                                                                              (200, 204))
    assert (home.verify, home.timeout_s, home.description) == (False, 90.0, "the landing page")
    assert (tls.target, tls.min_days, tls.timeout_s, tls.verify) == ("internal.example", 14.0, 0.5, False)
    assert (plain.timeout_s, plain.max_ms, plain.min_days) == (2.5, 50.0, None)


def test_every_mistake_at_its_line_all_at_once(tmp_path):
    path = write(tmp_path, """\
interval: 5s
hosts:
  - name: web-1
    sh: ops@web-1
checks:
  - name: api
    http: http://127.0.0.1/
    tmeout: 5
    severity: fatal
  - service: db
    tcp: "127.0.0.1:5432"
  - {name: api, dns: localhost}
  - {name: two, dns: localhost, tcp: "db:5432"}
  - {name: none}
  - {name: slow, tcp: "db:5432", timeout: 10 sec}
  - {name: long, tcp: "db:5432", timeout: 2h}
  - {name: port, tcp: "db:99999"}
  - {name: noport, tcp: "db"}
  - {name: ftp, http: "ftp://files.example/"}
  - {name: kind, tcp: "db:1", status: 200, min_days: 3}
  - {name: "bad name!", command: "true"}
  - name: keys
    name: again
    command: "true"
""")
    assert problems(path) == [
        "1: interval: 5s is too short; the minimum is 10s",
        "4: hosts[0].sh: unknown key 'sh' (allowed: name, ssh, description)",
        "8: checks[0].tmeout: unknown key 'tmeout' (allowed: name, service, description, http, tcp, dns, tls, "
        "command, severity, timeout, max_ms, status, contains, method, headers, min_days, verify, env, runbook)",
        "9: checks[0].severity: 'fatal' is not one of info, warning, critical",
        "10: checks[1]: missing 'name'",
        "12: checks[2].name: duplicate check name 'api' (first at line 6)",
        "13: checks[3]: give exactly one of http, tcp, dns, tls, command (found tcp, dns)",
        "14: checks[4]: give exactly one of http, tcp, dns, tls, command (found none)",
        "15: checks[5].timeout: '10 sec' is not valid; use seconds or a duration such as 30s, 5m, 1h30m, 500ms",
        "16: checks[6].timeout: 2h is too long; at most 10m",
        "17: checks[7].tcp: '127.0.0.1:99999': the port must be a number from 1 to 65535".replace("127.0.0.1", "db"),
        "18: checks[8].tcp: 'db' is not host:port (e.g. db.internal:5432)",
        "19: checks[9].http: 'ftp://files.example/' is not an http:// or https:// URL",
        "20: checks[10].min_days: applies only to tls checks (this is a tcp check)",
        "20: checks[10].status: applies only to http checks (this is a tcp check)",
        "21: checks[11].name: 'bad name!' is not valid; use 1-64 letters, digits, '.', '_' or '-', starting with "
        "a letter or digit",
        "23: checks[12].name: duplicate key 'name' (each key may appear once)",
    ]


def test_a_key_on_its_own_line_is_reported_there(tmp_path):
    path = write(tmp_path, "checks:\n  - name: a\n    tcp: 'db:1'\n\n    retries: 3\n    severity: 2\n")
    assert problems(path) == [
        "5: checks[0].retries: unknown key 'retries' (allowed: name, service, description, http, tcp, dns, tls, "
        "command, severity, timeout, max_ms, status, contains, method, headers, min_days, verify, env, runbook)",
        "6: checks[0].severity: 2 is not one of info, warning, critical",
    ]


def test_types_are_named(tmp_path):
    path = write(tmp_path, "checks:\n  - name: a\n    http: http://x/\n    status: '200'\n    max_ms: fast\n"
                           "    verify: maybe\n    headers: [a]\n")
    assert problems(path) == [
        "4: checks[0].status: expected a status code from 100 to 599 or a list of them, got '200'",
        "5: checks[0].max_ms: expected a number, got a string 'fast'",
        "6: checks[0].verify: expected true or false, got a string 'maybe'",
        "7: checks[0].headers: expected a mapping, got a list (not shown: header values may be secrets)",
    ]


@pytest.mark.parametrize("text, expected", [
    ("checks: [\n  {name: a, tcp: 'db:1'\n", ["3: YAML syntax error:"]),
    ("checks:\n  - name: a\n   tcp: x\n", ["3: YAML syntax error:"]),
    ("- name: a\n  tcp: 'db:1'\n", ["1: the file must be a mapping with a 'checks' list, not a list"]),
    ("just text\n", ["1: the file must be a mapping with a 'checks' list, not a string"]),
    ("interval: 1m\n", ["1: the file: missing 'checks' (the list of checks)"]),
    ("checks: []\n", ["1: checks: the list is empty; add at least one check"]),
    ("checks:\n", ["1: checks: expected a list, got nothing (an empty value)"]),
    ("# nothing yet\n", [" the file is empty; it must be a mapping with a 'checks' list (see schemas/checks.json)"]),
    ("checks: [{name: a, tcp: 'db:1'}]\n---\nchecks: []\n", ["2: YAML syntax error: expected a single document"]),
])
def test_files_that_are_not_an_inventory(tmp_path, text, expected):
    found = problems(write(tmp_path, text))
    assert len(found) == len(expected), found
    for line, want in zip(found, expected, strict=True):
        assert line.startswith(want), (line, want)


def test_unreadable_files_say_what_to_do(tmp_path):
    missing = tmp_path / "nope.yaml"
    assert problems(missing) == [
        " no such file; pass the checks file you meant (--checks FILE) or set TIEROPS_CHECKS"]
    assert problems(tmp_path) == [" is a directory; give the checks file (YAML) itself"]
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xff\xfe\x00checks")
    assert problems(binary) == [" is not UTF-8 text; save the checks file as UTF-8 YAML"]


def test_the_error_carries_its_problems(tmp_path):
    path = write(tmp_path, "checks:\n  - {name: a, tcp: 'db:1', x: 1}\n  - {name: a, tcp: 'db:1'}\n")
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    err = caught.value
    assert err.path == path
    assert [p.line for p in err.problems] == [2, 3]
    assert all(isinstance(p, Problem) for p in err.problems)


def test_the_schema_file_and_the_code_agree():
    schema = json.loads((BUNDLED_DIR / "schemas" / "checks.json").read_text())
    assert schema["$id"] == "urn:tierops:schema:checks:1"
    assert schema["$defs"]["name"]["pattern"] == NAME_PATTERN
    assert schema["$defs"]["duration"]["pattern"] == DURATION_PATTERN


@pytest.mark.parametrize("text, seconds", [
    ("30s", 30), ("5m", 300), ("1h", 3600), ("1h30m", 5400), ("500ms", 0.5), ("1.5s", 1.5), ("90", 90),
    (45, 45), (2.5, 2.5), ("1h0m5s", 3605),
])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "5 m", "5min", "1d", "-5s", "30s5m", "s30", True, None, [5]])
def test_not_durations(text):
    assert parse_duration(text) is None


def test_format_duration():
    assert [format_duration(s) for s in (300, 5400, 2.5, 0.25, 10, 3600, 86400)] == [
        "5m", "1h30m", "2.5s", "250ms", "10s", "1h", "24h"]


@pytest.mark.parametrize("text, default, expected", [
    ("db:5432", None, ("db", 5432)), ("[::1]:53", None, ("::1", 53)), ("10.0.0.1:1", None, ("10.0.0.1", 1)),
    ("api.example.com", 443, ("api.example.com", 443)), ("[2001:db8::1]", 443, ("2001:db8::1", 443)),
])
def test_host_port(text, default, expected):
    assert split_host_port(text, default) == expected


@pytest.mark.parametrize("text", ["db", "db:0", "db:x", "::1:53", "[db]:1", "[::1:53", "bad host:1", ":80"])
def test_bad_host_port(text):
    with pytest.raises(ValueError, match=re.escape(repr(text.strip()))):
        split_host_port(text)


def test_inventory_text_hides_secrets_marks_failing_and_stays_small(tmp_path, monkeypatch):
    monkeypatch.setenv("PROBE_TEST_PASSWORD", "hunter2-is-the-password")
    checks = "\n".join(
        f"  - {{name: check-{i:02d}, service: svc-{i % 7}, http: 'https://ops:s3cr3tpw@host-{i}.example.com:8443/"
        f"health/ready?verbose=1', severity: critical}}" for i in range(45))
    checks += "\n  - {name: cmd, service: svc-0, command: 'curl -u admin:hunter2-is-the-password http://x/'}"
    checks += "\n" + "\n".join(f"  - {{name: tcp-{i}, tcp: 'db-{i}.internal:5432'}}" for i in range(4))
    path = write(tmp_path, f"hosts:\n  - {{name: web-1, ssh: ops@web-1.internal, description: front}}\nchecks:\n"
                           f"{checks}\n")
    inv = load_inventory(path)
    assert len(inv.checks) == 50
    text = inventory_text(inv, failing=["check-03", "tcp-1", "not-a-check"])
    assert "s3cr3tpw" not in text and "hunter2" not in text
    assert "https://host-3.example.com:8443/health/ready?verbose=1" in text
    assert "- web-1 — ssh ops@web-1.internal (front)" in text
    assert "2 failing" in text.splitlines()[0]
    assert text.count("**FAILING**") == 2
    assert re.search(r"check-03 \(http https://host-3\S+, critical\) \*\*FAILING\*\*", text)
    assert len(text.encode()) < 8 * 1024, len(text.encode())
    assert {line.split(":")[0] for line in text.splitlines() if line.startswith("- svc-")} == {
        f"- svc-{i}" for i in range(7)}


def test_nested_aliases_are_refused_at_their_line_before_they_expand(tmp_path):
    # 10^8 strings in a few hundred bytes: every walk of the file (lines, schema, variables) would
    # visit each one; the first alias is reported instead, the way every other problem is.
    path = write(tmp_path, "checks:\n  - {name: a, tcp: 'db:1'}\nlaughs:\n" + laughs(indent="  "))
    assert problems(path) == ["5: found the alias *l0: YAML anchors and aliases are not accepted here (each would be "
                              "expanded everywhere it is used); write the value out"]
    deep = write(tmp_path, "checks: " + "[" * 500 + "]" * 500 + "\n", "deep.yaml")
    assert problems(deep) == ["1: nested more than 64 levels deep"]


SECRETS_FILE = """\
checks:
  - name: api
    http: https://api.internal/health
    headers: "Authorization: Bearer hdrBearerTok0042xyz"
  - name: admin
    http: https://api.internal/admin
    headers:
      Authorization: [Bearer listedHdrTok7781]
      X-Api-Key: 40213377001122
  - name: db
    tcp: "db:5432"
    contains: {password: mappedPassw0rd55}
  - name: token
    dns: localhost
    severity: ghp_R8s7Kd92LmQp0xZ1Wv3Yb4Nc5Td6Ue7Fg8Hi
  - name: cut
    tcp: "db:1"
    timeout: "slow, see xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx ghp_Zq81xkL0aa9Pq2LsQwErTy7788990011aabb"
  - name: resolver
    dns: "Bearer dnsTok1234567 as host"
maintenance:
  - name: nightly
    start: "02:00"
    duration: 1h
    description: {api_key: windowApiKey3141}
"""
FILE_SECRETS = ("hdrBearerTok0042xyz", "listedHdrTok7781", "40213377001122", "mappedPassw0rd55", "R8s7Kd92",
                "Zq81xkL0", "dnsTok1234567", "windowApiKey3141")


def test_problems_never_quote_a_value_that_may_be_a_secret(tmp_path):
    """A header value, anything under a secret-named key and any secret shape stay out of the
    problems (printed by `serve`, `checks validate`, the probe's failure and /config), also
    when the quote is cut short; each problem still says where and what is wrong."""
    found = problems(write(tmp_path, SECRETS_FILE))
    text = "\n".join(found)
    for secret in FILE_SECRETS:
        assert secret not in text, (secret, text)
    assert found == [
        "4: checks[0].headers: expected a mapping, got a string (not shown: header values may be secrets)",
        "8: checks[1].headers.Authorization: expected a string, got a list (not shown: header values may be secrets)",
        "9: checks[1].headers.X-Api-Key: expected a string, got an integer (not shown: header values may be secrets)",
        "12: checks[2].contains: applies only to http and command checks (this is a tcp check)",
        "12: checks[2].contains: expected a string, got a mapping {'password': '[REDACTED]'}",
        "15: checks[3].severity: '[REDACTED]' is not one of info, warning, critical",
        "18: checks[4].timeout: 'slow, see xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx [REDACTED]' is not valid; use seconds or a "
        "duration such as 30s, 5m, 1h30m, 500ms",
        "20: checks[5].dns: 'Bearer [REDACTED] as host' is not a host name",
        "25: maintenance[0].description: expected text of at most 500 characters, got {'api_key': '[REDACTED]'}",
    ]


def test_a_value_under_a_secret_named_key_is_never_quoted(tmp_path):
    """Even when it has no secret shape: a password is whatever its owner typed."""
    found = problems(write(tmp_path, "checks:\n  - name: a\n    tcp: 'db:1'\n    contains: {db_password: [42, hunter]}\n"))
    assert not any("hunter" in line or "42" in line.split(":", 1)[1] for line in found), found


def test_a_command_names_the_variables_it_may_see_and_the_file_its_concurrency(tmp_path):
    inv = load_inventory(write(tmp_path, """\
concurrency: 50
checks:
  - {name: pg, command: "pg_isready", env: [PGPASSWORD, PGHOST, _PRIVATE]}
  - {name: plain, command: "true"}
"""))
    assert inv.concurrency == 50 and [c.env for c in inv.checks] == [("PGPASSWORD", "PGHOST", "_PRIVATE"), ()]
    assert load_inventory(write(tmp_path, "checks: [{name: a, dns: localhost}]\n", "b.yaml")).concurrency is None


def test_variables_a_check_may_not_name(tmp_path):
    path = write(tmp_path, """\
concurrency: 0
checks:
  - name: leak
    command: "rev <<< $ANTHROPIC_API_KEY"
    env:
      - ANTHROPIC_API_KEY
      - CLAUDE_CODE_OAUTH_TOKEN
      - tierops_token
      - TIEROPS_SERVE_URL
      - 1BAD
  - {name: web, http: "http://x/", env: [A]}
  - {name: twice, command: "true", env: [A, A]}
""")
    found = problems(path)
    assert found[0] == "1: concurrency: must be at least 1 (got 0)"
    assert found[1:5] == [
        "6: checks[0].env[0]: ANTHROPIC_API_KEY: ANTHROPIC_* variables belong to the claude CLI and never reach tier 0; "
        "give the check a variable of its own",
        "7: checks[0].env[1]: CLAUDE_CODE_OAUTH_TOKEN: CLAUDE_CODE_* variables belong to the claude CLI and never "
        "reach tier 0; give the check a variable of its own",
        "8: checks[0].env[2]: tierops_token: TIEROPS_* variables belong to TierOps and never reach tier 0; give the "
        "check a variable of its own",
        "10: checks[0].env[4]: '1BAD' is not valid; use an environment variable's name: letters, digits and '_', "
        "not starting with a digit"]
    assert found[5] == "11: checks[1].env: applies only to command checks (this is a http check)"
    assert found[6].startswith("12: checks[2].env: ") and "non-unique" in found[6]
    assert len(found) == 7, found
