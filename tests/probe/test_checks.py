"""Each kind of check against real targets on 127.0.0.1: the status mapping, the
evidence, the timeouts (a check never runs much past its own), secrets kept out of results, and
command process groups killed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import ssl
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from app.probe.checks import CheckResult, run_all, run_check
from app.probe.executor import build_report
from app.probe.inventory import CheckSpec
from app.probe.x509 import CertificateError, validity
from app.vocab import Level, ServiceStatus
from tests.probe.local_targets import HttpTarget, closed_port, self_signed

SLACK = 1.5  # generous: a loaded CI machine


def spec(kind: str, target: str, **kw: Any) -> CheckSpec:
    kw.setdefault("name", f"{kind}-check")
    kw.setdefault("service", "svc")
    return CheckSpec(kind=kind, target=target, **kw)  # type: ignore[arg-type]


@pytest.fixture
def web():
    with HttpTarget() as target:
        yield target


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    return {"soon": self_signed(d, 5, "soon"), "long": self_signed(d, 36500, "long")}


def assert_result(r: CheckResult, ok: bool, status: ServiceStatus, *summary: str) -> None:
    assert (r.ok, r.status) == (ok, status), r
    for text in summary:
        assert text in r.summary, (text, r.summary)
    assert "\n" not in r.summary


# --- http --------------------------------------------------------------------------------------

async def test_http_healthy_failing_and_recovering(web):
    s = spec("http", web.url("/flip"), contains="healthy", expect_status=(200,), severity=Level.CRITICAL)
    ok = await run_check(s)
    assert_result(ok, True, ServiceStatus.HEALTHY, "HTTP 200 in ")
    assert ok.evidence["status_code"] == 200 and ok.latency_ms == ok.evidence["latency_ms"] > 0
    assert (ok.name, ok.service, ok.kind, ok.severity) == ("http-check", "svc", "http", Level.CRITICAL)
    web.flip_status = 500
    bad = await run_check(s)
    assert_result(bad, False, ServiceStatus.DOWN, "HTTP 500 in ", "expected 200")
    assert bad.evidence["status_code"] == 500 and bad.evidence["body"] == "down"
    web.flip_status = 200
    assert (await run_check(s)).ok


async def test_http_status_rules(web):
    assert_result(await run_check(spec("http", web.url("/fail"))), False, ServiceStatus.DOWN,
                  "HTTP 500", "expected 2xx or 3xx")
    body = (await run_check(spec("http", web.url("/fail")))).evidence["body"]
    assert body.startswith("internal error: database")
    # redirects are answers, not followed
    redirect = await run_check(spec("http", web.url("/redirect")))
    assert_result(redirect, True, ServiceStatus.HEALTHY, "HTTP 302")
    assert [path for _, path, _ in web.server.requests] == ["/fail", "/fail", "/redirect"]
    assert_result(await run_check(spec("http", web.url("/ok"), expect_status=(204, 404))), False,
                  ServiceStatus.DOWN, "expected 204, 404")
    assert (await run_check(spec("http", web.url("/missing"), expect_status=(404,)))).ok


async def test_http_body_must_contain(web):
    r = await run_check(spec("http", web.url("/sick"), contains="healthy"))
    assert_result(r, False, ServiceStatus.DOWN, "HTTP 200", "body lacks 'healthy'")
    assert r.evidence["body"] == "service sick"
    assert (await run_check(spec("http", web.url("/chunked"), contains="in chunks"))).ok


async def test_http_too_slow_is_degraded_and_past_timeout_unreachable(web):
    slow = await run_check(spec("http", web.url("/sleep?s=0.3"), max_ms=100))
    assert_result(slow, False, ServiceStatus.DEGRADED, "HTTP 200", "slower than 100 ms")
    assert slow.latency_ms is not None and slow.latency_ms >= 300
    started = time.monotonic()
    hung = await run_check(spec("http", web.url("/sleep?s=5"), timeout_s=1.0))
    took = time.monotonic() - started
    assert_result(hung, False, ServiceStatus.UNREACHABLE, "no answer from", "within 1s")
    assert hung.evidence["error"] == "timeout"
    assert 1.0 <= took < 1.0 + SLACK


async def test_http_head_headers_and_basic_auth_never_shown(web):
    url = web.url("/auth", userinfo="user:pa55word")
    r = await run_check(spec("http", url, method="HEAD", headers=(("X-Probe", "tierops"),)))
    assert r.ok, r
    method, _, headers = web.server.requests[-1]
    assert method == "HEAD" and headers["X-Probe"] == "tierops" and headers["User-Agent"].startswith("tierops-probe/")
    wrong = await run_check(spec("http", web.url("/auth", userinfo="user:wrong-pa55word")))
    assert_result(wrong, False, ServiceStatus.DOWN, "HTTP 401")
    for result in (r, wrong):
        shown = repr(result)
        assert "pa55word" not in shown and "user:" not in shown
        assert result.evidence["url"] == web.url("/auth")


async def test_http_refused_and_unresolvable():
    port = closed_port()
    refused = await run_check(spec("http", f"http://admin:topsecret@127.0.0.1:{port}/"))
    assert_result(refused, False, ServiceStatus.UNREACHABLE, f"connection to http://127.0.0.1:{port}/ refused")
    assert "topsecret" not in repr(refused)
    nowhere = await run_check(spec("http", "http://no-such-host.invalid/", timeout_s=5))
    assert nowhere.status == ServiceStatus.UNREACHABLE and not nowhere.ok
    assert "no-such-host.invalid" in nowhere.summary


async def test_https_verification(certs):
    with HttpTarget(tls=certs["long"]) as secure:
        untrusted = await run_check(spec("http", secure.url("/ok")))
        assert_result(untrusted, False, ServiceStatus.DOWN, "not trusted")
        trusted_anyway = await run_check(spec("http", secure.url("/ok"), verify=False, contains="healthy"))
        assert trusted_anyway.ok, trusted_anyway


async def test_not_http_at_all():
    # a server that answers with something else: a result, not an exception
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        r = await run_check(spec("http", f"http://127.0.0.1:{port}/"))
    assert_result(r, False, ServiceStatus.DOWN, "not an HTTP answer")


# --- tcp, dns ----------------------------------------------------------------------------------

async def test_tcp(web):
    ok = await run_check(spec("tcp", web.address))
    assert_result(ok, True, ServiceStatus.HEALTHY, f"connected to {web.address} in ")
    assert ok.evidence["address"] == web.address
    port = closed_port()
    closed = await run_check(spec("tcp", f"127.0.0.1:{port}"))
    assert_result(closed, False, ServiceStatus.UNREACHABLE, "refused")
    assert "Connect call failed" in closed.evidence["error"] or "refused" in closed.evidence["error"]


async def test_tcp_ipv6_loopback():
    try:
        server = await asyncio.start_server(lambda r, w: w.close(), "::1", 0)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    port = server.sockets[0].getsockname()[1]
    async with server:
        r = await run_check(spec("tcp", f"[::1]:{port}"))
    assert_result(r, True, ServiceStatus.HEALTHY, f"[::1]:{port}")


async def test_dns():
    r = await run_check(spec("dns", "localhost"))
    assert_result(r, True, ServiceStatus.HEALTHY, "localhost → ")
    assert set(r.evidence["addresses"]) & {"127.0.0.1", "::1"}
    bad = await run_check(spec("dns", "no-such-host.invalid", timeout_s=5))
    assert_result(bad, False, ServiceStatus.UNREACHABLE)
    assert "no-such-host.invalid" in bad.summary


# --- tls ---------------------------------------------------------------------------------------

async def test_tls_near_expiry_is_degraded(certs):
    with HttpTarget(tls=certs["soon"]) as secure:
        r = await run_check(spec("tls", secure.address, verify=False, min_days=14))
        assert_result(r, False, ServiceStatus.DEGRADED, "certificate expires in ", "less than 14")
        assert 4 < r.evidence["days_left"] <= 5 and r.evidence["verified"] is False
        assert r.evidence["not_after"].endswith("Z") and r.evidence["tls_version"].startswith("TLS")
        relaxed = await run_check(spec("tls", secure.address, verify=False, min_days=2))
        assert_result(relaxed, True, ServiceStatus.HEALTHY, "certificate valid until", "days left")
        untrusted = await run_check(spec("tls", secure.address, min_days=2))
        assert_result(untrusted, False, ServiceStatus.DOWN, "not trusted", "self-signed")


async def test_tls_verified_with_a_trusted_ca(certs, monkeypatch):
    """verify: true against a certificate the default context trusts (SSL_CERT_FILE)."""
    cert, _ = certs["long"]
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    with HttpTarget(tls=certs["long"]) as secure:
        r = await run_check(spec("tls", secure.address, min_days=14))
        assert_result(r, True, ServiceStatus.HEALTHY, "certificate valid until 21")  # 100 years: GeneralizedTime
        assert r.evidence["verified"] is True and r.evidence["days_left"] > 36000
        https = await run_check(spec("http", secure.url("/ok")))
        assert https.ok, https


async def test_tls_to_a_plain_port_and_a_closed_one(web):
    plain = await run_check(spec("tls", web.address, verify=False))
    assert_result(plain, False, ServiceStatus.DOWN, "TLS with")
    closed = await run_check(spec("tls", f"127.0.0.1:{closed_port()}", verify=False))
    assert_result(closed, False, ServiceStatus.UNREACHABLE, "refused")


def test_certificate_dates_agree_with_the_standard_library(certs):
    for cert, _ in certs.values():
        der = ssl.PEM_cert_to_DER_cert(cert.read_text())
        not_before, not_after = validity(der)
        decoded = ssl._ssl._test_decode_cert(str(cert))  # type: ignore[attr-defined]
        assert not_after.timestamp() == ssl.cert_time_to_seconds(decoded["notAfter"])
        assert not_before.timestamp() == ssl.cert_time_to_seconds(decoded["notBefore"])
    for junk in (b"", b"\x30\x03\x02\x01\x01", b"\x04\x00", os.urandom(64)):
        with pytest.raises(CertificateError):
            validity(junk)


# --- command -----------------------------------------------------------------------------------

async def test_command_exit_codes_and_contains():
    ok = await run_check(spec("command", "echo disk at 42%"))
    assert_result(ok, True, ServiceStatus.HEALTHY, "exit 0 in ", "disk at 42%")
    assert ok.evidence["exit_code"] == 0 and ok.evidence["output_tail"] == "disk at 42%\n"
    failed = await run_check(spec("command", "echo checking >&2; echo 'disk at 97%'; exit 3"))
    assert_result(failed, False, ServiceStatus.DOWN, "exit 3 in ", "disk at 97%")
    assert failed.evidence["output_tail"] == "checking\ndisk at 97%\n"
    lacks = await run_check(spec("command", "echo status: degraded", contains="status: ok"))
    assert_result(lacks, False, ServiceStatus.DOWN, "output lacks 'status: ok'")
    has = await run_check(spec("command", "echo noise >&2; echo status: ok", contains="status: ok"))
    assert has.ok


async def test_command_output_is_bounded_and_redacted(monkeypatch):
    monkeypatch.setenv("PROBE_DB_PASSWORD", "correct-horse-battery-staple")
    r = await run_check(spec("command", "head -c 300000 /dev/zero | tr '\\0' x; echo; echo pw=$PROBE_DB_PASSWORD; "
                                        "echo token ghp_abcdefghijklmnopqrstuvwxyz0123456789",
                             env=("PROBE_DB_PASSWORD",)))  # named: the command sees it (and the output is redacted)
    assert r.ok
    tail = r.evidence["output_tail"]
    assert len(tail) <= 2048 and "correct-horse" not in tail and "ghp_abc" not in tail
    assert "pw=[REDACTED]" in tail and "correct-horse" not in r.summary


async def test_command_past_its_timeout_has_its_process_group_killed(tmp_path):
    pidfile = tmp_path / "child.pid"
    started = time.monotonic()
    r = await run_check(spec("command", f"echo started; sleep 60 & echo $! > {pidfile}; wait", timeout_s=1.0))
    took = time.monotonic() - started
    assert_result(r, False, ServiceStatus.UNREACHABLE, "timed out after 1s", "process group killed")
    assert r.evidence["output_tail"] == "started\n" and r.evidence["exit_code"] is None
    assert 1.0 <= took < 1.0 + SLACK
    assert_gone(int(pidfile.read_text()))


async def test_a_background_child_left_behind_is_killed(tmp_path):
    pidfile = tmp_path / "child.pid"
    started = time.monotonic()
    r = await run_check(spec("command", f"sleep 60 & echo $! > {pidfile}; echo done", timeout_s=10))
    assert r.ok and "done" in r.summary
    assert time.monotonic() - started < 3  # did not wait for the child holding the pipe
    assert_gone(int(pidfile.read_text()))


async def test_cancelling_a_command_check_kills_its_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    task = asyncio.ensure_future(run_check(spec("command", f"sleep 60 & echo $! > {pidfile}; wait", timeout_s=30)))
    for _ in range(200):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_gone(int(pidfile.read_text()))


def assert_gone(pid: int) -> None:
    """Dead or a zombie waiting for its (re)parent: either way no longer running."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} is still running")


