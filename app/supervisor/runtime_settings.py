"""Settings changed at run time: which ones may be, what a valid value is, and the settings in force.

Why a module of its own: a few settings are read afresh by every cycle (a tier's model, the
highest tier, dry run, the schedule, the notifications' minimum severity), so changing them needs
no restart; every other one is fixed when the process starts (paths, tokens, the store, the
routes the notifier built) and is refused with what to do instead. A value is checked by the
Settings class itself (``validate_assignment``: the field's type, bounds and validators — the
cron expression, a model name's characters), so a run-time value can never be one the
environment would have been refused. Stored values are checked again when read
(:func:`effective_settings`): one that no longer passes (a rule tightened since) is skipped with
a WARNING naming it, once per process, and the environment's value is used.

There are no user accounts: a change records who made it as far as the request tells — the
dashboard (its login cookie) or the API token, and the client's address (``changed_by``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from app.config import Settings
from app.store import runtime_settings as store
from app.store.db import Database
from app.store.runtime_settings import SettingChangeRow

log = logging.getLogger(__name__)

__all__ = ["CHANGEABLE", "SettingsRefused", "change_settings", "checked_value", "effective_settings",
           "restart_note"]

# The settings a cycle reads afresh: the chain (tier models, max_tier, dry_run), the schedule's
# next wait (interval, cron) and the notifier (notify_min_severity).
CHANGEABLE = ("interval", "cron", "tier1_model", "tier2_model", "tier3_model", "max_tier", "dry_run",
              "notify_min_severity")
_warned: set[tuple[str, str]] = set()


def var(name: str) -> str:
    return f"TIEROPS_{name.upper()}"


def restart_note(name: str) -> str:
    return f"{name} needs a restart: set {var(name)} in the environment or .env"


class SettingsRefused(Exception):
    """A batch of changes refused, none applied: one ``(setting, why)`` per problem.
    ``restart``: every problem is a setting that cannot change at run time."""

    def __init__(self, problems: Sequence[tuple[str, str]], *, restart: bool = False) -> None:
        super().__init__("; ".join(why for _name, why in problems))
        self.problems = list(problems)
        self.restart = restart


def _integral(value: Any) -> Any:
    """JSON's 60.0 is the integer 60 (JSON Schema's integer says so; strict mode alone refuses it)."""
    return int(value) if isinstance(value, float) and math.isfinite(value) and value.is_integer() else value


def checked_value(base: Settings, name: str, value: Any, *, strict: bool) -> Any:
    """``value`` as the Settings class accepts it for ``name`` (normalised: a cron expression
    stripped, "60" → 60 unless ``strict``), or ValueError saying which rule it breaks. ``strict``:
    JSON types only (the API); otherwise text as the environment gives it (the form)."""
    trial = base.model_copy()
    candidate = _integral(value) if strict and Settings.model_fields[name].annotation is int else value
    try:
        Settings.__pydantic_validator__.validate_assignment(trial, name, candidate, strict=strict)
    except ValidationError as exc:
        why = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise ValueError(f"{var(name)}: {why}; got {_short(value)}") from None
    return getattr(trial, name)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


async def effective_settings(db: Database, base: Settings) -> Settings:
    """``base`` with the settings changed at run time laid over it, each checked again (one that no
    longer passes is skipped, logged once at WARNING); ``base`` itself when none is stored."""
    rows = await store.overrides(db, fresh=True)
    if not rows:
        return base
    settings = base.model_copy()
    for row in rows:
        name = row["name"]
        try:
            if name not in CHANGEABLE:
                raise ValueError(f"{name} cannot change at run time (any more)")
            value = checked_value(base, name, row["value"], strict=False)
        except ValueError as exc:
            if (name, repr(row["value"])) not in _warned:
                _warned.add((name, repr(row["value"])))
                log.warning("setting %s changed at run time by %s is skipped: %s; %s applies", name,
                            row["changed_by"], exc, var(name), extra={"setting": name})
            continue
        setattr(settings, name, value)
    return settings


async def change_settings(db: Database, base: Settings, *, sets: Mapping[str, Any], reverts: Sequence[str],
                          changed_by: str, strict: bool = True) -> list[SettingChangeRow]:
    """Set and revert settings, all or nothing: every value is checked first (:class:`SettingsRefused`
    lists every problem), then one transaction writes them with their change-log rows, which are
    returned (a value already in force and a revert of an unchanged setting log nothing)."""
    problems: list[tuple[str, str]] = []
    checked: dict[str, Any] = {}
    restart_only = 0
    for name in [*sets, *reverts]:
        if name not in CHANGEABLE:
            if name in Settings.model_fields:
                restart_only += 1
                problems.append((name, restart_note(name)))
            else:
                problems.append((name, f"there is no setting {name!r}; these change at run time: "
                                       f"{', '.join(CHANGEABLE)}"))
    problems += [(name, f"{name} is both set and reverted; do one") for name in sorted(set(sets) & set(reverts))]
    for name, value in sets.items():
        if name in CHANGEABLE:
            try:
                checked[name] = checked_value(base, name, value, strict=strict)
            except ValueError as exc:
                problems.append((name, str(exc)))
                continue
            if isinstance(checked[name], str) and db.redact(checked[name]) != checked[name]:
                problems.append((name, f"{var(name)}: the value looks like a secret (the redactor masks it); a "
                                       "setting changed at run time is stored and shown, so it must hold none"))
    if problems:
        raise SettingsRefused(problems, restart=restart_only == len(problems))
    logged = await store.apply_changes(db, sets=checked, reverts=list(reverts),
                                       base={name: getattr(base, name) for name in CHANGEABLE}, changed_by=changed_by)
    for row in logged:
        log.info("setting %s %s at run time by %s: %s -> %s", row["name"],
                 "reverted" if row["action"] == "revert" else "changed", changed_by, _short(row["old_value"]),
                 _short(row["new_value"]), extra={"setting": row["name"]})
    return logged
