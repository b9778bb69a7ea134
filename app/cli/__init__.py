"""The ``tierops`` command line, one module per kind of command.

``base`` holds the group and what every command shares (settings, the state options, one-line
errors); ``records`` stores and lists; ``schemas`` is the output schema registry; ``cycles`` runs sessions; ``ops`` keeps an installation
healthy (doctor, prune, backup). Importing this package registers every command on ``main``.
"""

from __future__ import annotations

from app.cli import cycles, doctor, ops, records, schemas
from app.cli.base import main

__all__ = ["cycles", "doctor", "main", "ops", "records", "schemas"]
