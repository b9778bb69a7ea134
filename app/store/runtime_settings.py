"""Settings changed at run time: the values in force instead of the environment's, and every change.

Why a table: an operator changes a tier's model or the interval from the dashboard or the API
without a restart, and every process on the database (``serve``, ``supervise``, ``run``) must use
the same values from its next cycle on, across restarts too. ``runtime_settings`` holds one row
per setting changed (its JSON value, who, when); ``runtime_setting_changes`` keeps every set and
revert with the values before and after. Which settings may be here and what a valid value is
are not this module's business (``app/supervisor/runtime_settings.py`` decides, with the Settings
class); this module writes a batch of changes in one transaction, so a batch is all or nothing,
and computes each change's old value inside that transaction, so two writers cannot log the same
old value twice.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict

from app.clock import utcnow
from app.store.db import Database

log = logging.getLogger(__name__)

__all__ = ["CHANGES_LIMIT", "RuntimeSettingRow", "SettingChangeRow", "apply_changes", "changes", "overrides"]

CHANGES_LIMIT = 50  # change-log rows GET /api/v1/config and the /config page show
SET: Literal["set"] = "set"
REVERT: Literal["revert"] = "revert"


class RuntimeSettingRow(TypedDict):
    name: str
    value: Any  # the JSON value in force
    changed_by: str
    changed_at: str


class SettingChangeRow(TypedDict):
    id: int
    name: str
    old_value: Any  # the JSON value in force before (None only when nothing was known)
    new_value: Any  # and after; a revert's is the environment's, .env's or the default
    changed_by: str
    changed_at: str
    action: Literal["set", "revert"]


def _decoded(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:  # not written by this module: shown as it is
        return text


def _encoded(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


async def overrides(db: Database, *, fresh: bool = False) -> list[RuntimeSettingRow]:
    """Every setting changed at run time, by name. ``fresh``: read on the writer (this process's
    last write included)."""
    rows = await db.fetchall("SELECT name, value, changed_by, changed_at FROM runtime_settings ORDER BY name",
                             fresh=fresh)
    return [{"name": r["name"], "value": _decoded(r["value"]), "changed_by": r["changed_by"],
             "changed_at": r["changed_at"]} for r in rows]


async def changes(db: Database, *, limit: int = CHANGES_LIMIT, fresh: bool = False) -> list[SettingChangeRow]:
    """The newest ``limit`` changes, newest first."""
    rows = await db.fetchall("SELECT id, name, old_value, new_value, changed_by, changed_at, action "
                             "FROM runtime_setting_changes ORDER BY id DESC LIMIT ?", (limit,), fresh=fresh)
    return [_change(r) for r in rows]


def _change(r: Any) -> SettingChangeRow:
    return {"id": r["id"], "name": r["name"], "old_value": _decoded(r["old_value"]),
            "new_value": _decoded(r["new_value"]), "changed_by": r["changed_by"], "changed_at": r["changed_at"],
            "action": REVERT if r["action"] == REVERT else SET}


async def apply_changes(db: Database, *, sets: Mapping[str, Any], reverts: Sequence[str], base: Mapping[str, Any],
                        changed_by: str, now: str | None = None) -> list[SettingChangeRow]:
    """Set and revert settings in one transaction, and log each change; returns the logged rows.

    ``base``: each named setting's value without run-time changes (the environment, ``.env`` or the
    default), the old value of a setting not changed yet and the new value of a revert. A set to
    the value already in force, and a revert of a setting not changed at run time, change nothing
    and are not logged."""
    when = now or utcnow()
    logged: list[SettingChangeRow] = []
    async with db.write() as conn:
        async with conn.execute("SELECT name, value FROM runtime_settings") as cur:
            current = {r[0]: r[1] for r in await cur.fetchall()}
        entries: list[tuple[str, str, str, str]] = []
        for name, value in sets.items():
            in_force = _decoded(current[name]) if name in current else base.get(name)
            if in_force == value:
                continue  # already in force
            old, new = (current[name] if name in current else _encoded(in_force)), _encoded(value)
            await conn.execute("INSERT INTO runtime_settings (name, value, changed_by, changed_at) VALUES (?, ?, ?, ?)"
                               " ON CONFLICT (name) DO UPDATE SET value = excluded.value, "
                               "changed_by = excluded.changed_by, changed_at = excluded.changed_at",
                               (name, new, changed_by, when))
            entries.append((name, old, new, SET))
        for name in reverts:
            if name not in current:
                continue  # nothing to revert
            await conn.execute("DELETE FROM runtime_settings WHERE name = ?", (name,))
            entries.append((name, current[name], _encoded(base.get(name)), REVERT))
        for name, old, new, action in entries:
            added = await conn.execute("INSERT INTO runtime_setting_changes (name, old_value, new_value, changed_by, "
                                     "changed_at, action) VALUES (?, ?, ?, ?, ?, ?) RETURNING id, name, old_value, "
                                     "new_value, changed_by, changed_at, action",
                                     (name, old, new, changed_by, when, action))
            row = await added.fetchone()
            await added.close()
            if row is not None:
                logged.append(_change(row))
    return logged
