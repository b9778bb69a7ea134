"""Resolving and connecting for the checks, so that a hung resolver never holds the probe.

Why a module of its own: asyncio resolves names in its default thread pool, and both
``asyncio.run`` and the interpreter's exit wait for every thread of that pool. A resolver that
hangs (an unreachable DNS server, a stuck NSS module) would then hold the probe long past the
check's timeout. Here each lookup runs in a daemon thread of its own: the check gives up at its
timeout, and the thread, if it is still waiting, dies with the process. Connections are made to
the resolved addresses directly, so asyncio never resolves anything itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
from typing import Any

from app.probe.targets import is_ip

log = logging.getLogger(__name__)

__all__ = ["close", "connect", "resolve"]

Address = tuple[int, Any]  # (family, sockaddr)


async def getaddrinfo(host: str, port: int | None, *, kind: int = socket.SOCK_STREAM) -> list[Any]:
    """``socket.getaddrinfo`` in a daemon thread (see the module docstring)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[list[Any]] = loop.create_future()

    def deliver(result: list[Any] | None, error: BaseException | None) -> None:
        if future.done():  # the check gave up (timeout, cancelled)
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result or [])

    def work() -> None:
        try:
            result = socket.getaddrinfo(host, port, type=kind)
        except BaseException as exc:  # delivered to the awaiting check, whatever it is
            outcome: tuple[list[Any] | None, BaseException | None] = (None, exc)
        else:
            outcome = (result, None)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody is waiting
            loop.call_soon_threadsafe(deliver, *outcome)

    threading.Thread(target=work, name=f"probe-resolve-{host}", daemon=True).start()
    return await future


async def resolve(host: str, port: int) -> list[Address]:
    """The addresses to try for ``host:port``, IPv4 and IPv6 alike, without duplicates."""
    if is_ip(host):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return [(family, (host, port))]
    found: list[Address] = []
    for family, _type, _proto, _name, sockaddr in await getaddrinfo(host, port):
        if (family, sockaddr) not in found:
            found.append((family, sockaddr))
    return found


async def connect(host: str, port: int, *, tls: ssl.SSLContext | None = None,
                  limit: int = 2 ** 16) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, str]:
    """A connection to the first address of ``host`` that answers (TLS with ``host`` as the server
    name when ``tls`` is given), and the address as text. Raises the last address's error."""
    loop = asyncio.get_running_loop()
    last: OSError | None = None
    for family, sockaddr in await resolve(host, port):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, sockaddr)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        except BaseException:  # cancelled (the check's timeout): no socket left open
            sock.close()
            raise
        shown = f"[{sockaddr[0]}]:{sockaddr[1]}" if family == socket.AF_INET6 else f"{sockaddr[0]}:{sockaddr[1]}"
        try:
            reader, writer = await asyncio.open_connection(
                sock=sock, ssl=tls, server_hostname=(host if tls is not None else None), limit=limit,
                ssl_handshake_timeout=None if tls is None else 3600.0)  # the check's own timeout bounds it
        except BaseException:
            sock.close()
            raise
        return reader, writer, shown
    if last is None:
        raise socket.gaierror(socket.EAI_NONAME, f"{host} has no address")
    raise last


def close(writer: asyncio.StreamWriter) -> None:
    """Close at once, never waiting on the peer: a TLS connection is aborted rather than shut down
    with close_notify, which a misbehaving server could leave unanswered."""
    if writer.get_extra_info("ssl_object") is not None:
        writer.transport.abort()
    else:
        writer.close()
