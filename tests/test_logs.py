"""app/logs.py: the JSON and text formatters, flag/environment precedence, the access log,
and ``tierops serve`` as a real subprocess whose request lines come from ``tierops.access``.

Nothing secret in any log line: a key shaped like an Anthropic key and the dashboard token are
put where a formatter would write them (a message argument that is not a string, an ``extra``
field, a traceback, a URL path) and must come out masked.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.logs import ACCESS_LOGGER, AccessLog, JsonFormatter, TextFormatter, oneline, setup_logging
from app.redact import MASK, Redactor, install_log_redaction

REPO = Path(__file__).resolve().parents[1]
API_KEY = "sk-ant-api03-" + "Zq7Xw2Lm9Np4Rt6Vy8Bc1Df3Gh5Jk0" + "AaBbCcDdEe"
TOKEN = "dash-token-" + "9f8e7d6c5b4a39281706"


@pytest.fixture
def logging_state() -> Iterator[None]:
    """Whatever a test does to the root logger and the record factory is undone after it."""
    root = logging.getLogger()
    handlers, level, factory = list(root.handlers), root.level, logging.getLogRecordFactory()
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.setLogRecordFactory(factory)


def _record(msg: str, *args: Any, level: int = logging.INFO, exc: BaseException | None = None,
            **extra: Any) -> logging.LogRecord:
    """A record made the way ``Logger.makeRecord`` makes one (factory first, then the extras)."""
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    record = logging.getLogRecordFactory()("app.test", level, __file__, 1, msg, args, exc_info)
    record.__dict__.update(extra)
    return record


def test_json_line_has_the_fields_and_only_the_known_extras():
    line = JsonFormatter().format(_record("session %d started", 7, session=7, chain=3, tier=2, status="running",
                                          cost_usd=0.25, color_message="\x1b[1mnoise\x1b[0m"))
    assert "\n" not in line
    entry = json.loads(line)
    assert entry.pop("ts").endswith("+00:00")
    assert entry == {"level": "info", "logger": "app.test", "message": "session 7 started", "session": 7, "chain": 3,
                     "tier": 2, "status": "running", "cost_usd": 0.25}


def test_json_line_keeps_an_exception_and_a_multiline_message_on_one_line():
    try:
        raise ValueError("first line\nsecond line")
    except ValueError as caught:
        record = _record("it broke:\n%s", "details\nmore", level=logging.ERROR, exc=caught, session=1)
    line = JsonFormatter().format(record)
    assert len(line.splitlines()) == 1
    entry = json.loads(line)
    assert entry["level"] == "error" and entry["message"] == "it broke:\ndetails\nmore" and entry["session"] == 1
    assert entry["exc"].startswith("Traceback") and "ValueError: first line\nsecond line" in entry["exc"]


def test_every_json_line_and_text_line_is_masked(logging_state):
    install_log_redaction(Redactor([TOKEN]))
    try:
        raise RuntimeError(f"login with {API_KEY}")
    except RuntimeError as caught:
        failure = caught
    # A non-string argument (the factory masks only strings), string extras, a traceback.
    record = _record("request failed: %s (%r)", failure, Path(f"/x/{TOKEN}"), level=logging.ERROR, exc=failure,
                     model=API_KEY, path=f"/api/{TOKEN}", session=1)
    json_line = JsonFormatter().format(record)
    text = TextFormatter().format(_record("request failed: %s", failure, exc=failure))
    for out in (json_line, text):
        assert API_KEY not in out and TOKEN not in out and MASK in out
    entry = json.loads(json_line)
    assert entry["model"] == MASK and entry["path"] == f"/api/{MASK}" and MASK in entry["exc"]
    assert entry["session"] == 1


def test_through_a_logger_extras_are_masked_too(logging_state):
    """The path a real line takes: logger → factory (masks the template and string args) → extras
    set after the factory → handler's formatter (masks the rest)."""
    install_log_redaction(Redactor([TOKEN]))
    out = io.StringIO()
    setup_logging("info", "json", stream=out)
    logging.getLogger("app.test").warning("token %s and key %s", TOKEN, KeyError(API_KEY),
                                          extra={"session": 4, "model": API_KEY})
    [entry] = [json.loads(x) for x in out.getvalue().splitlines()]
    assert TOKEN not in out.getvalue() and API_KEY not in out.getvalue()
    assert entry["session"] == 4 and entry["model"] == MASK and entry["level"] == "warning"


