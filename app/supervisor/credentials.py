"""The language-model tiers paused after the API rejected the credentials, until they change.

Why: the pinned CLI retries an HTTP 401 like a 5xx — about three minutes of ``api_retry`` lines
before it gives up (reference §6, fixture ``f_api_401``) — and every later cycle would do the same
with the same key. So the session that met the rejection stops its CLI at once
(``session.py``) and records here, in ``monitor_state`` (one row, shared by every process on the
database, kept across restarts), that the model tiers are paused: the reason, when, the session,
and a *fingerprint* of the credentials the CLI was given. While the pause holds and the
credentials are the same, no tier >= 1 starts (:func:`model_tiers_paused`, asked by the chain at a
run's start and before tier 0 escalates, and by ``run_tier_session`` itself); tier 0 keeps running.

The fingerprint is the first 16 hex digits of a SHA-256 over the values of
:data:`FINGERPRINT_VARS` in the CLI's environment (``launch.child_env``) and the stored login of
the CLI's HOME (``STATE_DIR/home/.claude/.credentials.json``, written by ``claude login``), never
a value itself. Once the credentials a CLI would now get differ (a restart with a new key, a new
login), the pause lifts by itself, logged, the first time anyone asks. There is deliberately no
timer: the same key would be refused again.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.clock import utcnow
from app.config import Settings
from app.errors import ConfigError
from app.logs import oneline
from app.store import monitor_state
from app.store.db import Database
from app.supervisor.launch import child_env
from app.vocab import FIRST_MODEL_TIER

log = logging.getLogger(__name__)

__all__ = ["FINGERPRINT_VARS", "PAUSE", "ModelTiersPaused", "Pause", "current_fingerprint", "fingerprint",
           "model_tiers_paused", "pause_holds", "pause_model_tiers", "read_pause", "read_pause_readonly"]

PAUSE = "model_tiers_paused"  # the monitor_state row
# The environment the CLI authenticates with (names only ever; the values are hashed).
FINGERPRINT_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL")
STORED_LOGIN = Path(".claude") / ".credentials.json"  # in the CLI's HOME, written by `claude login`
FINGERPRINT_CHARS = 16


class ModelTiersPaused(ConfigError):
    """A run would start a language-model tier while the model tiers are paused (rejected
    credentials); no session was created. Refused like :class:`~app.supervisor.guards.BudgetSpent`
    (the API answers 409, the CLI exits 2, a scheduled cycle is skipped)."""


@dataclass(frozen=True)
class Pause:
    reason: str  # what the API said, e.g. "HTTP 401 authentication_failed"
    since: str  # when it was recorded (UTC, ISO 8601)
    fingerprint: str
    session: int | None  # the session that met the rejection

    def text(self) -> str:
        """Why no language-model tier starts, and what lifts it."""
        where = f" in session #{self.session}" if self.session is not None else ""
        return (f"model tiers paused: the API rejected the credentials ({self.reason}){where} at {self.since}; "
                f"no tier >= {FIRST_MODEL_TIER} starts until the credentials change (set a valid "
                "ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN and restart; `tierops doctor --online` checks them)")


def fingerprint(env: Mapping[str, str], home: Path | None = None) -> str:
    """A short hash of the credentials in ``env`` (and the stored login under ``home``)."""
    digest = hashlib.sha256()
    for name in FINGERPRINT_VARS:
        digest.update(f"{name}\0{env.get(name, '')}\0".encode("utf-8", "surrogatepass"))
    if home is not None:
        with contextlib.suppress(OSError):  # none (or unreadable: the CLI could not read it either)
            digest.update(b"stored login\0" + (home / STORED_LOGIN).read_bytes())
    return digest.hexdigest()[:FINGERPRINT_CHARS]


def cli_home(settings: Settings) -> Path:
    """The HOME every CLI of this state directory gets (``session.py``)."""
    return settings.state_dir.resolve() / "home"


def current_fingerprint(settings: Settings, environ: Mapping[str, str] | None = None) -> str:
    """The fingerprint of the credentials a CLI started now would be given."""
    home = cli_home(settings)
    env = child_env(home, settings.allowed_env(), None if environ is None else dict(environ))
    return fingerprint(env, home)


def _pause_of(value: Any, updated_at: str) -> Pause | None:
    if not isinstance(value, dict) or not isinstance(value.get("fingerprint"), str):
        return None
    session = value.get("session")
    return Pause(reason=str(value.get("reason") or "credentials rejected"), since=str(value.get("since") or updated_at),
                 fingerprint=value["fingerprint"], session=session if isinstance(session, int) else None)


async def read_pause(db: Database) -> Pause | None:
    """The recorded pause, whether or not the credentials changed since (None: none)."""
    row = await monitor_state.get(db, PAUSE)
    return _pause_of(row["value"], row["updated_at"]) if row is not None else None


def read_pause_readonly(path: Path) -> Pause | None:
    """:func:`read_pause` from a database file opened read-only (``tierops doctor``)."""
    row = monitor_state.read_readonly(path, PAUSE)
    return _pause_of(row["value"], row["updated_at"]) if row is not None else None


async def pause_model_tiers(db: Database, reason: str, env: Mapping[str, str], home: Path | None,
                            session: int | None, *, now: str | None = None) -> Pause:
    """Record that the API rejected the credentials in ``env`` (those the CLI was given)."""
    since = now or utcnow()
    pause = Pause(reason=oneline(reason), since=since, fingerprint=fingerprint(env, home), session=session)
    await monitor_state.put(db, PAUSE, {"reason": pause.reason, "since": since, "fingerprint": pause.fingerprint,
                                        "session": session}, now=since)
    log.warning("model tiers paused: %s", pause.text(), extra={"session": session})
    return pause


async def pause_holds(db: Database, settings: Settings) -> Pause | None:
    """The recorded pause when it still holds (the credentials are the same), without lifting one
    that no longer does: for readers that must not write (``/healthz``, the overview)."""
    pause = await read_pause(db)
    return pause if pause is not None and pause.fingerprint == current_fingerprint(settings) else None


async def model_tiers_paused(db: Database, settings: Settings) -> str | None:
    """Why no tier >= 1 may start now — the API rejected these very credentials — or None. A pause
    whose credentials have changed since is lifted here (deleted, logged) and None returned."""
    pause = await read_pause(db)
    if pause is None:
        return None
    if pause.fingerprint != current_fingerprint(settings):
        if await monitor_state.delete(db, PAUSE):
            log.info("model tiers resumed: the credentials changed since the API rejected them at %s", pause.since)
        return None
    return pause.text()
