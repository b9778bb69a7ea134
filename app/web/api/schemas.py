"""The named output schema registry over the API: list, store (checked first, immutable), one, forget.

A schema is checked exactly as a run's inline schema is (``check_schema``: the preflight of what
the pinned CLI accepts, then compiling it) before it is stored, so a stored name can always be run.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.engine.contracts import ContractError, check_schema
from app.store import schemas as schema_store
from app.web.common import ApiError, int_param, json_body, limit_param, state, stripped
from app.web.limits import SCHEMA_DESCRIPTION_MAX, SCHEMA_NAME_PATTERN, SCHEMAS_LIMIT

log = logging.getLogger(__name__)


class SchemaCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(pattern=SCHEMA_NAME_PATTERN)
    description: str | None = Field(None, max_length=SCHEMA_DESCRIPTION_MAX)
    schema_: dict[str, Any] = Field(alias="schema")


async def schemas(request: Request) -> Response:
    """GET: the registry; POST: store a new named schema (checked first; 409 if the name exists)."""
    st = state(request)
    if request.method == "POST":
        body = await json_body(request, SchemaCreate)
        try:
            check_schema(body.schema_, st.settings, what=f"schema {body.name!r}")
            row = await schema_store.create_schema(st.db, name=body.name, schema=body.schema_,
                                                   description=stripped(body.description, blank_ok=True) or None)
        except ContractError as exc:
            raise ApiError(422, "invalid_output_schema", exc.detail) from None
        except schema_store.SchemaExists as exc:
            raise ApiError(409, "conflict", str(exc)) from None
        return JSONResponse(row, status_code=201, headers={"location": f"/api/v1/schemas/{row['name']}"})
    rows = await schema_store.list_schemas(st.db, limit=limit_param(request, SCHEMAS_LIMIT),
                                           offset=int_param(request, "offset", 0))
    return JSONResponse(rows)


async def schema(request: Request) -> Response:
    db = state(request).db
    name = request.path_params["name"]
    if request.method == "DELETE":
        if not await schema_store.delete_schema(db, name):
            raise ApiError(404, "not_found", f"no schema named {name!r}")
        return Response(status_code=204)
    row = await schema_store.get_schema(db, name)
    if row is None:
        raise ApiError(404, "not_found", f"no schema named {name!r}")
    return JSONResponse(row)
