"""The monitor's own health, decided once: ``/healthz`` and the overview's headline both ask here.

Why a module of its own: the headline and ``/healthz`` once disagreed — a missing claude CLI made
the headline a red "Monitor unhealthy" while ``/healthz`` said ok and tier 0 ran fine. Now both
read one :class:`MonitorHealth` with two levels:

* **problems** — the monitor cannot be trusted: the database cannot be written (a real write
  probe), the schedule is stale, or the last ``TIEROPS_UNHEALTHY_AFTER`` cycles failed
  (:meth:`Supervisor.health`). ``/healthz`` answers 503 ``unhealthy``; the headline is a red
  "Monitor unhealthy".
* **warnings** — something limits the monitor without breaking it: tier 0 still runs, but no
  language-model tier can start: no claude CLI while ``TIEROPS_MAX_TIER`` >= 1 (what to install,
  or ``TIEROPS_MAX_TIER=0``), the daily budget spent, or the model tiers paused because the API
  rejected the credentials (``credentials.py``). ``/healthz`` answers 200 ``degraded`` with a
  ``warnings`` list; the headline is an amber "Model tiers unavailable".

Nothing here writes (a pause whose credentials changed is left for the next cycle to lift), and
nothing raises: a read that fails is reported as what it is.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from app.logs import oneline
from app.store import dashboard
from app.supervisor.credentials import pause_holds
from app.supervisor.guards import daily_budget_spent
from app.supervisor.launch import CLINotFound, resolve_binary
from app.supervisor.scheduler import Supervisor
from app.vocab import FIRST_MODEL_TIER

log = logging.getLogger(__name__)

__all__ = ["INSTALL_CLI", "MonitorHealth", "assess", "cli_missing"]

INSTALL_CLI = ("install it (`bash scripts/install-claude.sh`, or `npm install -g @anthropic-ai/claude-code@2.1.197`; "
               "TIEROPS_CLAUDE_BIN may name its path) or set TIEROPS_MAX_TIER=0 to run tier 0 alone")


@dataclass
class MonitorHealth:
    problems: list[str] = field(default_factory=list)  # unhealthy: /healthz 503
    warnings: list[str] = field(default_factory=list)  # degraded: the model tiers cannot run
    storage: str | None = None  # why the database cannot be written (None: it can)
    facts: dict[str, Any] = field(default_factory=dict)  # Supervisor.health() without its problems

    @property
    def status(self) -> str:
        return "unhealthy" if self.problems else "degraded" if self.warnings else "ok"


def cli_missing(claude_bin: str) -> str | None:
    """Why the configured claude CLI cannot be found (None: it can)."""
    try:
        resolve_binary(claude_bin, os.environ.get("PATH"))
    except CLINotFound:
        return f"{claude_bin!r} is not an executable file or on PATH"
    return None


async def assess(sup: Supervisor) -> MonitorHealth:
    """The monitor's health now (never raises)."""
    settings = sup.settings
    health = MonitorHealth()
    try:
        await dashboard.ping(sup.db)
        health.storage = await dashboard.write_problem(sup.db)
    except Exception as exc:  # reporting is the point: never an error page for it
        health.storage = f"{type(exc).__name__}: {exc}"
    if health.storage:
        health.problems.append(f"the database cannot be written: {oneline(health.storage)}")
    facts = sup.health(scheduled=settings.schedule)
    health.problems.extend(facts.pop("problems"))
    health.facts = facts
    if settings.max_tier < FIRST_MODEL_TIER:
        return health  # tier 0 alone by design: nothing is missing
    tiers = f"tiers {FIRST_MODEL_TIER} to {settings.max_tier} cannot run"
    tail = " (tier 0 still runs the checks)" if settings.checks is not None else ""
    if (missing := cli_missing(settings.claude_bin)) is not None:
        health.warnings.append(f"the claude CLI is missing: {missing}; {tiers}{tail}: {INSTALL_CLI}")
    try:
        spent = await daily_budget_spent(sup.db, settings, FIRST_MODEL_TIER)
    except Exception as exc:  # a read that fails is a storage problem, reported as such
        spent = f"the daily budget could not be read: {type(exc).__name__}: {oneline(exc)}"
    if spent:
        health.warnings.append(f"{spent}{tail}")
    try:
        pause = await pause_holds(sup.db, settings)
    except Exception as exc:
        health.warnings.append(f"whether the model tiers are paused could not be read: {type(exc).__name__}: "
                               f"{oneline(exc)}")
    else:
        if pause is not None:
            health.warnings.append(f"{pause.text()}{tail}")
    return health
