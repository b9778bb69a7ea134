"""Running checks: one :class:`~app.probe.inventory.CheckSpec` → one :class:`CheckResult`.

Why a module of its own: this is where a target's behaviour becomes a service status, and the
mapping must be the same for every kind so that incidents and escalations mean one thing:

* ok → ``healthy``;
* timeout, connection refused, host or network unreachable, a name that does not resolve →
  ``unreachable``;
* too slow (``max_ms``), a certificate within ``min_days`` of its end → ``degraded``;
* anything else failing (a wrong status, a missing text, a failed command, an untrusted or
  expired certificate, a broken answer) → ``down``;
* the probe itself out of file descriptors ("Too many open files") → no status at all: a
  :attr:`CheckResult.probe_error`, the probe's failure, never the target's.

:func:`run_check` never raises for anything a target does: each failure is a result with its
error. Each check is bounded by its own timeout (a command gets :data:`~app.probe.command.KILL_GRACE`
more to have its process group killed); :func:`run_all` runs them all at once (or as many as the
open-files limit allows, ``limits.py``), so a cycle takes about its longest timeout. URLs lose their ``user:password@`` and command output passes the
redactor before it is put in a result; every text a target sent (a body, a status line, an output)
is redacted before it is cut to its snippet, never after.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from app.probe import http, net, x509
from app.probe.command import CommandRun
from app.probe.inventory import CheckSpec
from app.probe.limits import open_files_limit, out_of_descriptors
from app.probe.targets import clip, format_duration, redact_text, split_host_port, strip_userinfo
from app.vocab import Level, ServiceStatus

log = logging.getLogger(__name__)

__all__ = ["CheckResult", "run_all", "run_check"]

OUTPUT_TAIL = 2048
SNIPPET = 200
_UNREACHABLE_ERRNOS = {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT,
                       errno.EHOSTDOWN, errno.ENETDOWN}


@dataclass(frozen=True)
class CheckResult:
    name: str
    service: str
    kind: str
    severity: Level
    ok: bool
    status: ServiceStatus
    latency_ms: float | None
    summary: str  # one line, e.g. "HTTP 500 in 12 ms, expected 200"
    evidence: dict[str, Any] = field(default_factory=dict)
    # The probe itself failed before the target could be checked (it ran out of file descriptors):
    # the check has no result this run, neither passing nor failing (executor.build_report).
    probe_error: str | None = None


class _Fail(Exception):
    """A kind's verdict that the check failed (carried out of the kind's function)."""

    def __init__(self, status: ServiceStatus, summary: str, **evidence: Any) -> None:
        super().__init__(summary)
        self.status, self.summary, self.evidence = status, summary, evidence


@dataclass
class _Outcome:
    summary: str
    evidence: dict[str, Any]
    status: ServiceStatus = ServiceStatus.HEALTHY


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def _ms_text(ms: float) -> str:
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms"


def _one_line(text: str, limit: int = SNIPPET) -> str:
    """A sender's or a command's text on one line, redacted before it is cut to ``limit``."""
    return clip(" ".join(text.split()), limit, mark="…")


# --- the kinds -----------------------------------------------------------------------------------

async def _http(spec: CheckSpec, started: float) -> _Outcome:
    resp = await http.request(spec.target, method=spec.method, headers=spec.headers, verify=spec.verify)
    ms = _ms(time.monotonic() - started)
    body = resp.body.decode("utf-8", "replace")
    evidence: dict[str, Any] = {"url": strip_userinfo(spec.target), "address": resp.address,
                                "status_code": resp.status, "latency_ms": ms}
    said = f"HTTP {resp.status} in {_ms_text(ms)}"
    good = resp.status in spec.expect_status if spec.expect_status else 200 <= resp.status < 400
    if not good:
        expected = ", ".join(map(str, spec.expect_status)) if spec.expect_status else "2xx or 3xx"
        raise _Fail(ServiceStatus.DOWN, f"{said}, expected {expected}", **evidence, body=clip(body, SNIPPET))
    if spec.contains is not None and spec.contains not in body:
        raise _Fail(ServiceStatus.DOWN, f"{said}, body lacks {spec.contains!r}", **evidence, body=clip(body, SNIPPET))
    return _Outcome(said, evidence)


async def _tcp(spec: CheckSpec, started: float) -> _Outcome:
    host, port = split_host_port(spec.target)
    _, writer, address = await net.connect(host, port)
    net.close(writer)
    ms = _ms(time.monotonic() - started)
    return _Outcome(f"connected to {address} in {_ms_text(ms)}", {"address": address, "latency_ms": ms})


async def _dns(spec: CheckSpec, started: float) -> _Outcome:
    found = await net.getaddrinfo(spec.target, None)
    addresses = sorted({info[4][0] for info in found})
    ms = _ms(time.monotonic() - started)
    if not addresses:
        raise _Fail(ServiceStatus.DOWN, f"{spec.target} resolves to no address", latency_ms=ms, addresses=[])
    shown = ", ".join(addresses[:5]) + (f" (+{len(addresses) - 5})" if len(addresses) > 5 else "")
    return _Outcome(f"{spec.target} → {shown} in {_ms_text(ms)}", {"addresses": addresses, "latency_ms": ms})


async def _tls(spec: CheckSpec, started: float) -> _Outcome:
    host, port = split_host_port(spec.target, 443)
    _, writer, address = await net.connect(host, port, tls=http.tls_context(spec.verify))
    try:
        tls = writer.get_extra_info("ssl_object")
        der = tls.getpeercert(binary_form=True) if tls is not None else None
        version = tls.version() if tls is not None else None
    finally:
        net.close(writer)
    ms = _ms(time.monotonic() - started)
    evidence: dict[str, Any] = {"address": address, "latency_ms": ms, "verified": spec.verify, "tls_version": version}
    if not der:
        raise _Fail(ServiceStatus.DOWN, f"{spec.target} sent no certificate", **evidence)
    try:
        not_before, not_after = x509.validity(der)
    except x509.CertificateError as exc:
        raise _Fail(ServiceStatus.DOWN, f"cannot read the certificate of {spec.target}: {exc}", **evidence) from None
    now = datetime.now(UTC)
    days = round((not_after - now).total_seconds() / 86400, 1)
    evidence |= {"not_before": not_before.isoformat().replace("+00:00", "Z"),
                 "not_after": not_after.isoformat().replace("+00:00", "Z"), "days_left": days}
    until = not_after.strftime("%Y-%m-%d")
    if not_after <= now:
        raise _Fail(ServiceStatus.DOWN, f"certificate expired {-days:g} days ago ({until})", **evidence)
    if not_before > now:
        raise _Fail(ServiceStatus.DOWN, f"certificate not valid before {not_before:%Y-%m-%d}", **evidence)
    min_days = spec.min_days if spec.min_days is not None else 0.0
    if days < min_days:
        raise _Fail(ServiceStatus.DEGRADED, f"certificate expires in {days:g} days ({until}), less than "
                                            f"{min_days:g}", **evidence)
    return _Outcome(f"certificate valid until {until} ({days:g} days left)", evidence)


async def _command(spec: CheckSpec, started: float) -> _Outcome:
    async with CommandRun(spec.target, spec.env) as run:
        try:
            async with asyncio.timeout(spec.timeout_s):
                code = await run.wait()
        except TimeoutError:
            ms = _ms(time.monotonic() - started)
            raise _Fail(ServiceStatus.UNREACHABLE, f"timed out after {format_duration(spec.timeout_s)} "
                                                   "(process group killed)", latency_ms=ms, exit_code=None,
                        output_tail=_tail(run.output.shown(redact_text)), error="timeout") from None
    ms = _ms(time.monotonic() - started)
    shown = run.output.shown(redact_text)  # redacted before any cut; the raw text only for `contains`
    evidence = {"exit_code": code, "latency_ms": ms, "output_tail": _tail(shown)}
    last = _one_line(shown.strip().splitlines()[-1]) if shown.strip() else ""
    if code != 0:
        why = f"exit {code}" if code > 0 else f"killed by signal {-code}"
        raise _Fail(ServiceStatus.DOWN, f"{why} in {_ms_text(ms)}" + (f": {last}" if last else ""), **evidence)
    if spec.contains is not None and spec.contains not in run.output.text():
        raise _Fail(ServiceStatus.DOWN, f"exit 0 in {_ms_text(ms)}, output lacks {spec.contains!r}", **evidence)
    return _Outcome(f"exit 0 in {_ms_text(ms)}" + (f": {last}" if last else ""), evidence)


def _tail(text: str) -> str:
    return clip(text, OUTPUT_TAIL, keep="tail")


_KINDS: dict[str, Callable[[CheckSpec, float], Awaitable[_Outcome]]] = {
    "http": _http, "tcp": _tcp, "dns": _dns, "tls": _tls, "command": _command}


# --- one check, all checks ----------------------------------------------------------------------

def _describe_error(spec: CheckSpec, exc: BaseException) -> tuple[ServiceStatus, str]:
    """The status and one-line summary of an exception a kind raised."""
    target = strip_userinfo(spec.target)
    if isinstance(exc, TimeoutError):
        return ServiceStatus.UNREACHABLE, f"no answer from {target} within {format_duration(spec.timeout_s)}"
    if isinstance(exc, socket.gaierror):
        return ServiceStatus.UNREACHABLE, f"cannot resolve {_host(spec)}: {exc.strerror or exc}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return ServiceStatus.DOWN, f"certificate of {target} not trusted: {exc.verify_message or exc.reason}"
    if isinstance(exc, ssl.SSLError):
        return ServiceStatus.DOWN, f"TLS with {target} failed: {exc.reason or exc}"
    if isinstance(exc, ConnectionRefusedError):
        return ServiceStatus.UNREACHABLE, f"connection to {target} refused"
    if isinstance(exc, OSError) and exc.errno in _UNREACHABLE_ERRNOS:
        return ServiceStatus.UNREACHABLE, f"{target}: {exc.strerror or exc}"
    if isinstance(exc, OSError):
        return ServiceStatus.DOWN, f"{target}: {exc.strerror or exc}"
    if isinstance(exc, http.HttpError | asyncio.LimitOverrunError | ValueError):
        return ServiceStatus.DOWN, f"{target}: {exc}"
    log.warning("check %s: unexpected %s", spec.name, type(exc).__name__, exc_info=exc)
    return ServiceStatus.DOWN, f"{target}: {type(exc).__name__}: {exc}"


def _host(spec: CheckSpec) -> str:
    if spec.kind == "http":
        return urlsplit(spec.target).hostname or spec.target
    if spec.kind in ("tcp", "tls"):
        return split_host_port(spec.target, 443)[0]
    return spec.target


async def run_check(spec: CheckSpec) -> CheckResult:
    """Run one check within its timeout; every failure is a result, never an exception (only
    cancellation propagates)."""
    started = time.monotonic()
    try:
        if spec.kind == "command":  # bounds itself, so that it can report the output and kill the group
            outcome = await _command(spec, started)
        else:
            async with asyncio.timeout(spec.timeout_s):
                outcome = await _KINDS[spec.kind](spec, started)
    except _Fail as fail:
        return _result(spec, False, fail.status, fail.summary, {**fail.evidence})
    except Exception as exc:
        if out_of_descriptors(exc):
            return _probe_error(spec, exc, _ms(time.monotonic() - started))
        status, summary = _describe_error(spec, exc)
        ms = _ms(time.monotonic() - started)
        error = "timeout" if isinstance(exc, TimeoutError) else _one_line(redact_text(str(exc)) or type(exc).__name__)
        return _result(spec, False, status, redact_text(summary), {"error": error, "latency_ms": ms})
    took = outcome.evidence.get("latency_ms")
    if spec.max_ms is not None and isinstance(took, float) and took > spec.max_ms:
        return _result(spec, False, ServiceStatus.DEGRADED, f"{outcome.summary}, slower than {spec.max_ms:g} ms",
                       outcome.evidence)
    return _result(spec, True, outcome.status, outcome.summary, outcome.evidence)


def _probe_error(spec: CheckSpec, exc: BaseException, ms: float) -> CheckResult:
    """The probe's own failure, not the target's: nothing was learnt about it (no incident opens,
    none resolves)."""
    why = (f"the probe ran out of file descriptors ({getattr(exc, 'strerror', None) or exc}) before it could check "
           f"this target; its open-files limit is {open_files_limit()}: raise LimitNOFILE= (examples/tierops.service) "
           "or lower the checks file's concurrency")
    log.warning("check %s: not checked: %s", spec.name, why)
    return CheckResult(name=spec.name, service=spec.service, kind=spec.kind, severity=spec.severity, ok=False,
                       status=ServiceStatus.UNREACHABLE, latency_ms=None, summary=f"not checked: {why}",
                       evidence={"error": "probe: too many open files", "latency_ms": ms}, probe_error=why)


def _result(spec: CheckSpec, ok: bool, status: ServiceStatus, summary: str, evidence: dict[str, Any]) -> CheckResult:
    latency = evidence.get("latency_ms")
    summary = _one_line(summary, 300)
    log.debug("check %s: %s %s", spec.name, status, summary)
    return CheckResult(name=spec.name, service=spec.service, kind=spec.kind, severity=spec.severity, ok=ok,
                       status=status, latency_ms=latency if isinstance(latency, float) else None, summary=summary,
                       evidence=evidence)


async def run_all(specs: Iterable[CheckSpec], on_start: Callable[[int, CheckSpec], None] | None = None,
                  on_result: Callable[[int, CheckResult], None] | None = None,
                  concurrency: int | None = None) -> list[CheckResult]:
    """Run the checks, at most ``concurrency`` at once (None: all at once); results in the order of
    ``specs``. ``on_start(i, spec)`` is called for every check before any runs, ``on_result(i,
    result)`` as each one ends. Cancelling stops them all (their command process groups killed)
    before it propagates."""
    specs = list(specs)
    if on_start is not None:
        for i, spec in enumerate(specs):
            on_start(i, spec)
    slots = asyncio.Semaphore(concurrency) if concurrency is not None else contextlib.nullcontext()

    async def one(i: int, spec: CheckSpec) -> CheckResult:
        async with slots:  # a check's timeout starts when it runs, not while it waits for a slot
            result = await run_check(spec)
        if on_result is not None:
            on_result(i, result)
        return result

    return list(await asyncio.gather(*(one(i, s) for i, s in enumerate(specs))))

