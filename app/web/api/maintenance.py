"""The maintenance API: every window (configured and ad-hoc, with what is active now and what comes
next), adding an ad-hoc window, and ending one early.

A module of its own because its body has a rule JSON Schema states but pydantic does not by
itself: exactly one of ``duration`` and ``ends_at``. The rest of what a window may be (not over
before it starts, at most 90 days, patterns) is :func:`app.store.maintenance.plan` and
:func:`~app.store.maintenance.create_window`, which the dashboard's form and ``tierops
maintenance add`` use too; their refusals are 422 with the JSON path of the field at fault.
Who added or ended a window is recorded like incident actions (:func:`actor_for`).

Order of checks for an end: the body (413/415/422), then the window (404), then its state (409).
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.engine import maintenance as engine
from app.store import maintenance as store
from app.store.incidents import OPERATOR_MAX
from app.store.maintenance import MaintenanceStateError, WindowInputError
from app.web.api.incidents import actor_for
from app.web.common import ASCII_SPACE, ApiError, json_body, path_int, state
from app.web.limits import OPERATOR_PATTERN

log = logging.getLogger(__name__)

Pattern = Annotated[str, Field(min_length=1, max_length=store.PATTERN_MAX)]


def _stripped(value: str | None, *, field: str) -> str | None:
    """Surrounding ASCII whitespace dropped after the length check; nothing left is refused."""
    if value is None:
        return None
    value = value.strip(ASCII_SPACE)
    if not value:
        raise ValueError(f"{field} must contain more than whitespace")
    return value


class MaintenanceCreate(BaseModel):
    """``POST /maintenance`` (strict: the OpenAPI types are the only ones accepted)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    duration: str | None = Field(None, min_length=1, max_length=store.DURATION_MAX, pattern=store.DURATION_PATTERN)
    ends_at: str | None = Field(None, min_length=1, max_length=store.TIME_MAX, pattern=store.TIME_PATTERN)
    starts_at: str | None = Field(None, min_length=1, max_length=store.TIME_MAX, pattern=store.TIME_PATTERN)
    services: list[Pattern] | None = Field(None, min_length=1, max_length=store.PATTERNS_MAX)
    checks: list[Pattern] | None = Field(None, min_length=1, max_length=store.PATTERNS_MAX)
    reason: str = Field(min_length=1, max_length=store.REASON_MAX)
    by: str | None = Field(None, max_length=OPERATOR_MAX, pattern=OPERATOR_PATTERN)

    @model_validator(mode="before")
    @classmethod
    def _no_nulls(cls, data: Any) -> Any:
        """Leave a field out rather than sending null (the document's types say string or list)."""
        if isinstance(data, dict):
            for key in ("duration", "ends_at", "starts_at", "services", "checks"):
                if key in data and data[key] is None:
                    raise ValueError(f"{key} must not be null; leave it out instead")
        return data

    @field_validator("reason", "by")
    @classmethod
    def _text(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.field_name == "by":
            return (value.strip() or None) if value is not None else None
        return _stripped(value, field=str(info.field_name))

    @field_validator("services", "checks")
    @classmethod
    def _patterns(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if value is None:
            return None
        return [_stripped(p, field=f"every pattern of {info.field_name}") or "" for p in value]

    @model_validator(mode="after")
    def _one_end(self) -> MaintenanceCreate:
        if (self.duration is None) == (self.ends_at is None):
            raise ValueError("give exactly one of duration (e.g. 2h) and ends_at (an ISO time with a zone)")
        return self


class MaintenanceEnd(BaseModel):
    """The optional body of ``POST /maintenance/{id}/end``."""

    model_config = ConfigDict(extra="forbid", strict=True)
    by: str | None = Field(None, max_length=OPERATOR_MAX, pattern=OPERATOR_PATTERN)

    @field_validator("by")
    @classmethod
    def _stripped(cls, value: str | None) -> str | None:
        return (value.strip() or None) if value is not None else None


def _invalid(field: str, message: str) -> ApiError:
    return ApiError(422, "invalid_body", [{"path": f"$.{field}", "message": message}])


async def maintenance(request: Request) -> Response:
    """GET: every window and what is active; POST: add an ad-hoc window (201 with its row)."""
    st = state(request)
    if request.method == "POST":
        body = await json_body(request, MaintenanceCreate)
        try:
            starts_at, ends_at = store.plan(duration=body.duration, ends_at=body.ends_at, starts_at=body.starts_at)
            row = await store.create_window(st.db, starts_at=starts_at, ends_at=ends_at, reason=body.reason,
                                            created_by=actor_for(request, body.by), services=body.services,
                                            checks=body.checks)
        except WindowInputError as exc:
            raise _invalid(exc.field, str(exc)) from None
        return JSONResponse(row, status_code=201)
    try:
        engine.setting_windows(st.settings)
    except engine.MaintenanceConfigError as exc:
        raise ApiError(500, "config_error", str(exc)) from None
    return JSONResponse(await engine.report(st.db, st.settings))


async def end(request: Request) -> Response:
    """End an ad-hoc window now (an upcoming one never starts)."""
    pk = path_int(request)
    body = await json_body(request, MaintenanceEnd, required=False)
    db = state(request).db
    if await store.get_window(db, pk) is None:
        raise ApiError(404, "not_found", f"no maintenance window {pk}")
    try:
        row = await store.cancel_window(db, pk, actor_for(request, body.by))
    except LookupError:  # deleted since the look-up above
        raise ApiError(404, "not_found", f"no maintenance window {pk}") from None
    except MaintenanceStateError as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    return JSONResponse(row)
