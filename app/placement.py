"""Where work may run: ``TIEROPS_RUNS_ON`` against a node's ``TIEROPS_NODE_LABELS``.

Why: with several nodes on one store, only some hosts may reach production (an SSH key, a VPN, a
cloud role). An operator pins a tier, or any tier working on a service, to nodes carrying a label;
a node without it leaves that work in the run queue for one that has it. The rule is all-of: a run
needs every label its tier and its services name. Parsed strictly at start (a typo fails the
settings with the entry named), never guessed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from app.vocab import FIRST_MODEL_TIER, MAX_TIER

log = logging.getLogger(__name__)

__all__ = ["Placement", "labels_of", "parse_runs_on"]

_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,62}$")


def labels_of(text: str) -> frozenset[str]:
    """A comma separated label list as a set (blanks dropped)."""
    return frozenset(part.strip() for part in text.split(",") if part.strip())


@dataclass(frozen=True)
class Placement:
    """The parsed ``TIEROPS_RUNS_ON``: the labels each tier and each service needs."""

    tiers: dict[int, frozenset[str]] = field(default_factory=dict)
    services: dict[str, frozenset[str]] = field(default_factory=dict)

    def needs(self, tier: int, services: Iterable[str | None] = ()) -> frozenset[str]:
        """Every label a session of ``tier`` on ``services`` needs (empty: any node)."""
        out = set(self.tiers.get(tier, frozenset()))
        for service in services:
            if service:
                out |= self.services.get(service, frozenset())
        return frozenset(out)


def parse_runs_on(text: str) -> Placement:
    """``tier3=ssh-to-prod,service:db=dc-2`` as a :class:`Placement`; ValueError naming the entry
    that is not ``TARGET=LABEL`` with TARGET ``tier1``..``tier3`` or ``service:NAME``."""
    tiers: dict[int, set[str]] = {}
    services: dict[str, set[str]] = {}
    for raw in (part.strip() for part in text.split(",")):
        if not raw:
            continue
        target, sep, label = (s.strip() for s in raw.partition("="))
        if not sep or not _LABEL.match(label):
            raise ValueError(f"TIEROPS_RUNS_ON entry {raw!r}: expected TARGET=LABEL (e.g. tier3=ssh-to-prod), the "
                             "label letters, digits and . _ : / - only")
        if target.startswith("service:") and target[len("service:"):].strip():
            services.setdefault(target[len("service:"):].strip(), set()).add(label)
        elif (m := re.fullmatch(r"tier(\d)", target)) and FIRST_MODEL_TIER <= int(m.group(1)) <= MAX_TIER:
            tiers.setdefault(int(m.group(1)), set()).add(label)
        else:
            raise ValueError(f"TIEROPS_RUNS_ON entry {raw!r}: the target must be tier{FIRST_MODEL_TIER}..tier{MAX_TIER} "
                             "or service:NAME")
    return Placement({t: frozenset(v) for t, v in tiers.items()}, {s: frozenset(v) for s, v in services.items()})
