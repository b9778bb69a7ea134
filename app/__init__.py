"""TierOps: tiered Claude Code health-check sessions, streamed, validated, routed and escalated."""

import logging

__version__ = "0.1.0"

log = logging.getLogger(__name__)
