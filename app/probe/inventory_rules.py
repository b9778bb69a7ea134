"""What is wrong with a checks file: every problem at its line, in an operator's words.

Why a module of its own: ``app/probe/inventory.py`` loads the file and builds the inventory; the
rules the file is held to are here. A broken file is reported all at once, each problem at the
YAML line of the node it is about (:class:`app.probe.yamltext.Lines`): violations of
``schemas/checks.json``, duplicate names and keys, durations out of range, malformed targets and
options that do not apply to the check's kind. Unknown keys are errors, so a typo (``tmeout``)
never passes silently with the default in its place.

A problem never quotes a value that may be a secret: header values and whatever sits under a
secret-named key are described, not shown; every other quoted value is redacted before it is cut.
A command check's ``env:`` may not name the claude CLI's or TierOps' own variables
(:func:`refused_name`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator, ValidationError

from app.paths import CHECKS_SCHEMA_PATH
from app.probe.maintenance import SOURCE_CHECKS_FILE, parse_windows
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
from app.probe.variables import SERVE_VARIABLES
from app.probe.yamltext import Lines
from app.redact import MASK, secret_name

log = logging.getLogger(__name__)

__all__ = [
    "ENV_NAME_PATTERN",
    "KINDS",
    "MAX_TIMEOUT_S",
    "MIN_INTERVAL_S",
    "RUNBOOK_MAX_BYTES",
    "Kind",
    "Problem",
    "duplicate_keys",
    "refused_name",
    "runbook_problems",
    "schema_problems",
    "semantic_problems",
    "where",
]

Kind = Literal["http", "tcp", "dns", "tls", "command"]
KINDS: tuple[Kind, ...] = ("http", "tcp", "dns", "tls", "command")
MAX_TIMEOUT_S = 600.0
MIN_INTERVAL_S = 10.0
RUNBOOK_MAX_BYTES = 256 * 1024  # one runbook file; the prompt's budget (TIEROPS_RUNBOOK_BUDGET) is far smaller
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


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with a checks file, at its line (None: the file as a whole)."""

    line: int | None
    message: str


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


