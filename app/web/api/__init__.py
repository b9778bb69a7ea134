"""The REST API under ``/api/v1``: one module per resource, the route table and the OpenAPI document."""

import logging

log = logging.getLogger(__name__)
