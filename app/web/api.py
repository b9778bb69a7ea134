"""REST API under ``/api/v1`` (JSON; errors are ``{error, detail}``; documented in openapi.py).

Bad input never yields a 500: query and path parameters are checked (422/404), bodies are
validated with pydantic models (422 listing every problem), and state conflicts are 409.
"""

from __future__ import annotations

import asyncio
import json

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.store import queries
from app.store.memories import MemoryConflict, create_memory, delete_memory, update_memory
from app.supervisor.scheduler import CycleBusy
from app.web.common import ApiError, choice_param, int_param, path_int, state

FIRST_SESSION_WAIT = 10.0


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tier: int = Field(1, ge=1, le=3)
    prompt: str | None = Field(None, max_length=8000)

    @field_validator("prompt")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise ValueError("must not contain a NUL byte (it cannot be passed on a command line)")
        return value


class MemoryCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    category: str = Field(min_length=1, max_length=200)
    value: str = Field(min_length=1, max_length=10_000)
    service: str | None = Field(None, max_length=200)
    confidence: float = Field(0.7, ge=0, le=1)
    active: bool = True


class MemoryPatch(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    category: str | None = Field(None, min_length=1, max_length=200)
    value: str | None = Field(None, min_length=1, max_length=10_000)
    service: str | None = Field(None, max_length=200)
    confidence: float | None = Field(None, ge=0, le=1)
    active: bool | None = None

    @model_validator(mode="after")
    def _no_null_for_required_columns(self) -> MemoryPatch:
        for name in ("category", "value", "confidence", "active"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null (only service may be cleared)")
        return self


async def _body(request: Request, model: type[BaseModel]) -> BaseModel:
    raw = await request.body()
    try:
        data = json.loads(raw or b"{}")
    except ValueError as exc:
        raise ApiError(422, "invalid_json", f"request body is not JSON: {exc}") from None
    except RecursionError:
        raise ApiError(422, "invalid_json", "request body is not JSON we accept: nested too deeply") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [{"path": "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"]),
                     "message": e["msg"]} for e in exc.errors()]
        raise ApiError(422, "invalid_body", problems) from None


async def _session_or_404(request: Request) -> dict:
    pk = path_int(request)
    row = await queries.get_session(state(request).db, pk)
    if row is None:
        raise ApiError(404, "not_found", f"no session {pk}")
    return row


async def sessions(request: Request) -> Response:
    rows = await queries.list_sessions(
        state(request).db, status=choice_param(request, "status", ("running", "completed", "failed", "interrupted")),
        tier=int_param(request, "tier", minimum=1, maximum=3), limit=int_param(request, "limit", 50, minimum=1, maximum=500),
        offset=int_param(request, "offset", 0))
    return JSONResponse(rows)


async def session(request: Request) -> Response:
    row = await _session_or_404(request)
    attempts = await state(request).db.fetchall(
        "SELECT attempt, kind, result_subtype, is_error, has_output, valid, errors, created_at FROM output_attempts"
        " WHERE session_pk = ? ORDER BY attempt", (row["id"],))
    row["output_attempts"] = [dict(a) | {"errors": json.loads(a["errors"] or "[]")} for a in attempts]
    return JSONResponse(row)


async def activity(request: Request) -> Response:
    row = await _session_or_404(request)
    after = int_param(request, "after", 0)
    limit = int_param(request, "limit", 500, minimum=1, maximum=5000)
    rows = await state(request).db.fetchall(
        "SELECT seq, attempt, ts, type, subtype, display, raw FROM activity WHERE session_pk = ? AND seq > ?"
        " ORDER BY seq LIMIT ?", (row["id"], after, limit))
    return JSONResponse([dict(r) for r in rows])


async def result(request: Request) -> Response:
    """result_data (the accepted structured output) or result_text (the CLI's text), never both."""
    row = await _session_or_404(request)
    body: dict = {"session_id": row["session_id"], "status": row["status"], "source": row["source"],
                  "attempts": row["attempts"],
                  "validation": {"valid": row["validation_valid"], "errors": row["validation_errors"] or []}}
    if row["structured_output"] is not None:
        body["result_data"] = row["structured_output"]
    else:
        body["result_text"] = row["result_text"]
    return JSONResponse(body)


