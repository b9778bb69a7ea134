"""The runbooks a language-model session is given: chosen for its incidents, read or fetched.

Why a module of its own: the chain knows which incidents a tier investigates (the ones tier 0
escalated, an alert's, an approved escalation's); this module turns them into the system prompt's
runbook section (``app/engine/runbooks.py`` renders it) and the rows recording it. For each open
incident, in order: its check's own ``runbook:``, its alert's runbook links (``runbook_url``),
then every runbook of ``TIEROPS_RUNBOOKS`` and of the extensions' ``runbooks/`` whose front
matter matches its service, check or alert name; one runbook matched twice is given once.

A URL is fetched with the standard library in a thread (http and https only, redirects too),
at most ``TIEROPS_RUNBOOK_FETCH_MAX_BYTES`` within ``TIEROPS_RUNBOOK_FETCH_TIMEOUT``; one that
fails is given as a link with the reason. Nothing here can stop a session: a folder's problems are
logged (once per process each) and shown by ``tierops doctor`` and ``/config``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from app import __version__
from app.config import Settings
from app.engine.alerts import is_link
from app.engine.runbooks import Piece, Runbook, Subject, inline, load_folder, matches, render
from app.probe.extensions import Merged, discover, load_merged
from app.probe.frontmatter import FrontMatterError, split
from app.probe.inventory import CheckSpec, InventoryError
from app.probe.inventory_rules import RUNBOOK_MAX_BYTES
from app.store import incidents as incident_store
from app.store.db import Database
from app.store.rows import IncidentRow
from app.store.runbooks import RunbookGiven
from app.vocab import IncidentStatus

log = logging.getLogger(__name__)

__all__ = ["FETCHES_MAX", "Fetched", "RunbookSection", "fetch", "library", "load_checks", "runbooks_for"]

FETCHES_MAX = 10  # URLs fetched for one session; more are linked
FOLDER_SOURCE = "the runbooks folder"
_warned: set[str] = set()


@dataclass(frozen=True)
class RunbookSection:
    text: str  # the system prompt's section ("" without runbooks)
    given: list[RunbookGiven] = field(default_factory=list)


def load_checks(settings: Settings) -> Merged | None:
    """The checks file with the extensions' checks, or None without one or when it does not load
    (the probe reports why). Blocking: call it in a thread."""
    if settings.checks is None:
        return None
    try:
        merged = load_merged(settings.checks, settings.extension_dirs())
    except InventoryError as exc:
        _warn(f"the checks file cannot be given to the tiers: {' '.join(str(exc).split())[:500]}")
        return None
    for problem in merged.problems():  # what the probe left out too (once per process each)
        _warn(problem)
    return merged


def library(settings: Settings) -> tuple[list[Runbook], list[str]]:
    """Every usable runbook of ``TIEROPS_RUNBOOKS`` and of the extensions, and every problem met.
    Blocking: call it in a thread."""
    found: list[Runbook] = []
    problems: list[str] = []
    if settings.runbooks is not None:
        books, bad = load_folder(settings.runbooks, source=FOLDER_SOURCE)
        found += books
        problems += [f"TIEROPS_RUNBOOKS {p}" for p in bad]
    for ext in discover(settings.extension_dirs()):
        if ext.usable and ext.runbooks_dir is not None:
            books, bad = load_folder(ext.runbooks_dir, source=f"extension {ext.name}", extension=ext.name,
                                     prefix="runbooks/")
            found += books
            problems += [f"extension {ext.name}: {p}" for p in bad]
    return found, problems


async def runbooks_for(db: Database, settings: Settings, incident_ids: Sequence[int],
                       checks: Merged | None) -> RunbookSection:
    """The runbook section for a tier investigating ``incident_ids`` (in that order; resolved ones
    are left out). ``checks``: :func:`load_checks`' answer, for the checks' own runbooks."""
    rows = {r["id"]: r for r in await incident_store.get_incidents(db, incident_ids, fresh=True)
            if r["status"] != IncidentStatus.RESOLVED}
    if not rows:
        return RunbookSection("")
    books, problems = await asyncio.to_thread(library, settings)
    for problem in problems:
        _warn(f"runbook skipped: {problem}")
    specs = {c.name: c for c in checks.inventory.checks} if checks and checks.inventory else {}
    roots = {e.name: e.path for e in checks.extensions} if checks else {}
    pieces: dict[str, Piece] = {}

    def add(key: str, piece: Piece, incident_id: int) -> None:
        old = pieces.get(key)
        if old is None:
            pieces[key] = replace(piece, incident_ids=(incident_id,))
        elif incident_id not in old.incident_ids:
            pieces[key] = replace(old, incident_ids=(*old.incident_ids, incident_id))

    for pk in dict.fromkeys(incident_ids):
        if (inc := rows.get(pk)) is None:
            continue
        subject = Subject(pk, inc["service"], inc["check_name"], inc["name"] if inc["origin"] == "alert" else None)
        spec = specs.get(inc["check_name"] or "")
        if spec is not None and spec.runbook:
            add(spec.runbook, await asyncio.to_thread(_check_piece, spec, roots, settings), pk)
        for url in _alert_urls(inc):
            name = inline(inc["name"] or inc["key"], 120)
            add(url, Piece(source=f"alert {name}", label=f"linked by alert `{name}`", origin=url, delivery="linked"),
                pk)
        for rb in books:
            if matches(rb, subject):
                label = f"from extension `{rb.extension}`" if rb.extension else f"from {FOLDER_SOURCE}"
                add(str(rb.path), Piece(source=rb.source, label=label, origin=rb.shown, delivery="file",
                                        text=rb.text, title=rb.title), pk)
    ordered = await _fetch_all(list(pieces.values()), settings)
    text, given = render(ordered, settings.runbook_budget)
    return RunbookSection(text, given)


def _check_piece(spec: CheckSpec, roots: dict[str, Path], settings: Settings) -> Piece:
    """A check's own runbook: a file read now, or a URL (fetched with the others)."""
    name = inline(spec.name, 120)
    source = f"extension {spec.extension}" if spec.extension else f"check {name}"
    label = f"of check `{name}`" + (f" from extension `{spec.extension}`" if spec.extension else "")
    where = spec.runbook or ""
    if "://" in where:
        return Piece(source=source, label=label, origin=where, delivery="linked")
    path = Path(where)
    base = roots.get(spec.extension or "") or (spec.file.parent if spec.file else path.parent)
    shown = path.relative_to(base).as_posix() if path.is_relative_to(base) else str(path)
    try:
        if path.stat().st_size > RUNBOOK_MAX_BYTES:
            raise OSError(f"over {RUNBOOK_MAX_BYTES // 1024} KiB")
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return Piece(source=source, label=label, origin=shown, delivery="linked",
                     error=f"cannot be read ({exc.strerror or exc})")
    title = None
    try:
        front = split(text)
        if front.data is not None:
            text, title = front.body, front.data.get("title")
    except FrontMatterError:
        pass  # named by the check itself: given whole, its front matter included
    return Piece(source=source, label=label, origin=shown, delivery="file", text=text,
                 title=inline(str(title), 200) if title is not None else None)


