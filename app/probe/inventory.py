"""The checks file (issue #12): what tier 0 checks, and what the language-model tiers may reach.

Why a module of its own: an inventory is read by the probe every cycle, by ``tierops checks
validate|list``, and by the supervisor when it gives the language-model tiers their prompt; all
three must agree on what a valid file is and must report a broken one the same way.

A broken file is reported all at once, every problem as ``FILE:LINE: message``: YAML syntax
errors, violations of ``schemas/checks.json`` (each mapped back to the YAML line of the node it
is about), duplicate names and keys, durations out of range, malformed targets and options that
do not apply to the check's kind. Unknown keys are errors, so a typo (``tmeout``) never passes
silently with the default in its place. The ``maintenance:`` section (windows in which incidents
are recorded but nothing escalates) is parsed by ``app/probe/maintenance.py``, which the setting
``TIEROPS_MAINTENANCE`` shares; its problems are reported here like every other.

A problem never quotes a value that may be a secret: header values and whatever sits under a
secret-named key are described, not shown; every other quoted value is redacted before it is cut.

The YAML is read without aliases (``app/probe/yamltext.py``: a few hundred bytes of nested
aliases stand for 10^9 nodes). A command check's ``env:`` names the variables it may see (it
gets a minimal environment otherwise, ``app/probe/environment.py``); the CLI's and TierOps' own
(:func:`refused_name`) are problems of the file. ``concurrency`` caps the checks running at once
(``app/probe/limits.py`` may cap them lower, to fit the open-files limit).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlsplit

import yaml
from jsonschema import Draft202012Validator, ValidationError

from app.errors import InputError
from app.paths import BUNDLED_DIR
from app.probe import yamltext
from app.probe.maintenance import SOURCE_CHECKS_FILE, WindowSpec, parse_windows, restore_times
from app.probe.targets import (
    DURATION_PATTERN,
    NAME_PATTERN,
    format_duration,
    parse_duration,
    quote,
    redact_target,
    redact_text,
    split_host_port,
    valid_hostname,
)
from app.probe.variables import SERVE_VARIABLES, substitute
from app.redact import MASK, secret_name
from app.vocab import Level

log = logging.getLogger(__name__)

__all__ = [
    "CHECKS_SCHEMA_PATH",
    "KINDS",
    "CheckSpec",
    "Host",
    "Inventory",
    "InventoryError",
    "Kind",
    "Problem",
    "inventory_text",
    "load_inventory",
]

CHECKS_SCHEMA_PATH = BUNDLED_DIR / "schemas" / "checks.json"
Kind = Literal["http", "tcp", "dns", "tls", "command"]
KINDS: tuple[Kind, ...] = ("http", "tcp", "dns", "tls", "command")
DEFAULT_TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 600.0
MIN_INTERVAL_S = 10.0
DEFAULT_MIN_DAYS = 14.0
MAX_FILE_BYTES = 1024 * 1024
# Options that only mean something for some kinds.
_APPLIES_TO: dict[str, tuple[Kind, ...]] = {
    "status": ("http",), "method": ("http",), "headers": ("http",), "contains": ("http", "command"),
    "min_days": ("tls",), "verify": ("http", "tls"), "env": ("command",),
}
ENV_NAME_PATTERN = "^[A-Za-z_][A-Za-z0-9_]*$"
# Never given to a check, even by name: the claude CLI's credentials and settings, and TierOps' own.
_REFUSED_PREFIXES = (("ANTHROPIC_", "the claude CLI"), ("CLAUDE_CODE_", "the claude CLI"), ("TIEROPS_", "TierOps"))
_PATTERN_HINTS = {
    NAME_PATTERN: "use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
    DURATION_PATTERN: "use seconds or a duration such as 30s, 5m, 1h30m, 500ms",
    ENV_NAME_PATTERN: "use an environment variable's name: letters, digits and '_', not starting with a digit",
}


@dataclass(frozen=True)
class Host:
    name: str
    ssh: str | None
    description: str | None


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


@dataclass(frozen=True, order=True)
class Problem:
    line: int | None
    message: str


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


def refused_name(name: str) -> str | None:
    """Why the variable ``name`` may never be given to tier 0, or None: ``ANTHROPIC_*`` and
    ``CLAUDE_CODE_*`` (the claude CLI's), ``TIEROPS_*`` (TierOps'; ``serve``'s address excepted,
    which every check has)."""
    upper = name.upper()
    if upper in SERVE_VARIABLES:
        return None
    for prefix, owner in _REFUSED_PREFIXES:
        if upper.startswith(prefix):
            return f"{prefix}* variables belong to {owner} and never reach tier 0"
    return None


# --- loading -----------------------------------------------------------------------------------

def load_inventory(path: str | Path) -> Inventory:
    """The checks file at ``path``, validated; :class:`InventoryError` with every problem otherwise."""
    path = Path(path)
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
    data = _stringify_keys(data)
    lines = _Lines(root)
    if isinstance(data, dict) and "maintenance" in data:  # `start: 02:00` unquoted is 120 to YAML 1.1
        restore_times(data["maintenance"], lines.node(["maintenance"]))
    data, unknown = substitute(data)  # ${TIEROPS_SERVE_URL} and friends (app/probe/variables.py)
    problems = [Problem(lines.line(where), message) for where, message in unknown]
    problems += lines.duplicate_keys() + _schema_problems(data, lines) + _semantic_problems(data, lines)
    if problems:
        raise InventoryError(path, problems)
    inv = _build(path, data, lines)
    log.debug("loaded %s: %d checks, %d hosts", path, len(inv.checks), len(inv.hosts))
    return inv


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


def _stringify_keys(value: Any) -> Any:
    """YAML allows ``1:`` or ``on:`` as keys; JSON Schema sees text keys (reported as unknown)."""
    if isinstance(value, dict):
        return {str(k): _stringify_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_stringify_keys(v) for v in value]
    return value


class _Lines:
    """The YAML line of each node, by its JSON path (mapping keys, list indexes)."""

    def __init__(self, root: yaml.Node) -> None:
        self.root = root

    def node(self, path: Iterable[str | int], *, key: bool = False) -> yaml.Node:
        node = self.root
        steps = list(path)
        for i, step in enumerate(steps):
            if isinstance(node, yaml.MappingNode):
                found = [(k, v) for k, v in node.value if str(k.value) == str(step)]
                if not found:
                    return node
                k, v = found[-1]
                node = k if key and i == len(steps) - 1 else v
            elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
                node = node.value[step]
            else:
                return node
        return node

    def line(self, path: Iterable[str | int], *, key: bool = False) -> int:
        return self.node(path, key=key).start_mark.line + 1

    def duplicate_keys(self) -> list[Problem]:
        problems = []
        for path, node in _walk(self.root, []):
            seen: set[str] = set()
            for k, _ in node.value:
                name = str(k.value)
                if name in seen:
                    problems.append(Problem(k.start_mark.line + 1, f"{_where([*path, name])}: duplicate key "
                                                                   f"'{name}' (each key may appear once)"))
                seen.add(name)
        return problems


def _walk(node: yaml.Node, path: list[str | int]) -> Iterator[tuple[list[str | int], yaml.MappingNode]]:
    if isinstance(node, yaml.MappingNode):
        yield path, node
        for k, v in node.value:
            yield from _walk(v, [*path, str(k.value)])
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            yield from _walk(v, [*path, i])


def _where(path: Iterable[str | int]) -> str:
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out or "the file"


@cache
def _validator() -> Draft202012Validator:
    schema = json.loads(CHECKS_SCHEMA_PATH.read_text(encoding="utf-8"))
    return Draft202012Validator(schema)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
                       (list, "a list"), (dict, "a mapping")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


_TYPE_NAMES = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
               "array": "a list", "object": "a mapping", "null": "null"}


def _hidden(path: Iterable[str | int]) -> str | None:
    """Why a value at ``path`` is never quoted (None: it may be): header values carry credentials
    (``Authorization: Bearer …``), and so does whatever sits under a secret-named key."""
    for step in path:
        if step == "headers":
            return "(not shown: header values may be secrets)"
        if isinstance(step, str) and secret_name(step):
            return f"(not shown: {step!r} names a secret)"
    return None


def _masked(value: Any) -> Any:
    """``value`` with everything under a secret-named key (or ``headers``) replaced by the mask."""
    if isinstance(value, dict):
        return {k: MASK if isinstance(k, str) and (k == "headers" or secret_name(k)) else _masked(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def _short(value: Any, path: Iterable[str | int] = ()) -> str:
    """A value as a problem quotes it: never one that may be a secret (:func:`_hidden`), others
    with secret-named keys masked, redacted, and only then cut to 60 characters."""
    hidden = _hidden(path)
    return f"the value {hidden}" if hidden else quote(_masked(value))


def _schema_problems(data: Any, lines: _Lines) -> list[Problem]:
    problems: list[Problem] = []
    for error in _validator().iter_errors(data):
        if list(error.absolute_path)[:1] == ["maintenance"]:
            continue  # the maintenance section's own parser says what is wrong (_semantic_problems)
        problems.extend(_describe(error, lines))
    return problems


def _describe(error: ValidationError, lines: _Lines) -> list[Problem]:
    path = list(error.absolute_path)
    where, line, inst, rule = _where(path), lines.line(path), error.instance, error.validator
    if rule == "additionalProperties" and isinstance(inst, dict):
        allowed = list(_properties(error))
        return [Problem(lines.line([*path, k], key=True),
                        f"{_where([*path, k])}: unknown key '{k}' (allowed: {', '.join(allowed)})")
                for k in inst if k not in allowed]
    if rule == "required" and isinstance(inst, dict):
        missing = [k for k in cast(list[str], error.validator_value) if k not in inst]
        what = "the list of checks" if missing == ["checks"] else ""
        return [Problem(line, f"{where}: missing '{k}'" + (f" ({what})" if what else "")) for k in missing]
    if rule == "type" and not path:
        return [Problem(line, f"the file must be a mapping with a 'checks' list, not {_json_type(inst)}")]
    if rule == "type":
        want = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        expected = " or ".join(_TYPE_NAMES.get(str(w), str(w)) for w in want)
        shown = _hidden(path) or _short(inst, path)
        got = "nothing (an empty value)" if inst is None else f"{_json_type(inst)} {shown}"
        return [Problem(line, f"{where}: expected {expected}, got {got}")]
    if rule == "enum":
        choices = ", ".join(str(v) for v in cast(list[Any], error.validator_value))
        return [Problem(line, f"{where}: {_short(inst, path)} is not one of {choices}")]
    if rule == "pattern":
        hint = _PATTERN_HINTS.get(str(error.validator_value), f"must match {error.validator_value}")
        return [Problem(line, f"{where}: {_short(inst, path)} is not valid; {hint}")]
    if rule == "minItems" and path == ["checks"]:
        return [Problem(line, "checks: the list is empty; add at least one check")]
    if rule == "oneOf" and isinstance(inst, dict) and "name" in _properties(error):
        found = [k for k in KINDS if k in inst]
        return [Problem(line, f"{where}: give exactly one of {', '.join(KINDS)} (found {', '.join(found) or 'none'})")]
    if rule == "oneOf" and path and path[-1] == "status":
        return [Problem(line, f"{where}: expected a status code from 100 to 599 or a list of them, got "
                              f"{_short(inst, path)}")]
    if rule == "minLength":
        return [Problem(line, f"{where}: must not be empty")]
    if rule in ("minimum", "exclusiveMinimum", "maximum", "maxLength", "minItems"):
        bound = {"minimum": "at least", "exclusiveMinimum": "more than", "maximum": "at most",
                 "maxLength": "at most this many characters:", "minItems": "at least this many items:"}[str(rule)]
        return [Problem(line, f"{where}: must be {bound} {error.validator_value} (got {_short(inst, path)})")]
    if _hidden(path):  # jsonschema's own message quotes the value
        return [Problem(line, f"{where}: does not satisfy the schema's {rule!r} rule {_hidden(path)}")]
    return [Problem(line, f"{where}: {error.message.replace(repr(inst), _short(inst, path))}")]


def _properties(error: ValidationError) -> dict[str, Any]:
    """The ``properties`` of the schema an error is about ({} for a boolean schema)."""
    schema = error.schema
    props = schema.get("properties") if isinstance(schema, dict) else None
    return props if isinstance(props, dict) else {}


def _semantic_problems(data: Any, lines: _Lines) -> list[Problem]:
    """What JSON Schema cannot say: unique names, duration ranges, targets, options per kind. Runs on
    whatever the schema check found, skipping values of the wrong type (already reported)."""
    if not isinstance(data, dict):
        return []
    problems: list[Problem] = []
    interval = parse_duration(data.get("interval"))
    if interval is not None and 0 < interval < MIN_INTERVAL_S:
        problems.append(Problem(lines.line(["interval"]), f"interval: {format_duration(interval)} is too short; "
                                                          f"the minimum is {format_duration(MIN_INTERVAL_S)}"))
    if "maintenance" in data:
        _, found = parse_windows(data["maintenance"], SOURCE_CHECKS_FILE, ["maintenance"], lines=lines)
        problems += [Problem(lines.line(path), message) for path, message in found]
    routes = data.get("notify", {}).get("routes") if isinstance(data.get("notify"), dict) else None
    if isinstance(routes, list):  # the schema checks each route's shape; names must also be unique
        seen: set[str] = set()
        for i, route in enumerate(routes):
            name = route.get("name") if isinstance(route, dict) else None
            if isinstance(name, str) and name in seen:
                problems.append(Problem(lines.line(["notify", "routes", i, "name"]),
                                        f"notify.routes[{i}].name: {name!r} names an earlier route too; route "
                                        "names are unique"))
            elif isinstance(name, str):
                seen.add(name)
    for section in ("hosts", "checks"):
        items = data.get(section)
        if not isinstance(items, list):
            continue
        first: dict[str, int] = {}
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                continue
            name = item.get("name")
            if isinstance(name, str):
                if name in first:
                    what = "check" if section == "checks" else "host"
                    problems.append(Problem(lines.line([section, i, "name"]),
                                            f"{section}[{i}].name: duplicate {what} name '{name}' "
                                            f"(first at line {first[name]})"))
                else:
                    first[name] = lines.line([section, i, "name"])
            if section == "checks":
                problems += _check_problems(i, item, lines)
    return problems


def _check_problems(i: int, item: dict[str, Any], lines: _Lines) -> list[Problem]:
    problems: list[Problem] = []

    def add(key: str, message: str, *, at_key: bool = False) -> None:
        problems.append(Problem(lines.line(["checks", i, key], key=at_key), f"checks[{i}].{key}: {message}"))

    timeout = parse_duration(item.get("timeout"))
    if timeout is not None and timeout > MAX_TIMEOUT_S:
        add("timeout", f"{format_duration(timeout)} is too long; at most {format_duration(MAX_TIMEOUT_S)}")
    names = item.get("env")
    if isinstance(names, list):
        for j, name in enumerate(names):
            why = refused_name(name) if isinstance(name, str) else None
            if why is not None:
                problems.append(Problem(lines.line(["checks", i, "env", j]), f"checks[{i}].env[{j}]: {name}: {why}; "
                                        "give the check a variable of its own"))
    kinds = [k for k in KINDS if k in item]
    if len(kinds) != 1:
        return problems  # reported by the schema (exactly one kind)
    kind = kinds[0]
    for option, applies in _APPLIES_TO.items():
        if option in item and kind not in applies:
            add(option, f"applies only to {' and '.join(applies)} checks (this is a {kind} check)", at_key=True)
    target = item[kind]
    if not isinstance(target, str) or not target.strip():
        return problems
    if kind == "http":
        try:
            url = urlsplit(target)
            _ = url.port  # raises on a bad port
        except ValueError as exc:
            add(kind, f"{quote(redact_target(kind, target), 200)} is not a valid URL ({exc})")
        else:
            if url.scheme not in ("http", "https") or not url.hostname:
                add(kind, f"{quote(redact_target(kind, target), 200)} is not an http:// or https:// URL")
    elif kind in ("tcp", "tls"):
        try:
            split_host_port(target, 443 if kind == "tls" else None)
        except ValueError as exc:  # it quotes the target
            add(kind, redact_text(str(exc)))
    elif kind == "dns" and not valid_hostname(target.strip()):
        add(kind, f"{quote(target, 200)} is not a host name")
    return problems


def _build(path: Path, data: dict[str, Any], lines: _Lines) -> Inventory:
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
            line=lines.line(["checks", i]), env=tuple(item.get("env") or ())))
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