FORGED = "2031-01-01 00:00:00,000 CRITICAL app.supervisor.chain: session 1 escalated to tier 3"


def test_a_newline_in_stored_text_cannot_forge_a_text_log_line(logging_state):
    """An alert's service (any text its sender chose) is logged by name: each record is one line,
    CR/LF, ESC, BEL, C1 controls and Unicode line separators escaped, in the message and the name."""
    out = io.StringIO()
    setup_logging("info", "text", stream=out)
    service = f"web\n{FORGED}\r\x1b]52;c;ZXZpbA==\x07\x85\u2028tail"
    logging.getLogger("app.test").warning("alert for %s received", service)
    logging.getLogger(f"app.evil\n{FORGED}").warning("from a logger named by data")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].endswith("WARNING app.test: alert for web\\n" + FORGED + "\\r\\x1b]52;c;ZXZpbA==\\x07\\x85"
                             "\\u2028tail received")
    assert lines[1].split(" ", 3)[3].startswith("app.evil\\n2031-01-01")
    assert not any(c in out.getvalue() for c in "\r\x1b\x07\x85\u2028")


def test_a_traceback_stays_below_its_record_indented(logging_state):
    out = io.StringIO()
    setup_logging("info", "text", stream=out)
    try:
        raise ValueError(f"bad service\n{FORGED}\x1b[2J")
    except ValueError:
        logging.getLogger("app.test").exception("cycle %d failed", 3)
    first, *rest = out.getvalue().splitlines()
    assert first.endswith("ERROR app.test: cycle 3 failed")
    assert rest[0] == "  Traceback (most recent call last):" and all(line.startswith("  ") for line in rest)
    assert rest[-2:] == ["  ValueError: bad service", f"  {FORGED}\\x1b[2J"]  # its own line, never at column 0


def test_oneline_flattens_and_cuts():
    assert oneline("a\n  b\tc") == "a b c"
    assert oneline("x" * 500, limit=10) == "x" * 9 + "…"
    assert oneline(ValueError("bad\nthing")) == "bad thing"


@pytest.mark.parametrize("flag_level, flag_fmt, env_level, env_fmt, default, expected_level, expected_fmt", [
    (None, None, None, None, "warning", logging.WARNING, "text"),   # defaults
    (None, None, None, None, "info", logging.INFO, "text"),         # a long-running command's default
    (None, None, "debug", "json", "warning", logging.DEBUG, "json"),  # environment over the default
    ("error", "text", "debug", "json", "warning", logging.ERROR, "text"),  # flag over the environment
    (None, None, "loud", "xml", "info", logging.INFO, "text"),       # invalid environment: the default
    (None, None, " WARNING ", "JSON", "info", logging.WARNING, "json"),  # case and spaces
])
def test_flag_over_environment_over_default(logging_state, monkeypatch, flag_level, flag_fmt, env_level, env_fmt,
                                            default, expected_level, expected_fmt):
    for name, value in (("TIEROPS_LOG_LEVEL", env_level), ("TIEROPS_LOG_FORMAT", env_fmt)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    out = io.StringIO()
    setup_logging(flag_level, flag_fmt, default_level=default, stream=out)
    root = logging.getLogger()
    assert root.level == expected_level
    ours = [h for h in root.handlers if h.get_name() == "tierops"]
    assert len(ours) == 1
    assert isinstance(ours[0].formatter, JsonFormatter if expected_fmt == "json" else TextFormatter)
    logging.getLogger("app.test").error("visible")
    line = out.getvalue().strip()
    assert (json.loads(line)["message"] if expected_fmt == "json" else line.endswith("ERROR app.test: visible"))


def test_setup_twice_replaces_our_handler_and_keeps_others(logging_state):
    other = logging.NullHandler()
    logging.getLogger().addHandler(other)
    first, second = io.StringIO(), io.StringIO()
    setup_logging("info", "text", stream=first)
    setup_logging("info", "json", stream=second)
    logging.getLogger("app.test").info("once")
    assert first.getvalue() == "" and json.loads(second.getvalue())["message"] == "once"
    assert other in logging.getLogger().handlers


# --- the access log, in process -----------------------------------------------------------------

async def _call(app: Any, path: str, query: bytes = b"") -> list[dict]:
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "query_string": query, "http_version": "1.1",
             "client": ("127.0.0.1", 5555), "headers": []}
    await app(scope, receive, send)
    return sent