def where(path: Iterable[str | int]) -> str:
    """A path as a problem names it: ``checks[2].http``, or ``the file`` for the root."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out or "the file"


def duplicate_keys(lines: Lines) -> list[Problem]:
    """Each key written twice in one mapping (YAML would keep the last one silently)."""
    problems = []
    for path, node in lines.mappings():
        seen: set[str] = set()
        for k, _ in node.value:
            name = str(k.value)
            if name in seen:
                problems.append(Problem(k.start_mark.line + 1, f"{where([*path, name])}: duplicate key "
                                                               f"'{name}' (each key may appear once)"))
            seen.add(name)
    return problems


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


def schema_problems(data: Any, lines: Lines) -> list[Problem]:
    problems: list[Problem] = []
    for error in _validator().iter_errors(data):
        if list(error.absolute_path)[:1] == ["maintenance"]:
            continue  # the maintenance section's own parser says what is wrong (_semantic_problems)
        problems.extend(_describe(error, lines))
    return problems


def _describe(error: ValidationError, lines: Lines) -> list[Problem]:
    path = list(error.absolute_path)
    here, line, inst, rule = where(path), lines.line(path), error.instance, error.validator
    if rule == "additionalProperties" and isinstance(inst, dict):
        allowed = list(_properties(error))
        return [Problem(lines.line([*path, k], key=True),
                        f"{where([*path, k])}: unknown key '{k}' (allowed: {', '.join(allowed)})")
                for k in inst if k not in allowed]
    if rule == "required" and isinstance(inst, dict):
        missing = [k for k in cast(list[str], error.validator_value) if k not in inst]
        what = "the list of checks" if missing == ["checks"] else ""
        return [Problem(line, f"{here}: missing '{k}'" + (f" ({what})" if what else "")) for k in missing]
    if rule == "type" and not path:
        return [Problem(line, f"the file must be a mapping with a 'checks' list, not {_json_type(inst)}")]
    if rule == "type":
        want = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        expected = " or ".join(_TYPE_NAMES.get(str(w), str(w)) for w in want)
        shown = _hidden(path) or _short(inst, path)
        got = "nothing (an empty value)" if inst is None else f"{_json_type(inst)} {shown}"
        return [Problem(line, f"{here}: expected {expected}, got {got}")]
    if rule == "enum":
        choices = ", ".join(str(v) for v in cast(list[Any], error.validator_value))
        return [Problem(line, f"{here}: {_short(inst, path)} is not one of {choices}")]
    if rule == "pattern":
        hint = _PATTERN_HINTS.get(str(error.validator_value), f"must match {error.validator_value}")
        return [Problem(line, f"{here}: {_short(inst, path)} is not valid; {hint}")]
    if rule == "minItems" and path == ["checks"]:
        return [Problem(line, "checks: the list is empty; add at least one check")]
    if rule == "oneOf" and isinstance(inst, dict) and "name" in _properties(error):
        found = [k for k in KINDS if k in inst]
        return [Problem(line, f"{here}: give exactly one of {', '.join(KINDS)} (found {', '.join(found) or 'none'})")]
    if rule == "oneOf" and path and path[-1] == "status":
        return [Problem(line, f"{here}: expected a status code from 100 to 599 or a list of them, got "
                              f"{_short(inst, path)}")]
    if rule == "minLength":
        return [Problem(line, f"{here}: must not be empty")]
    if rule in ("minimum", "exclusiveMinimum", "maximum", "maxLength", "minItems"):
        bound = {"minimum": "at least", "exclusiveMinimum": "more than", "maximum": "at most",
                 "maxLength": "at most this many characters:", "minItems": "at least this many items:"}[str(rule)]
        return [Problem(line, f"{here}: must be {bound} {error.validator_value} (got {_short(inst, path)})")]
    if _hidden(path):  # jsonschema's own message quotes the value
        return [Problem(line, f"{here}: does not satisfy the schema's {rule!r} rule {_hidden(path)}")]
    return [Problem(line, f"{here}: {error.message.replace(repr(inst), _short(inst, path))}")]


def _properties(error: ValidationError) -> dict[str, Any]:
    """The ``properties`` of the schema an error is about ({} for a boolean schema)."""
    schema = error.schema
    props = schema.get("properties") if isinstance(schema, dict) else None
    return props if isinstance(props, dict) else {}


def semantic_problems(data: Any, lines: Lines) -> list[Problem]:
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


def _check_problems(i: int, item: dict[str, Any], lines: Lines) -> list[Problem]:
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


def runbook_problems(data: Any, lines: Lines, base: Path, root: Path | None = None) -> list[Problem]:
    """Each check's ``runbook:``: an http(s) URL, or a file relative to ``base`` (the checks file's
    folder) that exists, is at most :data:`RUNBOOK_MAX_BYTES` and, with ``root`` (an extension's
    folder), stays inside it: an extension's runbook is one of its own files."""
    checks = data.get("checks") if isinstance(data, dict) else None
    if not isinstance(checks, list):
        return []
    problems: list[Problem] = []
    for i, item in enumerate(checks):
        value = item.get("runbook") if isinstance(item, dict) else None
        if not isinstance(value, str) or not value.strip():
            continue  # the schema reports the type
        why = _runbook_problem(value.strip(), base, root)
        if why:
            problems.append(Problem(lines.line(["checks", i, "runbook"]), f"checks[{i}].runbook: {why}"))
    return problems


def _runbook_problem(value: str, base: Path, root: Path | None) -> str | None:
    if "://" in value:
        url = urlsplit(value)
        if url.scheme not in ("http", "https") or not url.hostname:
            return f"{quote(redact_text(value), 200)} is not an http:// or https:// URL (or a file's path)"
        return None
    if root is not None and Path(value).is_absolute():
        return f"{quote(value, 200)}: an extension names its runbook by a path relative to this file"
    path = (base / value).resolve()
    if root is not None and not path.is_relative_to(root.resolve()):
        return f"{quote(value, 200)} leaves the extension's folder {root}: an extension's runbook is one of its own files"
    try:
        st = path.stat()
    except FileNotFoundError:
        return f"no such file {path}; give the runbook's path relative to this checks file"
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror})"
    if path.is_dir():
        return f"{path} is a folder; name the runbook file itself"
    if st.st_size > RUNBOOK_MAX_BYTES:
        return f"{path} is {st.st_size} bytes; a runbook is at most {RUNBOOK_MAX_BYTES // 1024} KiB"
    return None
