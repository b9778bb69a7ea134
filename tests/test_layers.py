"""The shape of the package: storage owns every SQL statement, imports point down the line.

The lifecycle line is ``probe → stream → output → store → engine → notify → supervisor → web → cli``; a module may
import its own layer and the layers before it, never one after it. Below them all sits the
foundation (``clock``, ``vocab``, ``errors``, ``paths``, ``tasks``, ``config``, ``config_sources``, ``placement``, ``redact``),
which imports nothing but itself. Outside ``app/store/`` no module may hold a connection, call
``execute``/``fetch…``, open a transaction or contain SQL text.

Read with :mod:`ast`, not grep: a docstring that *mentions* SELECT is fine, a string that *is*
SQL is not; ``TYPE_CHECKING`` imports count like any other. The house also keeps its shape: no two
modules import each other (directly or around a circle), no module passes 550 lines, and the code
states rules, not the tracker's history (no "issue #N" in ``app/``, shipped migration SQL aside)
and module docstrings stay short.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[1] / "app"

FOUNDATION = {"app", "app.clock", "app.vocab", "app.errors", "app.paths", "app.tasks", "app.config", "app.config_sources", "app.placement", "app.redact",
              "app.logs", "app.units", "app.children"}
LINE = ["probe", "stream", "output", "store", "engine", "notify", "supervisor", "web", "cli"]
RANK = {name: i for i, name in enumerate(LINE)}

SQL_CALLS = {"execute", "executemany", "executescript", "fetchall", "fetchone", "fetchval", "fetchmany"}
DB_CONTEXTS = {"write", "read", "read_fresh"}
SQL_TEXT = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE\s+FROM|CREATE\s+(TABLE|INDEX|TRIGGER)|ALTER\s+TABLE|"
                      r"PRAGMA|BEGIN|COMMIT|ROLLBACK|WITH\s+\w+\s+AS)\b")
DB_MODULES = {"sqlite3", "aiosqlite"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(APP.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer(module: str) -> int | None:
    """None for the foundation; otherwise the position on the lifecycle line."""
    if module in FOUNDATION:
        return None
    parts = module.split(".")
    name = parts[1] if len(parts) > 1 else parts[0]
    if name == "__main__":
        name = "cli"
    if name not in RANK:
        raise AssertionError(f"{module}: not on the lifecycle line {LINE} nor in the foundation; place it")
    return RANK[name]


def _modules() -> dict[str, ast.Module]:
    return {_module_name(p): ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in sorted(APP.rglob("*.py"))}


def _imports(tree: ast.Module, module: str) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    package = module if module == "app" or tree_is_package(module) else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the package
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            # ``from app.store import sessions`` imports the submodule app.store.sessions
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names
                      if (APP.parent / Path(*f"{target}.{alias.name}".split("."))).with_suffix(".py").exists()]
    return [(line, name) for line, name in found if name == "app" or name.startswith("app.")]


def tree_is_package(module: str) -> bool:
    return (APP.parent / Path(*module.split(".")) / "__init__.py").exists()


def _docstring_nodes(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _receiver_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


@dataclass(frozen=True)
class Site:
    module: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.what}"


def sql_sites(modules: dict[str, ast.Module]) -> list[Site]:
    """Every place outside app/store that touches SQL: calls, transactions, DB modules, SQL text."""
    sites: list[Site] = []
    for module, tree in modules.items():
        if module == "app.store" or module.startswith("app.store."):
            continue
        docstrings = _docstring_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                attr = node.func.attr
                if attr in SQL_CALLS:
                    sites.append(Site(module, node.lineno, f".{attr}(…)"))
                elif attr in DB_CONTEXTS and _receiver_name(node.func.value).endswith("db"):
                    sites.append(Site(module, node.lineno, f"db.{attr}()"))
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                sites += [Site(module, node.lineno, f"import {n}") for n in names if n.split(".")[0] in DB_MODULES]
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                  and SQL_TEXT.match(node.value)):
                sites.append(Site(module, node.lineno, f"SQL text {node.value.strip()[:40]!r}"))
    return sites


def upward_imports(modules: dict[str, ast.Module]) -> list[Site]:
    bad: list[Site] = []
    for module, tree in modules.items():
        mine = _layer(module)
        for line, target in _imports(tree, module):
            theirs = _layer(target) if target in modules else _layer(target.rpartition(".")[0] or target)
            if mine is None and theirs is not None:
                bad.append(Site(module, line, f"foundation module imports {target} ({LINE[theirs]})"))
            elif mine is not None and theirs is not None and theirs > mine:
                bad.append(Site(module, line, f"{LINE[mine]} imports {target} ({LINE[theirs]}), up the line"))
    return bad


def test_no_sql_outside_the_store() -> None:
    sites = sql_sites(_modules())
    assert sites == [], "SQL outside app/store/ (add a named function to a store module):\n" + "\n".join(
        map(str, sites))


def test_imports_only_point_down_the_lifecycle_line() -> None:
    bad = upward_imports(_modules())
    assert bad == [], "imports pointing up the line " + " → ".join(LINE) + ":\n" + "\n".join(map(str, bad))


@pytest.mark.parametrize("source, expected", [
    ('rows = await db.fetchall("SELECT 1")', 2),   # the call and the SQL text
    ("async with self.db.write() as conn:\n    pass", 1),
    ("import aiosqlite", 1),
    ('"""SELECT is discussed in a docstring."""', 0),
    ('text = "select the session"', 0),          # lower-case prose is not SQL
    ('sql = "UPDATE sessions SET x = 1"', 1),
])
def test_the_sql_detector_finds_what_it_should(source: str, expected: int) -> None:
    assert len(sql_sites({"app.web.example": ast.parse(source)})) == expected


def test_the_import_check_catches_an_upward_import() -> None:
    tree = ast.parse("from app.web.app import create_app\nfrom app.store import sessions\n")
    bad = upward_imports({"app.engine.example": tree})
    assert [s.line for s in bad] == [1]
    assert upward_imports({"app.clock": ast.parse("from app.stream.parser import parse_line")})


LOG_SETUP = {"app.logs"}


def logging_misuse(modules: dict[str, ast.Module]) -> list[Site]:
    """Loggers other than ``logging.getLogger(__name__)``, and calls on the root logger."""
    bad: list[Site] = []
    for module, tree in modules.items():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "logging"):
                continue
            attr = node.func.attr
            if attr == "getLogger" and module in LOG_SETUP:
                continue  # it configures the root and access loggers
            if attr == "getLogger" and not (len(node.args) == 1 and isinstance(node.args[0], ast.Name)
                                            and node.args[0].id == "__name__"):
                bad.append(Site(module, node.lineno, "a logger not named after its module"))
            elif attr in {"debug", "info", "warning", "error", "exception", "critical", "log"}:
                bad.append(Site(module, node.lineno, f"logging.{attr}() logs on the root logger"))
    return bad


def test_every_module_logs_under_its_own_name() -> None:
    bad = logging_misuse(_modules())
    assert bad == [], "use log = logging.getLogger(__name__):\n" + "\n".join(map(str, bad))


def test_the_logging_check_catches_misuse() -> None:
    tree = ast.parse('log = logging.getLogger("tierops")\nlogging.info("x")\nok = logging.getLogger(__name__)\n')
    assert [s.line for s in logging_misuse({"app.web.example": tree})] == [1, 2]


# -- the shape of the house: no import circle, no oversized module, no history in the code --------

MODULE_MAX_LINES = 550


def import_graph(modules: dict[str, ast.Module]) -> dict[str, set[str]]:
    """Module → the modules of ``app`` it imports (a package counts as its ``__init__``)."""
    graph: dict[str, set[str]] = {}
    for module, tree in modules.items():
        edges = set()
        for _, target in _imports(tree, module):
            if target in modules and target != module:
                edges.add(target)
        graph[module] = edges
    return graph


def import_circles(modules: dict[str, ast.Module]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted. A package's
    ``__init__`` that imports its own submodules to register them is not a circle unless one of
    them imports the package back."""
    graph = import_graph(modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_no_import_circles() -> None:
    circles = import_circles(_modules())
    assert circles == [], "modules that import each other (directly or around a circle; TYPE_CHECKING imports " \
        "count):\n" + "\n".join(" ⇄ ".join(c) for c in circles)


def test_the_circle_check_finds_one() -> None:
    modules = {"app.engine.a": ast.parse("import app.engine.b\n"),
               "app.engine.b": ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                         "    from app.engine.a import X\n")}
    assert import_circles(modules) == [["app.engine.a", "app.engine.b"]]