# --- all at once -------------------------------------------------------------------------------

async def test_run_all_runs_concurrently_in_order_with_callbacks(web, tmp_path: Path):
    specs = [spec("http", web.url("/sleep?s=5"), name="slow-1", timeout_s=1.0),
             spec("http", web.url("/sleep?s=5"), name="slow-2", timeout_s=1.0),
             spec("command", "sleep 5", name="slow-3", timeout_s=1.0),
             spec("tcp", web.address, name="fast"),
             spec("http", web.url("/ok"), name="page")]
    started_names: list[str] = []
    finished: list[tuple[int, str]] = []
    t0 = time.monotonic()
    results = await run_all(specs, on_start=lambda i, s: started_names.append(s.name),
                            on_result=lambda i, r: finished.append((i, r.name)))
    took = time.monotonic() - t0
    assert 1.0 <= took < 1.0 + SLACK + 0.5  # one timeout, not three
    assert [r.name for r in results] == ["slow-1", "slow-2", "slow-3", "fast", "page"]
    assert started_names == [s.name for s in specs]
    assert sorted(finished) == [(i, s.name) for i, s in enumerate(specs)]
    assert {i for i, _ in finished[:2]} == {3, 4}  # the fast ones reported first
    assert [r.status for r in results] == [ServiceStatus.UNREACHABLE] * 3 + [ServiceStatus.HEALTHY] * 2


