"""The ``/api/docs`` page: the OpenAPI document rendered on the server, no script.

Why not Swagger UI or Redoc: both are scripts from a CDN (or megabytes to vendor) and the
dashboard's Content-Security-Policy allows neither inline script nor style. The document is
small (:mod:`app.web.api.openapi`), so one Jinja template shows all of it: the
operations grouped by tag in the document's tag order, each with an anchor
(``#get-/sessions/{id}`` style ids, slugged), its parameters with their types, ranges and
defaults, its request body and responses linked to the schemas, which are listed at the end
with their properties. It renders the same document ``/api/v1/openapi.json`` serves to this
client (with or without the bearer requirement, as configured).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.web.api.openapi import document
from app.web.common import state
from app.web.templating import page

log = logging.getLogger(__name__)

METHODS = ("get", "post", "put", "patch", "delete")
REF_PREFIX = "#/components/schemas/"


def anchor(*parts: str) -> str:
    """A fragment id made of ``parts``: ``op-get-sessions-id``."""
    return re.sub(r"[^A-Za-z0-9]+", "-", "-".join(parts)).strip("-").lower()


def ref_name(schema: dict[str, Any]) -> str | None:
    ref = schema.get("$ref")
    return ref.removeprefix(REF_PREFIX) if isinstance(ref, str) and ref.startswith(REF_PREFIX) else None


def _value(value: Any) -> str:
    if value is None:
        return "null"
    if value == "":
        return "(empty)"
    return json.dumps(value) if not isinstance(value, str) else value


def type_text(schema: dict[str, Any] | None) -> str:
    """A schema in a few words: ``integer 1..365, or empty (default 14)``, ``array of Session``."""
    if not schema:
        return "any"
    if (name := ref_name(schema)) is not None:
        return name
    for key in ("anyOf", "oneOf"):
        if key in schema:
            text = ", or ".join(type_text(s) for s in schema[key])
            return _with_default(text, schema)
    if "enum" in schema:
        return _with_default("one of " + ", ".join(_value(v) for v in schema["enum"]), schema)
    kind = schema.get("type", "any")
    text = " or ".join(kind) if isinstance(kind, list) else str(kind)
    if kind == "array":
        text = f"array of {type_text(schema.get('items'))}"
    if kind == "string" and schema.get("maxLength") == 0:
        return "empty"
    limits = []
    if "minimum" in schema or "maximum" in schema:
        limits.append(f"{schema.get('minimum', '')}..{schema.get('maximum', '')}")
    if "minLength" in schema or "maxLength" in schema:
        limits.append(f"length {schema.get('minLength', 0)}..{schema.get('maxLength', '')}")
    if "minItems" in schema or "maxItems" in schema:
        limits.append(f"{schema.get('minItems', 0)}..{schema.get('maxItems', '')} items")
    if "pattern" in schema:
        limits.append(f"pattern {schema['pattern']}")
    if limits:
        text += " " + ", ".join(limits)
    return _with_default(text, schema)


def _with_default(text: str, schema: dict[str, Any]) -> str:
    return f"{text} (default {_value(schema['default'])})" if "default" in schema else text


def _body(op: dict[str, Any]) -> dict[str, Any] | None:
    body = op.get("requestBody")
    if not body:
        return None
    schema = body.get("content", {}).get("application/json", {}).get("schema", {})
    ref = ref_name(schema)
    return {"required": bool(body.get("required")), "type": type_text(schema), "ref": ref,
            "ref_id": anchor("schema", ref) if ref else None}


def _responses(op: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for code, resp in op.get("responses", {}).items():
        schema = resp.get("content", {}).get("application/json", {}).get("schema")
        items = schema.get("items", {}) if schema and schema.get("type") == "array" else {}
        ref = ref_name(schema or {}) or ref_name(items)
        out.append({"code": code, "description": resp.get("description", ""),
                    "type": type_text(schema) if schema else None, "ref_id": anchor("schema", ref) if ref else None})
    return out


def _operation(path: str, method: str, op: dict[str, Any], secured: bool) -> dict[str, Any]:
    return {
        "id": anchor("op", method, path), "method": method.upper(), "path": path, "summary": op.get("summary", ""),
        "parameters": [{"name": p["name"], "in": p["in"], "required": bool(p.get("required")),
                        "type": type_text(p.get("schema")), "description": p.get("description", "")}
                       for p in op.get("parameters", [])],
        "body": _body(op), "responses": _responses(op),
        "auth": secured and op.get("security") != [],
    }


def _schemas(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name, schema in doc["components"]["schemas"].items():
        required = set(schema.get("required", []))
        props = [{"name": key, "type": type_text(sub), "required": key in required,
                  "description": sub.get("description", "")} for key, sub in schema.get("properties", {}).items()]
        alternatives = [type_text(s) for s in schema.get("oneOf", schema.get("anyOf", []))]
        out.append({"name": name, "id": anchor("schema", name), "description": schema.get("description", ""),
                    "properties": props, "alternatives": alternatives,
                    "closed": schema.get("additionalProperties") is False})
    return out


def docs_context(doc: dict[str, Any]) -> dict[str, Any]:
    """The document as the template shows it: tags in order, each with its operations."""
    secured = bool(doc.get("security"))
    groups: dict[str, list[dict[str, Any]]] = {t["name"]: [] for t in doc.get("tags", [])}
    for path, ops in doc["paths"].items():
        for method in METHODS:
            if method in ops:
                op = ops[method]
                for tag in op.get("tags") or ["other"]:
                    groups.setdefault(tag, []).append(_operation(path, method, op, secured))
    descriptions = {t["name"]: t.get("description", "") for t in doc.get("tags", [])}
    return {
        "info": doc["info"], "openapi": doc["openapi"], "base": doc["servers"][0]["url"] if doc.get("servers") else "", "secured": secured,
        "tags": [{"name": name, "id": anchor("tag", name), "description": descriptions.get(name, ""), "ops": ops}
                 for name, ops in groups.items() if ops],
        "schemas": _schemas(doc),
    }


async def api_docs(request: Request) -> Response:
    doc = document(token_required=state(request).token is not None)
    return page(request, "api_docs.html", docs_context(doc))


routes = [Route("/api/docs", api_docs, methods=["GET"])]
