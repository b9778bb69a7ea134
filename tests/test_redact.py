from __future__ import annotations

import json

import pytest

from app.redact import MASK, Redactor


@pytest.mark.parametrize("text,secret", [
    ("export ANTHROPIC_API_KEY=sk-ant-api03-abcdefghijkl", "sk-ant-api03-abcdefghijkl"),
    ("key sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX", "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX"),
    ("Authorization: Bearer abcdefghijklmnop", "abcdefghijklmnop"),
    ("ghp_" + "a" * 36, "ghp_" + "a" * 36),
    ("aws AKIAABCDEFGHIJKLMNOP", "AKIAABCDEFGHIJKLMNOP"),
    ("slack xoxb-1234567890-abcdef", "xoxb-1234567890-abcdef"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijklmnop", "eyJhbGciOiJIUzI1NiJ9"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----", "MIIEabc"),
    ("DB_PASSWORD=hunter22", "hunter22"),
    ("secret: hunter2x", "hunter2x"),
])
def test_common_shapes_are_masked(text, secret):
    out = Redactor()(text)
    assert secret not in out and MASK in out


def test_exact_values_from_the_environment_and_token():
    r = Redactor.from_environment(extra=["dashboard-token-123"],
                                  environ={"MY_API_KEY": "v4lue-of-the-key", "HOME": "/root", "SHORT_TOKEN": "abc"})
    out = r("home /root key v4lue-of-the-key tok dashboard-token-123 abc")
    assert "v4lue-of-the-key" not in out and "dashboard-token-123" not in out
    assert "/root" in out and out.endswith(" abc")  # not secret-named, or too short to be safe to mask


def test_json_line_stays_valid_json():
    line = json.dumps({"type": "user", "message": {"content": [
        {"type": "tool_result", "content": 'cat .env\nAPI_KEY="abcd1234efgh"\n"password": "hunter22"'}]}})
    out = Redactor()(line)
    data = json.loads(out)
    content = data["message"]["content"][0]["content"]
    assert "abcd1234efgh" not in content and "hunter22" not in content


def test_ordinary_lines_are_untouched():
    line = '{"type":"assistant","usage":{"input_tokens":19834,"max_tokens":64000},"text":"disk at 71%"}'
    assert Redactor()(line) is line


def test_a_key_cut_short_never_swallows_the_json_after_it():
    line = json.dumps({"a": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1", "n": 1,
                       "b": "-----BEGIN EC PRIVATE KEY-----\nMIIEabc\n-----END EC PRIVATE KEY-----"})
    data = json.loads(Redactor()(line))
    assert data["n"] == 1 and "MIIE" not in data["a"] + data["b"]


def test_a_token_at_the_start_of_an_escaped_line_is_masked():
    # In a raw stream line a line break is the two characters "\n": no word boundary before "ghp_".
    line = json.dumps({"content": "x\nghp_R8s7Kd92LmQp0xZ1Wv3Yb4Nc5Td6Ue7Fg8Hi\npassword: hunter22x"})
    out = Redactor()(line)
    assert "ghp_R8s7" not in out and "hunter22x" not in out and json.loads(out)["content"].startswith("x\n")


def test_log_records_are_redacted_message_args_and_traceback(caplog):
    import logging

    from app.redact import install_log_redaction

    before = logging.getLogRecordFactory()
    try:
        install_log_redaction(Redactor(secrets=["env-secret-value-123"]))
        install_log_redaction(Redactor(secrets=["env-secret-value-123"]))  # twice: replaced, not stacked
        log = logging.getLogger("tests.redact")
        with caplog.at_level(logging.INFO, logger="tests.redact"):
            log.info("connecting with %s and %s", "ghp_R8s7Kd92LmQp0xZ1Wv3Yb4Nc5Td6Ue7Fg8Hi", "env-secret-value-123")
            try:
                raise ValueError("bad password=hunter22x")
            except ValueError:
                log.exception("failed")
        text = caplog.text
        assert "ghp_R8s7" not in text and "env-secret-value-123" not in text and "hunter22x" not in text
        assert text.count(MASK) >= 3 and "ValueError" in text
    finally:
        logging.setLogRecordFactory(before)


def test_log_redaction_keeps_the_args_shape_uvicorn_relies_on():
    import logging

    from app.redact import install_log_redaction

    before = logging.getLogRecordFactory()
    try:
        install_log_redaction(Redactor())
        record = logging.getLogger("uvicorn.access").makeRecord(
            "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
            ("127.0.0.1:5", "GET", "/x?token=abcdefghijkl", "1.1", 200), None)
        _client, _method, path, _version, status = record.args  # uvicorn's formatter unpacks this
        assert status == 200 and "abcdefghijkl" not in path and MASK in path
    finally:
        logging.setLogRecordFactory(before)