# --- redacted before it is cut -----------------------------------------------------------------

TOKEN = "ghp_R8s7Kd92LmQp0xZ1Wv3Yb4Nc5Td6Ue7Fg8Hi"  # ghp_ + 36: its shape only while whole


async def _one_answer(payload: bytes) -> tuple[asyncio.AbstractServer, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(payload)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_an_http_body_snippet_is_redacted_before_it_is_cut():
    """The evidence keeps 200 characters of a failing answer: a token straddling that cut must not
    leave its first characters (too short for its shape once cut) in the snippet."""
    body = ("x" * 185 + " " + TOKEN + " and more").encode()
    server, port = await _one_answer(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n"
                                     b"Connection: close\r\n\r\n%s" % (len(body), body))
    async with server:
        r = await run_check(spec("http", f"http://127.0.0.1:{port}/"))
    shown = r.evidence["body"]
    assert shown.startswith("x" * 185) and len(shown) <= 200, shown
    assert "ghp_R8s7" not in shown and "ghp_R8s7" not in r.summary


async def test_a_line_that_is_not_http_is_redacted_before_it_is_cut():
    # 80 characters are quoted: the cut leaves 10 of the token, too few for the Bearer rule
    server, port = await _one_answer(b"X" * 62 + b" Bearer abcdefghijklmnopqrstuvwxyz012345\r\n")
    async with server:
        r = await run_check(spec("http", f"http://127.0.0.1:{port}/"))
    assert_result(r, False, ServiceStatus.DOWN, "not an HTTP answer")
    assert "abcdefg" not in r.summary and "abcdefg" not in r.evidence["error"], r


async def test_a_command_line_in_the_summary_is_redacted_before_it_is_cut():
    r = await run_check(spec("command", f"echo {'y' * 190} {TOKEN}; exit 3"))
    assert_result(r, False, ServiceStatus.DOWN, "exit 3 in ", "yyyy")
    assert "ghp_R8s7" not in r.summary, r.summary


async def test_the_output_tail_is_redacted_before_it_is_cut():
    """The last 2048 characters begin inside a token: only its end is left, which no rule knows."""
    r = await run_check(spec("command", f"printf '%s ' '{TOKEN}'; head -c 2040 /dev/zero | tr '\\0' z"))
    tail = r.evidence["output_tail"]
    assert tail.endswith(" " + "z" * 2040) and len(tail) <= 2048
    assert "Fg8Hi" not in tail and "Fg8Hi" not in r.summary, tail[:60]


async def test_the_kept_tail_of_a_long_output_is_redacted_before_it_is_cut():
    """Past 128 KiB only the first and last 64 KiB of a command's output are kept; a token that
    straddles where the kept tail begins is masked whole, in the tail and in the summary's line."""
    r = await run_check(spec("command", "head -c 200000 /dev/zero | tr '\\0' x; echo; "
                                        f"printf '%s ' '{TOKEN}'; head -c {65536 - 21} /dev/zero | tr '\\0' y"))
    assert r.ok, r
    assert "Fg8Hi" not in r.summary and "Fg8Hi" not in r.evidence["output_tail"], r.summary
    assert "[REDACTED]" in r.summary


# --- the probe out of file descriptors --------------------------------------------------------------

async def test_running_out_of_descriptors_is_the_probes_error_not_the_targets(web):
    """Every descriptor this process may open is taken (its soft limit lowered to what is open, then
    filled): a tcp check cannot get a socket, a command check no pipe. That says nothing about the
    targets, so neither is a failing check: both carry the probe's error instead of a status."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held: list[int] = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 16, hard))
        with contextlib.suppress(OSError):
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        tcp = await run_check(spec("tcp", web.address, name="port"))
        command = await run_check(spec("command", "true", name="cmd"))
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    for r in (tcp, command):
        assert r.probe_error is not None and "ran out of file descriptors" in r.probe_error, r
        assert r.summary.startswith("not checked: the probe ran out of file descriptors")
    report = build_report([spec("tcp", web.address, name="port"), spec("command", "true", name="cmd")],
                          [tcp, command])
    assert report["events"] == [] and report["services_checked"] == [] and report["escalation"]["needed"] is False
    assert report["error"].startswith("probe error: 2 of 2 checks not checked (port, cmd): the probe ran out of")
    assert report["summary"].startswith("2 checks: 0 passing, 0 failing, 2 not checked. Probe error: 2 of 2")
    assert (await run_check(spec("tcp", web.address))).ok  # with descriptors again, the target is healthy


async def test_run_all_runs_at_most_concurrency_checks_at_once(tmp_path: Path):
    log = tmp_path / "order.log"
    specs = [spec("command", f"echo start {i} >> {log}; sleep 0.2; echo end {i} >> {log}", name=f"c{i}")
             for i in range(3)]
    results = await run_all(specs, concurrency=1)
    assert all(r.ok for r in results)
    lines = log.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["start", "end"] * 3  # one after the other, never two at once
