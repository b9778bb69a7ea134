"""Repo extensions (``TIEROPS_EXTENSIONS``): folders that bring checks, runbooks, skills and MCP servers.

Why a module of its own: operators mount infrastructure repositories (git checkouts) next to
TierOps, each with any of ``checks/*.yaml``, ``runbooks/``, ``skills/<name>/SKILL.md`` and
``mcp.json``. What an extension brings is data, never settings: its checks join the inventory
under names (and host names) prefixed by the extension's name, ``infra/api-health``, so they can
neither replace nor collide with the checks file's; its checks files may hold ``checks:`` and
``hosts:`` only (interval, concurrency, maintenance windows and routes are the operator's).

A broken extension never stops the others: discovery (:func:`discover`) records its problems and
leaves it out when unusable (missing folder, bad name, a name already taken); a checks file that
does not load is an :class:`~app.probe.inventory.InventoryError` naming that file and line, its
checks left out (:func:`load_merged`). Only ``tierops checks validate`` fails for it. A skill is
listed only when its ``SKILL.md`` is one the CLI takes as a skill (front matter with a
description) and asks for nothing a skill could be granted (:data:`SKILL_KEYS`).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.probe.frontmatter import FrontMatterError, split
from app.probe.inventory import (
    CheckSpec,
    Host,
    Inventory,
    InventoryError,
    build_inventory,
    load_inventory,
    parse_document,
)
from app.probe.inventory_rules import (
    Problem,
    duplicate_keys,
    runbook_problems,
    schema_problems,
    semantic_problems,
)
from app.probe.targets import NAME_PATTERN

log = logging.getLogger(__name__)

__all__ = ["EXTENSION_KEYS", "SKILL_KEYS", "Extension", "Merged", "Skill", "discover", "load_merged"]

EXTENSION_KEYS = ("checks", "hosts")  # what an extension's checks file may hold
SKILL_KEYS = frozenset({"name", "description", "when_to_use", "argument-hint", "version", "license", "metadata"})
MAX_CHECKS_FILES = 100
MAX_SKILLS = 100
SKILL_MAX_BYTES = 256 * 1024  # one SKILL.md
_NAME = re.compile(NAME_PATTERN)


@dataclass(frozen=True)
class Skill:
    name: str  # its folder's name under skills/
    path: Path  # that folder
    description: str


@dataclass
class Extension:
    name: str  # the folder's name
    path: Path
    usable: bool = True  # False: nothing of it is used (the folder is missing, its name is taken, …)
    checks_files: tuple[Path, ...] = ()
    runbooks_dir: Path | None = None
    skills: tuple[Skill, ...] = ()
    mcp_config: Path | None = None  # mcp.json, merged by the MCP settings (not read here)
    problems: list[str] = field(default_factory=list)

    def skill_folder(self, skill: Skill) -> str:
        """The skill's folder in the CLI's HOME, which the CLI lists it by: ``<extension>-<skill>``."""
        return f"{self.name}-{skill.name}"


@dataclass(frozen=True)
class Merged:
    """The checks file and what the extensions add to it."""

    inventory: Inventory | None  # None without a checks file
    extensions: tuple[Extension, ...]
    errors: tuple[InventoryError, ...]  # extension checks files that cannot be used (their checks left out)
    counts: dict[str, tuple[int, int]]  # extension → (checks, hosts) merged

    def problems(self) -> list[str]:
        """Every problem of every extension, one line each, naming the extension."""
        out = [f"extension {e.name}: {p}" for e in self.extensions for p in e.problems]
        return out + [f"extension checks file {line}" for err in self.errors for line in str(err).splitlines()]


def discover(dirs: Sequence[Path]) -> list[Extension]:
    """What each folder brings, in the order given; never raises (problems are recorded)."""
    found: list[Extension] = []
    taken: dict[str, Path] = {}
    for raw in dirs:
        path = raw.expanduser().absolute()
        ext = Extension(name=path.name, path=path)
        found.append(ext)
        why = _unusable(path, taken)
        if why:
            ext.usable = False
            ext.problems.append(why)
            continue
        taken[ext.name] = path
        try:
            _contents(ext)
        except OSError as exc:
            ext.usable = False
            ext.problems.append(f"{path} cannot be read ({exc.strerror}); check its permissions")
    return found


def _unusable(path: Path, taken: dict[str, Path]) -> str | None:
    if not path.exists():
        return f"no such folder {path}; mount it or remove it from TIEROPS_EXTENSIONS"
    if not path.is_dir():
        return f"{path} is not a folder; TIEROPS_EXTENSIONS lists folders"
    if not _NAME.match(path.name):
        return (f"the folder name {path.name!r} cannot name an extension: use 1-64 letters, digits, '.', '_' or "
                "'-', starting with a letter or digit (rename the folder or mount it under another name)")
    if path.name in taken:
        return f"another extension is already named {path.name!r} ({taken[path.name]}); mount one under another name"
    return None


def _contents(ext: Extension) -> None:
    root = ext.path.resolve()
    checks = ext.path / "checks"
    if checks.is_dir():
        files = sorted(p for p in checks.iterdir() if p.suffix in (".yaml", ".yml"))
        inside = [p for p in files if p.is_file() and p.resolve().is_relative_to(root)]
        for p in files:
            if p not in inside:
                ext.problems.append(f"checks/{p.name} is not a file inside the extension's folder: left out")
        if len(inside) > MAX_CHECKS_FILES:
            ext.problems.append(f"checks/ holds {len(inside)} YAML files; the first {MAX_CHECKS_FILES} are read")
        ext.checks_files = tuple(inside[:MAX_CHECKS_FILES])
        if not files:
            ext.problems.append("checks/ holds no *.yaml file")
    if (ext.path / "runbooks").is_dir():
        ext.runbooks_dir = ext.path / "runbooks"
    if (ext.path / "skills").is_dir():
        ext.skills = tuple(_skills(ext))
    mcp = ext.path / "mcp.json"
    if mcp.is_file():
        ext.mcp_config = mcp
    elif mcp.exists():
        ext.problems.append("mcp.json is not a file: left out")
    if not (ext.checks_files or ext.runbooks_dir or ext.skills or ext.mcp_config or ext.problems):
        ext.problems.append("brings nothing: no checks/*.yaml, runbooks/, skills/ or mcp.json")


def _skills(ext: Extension) -> list[Skill]:
    skills: list[Skill] = []
    for folder in sorted(p for p in (ext.path / "skills").iterdir() if p.is_dir()):
        why = _skill_problem(ext, folder)
        if isinstance(why, str):
            ext.problems.append(f"skill {folder.name}: {why}; left out")
        elif len(skills) >= MAX_SKILLS:
            ext.problems.append(f"more than {MAX_SKILLS} skills; the rest are left out")
            break
        else:
            skills.append(why)
    return skills


def _skill_problem(ext: Extension, folder: Path) -> Skill | str:
    """The skill in ``folder``, or why it cannot be handed to the CLI."""
    if not _NAME.match(folder.name):
        return "its folder name must be 1-64 letters, digits, '.', '_' or '-'"
    doc = folder / "SKILL.md"
    if doc.is_symlink() or not doc.is_file():
        return "no SKILL.md file in its folder"
    if not doc.resolve().is_relative_to(ext.path.resolve()):
        return "SKILL.md leaves the extension's folder"
    if doc.stat().st_size > SKILL_MAX_BYTES:
        return f"SKILL.md is over {SKILL_MAX_BYTES // 1024} KiB"
    try:
        front = split(doc.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        return "SKILL.md is not UTF-8 text"
    except FrontMatterError as exc:
        return f"SKILL.md {exc}"
    if front.data is None or not isinstance(front.data.get("description"), str) or not front.data["description"]:
        # The CLI lists a SKILL.md without a front matter description as a slash command, not a skill.
        return "SKILL.md needs a front matter with a description (the CLI takes nothing else for a skill)"
    refused = sorted(set(front.data) - SKILL_KEYS)
    if refused:
        return (f"its front matter asks for {', '.join(refused)}; an extension's skill may only describe itself "
                f"({', '.join(sorted(SKILL_KEYS))}): tool rules and hooks are TierOps' own")
    return Skill(name=folder.name, path=folder, description=" ".join(front.data["description"].split())[:300])


# --- checks: the checks file plus every extension's ---------------------------------------------

def load_merged(checks: Path | None, dirs: Sequence[Path]) -> Merged:
    """The checks file (its problems raise :class:`InventoryError`, as ``load_inventory``) with the
    checks and hosts of every usable extension that load; the others are in ``errors``. Without a
    checks file the extensions are still discovered and judged, and ``inventory`` is None."""
    main = load_inventory(checks) if checks is not None else None
    extensions = discover(dirs)
    errors: list[InventoryError] = []
    counts: dict[str, tuple[int, int]] = {}
    added: list[CheckSpec] = []
    hosts: list[Host] = []
    for ext in extensions:
        if not ext.usable:
            continue
        seen: dict[str, str] = {}
        n_checks = n_hosts = 0
        for file in ext.checks_files:
            try:
                specs, found_hosts = _extension_file(ext, file, seen)
            except InventoryError as exc:  # the caller tells (the probe on stderr, the supervisor's log, doctor)
                errors.append(exc)
                continue
            added += specs
            hosts += found_hosts
            n_checks, n_hosts = n_checks + len(specs), n_hosts + len(found_hosts)
        counts[ext.name] = (n_checks, n_hosts)
    inventory = None
    if main is not None:
        inventory = dataclasses.replace(main, checks=(*main.checks, *added), hosts=(*main.hosts, *hosts))
    return Merged(inventory, tuple(extensions), tuple(errors), counts)


def _extension_file(ext: Extension, file: Path, seen: dict[str, str]) -> tuple[list[CheckSpec], list[Host]]:
    """One extension checks file, its names prefixed; ``seen``: the extension's check names so far
    (name → where), a name repeated across its files is a problem at the second one."""
    data, lines, problems = parse_document(file)
    if isinstance(data, dict):
        for key in [k for k in data if k not in EXTENSION_KEYS and k in _OPERATOR_KEYS]:
            problems.append(Problem(lines.line([key], key=True), f"{key}: belongs to the operator's checks file "
                                    "(TIEROPS_CHECKS); an extension's checks file holds checks and hosts only"))
            del data[key]
    problems += duplicate_keys(lines) + schema_problems(data, lines) + semantic_problems(data, lines)
    problems += runbook_problems(data, lines, file.absolute().parent, root=ext.path)
    if not problems:
        for i, item in enumerate(data["checks"]):
            name = item["name"]
            if name in seen:
                problems.append(Problem(lines.line(["checks", i, "name"]), f"checks[{i}].name: duplicate check name "
                                        f"'{name}' (first in {seen[name]})"))
            seen.setdefault(name, f"checks/{file.name}:{lines.line(['checks', i, 'name'])}")
    if problems:
        raise InventoryError(file, problems)
    inv = build_inventory(file, data, lines)
    specs = [dataclasses.replace(c, name=f"{ext.name}/{c.name}", extension=ext.name) for c in inv.checks]
    found_hosts = [dataclasses.replace(h, name=f"{ext.name}/{h.name}", extension=ext.name) for h in inv.hosts]
    return specs, found_hosts


_OPERATOR_KEYS = ("interval", "concurrency", "maintenance", "notify")
