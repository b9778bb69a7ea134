"""Notification routes: which message goes to which Apprise URLs.

Why a module of its own: "critical to the pager, warnings to the team chat, the database team
hears about the database" is the first thing an on-call team configures, and it must be decided in
one place that the sender, ``tierops notify preview`` and the notifications page all ask. The shape
is Alertmanager's routing tree flattened to one ordered list (first match takes the message,
``continue: true`` lets the next matching one take it too), the fan-out is Apprise's tags; a
message no route matches goes to the URLs without a tag (the ``default`` route).

What it deliberately does: tags are given where the URLs are (``pager=pagerduty://…`` in
``TIEROPS_NOTIFY_URLS``), so the routes need not hold a secret; URLs written into a route are
masked and never stored: a stored message names its routes, not its URLs. Routes come from
``TIEROPS_NOTIFY_ROUTES`` (YAML or JSON) or else the checks file's ``notify: {routes: [...]}``,
every problem reported with its path. The rules in full: ARCHITECTURE.md, "Notifications".
"""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from app.config import Settings
from app.errors import ConfigError
from app.probe import yamltext
from app.probe.inventory import InventoryError, load_inventory

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_ROUTE", "SOURCES", "Route", "RouteError", "RouteTable", "Subject", "Target", "checks_mtime",
           "load_routes", "parse_routes", "parse_targets", "route_table"]

DEFAULT_ROUTE = "default"
ALL = "all"
SEVERITIES = ("info", "warning", "critical")
SOURCES = ("check", "model", "alert", "monitor")
ROUTES_MAX = 100
VALUES_MAX = 100
NAME_MAX = 64
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
# Apprise's text-config form: "tag1,tag2=scheme://…" (tags without spaces).
_TAGGED_URL = re.compile(r"^(?P<tags>[A-Za-z0-9_][A-Za-z0-9_.\-]*(?:,[A-Za-z0-9_][A-Za-z0-9_.\-]*)*)="
                         r"(?P<url>[A-Za-z][A-Za-z0-9+.\-]*://.*)$", re.S)
_MATCH_KEYS = ("severity", "service", "check", "source")
_ROUTE_KEYS = ("name", "match", "to", "continue")


class RouteError(ConfigError):
    """Routes that cannot be used; ``problems`` lists ``(path, message)``."""

    def __init__(self, where: str, problems: Sequence[tuple[str, str]]) -> None:
        self.where = where
        self.problems = list(problems)
        text = "; ".join(f"{path}: {message}" for path, message in self.problems[:10])
        more = f"; and {len(self.problems) - 10} more" if len(self.problems) > 10 else ""
        super().__init__(f"{where}: {text}{more}")


@dataclass(frozen=True)
class Target:
    """One Apprise URL the sender knows, with its tags (from ``TAG=URL``)."""

    url: str
    tags: frozenset[str] = frozenset()
    from_route: bool = False  # written in a route's ``to``, not in TIEROPS_NOTIFY_URLS


def parse_targets(urls: Iterable[str]) -> list[Target]:
    """``TIEROPS_NOTIFY_URLS`` entries → targets; ``pager,ops=json://…`` carries tags."""
    out = []
    for raw in urls:
        m = _TAGGED_URL.match(raw)
        if m:
            out.append(Target(m["url"], frozenset(t.lower() for t in m["tags"].split(","))))
        else:
            out.append(Target(raw))
    return out


@dataclass(frozen=True)
class Subject:
    """What a message is about, as routes see it."""

    severity: str
    source: str | None = None  # check | model | alert | monitor
    service: str | None = None
    check: str | None = None


@dataclass(frozen=True)
class Route:
    name: str
    severity: frozenset[str] | None = None
    services: tuple[str, ...] | None = None
    checks: tuple[str, ...] | None = None
    sources: frozenset[str] | None = None
    to: tuple[str, ...] = ()
    continue_: bool = False

    def matches(self, s: Subject) -> bool:
        if self.severity is not None and s.severity not in self.severity:
            return False
        if self.sources is not None and (s.source or "") not in self.sources:
            return False
        if self.services is not None and not _any_match(s.service, self.services):
            return False
        return self.checks is None or _any_match(s.check, self.checks)

    def describe(self) -> str:
        """``severity=critical service=db-*`` (``everything`` without matchers)."""
        parts = []
        if self.severity is not None:
            parts.append("severity=" + ",".join(x for x in SEVERITIES if x in self.severity))
        if self.services is not None:
            parts.append("service=" + ",".join(self.services))
        if self.checks is not None:
            parts.append("check=" + ",".join(self.checks))
        if self.sources is not None:
            parts.append("source=" + ",".join(x for x in SOURCES if x in self.sources))
        return " ".join(parts) or "everything"


def _any_match(value: str | None, patterns: Sequence[str]) -> bool:
    if value is None:
        return False
    return any(fnmatch.fnmatchcase(value.lower(), p.lower()) for p in patterns)


