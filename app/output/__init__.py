"""Output: what a run produced, judged and turned into findings (outcome, validation, routing).

A package of its own on the lifecycle line: it reads parsed stream lines (``app/stream``) and
decides, without storage, what the store then writes (see ARCHITECTURE.md, "Output contracts").
"""

import logging

log = logging.getLogger(__name__)