def _alert_urls(inc: IncidentRow) -> list[str]:
    """The runbook links an alert incident carries (its links labelled runbook, its runbook_url)."""
    urls = [link["url"] for link in inc.get("links") or [] if isinstance(link, dict)
            and str(link.get("label", "")).startswith("runbook") and isinstance(link.get("url"), str)]
    notes = inc.get("annotations")
    if isinstance(notes, dict) and isinstance(notes.get("runbook_url"), str):
        urls.append(notes["runbook_url"].strip())
    return [u for u in dict.fromkeys(urls) if is_link(u)]


async def _fetch_all(pieces: list[Piece], settings: Settings) -> list[Piece]:
    """Each URL piece fetched (at most :data:`FETCHES_MAX`, at once); the others as they are."""
    urls = [i for i, p in enumerate(pieces) if "://" in p.origin and p.delivery == "linked" and p.error is None]
    out = list(pieces)

    async def one(i: int) -> None:
        got = await asyncio.to_thread(fetch, pieces[i].origin, settings.runbook_fetch_timeout,
                                      settings.runbook_fetch_max_bytes)
        out[i] = replace(pieces[i], error=got.error) if got.text is None else replace(
            pieces[i], delivery="fetched", text=got.text, cut_note=(
                f"fetched text cut at {settings.runbook_fetch_max_bytes} bytes (TIEROPS_RUNBOOK_FETCH_MAX_BYTES)"
                if got.cut else None))

    async def bounded(i: int) -> None:
        try:  # the thread's own timeouts apply per socket operation; this bounds the whole fetch
            await asyncio.wait_for(one(i), settings.runbook_fetch_timeout + 1)
        except TimeoutError:
            out[i] = replace(pieces[i], error=f"no complete answer within {settings.runbook_fetch_timeout:g} s "
                                              "(TIEROPS_RUNBOOK_FETCH_TIMEOUT)")

    await asyncio.gather(*(bounded(i) for i in urls[:FETCHES_MAX]))
    for i in urls[FETCHES_MAX:]:
        out[i] = replace(pieces[i], error=f"more than {FETCHES_MAX} runbook URLs for one session")
    return out


