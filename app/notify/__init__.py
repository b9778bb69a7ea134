"""What people are told: the messages state changes become, where they go, and the sender."""

import logging

log = logging.getLogger(__name__)