async def stop(request: Request) -> Response:
    row = await _session_or_404(request)
    if row["status"] != "running" or not state(request).supervisor.stop_session(row["id"]):
        raise ApiError(409, "not_running", f"session {row['id']} is not running in this server (status {row['status']})")
    return JSONResponse({"id": row["id"], "stopping": True}, status_code=202)


async def runs(request: Request) -> Response:
    req = await _body(request, RunRequest)
    st = state(request)
    if req.tier > st.settings.max_tier:
        raise ApiError(422, "invalid_body", f"tier {req.tier} is above TIEROPS_MAX_TIER={st.settings.max_tier}")
    try:
        task = st.supervisor.start_cycle(tier=req.tier, prompt=req.prompt, trigger="manual")
    except CycleBusy as exc:
        raise ApiError(409, "cycle_running", str(exc)) from None
    first = st.supervisor.first_session
    done, _ = await asyncio.wait({first, task}, timeout=FIRST_SESSION_WAIT, return_when=asyncio.FIRST_COMPLETED)
    if first.done():
        return JSONResponse({"id": first.result(), "tier": req.tier, "status": "running"}, status_code=202,
                            headers={"location": f"/api/v1/sessions/{first.result()}"})
    if task.done() and not task.cancelled() and task.exception() is not None:
        raise ApiError(500, "run_failed", f"the cycle could not start: {task.exception()}")
    raise ApiError(503, "run_not_started", "the cycle did not create its session in time; see /api/v1/sessions")


async def events(request: Request) -> Response:
    rows = await queries.list_events(
        state(request).db, level=choice_param(request, "level", ("info", "warning", "critical")),
        service=request.query_params.get("service") or None, session=int_param(request, "session"),
        limit=int_param(request, "limit", 100, minimum=1, maximum=1000), offset=int_param(request, "offset", 0))
    return JSONResponse(rows)


async def memories(request: Request) -> Response:
    db = state(request).db
    if request.method == "POST":
        body = await _body(request, MemoryCreate)
        try:
            pk = await create_memory(db, **body.model_dump())
        except MemoryConflict as exc:
            raise ApiError(409, "conflict", str(exc)) from None
        row = await db.fetchone("SELECT * FROM memories WHERE id = ?", (pk,))
        return JSONResponse(dict(row) | {"active": bool(row["active"])}, status_code=201)
    active_raw = request.query_params.get("active")
    if active_raw not in (None, "", "true", "false", "1", "0"):
        raise ApiError(422, "invalid_parameter", "query parameter 'active' must be true or false")
    active = None if active_raw in (None, "") else active_raw in ("true", "1")
    rows = await queries.list_memories(
        db, service=request.query_params.get("service") or None, category=request.query_params.get("category") or None,
        active=active, limit=int_param(request, "limit", 200, minimum=1, maximum=2000),
        offset=int_param(request, "offset", 0))
    return JSONResponse(rows)


async def memory(request: Request) -> Response:
    db = state(request).db
    pk = path_int(request)
    if request.method == "DELETE":
        if not await delete_memory(db, pk):
            raise ApiError(404, "not_found", f"no memory {pk}")
        return Response(status_code=204)
    body = await _body(request, MemoryPatch)
    try:
        found = await update_memory(db, pk, body.model_dump(exclude_unset=True))
    except MemoryConflict as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    if not found:
        raise ApiError(404, "not_found", f"no memory {pk}")
    row = await db.fetchone("SELECT * FROM memories WHERE id = ?", (pk,))
    return JSONResponse(dict(row) | {"active": bool(row["active"])})


async def openapi(request: Request) -> Response:
    from app.web.openapi import document

    return JSONResponse(document())


routes = [
    Route("/sessions", sessions),
    Route("/sessions/{id}", session),
    Route("/sessions/{id}/activity", activity),
    Route("/sessions/{id}/result", result),
    Route("/sessions/{id}/stop", stop, methods=["POST"]),
    Route("/runs", runs, methods=["POST"]),
    Route("/events", events),
    Route("/memories", memories, methods=["GET", "POST"]),
    Route("/memories/{id}", memory, methods=["PATCH", "DELETE"]),
    Route("/openapi.json", openapi),
]
