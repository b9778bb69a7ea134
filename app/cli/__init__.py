"""The ``tierops`` command line, one module per kind of command.

``base`` holds the group and what every command shares (settings, the state options, one-line
errors, printing stored text); ``ingest`` stores a recorded stream and ``records`` lists what is
stored; ``schemas`` is the output schema registry; ``cycles`` runs sessions (run, supervise,
serve); ``checks`` the checks file and tier 0's ``probe``; ``doctor`` (its checks in
``doctor_checks``, ``--online`` in ``doctor_online``) and ``ops`` (prune, backup) keep an
installation healthy; ``incidents`` lists incidents and acts on them; ``maintenance`` lists, adds
and ends maintenance windows; ``cooldowns`` shows the action limits; ``approvals`` decides
escalations waiting for an operator; ``notify`` tests and previews the notifications. A command's
module is imported when the command is used (``base.COMMAND_MODULES``), so each command loads
only what it needs.
"""

from __future__ import annotations

import logging

from app.cli.base import main

log = logging.getLogger(__name__)

__all__ = ["main"]