def test_the_screen_pattern_finds_every_line_redaction_would_change():
    """A caller skips the per-line redaction of lines where the screen finds nothing,
    also when it searches many lines joined by newlines. Every corpus line (plain, in a JSON
    stream line, escaped) that redaction changes is found, alone and in the middle of a batch."""
    import json

    import re2

    from tests.secrets_corpus import CORPUS, ENV_SECRET_VALUE, escaped

    redactor = Redactor([ENV_SECRET_VALUE])
    screen = re2.compile(redactor.screen_pattern)
    lines = [escaped(shape) for _, shape, _ in CORPUS]
    lines += [escaped(json.dumps({"type": "user", "message": {"content": shape}})) for _, shape, _ in CORPUS]
    lines.append(escaped('{"type":"user","message":{"content":"SK_ESCAPED URL_ESCAPED"}}'))
    first = "plain output_tokens line"
    for line in (x for x in lines if "\n" not in x):
        assert redactor(line) != line
        match = screen.search("\n".join([first, line, "another://clean line"]).encode())
        assert match is not None and len(first) < match.start() <= len(first) + len(line)
    for clean in ("output_tokens: 12", "the api_key field is empty", "a://b c"):
        assert redactor(clean) == clean  # false hits of the screen are allowed; no rewriting of these


@pytest.mark.parametrize("name", [
    "PGPASSWORD", "MYSQL_PWD", "REDISCLI_AUTH", "VAULT_TOKEN", "DOCKER_AUTH_CONFIG", "NPM_TOKEN", "BORG_PASSPHRASE",
    "RABBITMQ_DEFAULT_PASS", "SENTRY_DSN", "RABBITMQ_ERLANG_COOKIE", "LDAP_BIND_PW"])
def test_the_values_of_tool_named_credentials_in_the_environment_are_masked_exactly(name):
    """An environment variable named the way the tool reading it names it carries a secret even
    without a _PASSWORD/_TOKEN suffix: its value is masked wherever it shows up, in any shape."""
    r = Redactor.from_environment(environ={name: "no-shape-value-4711"})
    assert r("dump: no-shape-value-4711 end") == f"dump: {MASK} end"


def test_names_that_only_look_secret_keep_their_values():
    """The working directory and the agent socket are not secrets: masking their values would
    blank every path in a transcript."""
    r = Redactor.from_environment(environ={"PWD": "/srv/app/current", "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1",
                                           "OLDPWD": "/srv/app/previous"})
    assert r("cd /srv/app/current /tmp/ssh-x/agent.1 /srv/app/previous") == (
        "cd /srv/app/current /tmp/ssh-x/agent.1 /srv/app/previous")


@pytest.mark.parametrize("line", [
    '{"modelUsage":{"claude-sonnet-5":{"inputTokens":28986,"outputTokens":8,"cacheReadInputTokens":0}}}',
    '{"apiKeySource":"ANTHROPIC_API_KEY","permissionMode":"default"}',
    '{"usage":{"input_tokens":19834,"output_tokens":1,"max_tokens":64000,"token_count":12}}',
    "monkey: banana, passed: 3, bypass: true, tokens=1234",
    '{"groupKey": "{}:{alertname=\\"HighRequestLatency\\"}", "routingKey": "team-a"}',  # Alertmanager
])
def test_camel_case_and_tool_names_leave_ordinary_fields_alone(line):
    assert Redactor()(line) == line


@pytest.mark.parametrize("text,keep", [
    ('{"SessionToken": "FwoGZXIvYXdzEBYaDStsSessTok0123"}', '{"SessionToken": "'),
    ("PGPASSWORD=pgEnvPassw0rd42 psql", "PGPASSWORD="),
    ('{\\"refreshToken\\": \\"rfrshTokVal4821\\"}', '{\\"refreshToken\\": \\"'),  # inside a stream line
])
def test_the_name_is_kept_and_only_the_value_is_masked(text, keep):
    out = Redactor()(text)
    assert out.startswith(keep + MASK), out


def test_redact_then_cut_never_leaves_the_start_of_a_token_at_the_cut():
    from app.redact import redact_then_cut

    token = "ghp_R8s7Kd92LmQp0xZ1Wv3Yb4Nc5Td6Ue7Fg8Hi"
    text = "x" * 190 + " " + token + " tail"
    redact = Redactor()
    assert token[:8] in redact(text[:200])  # cutting first leaves a token too short for its shape: it leaks
    head = redact_then_cut(text, 200, redact)
    assert len(head) <= 200 and "ghp_R8s" not in head and head.startswith("x" * 190)
    tail = redact_then_cut(token + " " + "y" * 190, 200, redact, keep="tail")
    assert len(tail) <= 200 and "Fg8Hi" not in tail and tail.endswith("y" * 190)
    assert redact_then_cut("short", 200, redact) == "short"


def _corpus():
    from tests.secrets_corpus import CORPUS, escaped

    return [pytest.param(escaped(shape), secret, id=name) for name, shape, secret in CORPUS]


@pytest.mark.parametrize("text,secret", _corpus())
def test_every_shape_of_the_corpus_loses_its_secret(text, secret):
    from tests.secrets_corpus import ENV_SECRET_VALUE

    out = Redactor([ENV_SECRET_VALUE])(text)
    assert secret not in out and MASK in out, out
