"""The OpenAPI 3.1 document served at ``/api/v1/openapi.json``, written by hand: small, exact,
and checked against the mounted routes by ``tests/web/test_api.py``. Enums, tiers and lengths
come from :mod:`app.vocab` and :mod:`app.web.limits`, the constants the handlers check against."""

from __future__ import annotations

from typing import Any

from app import __version__
from app.vocab import MAX_TIER, MIN_TIER, Level, SessionStatus, values
from app.web.limits import (
    MEMORY_CATEGORY_MAX,
    MEMORY_DEFAULT_CONFIDENCE,
    MEMORY_SERVICE_MAX,
    MEMORY_VALUE_MAX,
    PROMPT_MAX_CHARS,
)

_ERR = {"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_JSON = {"content": {"application/json": {"schema": {"type": "object"}}}}


def _op(summary: str, ok: str = "200", params: list[Any] | None = None, body: str | None = None,
        errors: tuple[str, ...] = ("401", "422")) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {ok: {"description": "ok", **(_JSON if ok != "204" else {})},
                                                  **{code: _ERR for code in errors}}}
    if params:
        op["parameters"] = params
    if body:
        op["requestBody"] = {"required": True, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{body}"}}}}
    return op


def _q(name: str, kind: str = "integer", enum: tuple[str, ...] | None = None, **limits: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": kind, **limits}
    if enum:
        schema["enum"] = list(enum)
    return {"name": name, "in": "query", "required": False, "schema": schema}


_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}


def _memory_properties(*, defaults: bool) -> dict[str, Any]:
    """MemoryCreate's and MemoryPatch's fields (the same limits; only creation has defaults)."""
    confidence: dict[str, Any] = {"type": "number", "minimum": 0, "maximum": 1}
    active: dict[str, Any] = {"type": "boolean"}
    if defaults:
        confidence["default"] = MEMORY_DEFAULT_CONFIDENCE
        active["default"] = True
    return {"category": {"type": "string", "minLength": 1, "maxLength": MEMORY_CATEGORY_MAX},
            "value": {"type": "string", "minLength": 1, "maxLength": MEMORY_VALUE_MAX},
            "service": {"type": ["string", "null"], "maxLength": MEMORY_SERVICE_MAX},
            "confidence": confidence, "active": active}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "TierOps API", "version": __version__,
                 "description": "Sessions, events, memories and runs of TierOps. With TIEROPS_TOKEN set, send "
                                "'Authorization: Bearer <token>'. Errors are {error, detail}."},
        "servers": [{"url": "/api/v1"}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {"type": "object", "required": ["error"],
                          "properties": {"error": {"type": "string"}, "detail": {}}},
                "RunRequest": {"type": "object", "additionalProperties": False, "properties": {
                    "tier": {"type": "integer", "minimum": MIN_TIER, "maximum": MAX_TIER, "default": MIN_TIER},
                    "prompt": {"type": ["string", "null"], "maxLength": PROMPT_MAX_CHARS}}},
                "MemoryCreate": {"type": "object", "additionalProperties": False, "required": ["category", "value"],
                                 "properties": _memory_properties(defaults=True)},
                "MemoryPatch": {"type": "object", "additionalProperties": False,
                                "properties": _memory_properties(defaults=False)},
            },
        },
        "security": [{"bearer": []}],
        "paths": {
            "/sessions": {"get": _op("List sessions, newest first", params=[
                _q("status", "string", values(SessionStatus)), _q("tier", minimum=MIN_TIER, maximum=MAX_TIER),
                _q("limit"), _q("offset")])},
            "/sessions/{id}": {"get": _op("One session with its output attempts", params=[_ID],
                                          errors=("401", "404"))},
            "/sessions/{id}/activity": {"get": _op("Stored stream lines after a sequence number",
                                                   params=[_ID, _q("after"), _q("limit")],
                                                   errors=("401", "404", "422"))},
            "/sessions/{id}/result": {"get": _op("result_data or result_text, with validation, source, attempts",
                                                 params=[_ID], errors=("401", "404"))},
            "/sessions/{id}/stop": {"post": _op("Stop a running session (SIGTERM, then SIGKILL)", "202",
                                                params=[_ID], errors=("401", "403", "404", "409"))},
            "/runs": {"post": _op("Start a chain now; answers at once with the first session id", "202",
                                  body="RunRequest", errors=("401", "403", "409", "422"))},
            "/events": {"get": _op("List events, newest first", params=[
                _q("level", "string", values(Level)), _q("service", "string"), _q("session"),
                _q("limit"), _q("offset")])},
            "/memories": {
                "get": _op("List memories", params=[_q("service", "string"), _q("category", "string"),
                                                    _q("active", "boolean"), _q("limit"), _q("offset")]),
                "post": _op("Create a memory", "201", body="MemoryCreate", errors=("401", "403", "409", "422"))},
            "/memories/{id}": {
                "patch": _op("Edit a memory", params=[_ID], body="MemoryPatch",
                             errors=("401", "403", "404", "409", "422")),
                "delete": _op("Delete a memory", "204", params=[_ID], errors=("401", "403", "404"))},
            "/openapi.json": {"get": {"summary": "This document", "security": [],
                                      "responses": {"200": {"description": "ok", **_JSON}}}},
        },
    }
