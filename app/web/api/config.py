"""``GET`` and ``PUT /api/v1/config``: the settings that change at run time, and changing them.

``GET`` lists each changeable setting (``runtime_settings.CHANGEABLE``) with the value in force,
where it comes from — changed at run time (by whom, when), else the environment, ``.env``, the
command line or the default (``app.config_sources``) — the value a revert goes back to, and the
newest changes. ``PUT`` takes ``{"settings": {NAME: value, ...}, "revert": [NAME, ...]}``: every
value checked by the Settings class first, then all of them written in one transaction, or none
(400 ``invalid_setting`` naming each setting and the rule it breaks; 409 ``needs_restart`` for a
setting only a restart changes; a value already in force changes nothing). The supervisor then
reads them again: the next cycle uses them, and a schedule waiting on the old interval looks
again at once. The page's form (``app/web/pages/config.py``) goes through the same function.

There are no user accounts: ``changed_by`` is how the request was authenticated (the dashboard's
login cookie or the API token, ``actor_for``) and the client's address as the server sees it (a
reverse proxy's, behind one). None of these settings is a secret.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, TypedDict

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import SettingsError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.config import ENV_FILE, Settings, get_settings
from app.config_sources import setting_sources
from app.errors import ConfigError
from app.store import runtime_settings as store
from app.store.runtime_settings import SettingChangeRow
from app.supervisor.runtime_settings import (
    CHANGEABLE,
    SettingsRefused,
    change_settings,
    effective_settings,
    var,
)
from app.web.api.incidents import actor_for
from app.web.common import ApiError, WebState, json_body, state

log = logging.getLogger(__name__)

RUN_TIME = "run time"
RESTART_NOTE = ("Every other setting needs a restart: set TIEROPS_X in the environment or .env, then restart "
                "`tierops serve`.")
WHO_NOTE = ("There are no user accounts: a change records how the request was authenticated (the dashboard's login "
            "or the API token) and the client's address.")


class RuntimeSetting(TypedDict):
    name: str
    var: str  # TIEROPS_NAME
    value: Any  # in force now
    source: str  # "run time", or where the base value comes from: env, file, command line, default
    source_text: str  # "changed at run time by WHO at WHEN", or "env" ...
    changed_by: str | None
    changed_at: str | None
    reverts_to: Any  # the value without the run-time change
    reverts_to_source: str
    description: str


class ConfigBody(TypedDict):
    settings: list[RuntimeSetting]
    changes: list[SettingChangeRow]  # newest first
    restart: str
    who: str


class ConfigUpdated(ConfigBody):
    applied: list[SettingChangeRow]  # what this request changed (empty: everything was already in force)


class ConfigChange(BaseModel):
    """``PUT /config`` (strict: the OpenAPI types are the only ones accepted; values are checked per
    setting by the Settings class)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    settings: dict[str, Any] = Field(default_factory=dict)
    revert: list[str] = Field(default_factory=list, max_length=len(Settings.model_fields))


def changed_by(request: Request) -> str:
    """Who changes a setting, as far as the request tells (there are no user accounts)."""
    address = request.client.host if request.client is not None else "an unknown address"
    return f"{actor_for(request, None)} from {address}"


def base_sources(base: Settings) -> dict[str, str]:
    """Where each base value comes from (the environment, ``.env``, the command line, the default);
    without the command-line comparison when the environment no longer loads."""
    try:
        baseline: Settings | None = get_settings()
    except (ValidationError, SettingsError, ConfigError) as exc:
        log.info("the settings cannot be reloaded to tell command-line values apart: %s", type(exc).__name__)
        baseline = None
    return setting_sources(base, env_file=Path(ENV_FILE).absolute(), baseline=baseline)


async def config_body(st: WebState) -> ConfigBody:
    """What ``GET /config`` answers (the /config page shows the same)."""
    overrides = {row["name"]: row for row in await store.overrides(st.db, fresh=True)}
    sources = base_sources(st.base_settings)
    now = await effective_settings(st.db, st.base_settings)  # as the next cycle reads them, whoever changed them
    rows: list[RuntimeSetting] = []
    for name in CHANGEABLE:
        row = overrides.get(name)
        live = row is not None and getattr(now, name) == row["value"]  # skipped when it no longer validates
        source = RUN_TIME if live else sources[name]
        rows.append({"name": name, "var": var(name), "value": getattr(now, name), "source": source,
                     "source_text": f"changed at run time by {row['changed_by']} at {row['changed_at']}"
                     if row is not None and live else sources[name],
                     "changed_by": row["changed_by"] if live and row else None,
                     "changed_at": row["changed_at"] if live and row else None,
                     "reverts_to": getattr(st.base_settings, name), "reverts_to_source": sources[name],
                     "description": Settings.model_fields[name].description or ""})
    return {"settings": rows, "changes": await store.changes(st.db, fresh=True), "restart": RESTART_NOTE,
            "who": WHO_NOTE}


async def apply(request: Request, sets: dict[str, Any], reverts: list[str], *,
                strict: bool) -> list[SettingChangeRow]:
    """Check and write the changes (``SettingsRefused`` when refused), then let the supervisor read them."""
    st = state(request)
    logged = await change_settings(st.db, st.base_settings, sets=sets, reverts=reverts, changed_by=changed_by(request),
                                   strict=strict)
    await st.supervisor.reload_settings()
    return logged


def refusal(exc: SettingsRefused) -> ApiError:
    detail = [{"setting": name, "message": why} for name, why in exc.problems]
    return ApiError(409, "needs_restart", detail) if exc.restart else ApiError(400, "invalid_setting", detail)


async def config(request: Request) -> Response:
    st = state(request)
    if request.method == "GET":
        return JSONResponse(await config_body(st))
    change = await json_body(request, ConfigChange)
    try:
        applied = await apply(request, change.settings, list(dict.fromkeys(change.revert)), strict=True)
    except SettingsRefused as exc:
        raise refusal(exc) from None
    body: ConfigUpdated = {**await config_body(st), "applied": applied}
    return JSONResponse(body)
