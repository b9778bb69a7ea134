"""The severity words alert senders use, read as ``critical``, ``warning`` or ``info``.

Why a module of its own: every sender and every shop has its vocabulary (PagerDuty, Opsgenie
P1-P5, Zabbix, syslog, incident SEV levels), and the incidents, routes and messages downstream
know only three words. :func:`severity_of` is the one translation; it never refuses a word: a
missing or unknown one is the configured default (``TIEROPS_ALERT_DEFAULT_SEVERITY``), because
an alert is worth recording whatever its sender calls it.
"""

from __future__ import annotations

import logging
import re

log = logging.getLogger(__name__)

# The severity words senders use (compared case-insensitively, spaces, "-" and "_" alike), and what
# each means here. PagerDuty: critical, error, warning, info. Opsgenie: P1 (critical), P2 (high),
# P3 (moderate), P4 (low), P5 (informational). Zabbix: Disaster, High, Average, Warning,
# Information, Not classified. Syslog: emerg, alert, crit, err, warning, notice, info, debug.
SEVERITY_TABLE: dict[str, str] = {
    **dict.fromkeys(("critical", "crit", "fatal", "emergency", "emerg", "alert", "disaster", "page", "high", "major",
                     "error", "err", "severe"), "critical"),
    **dict.fromkeys(("warning", "warn", "medium", "minor", "average", "moderate"), "warning"),
    **dict.fromkeys(("info", "informational", "information", "low", "notice", "debug", "none", "not classified"),
                    "info"),
}
# A number, bare or after P, SEV or SEVERITY (P1, sev-1, SEV 2, 3): 1 is the most severe, as in
# Opsgenie's priorities and incident SEV levels. Zabbix's numeric severities run the other way
# (5 = Disaster): Zabbix sends its names ({EVENT.SEVERITY}), which the table above reads.
SEVERITY_NUMBERS = {0: "critical", 1: "critical", 2: "critical", 3: "warning"}  # 4 and above: info
_NUMBERED = re.compile(r"(?:(?:p|sev|severity|priority)[ _-]*)?(\d{1,3})")
SEVERITIES = ("info", "warning", "critical")
DEFAULT_SEVERITY = "warning"
# Worst first: how alerts are ordered (an unknown word ranks as info).
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


def severity_of(word: str | None, default: str = DEFAULT_SEVERITY) -> str:
    """``critical``, ``warning`` or ``info`` for a sender's word (:data:`SEVERITY_TABLE`, or a
    number: :data:`SEVERITY_NUMBERS`, 4 and above info); ``default`` when missing or unknown."""
    w = " ".join((word or "").replace("_", " ").split()).lower()
    if not w:
        return default
    if (known := SEVERITY_TABLE.get(w) or SEVERITY_TABLE.get(w.replace(" ", ""))) is not None:
        return known
    if (numbered := _NUMBERED.fullmatch(w)) is not None:
        return SEVERITY_NUMBERS.get(int(numbered.group(1)), "info")
    return default
