"""The memories page: list with filters (each memory with its provenance and decay), create, edit,
deactivate and delete, as plain HTML forms answered with a 303 (:mod:`app.web.pages.forms`). A
wrong value re-renders the page with the message and a 4xx status.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.clock import utcnow
from app.store import memories as memory_store
from app.store.memories import MemoryConflict
from app.web.common import choice_param, int_param, path_int, state
from app.web.limits import (
    MEMORY_CATEGORY_MAX,
    MEMORY_DEFAULT_CONFIDENCE,
    MEMORY_SERVICE_MAX,
    MEMORY_VALUE_MAX,
)
from app.web.pages.forms import filter_text, not_found, page_query, read_form, see_other
from app.web.templating import page

log = logging.getLogger(__name__)

MEMORIES_PER_PAGE = 200


async def _memories_ctx(request: Request) -> dict[str, Any]:
    """The memories page. Showing it sweeps the memories' decay first (those below
    TIEROPS_MEMORY_FLOOR are marked stale), and each row shows its decayed confidence, whether it
    is stale, and the contradiction links (replaced by / replaces)."""
    st = state(request)
    pg = int_param(request, "page", 1, minimum=1, maximum=100_000)
    service = filter_text(request, "service")
    category = filter_text(request, "category")
    active_param = choice_param(request, "active", ("1", "0"))
    active = None if active_param is None else active_param == "1"
    stale_param = choice_param(request, "stale", ("1", "0"))
    lifecycle = memory_store.MemoryLifecycle.from_settings(st.settings)
    now = utcnow()
    await memory_store.sweep_stale(st.db, lifecycle, now=now)
    rows = await memory_store.list_memories(st.db, service=service, category=category, active=active,
                                            stale=None if stale_param is None else stale_param == "1",
                                            limit=MEMORIES_PER_PAGE + 1, offset=(pg - 1) * MEMORIES_PER_PAGE)
    shown = rows[:MEMORIES_PER_PAGE]
    replaces: dict[int, list[int]] = {}
    for m in shown:
        if m["replaced_by"] is not None:
            replaces.setdefault(m["replaced_by"], []).append(m["id"])
    filters = {"service": service, "category": category, "active": active_param, "stale": stale_param}
    return {
        "memories": shown, "service": service, "category": category, "active": active_param,
        "stale": stale_param, "effective": memory_store.effective_confidences(shown, lifecycle, now),
        "stale_at": memory_store.stale_times(shown, lifecycle), "now": now,  # decay shown
        "replaces": replaces, "lifecycle": lifecycle,
        "services": await memory_store.memory_services(st.db),
        "categories": await memory_store.memory_categories(st.db), "page": pg,
        "prev_url": page_query(page=pg - 1, **filters) if pg > 1 else None,
        "next_url": page_query(page=pg + 1, **filters) if len(rows) > MEMORIES_PER_PAGE else None,
        "error": None, "error_id": None,
        "form": {"service": "", "category": "", "value": "", "confidence": str(MEMORY_DEFAULT_CONFIDENCE)},
    }


async def memories_page(request: Request) -> Response:
    return page(request, "memories.html", await _memories_ctx(request))


def _confidence(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and 0.0 <= value <= 1.0 else None


def _too_long(**fields: tuple[str, int]) -> str | None:
    """The first field longer than its limit, as a message (the API's limits, app/web/limits.py)."""
    for name, (text, limit) in fields.items():
        if len(text) > limit:
            return f"The {name} is too long ({len(text):,} characters; at most {limit:,})."
    return None


async def _memory_error(request: Request, message: str, status: int, *, form: dict[str, Any] | None = None,
                        error_id: int | None = None) -> Response:
    ctx = await _memories_ctx(request)
    ctx.update(error=message, error_id=error_id)
    if form is not None:
        ctx["form"] = form
    return page(request, "memories.html", ctx, status)


async def memory_create(request: Request) -> Response:
    form = await read_form(request)
    service = form.get("service", "").strip()
    category = form.get("category", "").strip()
    value = form.get("value", "").strip()
    conf_text = form.get("confidence", "").strip() or str(MEMORY_DEFAULT_CONFIDENCE)
    kept = {"service": service, "category": category, "value": value, "confidence": conf_text}
    confidence = _confidence(conf_text)
    if not category or not value:
        return await _memory_error(request, "Category and value must not be empty.", 422, form=kept)
    if too_long := _too_long(service=(service, MEMORY_SERVICE_MAX), category=(category, MEMORY_CATEGORY_MAX),
                             value=(value, MEMORY_VALUE_MAX)):
        return await _memory_error(request, too_long, 422, form=kept)
    if confidence is None:
        return await _memory_error(request, "Confidence must be a number from 0 to 1.", 422, form=kept)
    try:
        await memory_store.create_memory(state(request).db, category=category, value=value, service=service or None,
                                         confidence=confidence)
    except MemoryConflict as exc:
        return await _memory_error(request, str(exc), 409, form=kept)
    return see_other("/memories?notice=memory_created")


async def memory_edit(request: Request) -> Response:
    pk = path_int(request)
    form = await read_form(request)
    value = form.get("value", "").strip()
    confidence = _confidence(form.get("confidence", ""))
    if not value:
        return await _memory_error(request, f"Memory {pk}: the value must not be empty.", 422, error_id=pk)
    if too_long := _too_long(value=(value, MEMORY_VALUE_MAX)):
        return await _memory_error(request, f"Memory {pk}: {too_long}", 422, error_id=pk)
    if confidence is None:
        return await _memory_error(request, f"Memory {pk}: confidence must be a number from 0 to 1.", 422,
                                   error_id=pk)
    try:
        row = await memory_store.update_memory(state(request).db, pk, {"value": value, "confidence": confidence,
                                                                       "active": "active" in form})
    except MemoryConflict as exc:
        return await _memory_error(request, f"Memory {pk}: {exc}", 409, error_id=pk)
    if row is None:
        raise not_found("memory", pk)
    return see_other("/memories?notice=memory_saved")


async def memory_toggle(request: Request) -> Response:
    pk = path_int(request)
    db = state(request).db
    memory = await memory_store.get_memory(db, pk, fresh=True)
    if memory is None:
        raise not_found("memory", pk)
    try:
        await memory_store.update_memory(db, pk, {"active": not memory["active"]})
    except MemoryConflict as exc:  # not expected for a flag, but never a 500
        return await _memory_error(request, f"Memory {pk}: {exc}", 409, error_id=pk)
    return see_other("/memories?notice=memory_toggled")


async def memory_delete(request: Request) -> Response:
    pk = path_int(request)
    if not await memory_store.delete_memory(state(request).db, pk):
        raise not_found("memory", pk)
    return see_other("/memories?notice=memory_deleted")


routes = [
    Route("/memories", memories_page, methods=["GET"]),
    Route("/memories", memory_create, methods=["POST"]),
    Route("/memories/{id}", memory_edit, methods=["POST"]),
    Route("/memories/{id}/toggle", memory_toggle, methods=["POST"]),
    Route("/memories/{id}/delete", memory_delete, methods=["POST"]),
]
