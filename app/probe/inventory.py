"""The checks file: what tier 0 checks, and what the language-model tiers may reach.

Why a module of its own: an inventory is read by the probe every cycle, by ``tierops checks
validate|list``, and by the supervisor when it gives the language-model tiers their prompt; all
three must agree on what a valid file is and must report a broken one the same way.

Loading reads the YAML without aliases (``app/probe/yamltext.py``), substitutes ``serve``'s
address (``app/probe/variables.py``) and raises :class:`InventoryError` with every problem at once,
as ``FILE:LINE: message`` (the rules: ``app/probe/inventory_rules.py``; the ``maintenance:``
section's, shared with ``TIEROPS_MAINTENANCE``: ``app/probe/maintenance.py``). ``concurrency`` caps
the checks running at once (``app/probe/limits.py`` may cap them lower, to fit the open-files
limit); a command check's ``env:`` names the variables it may see (``app/probe/environment.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from app.errors import InputError
from app.probe import yamltext
from app.probe.inventory_rules import (
    KINDS,
    Kind,
    Problem,
    duplicate_keys,
    runbook_problems,
    schema_problems,
    semantic_problems,
)
from app.probe.maintenance import SOURCE_CHECKS_FILE, WindowSpec, parse_windows, restore_times
from app.probe.targets import parse_duration, redact_target, redact_text
from app.probe.variables import substitute
from app.vocab import Level

log = logging.getLogger(__name__)

__all__ = [
    "CheckSpec",
    "Host",
    "Inventory",
    "InventoryError",
    "build_inventory",
    "inventory_text",
    "load_inventory",
    "parse_document",
]

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MIN_DAYS = 14.0
MAX_FILE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Host:
    name: str
    ssh: str | None
    description: str | None
    extension: str | None = None  # the extension that brought it (its name prefixed), None: the checks file


@dataclass(frozen=True)
class CheckSpec:
    name: str
    service: str
    kind: Kind
    target: str
    severity: Level = Level.WARNING
    timeout_s: float = DEFAULT_TIMEOUT_S
    expect_status: tuple[int, ...] = ()  # empty: any 2xx or 3xx
    contains: str | None = None
    max_ms: float | None = None
    min_days: float | None = None  # tls: DEFAULT_MIN_DAYS unless given
    verify: bool = True
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    description: str | None = None
    line: int | None = None
    env: tuple[str, ...] = ()  # command: variables passed on from the probe's environment
    runbook: str | None = None  # an http(s) URL, or the runbook file's absolute path (checked at load)
    extension: str | None = None  # the extension that brought it (its name prefixed), None: the checks file
    file: Path | None = field(default=None, compare=False)  # the file it is written in (with ``line``)

    @property
    def origin(self) -> str:
        """Where the check is written: ``checks.yaml:12`` or ``extension infra (checks/web.yaml:12)``."""
        where = f"{self.file.name if self.file else '?'}:{self.line or '?'}"
        if self.extension is None:
            return where
        shown = "/".join(self.file.parts[-2:]) if self.file else "?"
        return f"extension {self.extension} ({shown}:{self.line or '?'})"

    @property
    def shown_target(self) -> str:
        """The target as any stream line or prompt may show it (no URL password, no secret)."""
        return redact_target(self.kind, self.target)


@dataclass(frozen=True)
class Inventory:
    path: Path
    interval_s: float | None
    hosts: tuple[Host, ...]
    checks: tuple[CheckSpec, ...]
    maintenance: tuple[WindowSpec, ...] = ()
    notify_routes: list[dict[str, Any]] | None = None  # notify.routes, as written (app/notify/routes.py reads them)
    concurrency: int | None = None  # at most this many checks at once (None: as the open-files limit allows)


class InventoryError(InputError):
    """A checks file that cannot be used; ``str()`` is one ``FILE:LINE: message`` per problem, in
    line order (``FILE: message`` when no line applies)."""

    def __init__(self, path: Path, problems: Iterable[Problem]) -> None:
        self.path = path
        self.problems = sorted(set(problems), key=lambda p: (p.line or 0, p.message))
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(f"{self.path}:{p.line}: {p.message}" if p.line else f"{self.path}: {p.message}"
                         for p in self.problems)


# --- loading -----------------------------------------------------------------------------------

def load_inventory(path: str | Path) -> Inventory:
    """The checks file at ``path``, validated; :class:`InventoryError` with every problem otherwise.
    The extensions' checks are merged by ``app/probe/extensions.py``."""
    path = Path(path)
    data, lines, problems = parse_document(path)
    problems += duplicate_keys(lines) + schema_problems(data, lines) + semantic_problems(data, lines)
    problems += runbook_problems(data, lines, path.absolute().parent)
    if problems:
        raise InventoryError(path, problems)
    inv = build_inventory(path, data, lines)
    log.debug("loaded %s: %d checks, %d hosts", path, len(inv.checks), len(inv.hosts))
    return inv