def refused_host(url: str) -> str | None:
    """Why a runbook URL's host is not fetched, or None. Whoever may post an alert names the URL,
    so addresses that hold credentials rather than runbooks are refused: link-local (the cloud
    metadata services at 169.254.169.254 and fd00:ec2::254 among them), unspecified and multicast
    ones. Blocking (resolves the name)."""
    host = urlsplit(url).hostname
    if not host:
        return "the URL names no host"
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        return f"cannot resolve {host}: {exc}"
    for info in infos:
        ip = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if ip.is_link_local or ip.is_unspecified or ip.is_multicast or ip == METADATA_V6:
            return f"{host} is {ip}, a link-local, unspecified or multicast address (cloud metadata lives there)"
    return None


METADATA_V6 = ipaddress.ip_address("fd00:ec2::254")


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        if urlsplit(newurl).scheme not in ("http", "https"):
            raise urllib.error.URLError(f"redirected to a {urlsplit(newurl).scheme or 'relative'} URL; only http(s) "
                                        "is followed")
        if (why := refused_host(newurl)) is not None:
            raise urllib.error.URLError(f"redirected: {why}")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_HttpOnlyRedirects)


@dataclass(frozen=True)
class Fetched:
    text: str | None  # None: not fetched
    error: str | None = None  # why not
    cut: bool = False  # the answer was longer than the bytes read


def fetch(url: str, timeout: float, max_bytes: int) -> Fetched:
    """A runbook URL read as text (http and https only; at most ``max_bytes``), or why not.
    Blocking: call it in a thread."""
    if urlsplit(url).scheme not in ("http", "https"):
        return Fetched(None, "not an http:// or https:// URL")
    if (why := refused_host(url)) is not None:
        return Fetched(None, why)
    request = urllib.request.Request(url, headers={  # noqa: S310 - the scheme is http(s), checked above
        "User-Agent": f"TierOps/{__version__} (runbook)", "Accept": "text/markdown, text/plain;q=0.9, */*;q=0.5"})
    try:
        with _OPENER.open(request, timeout=timeout) as answer:
            kind = answer.headers.get_content_type()
            if not (kind.startswith("text/") or kind in ("application/json", "application/xml")):
                return Fetched(None, f"the answer is {kind}, not text")
            body = answer.read(max_bytes + 1)
            charset = answer.headers.get_content_charset() or "utf-8"
    except urllib.error.HTTPError as exc:
        return Fetched(None, f"HTTP {exc.code} {exc.reason}")
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            return Fetched(None, f"no answer within {timeout:g} s (TIEROPS_RUNBOOK_FETCH_TIMEOUT)")
        return Fetched(None, f"cannot fetch it: {exc.reason}")
    except TimeoutError:
        return Fetched(None, f"no answer within {timeout:g} s (TIEROPS_RUNBOOK_FETCH_TIMEOUT)")
    except (OSError, ValueError) as exc:
        return Fetched(None, f"cannot fetch it: {exc}")
    try:
        text = body[:max_bytes].decode(charset, errors="replace")
    except LookupError:
        text = body[:max_bytes].decode("utf-8", errors="replace")
    return Fetched(text, cut=len(body) > max_bytes)


def _warn(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning("%s", message)
