"""The ``tierops`` command line, one module per kind of command.

``base`` holds the group and what every command shares (settings, the state options, one-line
errors); ``records`` stores and lists; ``schemas`` is the output schema registry; ``cycles`` runs sessions; ``ops`` keeps an installation
healthy (doctor, prune, backup); ``incidents`` lists incidents and acts on them; ``maintenance`` lists, adds and ends maintenance windows; ``cooldowns`` shows the action limits; ``approvals`` decides escalations waiting for an operator; ``notify`` tests the notification URLs. Importing this package registers every command on ``main``.
"""

from __future__ import annotations

from app.cli import (
    approvals,
    checks,
    cooldowns,
    cycles,
    doctor,
    incidents,
    maintenance,
    notify,
    ops,
    records,
    schemas,
)
from app.cli.base import main

__all__ = ["approvals", "checks", "cooldowns", "cycles", "doctor", "incidents", "main", "maintenance", "notify", "ops",
           "records", "schemas"]