def test_access_middleware_logs_status_duration_and_no_query(caplog):
    async def ok(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def broken(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("handler bug")

    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    sent = asyncio.run(_call(AccessLog(ok), "/api/v1/sessions", b"status=failed&token=abc"))
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    with pytest.raises(RuntimeError):
        asyncio.run(_call(AccessLog(broken), "/boom"))
    lines = [r for r in caplog.records if r.name == ACCESS_LOGGER]
    assert [(r.method, r.path, r.http_status, r.client) for r in lines] == [  # type: ignore[attr-defined]
        ("GET", "/api/v1/sessions", 204, "127.0.0.1:5555"), ("GET", "/boom", 500, "127.0.0.1:5555")]
    assert lines[0].getMessage().startswith('127.0.0.1:5555 - "GET /api/v1/sessions HTTP/1.1" 204 ')
    assert "token" not in caplog.text and "status=failed" not in caplog.text
    assert all(r.duration_ms >= 0 for r in lines)  # type: ignore[attr-defined]


# --- tierops serve, a real subprocess -----------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _serve(tmp_path: Path, **env_extra: str) -> list[dict]:
    """Start ``tierops --log-format json serve``, make three requests, stop it with SIGTERM and
    return its stderr as JSON objects (every line must be one)."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIEROPS_")}
    env.update({"PYTHONPATH": str(REPO), "TIEROPS_HOME": str(tmp_path / "state"), "TIEROPS_SCHEDULE": "false",
                "TIEROPS_TOKEN": TOKEN, "ANTHROPIC_API_KEY": API_KEY, **env_extra})
    proc = subprocess.Popen([sys.executable, "-m", "app", "--log-format", "json", "serve", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                status = _get(f"http://127.0.0.1:{port}/healthz")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"serve did not come up: {proc.communicate(timeout=5)}") from None
                time.sleep(0.1)
        assert status == 200
        assert _get(f"http://127.0.0.1:{port}/api/v1/sessions?token={TOKEN}") == 401  # no bearer token
        _get(f"http://127.0.0.1:{port}/nothing/{API_KEY}")  # a redirect to /login, followed
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode in (0, -signal.SIGTERM), err  # uvicorn re-raises the signal once shut down
    assert TOKEN not in err and API_KEY not in err
    return [json.loads(line) for line in err.splitlines()]


@pytest.mark.timeout(60)
def test_serve_access_lines_come_from_tierops_access(tmp_path):
    entries = _serve(tmp_path)
    loggers = {e["logger"] for e in entries}
    assert "uvicorn.access" not in loggers  # uvicorn's own access log is off: no line twice
    messages = [e["message"] for e in entries if e["logger"] == "uvicorn.error"]
    assert any(m.startswith("Uvicorn running on http://127.0.0.1:") for m in messages)
    assert "Application startup complete." in messages
    access = [e for e in entries if e["logger"] == ACCESS_LOGGER]
    paths = [(e["method"], e["path"], e["http_status"]) for e in access]
    assert ("GET", "/api/v1/sessions", 401) in paths  # the query string (with the token) is not logged
    assert ("GET", f"/nothing/{MASK}", 303) in paths  # a key in the path is masked
    assert ("GET", "/login", 200) in paths
    healthz = [e for e in access if e["path"] == "/healthz"]
    assert healthz and healthz[-1]["http_status"] == 200 and healthz[-1]["level"] == "info"
    assert healthz[-1]["client"].startswith("127.0.0.1:") and healthz[-1]["duration_ms"] >= 0
    assert len(access) == len({(e["ts"], e["client"], e["path"]) for e in access})


@pytest.mark.timeout(60)
def test_serve_access_log_can_be_turned_off(tmp_path):
    entries = _serve(tmp_path, TIEROPS_ACCESS_LOG="false")
    loggers = {e["logger"] for e in entries}
    assert ACCESS_LOGGER not in loggers and "uvicorn.access" not in loggers
    assert any(e["message"] == "Application startup complete." for e in entries)  # the rest still logs


def test_a_logger_named_auth_is_not_read_as_a_credential(logging_state):
    """The text line's prefix is the time, the level and the logger's name: "app.web.auth: refused …"
    is not "auth: <secret>"; a secret in the message is still masked."""
    install_log_redaction(Redactor([TOKEN]))
    record = _record("refused %s %s: %s", "GET", "/v1/models", f"no token {TOKEN}")
    record.name = "app.web.auth"
    text = TextFormatter().format(record)
    assert "app.web.auth: refused GET /v1/models: no token" in text and TOKEN not in text and MASK in text
