"""Open files: the probe's own limit, how many checks may run at once under it, and running out.

Why a module of its own: the probe runs every check at once, and each running check holds file
descriptors (a socket, a command's pipe, the resolver's files). Under systemd's default soft
limit of 1024 a file of about 1,150 checks made healthy checks fail with "Too many open files" —
false incidents every cycle. So:

* :func:`raise_open_files` raises the soft ``RLIMIT_NOFILE`` to the hard limit at probe start
  (systemd's default hard limit is 524288; ``LimitNOFILE=`` in the unit sets both). Command
  checks get the limit the probe was started with back (:func:`child_limit`): programs that use
  ``select()`` break on descriptors above 1024, which is why the soft default stays low.
* :func:`concurrency` caps the checks running at once so that they fit in what the limit leaves
  (:data:`FDS_PER_CHECK` each, :data:`RESERVED_FDS` for the probe itself), or the checks file's
  ``concurrency`` when that is lower.
* :func:`out_of_descriptors` tells a check's ``EMFILE``/``ENFILE`` apart: that is the probe's own
  failure, reported as an ``error`` of its run, never as the target's.
"""

from __future__ import annotations

import errno
import logging
import resource

log = logging.getLogger(__name__)

__all__ = ["FDS_PER_CHECK", "RESERVED_FDS", "child_limit", "concurrency", "open_files_limit",
           "out_of_descriptors", "raise_open_files"]

# What one running check may hold at its peak: its socket or its command's pipe, plus the
# resolver's (/etc/hosts, resolv.conf, a UDP socket) or the CA bundle while a TLS context loads,
# plus the short-lived ones of starting a process (the exec error pipe, /dev/null).
FDS_PER_CHECK = 4
# The probe's own: stdio, the event loop (epoll, its self-pipe), imported modules, a margin.
RESERVED_FDS = 64
# macOS refuses a soft limit above OPEN_MAX (10240) even when the hard limit is unlimited.
_UNLIMITED_FALLBACK = 10240

_started_with: tuple[int, int] | None = None


def open_files_limit() -> int:
    """The current soft limit on open files."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def raise_open_files() -> tuple[int, int]:
    """Raise the soft open-files limit to the hard one; ``(before, after)``. Logged at info when it
    moved, at warning when it could not be raised (the checks are then capped lower)."""
    global _started_with
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if _started_with is None:
        _started_with = (soft, hard)
    if soft == hard:
        return soft, soft
    for target in (hard, _UNLIMITED_FALLBACK) if hard == resource.RLIM_INFINITY else (hard,):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            continue
        log.info("open files: soft limit raised from %d to %d (the hard limit)", soft, target)
        return soft, target
    log.warning("open files: the soft limit %d could not be raised (hard limit %s)", soft, hard)
    return soft, soft


def child_limit() -> tuple[int, int] | None:
    """The open-files limit the probe was started with, for its commands (None: never raised)."""
    if _started_with is None or _started_with == resource.getrlimit(resource.RLIMIT_NOFILE):
        return None
    return _started_with


def concurrency(wanted: int | None = None, limit: int | None = None) -> int:
    """How many checks may run at once: what the open-files ``limit`` (default: the current soft
    limit) leaves after :data:`RESERVED_FDS`, at :data:`FDS_PER_CHECK` each, and at most
    ``wanted`` (the checks file's ``concurrency``). Never below 1."""
    fits = max(1, ((open_files_limit() if limit is None else limit) - RESERVED_FDS) // FDS_PER_CHECK)
    return min(fits, wanted) if wanted is not None else fits


def out_of_descriptors(exc: BaseException) -> bool:
    """True for "Too many open files" (this process's limit, ``EMFILE``, or the system's, ``ENFILE``)."""
    return isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE)
