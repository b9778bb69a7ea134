"""The /config page's "Change at run time" section: its form, its Revert buttons and its change log.

What ``GET``/``PUT /api/v1/config`` do (``app/web/api/config.py``), as a form: one POST with every
changeable setting (a value already in force changes nothing, so only what the operator edited is
recorded), and one small form per setting changed at run time that reverts it. Text from the form
is read as the environment's text is (``"60"`` is 60, ``"true"`` is true), surrounding whitespace
dropped. The handlers (``config.py``) re-render the page on a refusal with every problem and what
was typed (400, or 409 for a setting that needs a restart), or redirect (303) with a fixed notice.
CSRF is the security middleware's, as for every form (``forms.py``).

A tier's model is a text input with a ``<datalist>`` of the models the upstream offers (the
supervisor's catalog, waited for at most :data:`MODELS_WAIT` s; the fetch goes on and fills the
list for the next load): any name can be typed, and when the list cannot be had the page says why.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.requests import Request

from app.supervisor.runtime_settings import CHANGEABLE, SettingsRefused
from app.supervisor.upstream_models import ModelsView
from app.web.api.config import RUN_TIME, apply, config_body
from app.web.common import WebState, state

log = logging.getLogger(__name__)

MODELS_WAIT = 2.0  # seconds the page waits for the models list
NOTICES = {  # fixed texts after a redirect (never query text echoed into the page)
    "settings_changed": "Saved: the next cycle uses the new values (a changed schedule applies at once).",
    "settings_unchanged": "Nothing changed: every value was already in force.",
    "setting_reverted": "Reverted: the next cycle uses the environment's, .env's or the default value.",
}
CHOICES: dict[str, list[tuple[str, str]]] = {
    "max_tier": [("0", "0 (the probe only)"), ("1", "1"), ("2", "2"), ("3", "3")],
    "dry_run": [("false", "off"), ("true", "on: read-only tools, only report")],
    "notify_min_severity": [("info", "info"), ("warning", "warning"), ("critical", "critical")],
}
MODEL_FIELDS = ("tier1_model", "tier2_model", "tier3_model")


def as_text(value: Any) -> str:
    """A value as the form shows it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


async def models_for_page(st: WebState) -> tuple[list[dict[str, Any]], str | None]:
    """The upstream's models for the datalist, and why there are none or they are old (None: fine)."""
    catalog = st.supervisor.models
    try:
        view: ModelsView | None = await asyncio.wait_for(catalog.get(), MODELS_WAIT)
    except TimeoutError:
        view = catalog.cached()
        if view is None or view.status == 200:
            return ([dict(m) for m in view.body["models"]] if view else []), (
                f"The models list is still being fetched (more than {MODELS_WAIT:g} s so far); reload the page in a "
                "moment. Any model name can be typed.")
    assert view is not None  # noqa: S101 (answered, or the branch above returned)
    models = [dict(m) for m in view.body["models"]]
    if view.status != 200:
        detail = view.body.get("detail")
        return models, f"The models the upstream offers are not available: {detail}. Any model name can be typed."
    return models, None


async def section(request: Request, form: dict[str, str] | None = None,
                  problems: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """The section's context: the settings, their form values, the models, the change log."""
    st = state(request)
    body = await config_body(st)
    models, models_problem = await models_for_page(st)
    rows = [{**s, "text": (form or {}).get(s["name"], as_text(s["value"])), "run_time": s["source"] == RUN_TIME,
             "reverts_to_text": as_text(s["reverts_to"]) or "(empty)", "choices": CHOICES.get(s["name"]),
             "model": s["name"] in MODEL_FIELDS,
             "errors": [why for name, why in problems or [] if name == s["name"]]} for s in body["settings"]]
    other = [why for name, why in problems or [] if name not in CHANGEABLE]
    return {"rows": rows, "changes": body["changes"], "restart": body["restart"], "who": body["who"],
            "models": models, "models_problem": models_problem, "problems": problems or [], "other_problems": other}


def form_values(raw: dict[str, str]) -> dict[str, str]:
    """The changeable settings the form sent, surrounding whitespace dropped."""
    return {name: raw[name].strip() for name in CHANGEABLE if name in raw}


async def change(request: Request, raw: dict[str, str]) -> tuple[str | None, SettingsRefused | None]:
    """The form's values applied: the notice to redirect with, or the refusal."""
    try:
        applied = await apply(request, form_values(raw), [], strict=False)
    except SettingsRefused as exc:
        return None, exc
    return ("settings_changed" if applied else "settings_unchanged"), None


async def revert(request: Request, raw: dict[str, str]) -> tuple[str | None, SettingsRefused | None]:
    """The setting the Revert button names back to its environment/.env/default value, or the refusal."""
    try:
        await apply(request, {}, [raw.get("name", "").strip()], strict=False)
    except SettingsRefused as exc:
        return None, exc
    return "setting_reverted", None
