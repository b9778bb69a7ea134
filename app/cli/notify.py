"""``tierops notify test`` (issue #13): does each notification URL work, before an incident needs it.

Why a command: a mistyped Apprise URL or a revoked chat token is otherwise found out the day a
real incident is not delivered (the overview shows it then, as ``failed``). This sends one test
message to every URL of ``TIEROPS_NOTIFY_URLS`` (or ``TIEROPS_NOTIFY_URLS_FILE``), one Apprise
object per URL, and prints one line per URL: its scheme and host only (URLs hold tokens and
passwords; a token in the host position is shown the way Apprise masks it) and ``ok`` or the
error. Exit 0 when every URL accepted the message, 1 when one did not, 2 when there is nothing to
test (no URL configured, Apprise not installed, the URLs file unreadable). Nothing is stored: it
needs no database.
"""

from __future__ import annotations

import sys

import click

from app.cli.base import load_settings, main
from app.cli.base import run_async as _run
from app.notify.sender import send_test

EXIT_FAILED = 1


@main.group()
def notify() -> None:
    """Notifications: check the Apprise URLs (TIEROPS_NOTIFY_URLS)."""


@notify.command("test")
def notify_test() -> None:
    """Send a test message to every configured URL; one line per URL (scheme and host only) with
    ok or the error. Exit 1 if one failed, 2 if none is configured or Apprise is missing."""
    settings = load_settings()
    results = _run(lambda: send_test(settings))
    for result in results:
        click.echo(f"{result.shown}: {'ok' if result.error is None else 'failed: ' + result.error}")
    failed = sum(1 for r in results if r.error is not None)
    if failed:
        click.echo(f"tierops: {failed} of {len(results)} notification URL(s) failed", err=True)
        sys.exit(EXIT_FAILED)
