"""``python -m app.cli``: the same as the ``tierops`` command."""

import logging

from app.cli import main

log = logging.getLogger(__name__)

main()