def test_every_module_is_of_a_readable_size() -> None:
    big = {str(p.relative_to(APP.parent)): n for p in APP.rglob("*.py")
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_MAX_LINES}
    assert big == {}, f"modules over {MODULE_MAX_LINES} lines (split them along the concepts inside): {big}"


HISTORY = re.compile(r"issue\s*#\s*\d+", re.IGNORECASE)
# Everything in app/ states its reason in words, the migrations' SQL comments included.


def _history(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return [f"{path.relative_to(APP.parent)}:{i}: {line.strip()[:80]}"
            for i, line in enumerate(text.splitlines(), 1) if HISTORY.search(line)]


def test_the_code_states_rules_not_history() -> None:
    found = [site for p in sorted(APP.rglob("*.py")) for site in _history(p)]
    found += [f"{p.relative_to(APP.parent)}: {m.group(0)}" for p in sorted(APP.rglob("*"))
              if p.suffix in (".html", ".js", ".css") for m in HISTORY.finditer(p.read_text(encoding="utf-8"))]
    assert found == [], "issue numbers in app/ (say the rule or the CLI behaviour instead):\n" + "\n".join(found[:50])


DOCSTRING_MAX_LINES = 24  # "about 20": why the module exists and what it does differently


def test_module_docstrings_stay_short() -> None:
    """A module docstring says why the module exists; design narrative lives in ARCHITECTURE.md."""
    long = {str(p.relative_to(APP.parent)): n for p in sorted(APP.rglob("*.py"))
            if (doc := ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")), clean=False))
            and (n := len(doc.splitlines())) > DOCSTRING_MAX_LINES}
    assert long == {}, f"module docstrings over {DOCSTRING_MAX_LINES} lines (move the narrative out): {long}"
