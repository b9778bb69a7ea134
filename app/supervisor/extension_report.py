"""What each extension (and ``TIEROPS_RUNBOOKS``) contributes, and what is wrong with it.

Why a module of its own: ``tierops doctor`` and the ``/config`` page show the same account —
per extension its checks and hosts, runbooks, skills (by the names the CLI lists them under),
whether it has an ``mcp.json``, and every problem — so an operator sees one story whichever they
look at. It reads the folders as a session would (``app/probe/extensions.py``,
``app/engine/runbooks.py``) and changes nothing. Blocking: call it in a thread from async code.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from app.config import Settings
from app.engine.runbooks import load_folder
from app.probe.extensions import Merged, load_merged
from app.probe.inventory import InventoryError
from app.supervisor.runbooks import FOLDER_SOURCE

log = logging.getLogger(__name__)

__all__ = ["ExtensionSummary", "ExtensionsReport", "RunbooksFolder", "extensions_report"]


@dataclass
class ExtensionSummary:
    name: str
    path: str
    usable: bool
    checks: int = 0
    hosts: int = 0
    runbooks: int = 0
    skills: list[str] = field(default_factory=list)  # as the CLI lists them: <extension>-<skill>
    mcp_config: bool = False
    problems: list[str] = field(default_factory=list)  # warnings: what is left out and why
    errors: list[str] = field(default_factory=list)  # checks files that fail `tierops checks validate`

    def contributes(self) -> str:
        """One line: "3 checks, 1 host, 4 runbooks, 1 skill (infra-restart-api), mcp.json"."""
        if not self.usable:
            return "not used"
        parts = [_n(self.checks, "check"), _n(self.hosts, "host"), _n(self.runbooks, "runbook"),
                 _n(len(self.skills), "skill") + (f" ({', '.join(self.skills)})" if self.skills else ""),
                 "mcp.json" if self.mcp_config else "no mcp.json"]
        return ", ".join(parts)


@dataclass
class RunbooksFolder:
    path: str
    runbooks: int
    problems: list[str]


@dataclass
class ExtensionsReport:
    extensions: list[ExtensionSummary]
    runbooks_folder: RunbooksFolder | None
    idle_checks: int  # extension checks that do not run: no checks file (TIEROPS_CHECKS) to join


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def extensions_report(settings: Settings) -> ExtensionsReport:
    """The account of ``TIEROPS_EXTENSIONS`` and ``TIEROPS_RUNBOOKS`` as sessions would read them."""
    dirs = settings.extension_dirs()
    merged: Merged
    try:
        merged = load_merged(settings.checks, dirs)
    except InventoryError:  # the checks file's own problems are the checks-file check's to tell
        merged = load_merged(None, dirs)
    out: list[ExtensionSummary] = []
    for ext in merged.extensions:
        summary = ExtensionSummary(name=ext.name, path=str(ext.path), usable=ext.usable, problems=list(ext.problems))
        if ext.usable:
            summary.checks, summary.hosts = merged.counts.get(ext.name, (0, 0))
            summary.skills = [ext.skill_folder(s) for s in ext.skills]
            summary.mcp_config = ext.mcp_config is not None
            if ext.runbooks_dir is not None:
                books, bad = load_folder(ext.runbooks_dir, source=f"extension {ext.name}", extension=ext.name,
                                         prefix="runbooks/")
                summary.runbooks = len(books)
                summary.problems += [f"runbook {p}" for p in bad]
            summary.errors = [line for err in merged.errors if err.path.is_relative_to(ext.path)
                              for line in str(err).splitlines()]
        out.append(summary)
    folder = None
    if settings.runbooks is not None:
        books, bad = load_folder(settings.runbooks, source=FOLDER_SOURCE)
        folder = RunbooksFolder(str(settings.runbooks), len(books), bad)
    idle = sum(e.checks for e in out) if settings.checks is None else 0
    return ExtensionsReport(out, folder, idle)
