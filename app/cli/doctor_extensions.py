"""``tierops doctor``'s look at the extensions (``TIEROPS_EXTENSIONS``) and ``TIEROPS_RUNBOOKS``.

Why a module of its own: one line per extension saying what it brings (checks, hosts, runbooks,
skills, mcp.json) and what is wrong with it, from the same account the ``/config`` page shows
(``app/supervisor/extension_report.py``). A checks file of an extension that
``tierops checks validate`` refuses fails the doctor; everything else an extension gets wrong
(a missing folder, a runbook without front matter, a skill left out) only leaves that part out
of the sessions, so it is a warning.
"""

from __future__ import annotations

import logging

from app.cli.doctor_checks import PROBLEMS_SHOWN, Check, Status
from app.config import Settings
from app.supervisor.extension_report import extensions_report

log = logging.getLogger(__name__)

__all__ = ["check_extensions"]


def _listed(problems: list[str]) -> str:
    shown = "; ".join(problems[:PROBLEMS_SHOWN])
    return shown + (f"; and {len(problems) - PROBLEMS_SHOWN} more" if len(problems) > PROBLEMS_SHOWN else "")


def check_extensions(settings: Settings) -> list[Check]:
    """One check per extension, and one for the runbooks folder when it is set."""
    report = extensions_report(settings)
    checks: list[Check] = []
    if not report.extensions:
        checks.append(Check("extensions", "skip", "none (TIEROPS_EXTENSIONS: folders with checks/, runbooks/, "
                                                  "skills/ or mcp.json)"))
    for ext in report.extensions:
        detail = f"{ext.path}: {ext.contributes()}"
        status: Status = "fail" if ext.errors else "warn" if ext.problems or not ext.usable else "ok"
        if ext.errors:
            detail += f"; its checks files have problems (their checks do not run): {_listed(ext.errors)}; see " \
                      "`tierops checks validate`"
        if ext.problems:
            detail += f"; {_listed(ext.problems)}"
        if report.idle_checks and ext.checks:
            status = "fail" if status == "fail" else "warn"
            detail += "; its checks do not run: they join a checks file, and TIEROPS_CHECKS is not set"
        checks.append(Check(f"extension {ext.name}", status, detail))
    if report.runbooks_folder is not None:
        folder = report.runbooks_folder
        folder_status: Status = "warn" if folder.problems or not folder.runbooks else "ok"
        detail = f"{folder.path}: {folder.runbooks} runbook(s)"
        if folder.problems:
            detail += f"; skipped: {_listed(folder.problems)}"
        elif not folder.runbooks:
            detail += "; none usable (markdown files with a front matter naming services, checks or alerts)"
        checks.append(Check("runbooks", folder_status, detail))
    return checks
