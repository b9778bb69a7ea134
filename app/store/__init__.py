"""The store: the only package that holds SQLite connections and SQL text.

Every other layer calls a named function of one of these modules and gets typed rows back
(``rows.py``); ``db.py`` owns the connections and transactions, ``migrations/`` the schema.
Why: one place to read for every statement that touches the database, so a write's transaction,
its redaction and its indexes are decided where the SQL is (``tests/test_layers.py`` enforces it).
"""

import logging

log = logging.getLogger(__name__)
