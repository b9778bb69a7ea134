"""The dashboard and REST API: the starlette app, what its two rooms share, ``api/`` and ``pages/``."""

import logging

log = logging.getLogger(__name__)
