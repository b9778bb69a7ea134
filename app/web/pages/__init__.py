"""The dashboard's server-rendered pages, one module per page or area, and the HTML fragments they share."""

import logging

log = logging.getLogger(__name__)
