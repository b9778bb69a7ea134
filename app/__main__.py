"""``python -m app``: the same as the ``tierops`` command, for an install without the script on PATH
(the probe runs as ``python -m app probe``, so it needs no ``tierops`` on the CLI's PATH either)."""

import logging

from app.cli import main

log = logging.getLogger(__name__)

main()