def parse_document(path: Path) -> tuple[Any, yamltext.Lines, list[Problem]]:
    """A checks file read, parsed without aliases, its ``${…}`` variables substituted: the data, its
    line map and the unknown variables; :class:`InventoryError` for what stops the rules looking."""
    text = _read(path)
    try:  # no aliases: a few hundred bytes of them stand for 10^9 nodes (app/probe/yamltext.py)
        root = yamltext.compose(text)
        data = yamltext.safe_load(text)
    except yamltext.Refused as exc:
        mark = exc.problem_mark
        raise InventoryError(path, [Problem(mark.line + 1 if mark else None, str(exc.problem))]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = redact_text(" ".join(str(x) for x in (exc.context, exc.problem) if x))
        raise InventoryError(path, [Problem(mark.line + 1 if mark else None, f"YAML syntax error: {what}")]) from None
    except yaml.YAMLError as exc:
        raise InventoryError(path, [Problem(None, f"YAML error: {redact_text(str(exc))}")]) from None
    if root is None or data is None:
        raise InventoryError(path, [Problem(None, "the file is empty; it must be a mapping with a 'checks' list "
                                                  "(see schemas/checks.json)")])
    data = yamltext.stringify_keys(data)
    lines = yamltext.Lines(root)
    if isinstance(data, dict) and "maintenance" in data:  # `start: 02:00` unquoted is 120 to YAML 1.1
        restore_times(data["maintenance"], lines.node(["maintenance"]))
    data, unknown = substitute(data)  # ${TIEROPS_SERVE_URL} and friends (app/probe/variables.py)
    return data, lines, [Problem(lines.line(where), message) for where, message in unknown]


def _runbook(path: Path, value: str | None) -> str | None:
    if not value or not value.strip():
        return None
    value = value.strip()
    return value if "://" in value else str((path.absolute().parent / value).resolve())


def _read(path: Path) -> str:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InventoryError(path, [Problem(None, f"the file is {size} bytes; a checks file is at most 1 MiB")])
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        why = "no such file; pass the checks file you meant (--checks FILE) or set TIEROPS_CHECKS"
    except IsADirectoryError:
        why = "is a directory; give the checks file (YAML) itself"
    except UnicodeDecodeError:
        why = "is not UTF-8 text; save the checks file as UTF-8 YAML"
    except OSError as exc:
        why = f"cannot be read ({exc.strerror}); check its permissions"
    raise InventoryError(path, [Problem(None, why)])


def build_inventory(path: Path, data: dict[str, Any], lines: yamltext.Lines) -> Inventory:
    """The inventory of a document the rules found nothing wrong with."""
    hosts = tuple(Host(name=h["name"], ssh=h.get("ssh"), description=h.get("description"))
                  for h in data.get("hosts") or [])
    checks = []
    for i, item in enumerate(data["checks"]):
        kind = next(k for k in KINDS if k in item)
        status = item.get("status")
        timeout = parse_duration(item.get("timeout"))
        checks.append(CheckSpec(
            name=item["name"], service=item.get("service") or item["name"], kind=kind, target=item[kind].strip(),
            severity=Level(item.get("severity", Level.WARNING)),
            timeout_s=DEFAULT_TIMEOUT_S if timeout is None else timeout,
            expect_status=tuple(status) if isinstance(status, list) else (status,) if isinstance(status, int) else (),
            contains=item.get("contains"),
            max_ms=float(item["max_ms"]) if "max_ms" in item else None,
            min_days=float(item.get("min_days", DEFAULT_MIN_DAYS)) if kind == "tls" else None,
            verify=item.get("verify", True), method=item.get("method", "GET"),
            headers=tuple((item.get("headers") or {}).items()), description=item.get("description"),
            line=lines.line(["checks", i]), env=tuple(item.get("env") or ()),
            runbook=_runbook(path, item.get("runbook")), file=path.absolute()))
    windows, _ = parse_windows(data.get("maintenance") or [], SOURCE_CHECKS_FILE, ["maintenance"], lines=lines)
    return Inventory(path=path, interval_s=parse_duration(data.get("interval")), hosts=hosts, checks=tuple(checks),
                     maintenance=tuple(windows),
                     notify_routes=(data.get("notify") or {}).get("routes"), concurrency=data.get("concurrency"))


# --- the language-model tiers' view -----------------------------------------------------------

def inventory_text(inv: Inventory, failing: Iterable[str] = ()) -> str:
    """A compact markdown block for the language-model tiers' prompt: the hosts and how to reach
    them, then each service with its checks (secrets removed), the failing ones marked."""
    bad = set(failing)
    out = [f"## Inventory ({inv.path.name}: {len(inv.checks)} checks, {len(bad & {c.name for c in inv.checks})} "
           "failing)"]
    if inv.hosts:
        out.append("Hosts:")
        for h in inv.hosts:
            how = f" — ssh {h.ssh}" if h.ssh else ""
            desc = f" ({_clip(h.description, 80)})" if h.description else ""
            out.append(f"- {h.name}{how}{desc}")
    out.append("Services and their checks (kind target, severity):")
    services: dict[str, list[CheckSpec]] = {}
    for c in inv.checks:
        services.setdefault(c.service, []).append(c)
    for service, specs in services.items():
        parts = [f"{c.name} ({c.kind} {_clip(c.shown_target, 80)}, {c.severity})"
                 + (" **FAILING**" if c.name in bad else "") for c in specs]
        out.append(f"- {service}: " + "; ".join(parts))
    return "\n".join(out) + "\n"


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
