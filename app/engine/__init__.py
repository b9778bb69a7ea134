"""The engine: one CLI session's stream → stored lines → outcome → validated, routed findings.

``recorder`` orchestrates a session (feed, flush, end attempt, finalize), ``outcomes`` decides
each attempt and the session summary, ``report`` reads back what was stored, ``ingest`` feeds a
recorded file. The supervisor feeds the same recorder from a live child process. The policies a
finished session is judged by live here too, as pure functions over stored rows where they can:
incidents, cooldowns, maintenance windows, alerts in, retention.
"""

import logging

log = logging.getLogger(__name__)
