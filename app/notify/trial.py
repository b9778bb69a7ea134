"""``tierops notify test``: one test message to every notification URL, or to the URLs of one route.

Why a module of its own: it is the one place that sends outside the sender (no record, no
retries, no routes deciding: the operator chose the URLs), and what it prints must follow the same
secrecy rules as everything else — scheme and host only (``urls.shown_url``), errors masked.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from app.clock import utcnow
from app.config import Settings
from app.errors import ConfigError
from app.notify.policy import format_title
from app.notify.routes import DEFAULT_ROUTE, load_routes
from app.notify.urls import (
    NOT_INSTALLED,
    NOTIFY_SETTING_HINT,
    UrlMask,
    apprise_available,
    captured_only,
    notify_urls,
    send_one,
    shown_url,
)

log = logging.getLogger(__name__)

__all__ = ["UrlResult", "send_test"]


@dataclass(frozen=True)
class UrlResult:
    """One URL's answer to ``tierops notify test``: its shown form, and None or the error."""

    shown: str
    error: str | None


async def send_test(settings: Settings, route: str | None = None) -> list[UrlResult]:
    """Send a test message to every configured URL (or those of ``route``), one at a time.
    Raises :class:`ConfigError` when none is configured, the route is unknown or reaches no URL,
    or Apprise is missing (the CLI exits 2)."""
    urls = notify_urls(settings)
    table = load_routes(settings, urls)
    if not table.targets:
        raise ConfigError(f"no notification URL configured: {NOTIFY_SETTING_HINT}")
    if route is None:
        indexes = list(range(len(table.targets)))
        what = "this URL works"
    else:
        if route != DEFAULT_ROUTE and table.route(route) is None:
            names = ", ".join([r.name for r in table.routes] + [DEFAULT_ROUTE])
            raise ConfigError(f"no notification route {route!r} (routes from {table.origin}: {names})")
        indexes = table.indexes([route])
        if not indexes:
            raise ConfigError(f"route {route!r} reaches no URL (to: [] or tags no URL carries)")
        what = f"route {route} reaches this URL"
    if not apprise_available():
        raise ConfigError(NOT_INSTALLED)
    mask = UrlMask(table.urls)
    title = format_title("info", "tierops: test notification")
    link = f"\n\n{settings.public_url.rstrip('/')}/" if settings.public_url.strip() else ""
    body = f"A test message from `tierops notify test` at {utcnow()}: {what}.{link}"
    results = []
    with captured_only(mask):
        for i in indexes:
            url = table.targets[i].url
            error = await asyncio.to_thread(send_one, url, title, body, "info", mask)
            results.append(UrlResult(shown_url(url), error))
    return results
