"""The ``tierops`` command line, one module per kind of command.

``base`` holds the group and what every command shares (settings, the state options, one-line
errors); ``records`` stores and lists; ``schemas`` is the output schema registry; ``cycles`` runs sessions; ``ops`` keeps an installation
healthy (doctor, prune, backup); ``incidents`` lists incidents and acts on them. Importing this package registers every command on ``main``.
"""

from __future__ import annotations

from app.cli import checks, cycles, doctor, incidents, ops, records, schemas
from app.cli.base import main

__all__ = ["checks", "cycles", "doctor", "incidents", "main", "ops", "records", "schemas"]
