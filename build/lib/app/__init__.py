"""TierOps: tiered Claude Code health-check sessions, streamed, validated, routed and escalated."""

__version__ = "0.1.0"
