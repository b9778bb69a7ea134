"""Named, ordered schema migrations. Append only: never edit a migration that has shipped.

They live in modules by era (``first``, ``monitor``, ``extensions``); a new one goes at the end of
the last module (or a new module appended below), never between shipped ones.

Each entry is ``(name, sql)``; :class:`app.store.db.Database` applies the ones not yet recorded
in the ``migrations`` table, each as one script in its own transaction together with its row,
before anything else touches the DB. Only names are recorded: a shipped migration's statements
never change, its SQL comments may be reworded (they state the table's rules, not their history).
"""

import logging

from app.store.migrations import extensions, first, monitor

log = logging.getLogger(__name__)

MIGRATIONS: list[tuple[str, str]] = [*first.MIGRATIONS, *monitor.MIGRATIONS, *extensions.MIGRATIONS]