@dataclass
class RouteTable:
    """The routes in force and the URLs they reach. ``origin`` says where the routes came from."""

    routes: list[Route] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    origin: str = "no routes configured: every message to every URL"

    @classmethod
    def build(cls, urls: Sequence[str], routes: Sequence[Route], origin: str | None = None) -> RouteTable:
        targets = parse_targets(urls)
        known = {t.url for t in targets}
        for route in routes:
            for item in route.to:
                if _SCHEME.match(item) and item not in known:
                    targets.append(Target(item, from_route=True))
                    known.add(item)
        table = cls(list(routes), targets)
        if origin is not None:
            table.origin = origin
        return table

    @property
    def urls(self) -> list[str]:
        return [t.url for t in self.targets]

    def select(self, subject: Subject) -> list[str]:
        """The names of the routes that take a message about ``subject``, in order."""
        chosen: list[str] = []
        for route in self.routes:
            if route.matches(subject):
                chosen.append(route.name)
                if not route.continue_:
                    break
        return chosen or [DEFAULT_ROUTE]

    def route(self, name: str) -> Route | None:
        return next((r for r in self.routes if r.name == name), None)

    def indexes(self, names: Iterable[str]) -> list[int]:
        """The targets (by index) the named routes send to. An unknown name (the routes changed
        since the message was recorded) counts as the default route."""
        found: set[int] = set()
        for name in names:
            route = self.route(name) if name != DEFAULT_ROUTE else None
            if route is None:
                if name != DEFAULT_ROUTE:
                    log.warning("notification route %r no longer exists; its message goes to the default route", name)
                found.update(self._default())
                continue
            for item in route.to:
                found.update(self._resolve(item))
        return sorted(found)

    def _default(self) -> list[int]:
        own = [i for i, t in enumerate(self.targets) if not t.from_route]
        if not self.routes:
            return own
        return [i for i in own if not self.targets[i].tags]

    def _resolve(self, item: str) -> list[int]:
        if _SCHEME.match(item):
            return [i for i, t in enumerate(self.targets) if t.url == item]
        word = item.lower()
        if word == ALL:
            return [i for i, t in enumerate(self.targets) if not t.from_route]
        return [i for i, t in enumerate(self.targets) if word in t.tags]

    def unknown_tags(self) -> list[str]:
        """Tags routes send to that no URL carries (``tierops doctor``, the notifications page)."""
        have = {tag for t in self.targets for tag in t.tags}
        wanted = {item.lower() for r in self.routes for item in r.to if not _SCHEME.match(item) and item.lower() != ALL}
        return sorted(wanted - have)


# -- parsing ---------------------------------------------------------------------------------

def parse_routes(data: Any, where: str) -> list[Route]:
    """A list of route mappings → routes. Raises :class:`RouteError` naming every problem."""
    problems: list[tuple[str, str]] = []
    if data is None:
        return []
    if not isinstance(data, list):
        raise RouteError(where, [("$", f"must be a list of routes, got {_type(data)}")])
    if len(data) > ROUTES_MAX:
        raise RouteError(where, [("$", f"{len(data)} routes; at most {ROUTES_MAX}")])
    routes: list[Route] = []
    names: set[str] = set()
    for i, item in enumerate(data):
        path = f"$[{i}]"
        if not isinstance(item, dict):
            problems.append((path, f"a route is a mapping with name, match, to; got {_type(item)}"))
            continue
        before = len(problems)
        problems.extend((f"{path}.{key}", f"unknown key; a route has {', '.join(_ROUTE_KEYS)}")
                        for key in item if key not in _ROUTE_KEYS)
        name = item.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            problems.append((f"{path}.name", "required: 1-64 letters, digits, '.', '_' or '-'"))
        elif name == DEFAULT_ROUTE:
            problems.append((f"{path}.name", f"{DEFAULT_ROUTE!r} is the name of the route of unmatched messages"))
        elif name in names:
            problems.append((f"{path}.name", f"duplicate route name {name!r}"))
        else:
            names.add(name)
        match = item.get("match", {})
        if match is None:
            match = {}
        if not isinstance(match, dict):
            problems.append((f"{path}.match", f"must be a mapping of {', '.join(_MATCH_KEYS)}; got {_type(match)}"))
            match = {}
        problems.extend((f"{path}.match.{key}", f"unknown matcher; use {', '.join(_MATCH_KEYS)}")
                        for key in match if key not in _MATCH_KEYS)
        severity = _words(match, "severity", SEVERITIES, f"{path}.match", problems)
        sources = _words(match, "source", SOURCES, f"{path}.match", problems)
        services = _patterns(match, "service", f"{path}.match", problems)
        checks = _patterns(match, "check", f"{path}.match", problems)
        to = _targets(item.get("to"), f"{path}.to", problems)
        cont = item.get("continue", False)
        if not isinstance(cont, bool):
            problems.append((f"{path}.continue", f"must be true or false, got {_type(cont)}"))
            cont = False
        if len(problems) == before and isinstance(name, str):
            routes.append(Route(name=name, severity=severity, services=services, checks=checks, sources=sources,
                                to=to, continue_=cont))
    if problems:
        raise RouteError(where, problems)
    return routes


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _values(match: Mapping[str, Any], key: str, path: str, problems: list[tuple[str, str]]) -> list[str] | None:
    if key not in match:
        return None
    raw = match[key]
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        problems.append((f"{path}.{key}", "an empty list matches nothing; leave the matcher out to match everything"))
        return None
    if len(items) > VALUES_MAX:
        problems.append((f"{path}.{key}", f"{len(items)} values; at most {VALUES_MAX}"))
        return None
    out = []
    for j, v in enumerate(items):
        where = f"{path}.{key}" + (f"[{j}]" if isinstance(raw, list) else "")
        if not isinstance(v, str) or not v.strip() or len(v) > 200:
            problems.append((where, f"must be a non-empty string of at most 200 characters, got {_type(v)}"))
            continue
        out.append(v.strip())
    return out


