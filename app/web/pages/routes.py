"""Every page's routes, in the order the app matches them (before ``/static``, after the streams)."""

from __future__ import annotations

import logging

from app.web.pages import (
    approvals,
    chat,
    config,
    cooldowns,
    docs,
    events,
    incidents,
    maintenance,
    memories,
    notifications,
    overview,
    schemas,
    sessions,
    stats,
)

log = logging.getLogger(__name__)

routes = [
    *overview.routes, *sessions.routes, *events.routes, *memories.routes, *schemas.routes, *incidents.routes,
    *approvals.routes, *maintenance.routes, *notifications.routes, *config.routes, *cooldowns.routes,
    *stats.routes, *docs.routes, *chat.routes,
]
