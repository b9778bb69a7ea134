"""Memories over the API: list with filters, create, edit and delete.

The bodies are strict pydantic models with the limits of :mod:`app.web.limits`; surrounding
whitespace is dropped after the length check, and a PATCH may clear only ``service`` (the other
columns cannot be null). A create or an edit that would duplicate another memory is a 409.
"""

from __future__ import annotations

import logging

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.store import memories as memory_store
from app.store.memories import MemoryConflict
from app.web.common import ApiError, int_param, json_body, limit_param, path_int, state, stripped
from app.web.limits import (
    MEMORIES_LIMIT,
    MEMORY_CATEGORY_MAX,
    MEMORY_DEFAULT_CONFIDENCE,
    MEMORY_SERVICE_MAX,
    MEMORY_VALUE_MAX,
)

log = logging.getLogger(__name__)


class MemoryCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    category: str = Field(min_length=1, max_length=MEMORY_CATEGORY_MAX)
    value: str = Field(min_length=1, max_length=MEMORY_VALUE_MAX)
    service: str | None = Field(None, max_length=MEMORY_SERVICE_MAX)
    confidence: float = Field(MEMORY_DEFAULT_CONFIDENCE, ge=0, le=1)
    active: bool = True

    @field_validator("category", "value", "service")
    @classmethod
    def _stripped(cls, value: str | None, info: ValidationInfo) -> str | None:
        return stripped(value, blank_ok=info.field_name == "service")


class MemoryPatch(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    category: str | None = Field(None, min_length=1, max_length=MEMORY_CATEGORY_MAX)
    value: str | None = Field(None, min_length=1, max_length=MEMORY_VALUE_MAX)
    service: str | None = Field(None, max_length=MEMORY_SERVICE_MAX)
    confidence: float | None = Field(None, ge=0, le=1)
    active: bool | None = None

    @field_validator("category", "value", "service")
    @classmethod
    def _stripped(cls, value: str | None, info: ValidationInfo) -> str | None:
        return stripped(value, blank_ok=info.field_name == "service")

    @model_validator(mode="after")
    def _no_null_for_required_columns(self) -> MemoryPatch:
        for name in ("category", "value", "confidence", "active"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null (only service may be cleared)")
        return self


def _active_param(request: Request) -> bool | None:
    raw = request.query_params.get("active")
    if raw not in (None, "", "true", "false", "1", "0"):
        raise ApiError(422, "invalid_parameter", "query parameter 'active' must be true or false")
    return None if raw in (None, "") else raw in ("true", "1")


async def memories(request: Request) -> Response:
    db = state(request).db
    if request.method == "POST":
        body = await json_body(request, MemoryCreate)
        try:
            row = await memory_store.create_memory(db, **body.model_dump())
        except MemoryConflict as exc:
            raise ApiError(409, "conflict", str(exc)) from None
        return JSONResponse(row, status_code=201)
    rows = await memory_store.list_memories(
        db, service=request.query_params.get("service") or None, category=request.query_params.get("category") or None,
        active=_active_param(request), limit=limit_param(request, MEMORIES_LIMIT),
        offset=int_param(request, "offset", 0))
    return JSONResponse(rows)


async def memory(request: Request) -> Response:
    db = state(request).db
    pk = path_int(request)
    if request.method == "DELETE":
        if not await memory_store.delete_memory(db, pk):
            raise ApiError(404, "not_found", f"no memory {pk}")
        return Response(status_code=204)
    body = await json_body(request, MemoryPatch)
    try:
        row = await memory_store.update_memory(db, pk, body.model_dump(exclude_unset=True))
    except MemoryConflict as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    if row is None:
        raise ApiError(404, "not_found", f"no memory {pk}")
    return JSONResponse(row)
