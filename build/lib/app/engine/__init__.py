"""The engine: one CLI session's stream → stored lines → outcome → validated, routed findings.

``recorder`` orchestrates a session (feed, flush, end attempt, finalize), ``outcomes`` decides
each attempt and the session summary, ``report`` reads back what was stored, ``ingest`` feeds a
recorded file. The supervisor feeds the same recorder from a live child process.
"""
