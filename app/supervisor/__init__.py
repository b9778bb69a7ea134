"""The supervisor: claude CLI processes run as tier sessions, chained into escalations, in cycles.

One CLI process: ``launch`` (its command line and environment), ``runner`` (starting and ending
it), ``pipes`` (its stdin and outputs), ``process_groups`` (its group; a recorded CLI's identity).
One session: ``session``, told ``context``. One chain: ``chain``, asking ``guards`` and
``approvals``, telling people through ``news``. Cycles: ``scheduler`` (the ``Supervisor``),
``cycle_lock``, ``schedule``, ``cycle_health``, ``halt``; ``alerts`` and ``windows`` start cycles
through ``cycle_start``'s Protocol. Beside them: ``credentials``, ``health``, ``hub``, ``follow``,
``remote_stop``. No module here imports one that imports it back (ARCHITECTURE.md).
"""

import logging

log = logging.getLogger(__name__)