def _words(match: Mapping[str, Any], key: str, allowed: Sequence[str], path: str,
           problems: list[tuple[str, str]]) -> frozenset[str] | None:
    values = _values(match, key, path, problems)
    if values is None:
        return None
    bad = [v for v in values if v.lower() not in allowed]
    if bad:
        problems.append((f"{path}.{key}", f"unknown {key} {bad[0]!r}; use {', '.join(allowed)}"))
        return None
    return frozenset(v.lower() for v in values)


def _patterns(match: Mapping[str, Any], key: str, path: str,
              problems: list[tuple[str, str]]) -> tuple[str, ...] | None:
    values = _values(match, key, path, problems)
    return tuple(values) if values is not None else None


def _targets(raw: Any, path: str, problems: list[tuple[str, str]]) -> tuple[str, ...]:
    if raw is None:
        problems.append((path, "required: Apprise tags, 'all', or Apprise URLs (an empty list drops the messages)"))
        return ()
    items = raw if isinstance(raw, list) else [raw]
    out = []
    for j, v in enumerate(items):
        where = f"{path}[{j}]" if isinstance(raw, list) else path
        if not isinstance(v, str) or not v.strip():
            problems.append((where, f"must be an Apprise tag or URL, got {_type(v)}"))
            continue
        v = v.strip()
        if not _SCHEME.match(v) and not _TAG.match(v):
            problems.append((where, "neither an Apprise URL (scheme://…) nor a tag (letters, digits, '.', '_', '-')"))
            continue
        out.append(v)
    return tuple(out)


def load_text(text: str, where: str) -> list[Route]:
    """Routes from YAML or JSON text (``TIEROPS_NOTIFY_ROUTES``)."""
    try:  # no aliases: a few hundred bytes of them stand for 10^9 nodes (app/probe/yamltext.py)
        data = yamltext.safe_load(text)
    except yamltext.Refused as exc:
        mark = exc.problem_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise RouteError(where, [("$", f"{at}{exc.problem}")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise RouteError(where, [("$", f"not YAML or JSON{at}: {getattr(exc, 'problem', None) or exc}")]) from None
    if isinstance(data, dict) and "routes" in data:
        data = data["routes"]
    return parse_routes(data, where)


def route_table(urls: Sequence[str], routes_text: str | None, checks_routes: Any = None,
                checks_where: str = "the checks file") -> RouteTable:
    """The route table from the setting's text (wins when set) or the checks file's
    ``notify.routes``; raises :class:`RouteError`."""
    if routes_text is not None and routes_text.strip():
        return RouteTable.build(urls, load_text(routes_text, "TIEROPS_NOTIFY_ROUTES"), "TIEROPS_NOTIFY_ROUTES")
    if checks_routes is not None:
        return RouteTable.build(urls, parse_routes(checks_routes, f"{checks_where}: notify.routes"),
                                f"{checks_where} (notify.routes)")
    return RouteTable.build(urls, [])


def load_routes(settings: Settings, urls: Sequence[str]) -> RouteTable:
    """The route table in force: ``TIEROPS_NOTIFY_ROUTES`` when set, else the checks file's
    ``notify.routes``. Raises :class:`RouteError` (a :class:`ConfigError`) when they are broken; a
    checks file that cannot be read gives no routes (the probe reports the file itself)."""
    text = settings.notify_routes.get_secret_value() if settings.notify_routes is not None else None
    if text is not None and text.strip():
        return route_table(urls, text)
    if settings.checks is not None:
        try:
            inv = load_inventory(settings.checks)
        except InventoryError:
            return route_table(urls, None)
        if inv.notify_routes is not None:
            return route_table(urls, None, inv.notify_routes, str(settings.checks))
    return route_table(urls, None)


def checks_mtime(settings: Settings) -> float | None:
    if settings.checks is None:
        return None
    try:
        return Path(settings.checks).stat().st_mtime
    except OSError:
        return None
