"""The ``/config`` page: what this server runs with, and the few settings that change without a restart.

* **Change at run time** (``config_changes.py``): the settings a cycle reads afresh as a form,
  with a Revert button each and the change log; every other setting needs a restart.
* **Every setting** with its effective value, where it came from (default, env, file — ``.env`` or
  a ``*_FILE`` setting — or command line; :func:`app.config_sources.setting_sources`), its description
  (the pydantic field's) and how to change it. Every ``SecretStr`` setting is shown as "set" or
  "not set", never a character of it; the other values pass through the store's redactor too, so a
  password someone put in a URL setting is masked as it is in the logs.
* **The tiers** 0..3 as a cycle runs them: model, tools (the dry-run rules when
  ``TIEROPS_DRY_RUN`` is on), timeout, budget, max turns and approval mode, and whether the chain
  can reach the tier at all (``TIEROPS_MAX_TIER``, the checks file for tier 0).
* **The checks file**: path, interval in words, checks by kind, and every problem when it does
  not load (the probe reports the same problems as its failure).
* **The output schema** every tier is validated against, with its sha256 (the value sessions
  record) and the ``/schemas`` entry holding the same schema, if any.
* **The extensions** and the runbooks folder, as ``tierops doctor`` tells it; **the MCP servers**:
  source, transport, the tools each run may call, what was left out and why (``${VAR}`` only).

"Command line" means the value differs from what the environment and ``.env`` give now
(``--home``, ``--db``, ``--checks`` on ``tierops serve``): the page compares with settings
loaded afresh; when those no longer load (``.env`` edited since the start), it says so and
reports sources without that comparison.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import SecretStr, ValidationError
from pydantic_settings import SettingsError
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from app.config import ENV_FILE, Settings, get_settings
from app.config_sources import SOURCE_COMMAND_LINE, SOURCE_FILE, setting_sources
from app.engine.mcp_launch import access, check_settings, launch_problems
from app.errors import ConfigError
from app.output.spec import AGENT_RESPONSE_SHA256, schema_sha256
from app.probe.inventory import InventoryError, load_inventory
from app.probe.inventory_rules import KINDS
from app.store import schemas as schema_store
from app.supervisor.extension_report import extensions_report
from app.supervisor.runtime_settings import CHANGEABLE, SettingsRefused
from app.supervisor.session import tier_budget, tools_for
from app.units import every, span
from app.vocab import PROBE_TIER, TIERS
from app.web.api.config import RUN_TIME
from app.web.common import WebState, state
from app.web.pages import config_changes
from app.web.pages.forms import read_form
from app.web.templating import page

log = logging.getLogger(__name__)

# Settings that also have a flag (`tierops --log-level … serve --home … --db … --checks …`).
FLAGS = {"home": "--home", "db": "--db", "checks": "--checks", "log_level": "--log-level",
         "log_format": "--log-format"}
SET = "set"
NOT_SET = "not set"


def secret_fields() -> list[str]:
    """The settings holding a secret: every ``SecretStr`` field (token, notify_urls, webhook_token,
    heartbeat_url, and any added later)."""
    return [name for name, field in Settings.model_fields.items()
            if field.annotation is SecretStr or SecretStr in getattr(field.annotation, "__args__", ())]


def _shown(st: WebState, name: str, secrets: set[str]) -> str:
    value = getattr(st.settings, name)
    if name in secrets:
        from_file = getattr(st.settings, f"{name}_file", None) is not None
        if name == "token":
            return SET if st.token is not None else NOT_SET  # what the server checks requests against
        secret = value.get_secret_value().strip() if isinstance(value, SecretStr) else ""
        return SET if secret or from_file else NOT_SET
    if value is None:
        return NOT_SET
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    return st.db.redact(text) if text else "(empty)"


def _how(name: str, var: str, source: str, env_file: Path, secrets: set[str]) -> str:
    """How to change one setting, in words."""
    where = f"set {var} in the server's environment or in {env_file}"
    if f"{name}_file" in Settings.model_fields:
        where += f" (or name a file holding it with {var}_FILE)"
    text = f"{where[0].upper()}{where[1:]}, then restart `tierops serve`."
    if name in CHANGEABLE:
        text = f"Change it above, at run time (no restart). Or {where}, then restart `tierops serve`."
    if name in FLAGS:
        text += f" Or pass {FLAGS[name]} on the command line."
    if source == SOURCE_COMMAND_LINE:
        text = f"Given on the command line when the server started{f' ({FLAGS[name]})' if name in FLAGS else ''}; " \
               f"restart without it to use {var}. " + text
    elif source == SOURCE_FILE and name in secrets:
        text = f"Read from the file named by {var}_FILE (or .env). " + text
    return text


def _baseline() -> tuple[Settings | None, str | None]:
    """The settings as the environment and ``.env`` give them now, or why they cannot load."""
    try:
        return get_settings(), None
    except (ValidationError, SettingsError, ConfigError) as exc:
        log.info("the /config page cannot reload the settings: %s", type(exc).__name__)
        return None, ("The environment or .env no longer loads as valid settings (edited since the server "
                      "started?): sources below cannot tell command-line values apart.")


def settings_rows(st: WebState, env_file: Path,
                  changed: frozenset[str] = frozenset()) -> tuple[list[dict[str, Any]], str | None]:
    """Every setting; ``changed``: the ones whose value in force was changed at run time."""
    baseline, problem = _baseline()
    sources = {**setting_sources(st.base_settings, env_file=env_file, baseline=baseline),
               **dict.fromkeys(changed, RUN_TIME)}
    secrets = set(secret_fields())
    rows = []
    for name, field in Settings.model_fields.items():
        var = f"TIEROPS_{name.upper()}"
        rows.append({"var": var, "name": name, "value": _shown(st, name, secrets), "secret": name in secrets,
                     "source": sources[name], "description": field.description or "",
                     "how": _how(name, var, sources[name], env_file, secrets)})
    return rows, problem


def tier_rows(settings: Settings) -> list[dict[str, Any]]:
    rows = []
    for n in TIERS:
        cfg = settings.tier(n)
        allowed: list[str]
        disallowed: list[str]
        if n == PROBE_TIER:
            reach = "runs every cycle first" if settings.checks is not None else "off: no checks file (TIEROPS_CHECKS)"
            allowed, disallowed = ["none: the probe runs the checks file"], []
        else:
            reach = "reachable" if n <= settings.max_tier else f"not reached: TIEROPS_MAX_TIER={settings.max_tier}"
            allowed, disallowed = tools_for(cfg, settings.dry_run)
        budget = tier_budget(settings, n)
        rows.append({
            "tier": n, "model": cfg.model, "allowed": allowed, "disallowed": disallowed,
            "timeout": span(cfg.timeout), "timeout_s": cfg.timeout,
            "budget": "$0 (no language model)" if n == PROBE_TIER else
            (f"${budget.usd:g} per run ({budget.setting})" if budget else f"none (TIEROPS_TIER{n}_MAX_BUDGET_USD=0)"),
            "max_turns": cfg.max_turns if n != PROBE_TIER else None,
            "approval": "— (starts the cycle)" if n == PROBE_TIER else getattr(settings, f"tier{n}_approval"),
            "prompt_file": str(cfg.prompt_file), "reach": reach})
    return rows


async def checks_summary(settings: Settings) -> dict[str, Any] | None:
    """The checks file: path, interval, checks by kind and hosts, or its problems."""
    if settings.checks is None:
        return None
    try:
        inv = await asyncio.to_thread(load_inventory, settings.checks)
    except InventoryError as exc:
        return {"path": str(settings.checks), "problems": [(p.line, p.message) for p in exc.problems]}
    kinds = Counter(c.kind for c in inv.checks)
    return {"path": str(inv.path), "problems": [], "checks": len(inv.checks), "hosts": len(inv.hosts),
            "by_kind": [(k, kinds[k]) for k in KINDS if kinds[k]],
            "interval": every(inv.interval_s) if inv.interval_s else None,
            "services": sorted({c.service for c in inv.checks})}


def mcp_summary(settings: Settings) -> dict[str, Any]:
    """The MCP servers as ``tierops doctor`` lists them (blocking: reads the files)."""
    try:
        found = check_settings(settings)
        servers = [{"name": s.name, "source": s.source, "path": str(s.path), "transport": s.transport,
                    "target": s.target, "access": access(settings, s.name)} for s in found.servers.values()]
    except ConfigError as exc:
        return {"error": str(exc), "servers": [], "warnings": [], "problems": []}
    return {"error": None, "servers": servers, "warnings": [str(w) for w in found.warnings],
            "problems": launch_problems(settings) if servers else [],
            "baseline": str(settings.mcp_config) if settings.mcp_config else None}


def schedule_summary(settings: Settings, checks: dict[str, Any] | None) -> str:
    if not settings.schedule:
        return "off (TIEROPS_SCHEDULE=false): cycles start only from Run Now, the API or alerts"
    if settings.cron:
        return f"on the cron expression {settings.cron} (TIEROPS_CRON)"
    if checks and checks.get("interval"):
        return f"{checks['interval']} (the checks file's interval, read again before every wait)"
    return f"{every(settings.interval)} (TIEROPS_INTERVAL)"


async def schema_summary(st: WebState) -> dict[str, Any]:
    sha = schema_sha256(st.validator.schema)
    named = [r["name"] for r in await schema_store.list_schemas(st.db) if r["sha256"] == sha]
    return {"path": str(st.settings.schema_file), "sha256": sha, "bundled": sha == AGENT_RESPONSE_SHA256,
            "named": named, "mode": st.settings.output_mode, "max_retries": st.settings.output_max_retries}


async def config_page(request: Request) -> Response:
    ctx = await config_changes.section(request)
    return await render(request, ctx, 200, config_changes.NOTICES.get(request.query_params.get("notice", "")))


async def change_form(request: Request) -> Response:
    """POST /config: the run-time form; POST /config/revert: one setting's Revert button."""
    raw = await read_form(request)
    what = config_changes.revert if request.url.path.endswith("/revert") else config_changes.change
    notice, refused = await what(request, raw)
    if refused is None:
        return RedirectResponse(f"/config?notice={notice}#runtime", status_code=303)
    form = config_changes.form_values(raw) if what is config_changes.change else None
    return await render(request, await config_changes.section(request, form, refused.problems),
                        _status(refused))


def _status(refused: SettingsRefused) -> int:
    return 409 if refused.restart else 400


async def render(request: Request, runtime: dict[str, Any], status: int, notice: str | None = None) -> Response:
    st = state(request)
    env_file = Path(ENV_FILE).absolute()
    rows, problem = settings_rows(st, env_file, frozenset(r["name"] for r in runtime["rows"] if r["run_time"]))
    checks = await checks_summary(st.settings)
    extra = {"notice": notice} if notice else {}
    return page(request, "config.html", {
        **extra, "runtime": runtime, "rows": rows, "sources_problem": problem, "env_file": str(env_file), "env_file_exists": env_file.is_file(),
        "counts": Counter(r["source"] for r in rows), "tiers": tier_rows(st.settings),
        "max_tier": st.settings.max_tier, "dry_run": st.settings.dry_run, "checks": checks,
        "schedule": schedule_summary(st.settings, checks), "schema": await schema_summary(st),
        "mcp": await asyncio.to_thread(mcp_summary, st.settings),
        "extensions": await asyncio.to_thread(extensions_report, st.settings)}, status)


routes = [Route("/config", config_page, methods=["GET"]), Route("/config", change_form, methods=["POST"]),
          Route("/config/revert", change_form, methods=["POST"])]
