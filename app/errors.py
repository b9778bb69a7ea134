"""The exception hierarchy every layer raises from, so callers catch one type.

Why: the CLI turns any :class:`TierOpsError` into one ``tierops: error: …`` line and exit 2; the
web layer turns one into a 4xx JSON body. Anything else that escapes is a bug: it is logged with
its traceback and, inside a session, ends that session ``failed`` with the exception named.
The messages are written for operators: what was wrong, where, what to do.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class TierOpsError(Exception):
    """Base of every error TierOps raises on purpose. ``str(exc)`` is the operator's message."""


class ConfigError(TierOpsError):
    """A setting, prompt file or schema file is unusable."""


class StoreError(TierOpsError):
    """The database could not be opened, migrated or written. The message names the file."""


class StorageUnavailable(StoreError):
    """Writes kept failing (locked by another process, disk full, I/O error) past the retry limit
    (``TIEROPS_STORAGE_RETRY_LIMIT``). The message starts with "storage error:" and names the cause."""


class InputError(TierOpsError):
    """Input given to a command (a stream file, a flag) is unusable."""


class CycleBusy(TierOpsError):
    """A cycle is already running; the message says which and since when."""


class CLIError(TierOpsError):
    """The Claude Code child process could not be run."""
