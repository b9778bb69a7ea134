"""The ``/schemas`` page: view, check, add and delete named output schemas.

Same rules as ``POST /api/v1/schemas`` (:func:`app.engine.contracts.check_schema`, the name
pattern and limits of ``app/web/limits.py``): the "Check" button runs the preflight and shows each
problem with its JSON path, changing nothing; "Store" runs it again and stores. A refused form
keeps what was typed.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from app.engine.contracts import ContractError, check_schema
from app.store import schemas as schema_store
from app.web.common import ApiError, state
from app.web.limits import SCHEMA_DESCRIPTION_MAX, SCHEMA_NAME_PATTERN
from app.web.pages.forms import read_form
from app.web.templating import page

log = logging.getLogger(__name__)

SCHEMA_TEXT_MAX = 256 * 1024  # characters of the schema textarea (the form body limit is larger)


async def _ctx(request: Request, **extra: Any) -> dict[str, Any]:
    rows = await schema_store.list_schemas(state(request).db)
    shown = request.query_params.get("name")
    selected = next((r for r in rows if r["name"] == shown), None)
    return {"schemas": rows, "selected": selected,
            "selected_json": json.dumps(selected["body"], indent=2, ensure_ascii=False) if selected else None,
            "form": {"name": "", "description": "", "schema": ""}, "problems": None, "checked": False,
            "error": None, "name_pattern": SCHEMA_NAME_PATTERN.strip("^$"),
            "description_max": SCHEMA_DESCRIPTION_MAX, "schema_max": SCHEMA_TEXT_MAX, **extra}


async def schemas_page(request: Request) -> Response:
    return page(request, "schemas.html", await _ctx(request))


def _parse(form: dict[str, str]) -> tuple[Any, list[dict[str, str]]]:
    text = form.get("schema", "")
    if len(text) > SCHEMA_TEXT_MAX:
        return None, [{"path": "$", "rule": "size", "message": f"the schema is too long ({len(text):,} characters; "
                                                               f"at most {SCHEMA_TEXT_MAX:,})"}]
    try:
        return json.loads(text), []
    except RecursionError:
        return None, [{"path": "$", "rule": "json", "message": "nested too deeply to parse"}]
    except ValueError as exc:
        return None, [{"path": "$", "rule": "json", "message": f"not valid JSON: {exc}"}]


async def schema_submit(request: Request) -> Response:
    """``action=check``: preflight only; ``action=store``: preflight, then store."""
    form = await read_form(request)
    kept = {"name": form.get("name", "").strip(), "description": form.get("description", "").strip(),
            "schema": form.get("schema", "")}
    schema, problems = _parse(form)
    if not problems:
        try:
            check_schema(schema, state(request).settings, what="the schema")
        except ContractError as exc:
            problems = exc.problems or [{"path": "$", "rule": "schema", "message": str(exc)}]
    if form.get("action") == "check" or problems:
        status = 422 if problems else 200
        return page(request, "schemas.html", await _ctx(request, form=kept, problems=problems, checked=True), status)
    if not re.match(SCHEMA_NAME_PATTERN, kept["name"]):
        return page(request, "schemas.html", await _ctx(
            request, form=kept, error="The name must be 1 to 64 letters, digits, '.', '_' or '-', starting with a "
                                      "letter or digit."), 422)
    if len(kept["description"]) > SCHEMA_DESCRIPTION_MAX:
        return page(request, "schemas.html", await _ctx(
            request, form=kept, error=f"The description is too long (at most {SCHEMA_DESCRIPTION_MAX:,} characters)."),
            422)
    try:
        await schema_store.create_schema(state(request).db, name=kept["name"], schema=schema,
                                         description=kept["description"] or None)
    except schema_store.SchemaExists as exc:
        return page(request, "schemas.html", await _ctx(request, form=kept, error=str(exc)), 409)
    return RedirectResponse(f"/schemas?notice=schema_created&name={kept['name']}", status_code=303)


async def schema_delete(request: Request) -> Response:
    name = request.path_params["name"]
    if not await schema_store.delete_schema(state(request).db, name):
        raise ApiError(404, "not_found", f"There is no schema named {name!r}.")
    return RedirectResponse("/schemas?notice=schema_deleted", status_code=303)


routes = [
    Route("/schemas", schemas_page, methods=["GET"]),
    Route("/schemas", schema_submit, methods=["POST"]),
    Route("/schemas/{name}/delete", schema_delete, methods=["POST"]),
]
