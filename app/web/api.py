"""REST API under ``/api/v1`` (JSON; errors are ``{error, detail}``; documented in openapi.py).

Bad input never yields a 500: query and path parameters are checked (422/404), bodies are
read up to ``API_BODY_MAX_BYTES`` (413 beyond, refused while reading), must be JSON (415 for
another declared media type), are validated with pydantic models (422 listing every problem),
and state conflicts are 409.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.engine import cooldowns as cooldown_engine
from app.engine.contracts import ContractError, check_schema, resolve_spec
from app.errors import CycleBusy
from app.store import activity as activity_store
from app.store import attempts, findings
from app.store import cooldowns as action_store
from app.store import memories as memory_store
from app.store import schemas as schema_store
from app.store import sessions as session_store
from app.store.incidents import OPERATOR_MAX
from app.store.memories import MemoryConflict
from app.store.rows import SessionRow
from app.supervisor.chain import BudgetSpent, tier0_problem
from app.supervisor.credentials import ModelTiersPaused
from app.supervisor.remote_stop import StopRefused, stop_anywhere
from app.vocab import MAX_TIER, MIN_TIER, Level, SessionStatus, Trigger, values
from app.web import alerts_api, approvals_api, incidents_api, maintenance_api, notifications_api, stats_api
from app.web.common import ApiError, choice_param, int_param, json_body, path_int, state
from app.web.faults import storage_fault, unavailable
from app.web.limits import (
    MEMORY_CATEGORY_MAX,
    MEMORY_DEFAULT_CONFIDENCE,
    MEMORY_SERVICE_MAX,
    MEMORY_VALUE_MAX,
    OUTPUT_MAX_RETRIES_MAX,
    PROMPT_MAX_CHARS,
    SCHEMA_DESCRIPTION_MAX,
    SCHEMA_NAME_PATTERN,
)
from app.web.openapi import (
    ACTIVITY_LIMIT,
    COOLDOWN_ACTIONS_LIMIT,
    EVENTS_LIMIT,
    MEMORIES_LIMIT,
    OPERATOR_PATTERN,
    PROPOSALS_MAX,
    SCHEMAS_LIMIT,
    SESSIONS_LIMIT,
    ActivityLine,
    RunStarted,
    SessionDetail,
    StopAccepted,
    document,
)
from app.web.results import result_body

log = logging.getLogger(__name__)

# strict: a JSON string is not a number and 0 is not false (the OpenAPI types are the only ones accepted)
class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    tier: int | None = Field(None, ge=MIN_TIER, le=MAX_TIER)  # None: 0 with a checks file, else 1 (issue #12)
    prompt: str | None = Field(None, max_length=PROMPT_MAX_CHARS)
    # Issue #11: the output contract of the first session (inline > named > the default).
    output_schema: dict[str, Any] | None = None
    output_schema_name: str | None = Field(None, pattern=SCHEMA_NAME_PATTERN)
    output_mode: Literal["native", "prompted"] | None = None
    max_retries: int | None = Field(None, ge=0, le=OUTPUT_MAX_RETRIES_MAX)
    dry_run: bool = False  # issue #13: the whole chain read-only, reporting what it would do

    @field_validator("max_retries", mode="before")
    @classmethod
    def _integral_retries(cls, value: Any) -> Any:
        return int(value) if isinstance(value, float) and value.is_integer() else value

    @field_validator("tier", mode="before")
    @classmethod
    def _integral(cls, value: Any) -> Any:
        """JSON Schema's integer includes 1.0 (strict mode alone would refuse it)."""
        return int(value) if isinstance(value, float) and value.is_integer() else value

    @field_validator("prompt")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise ValueError("must not contain a NUL byte (it cannot be passed on a command line)")
        return value


ASCII_SPACE = " \t\n\r\f\v"  # what is stripped: a set every regex engine agrees on (openapi.py's pattern)


def _strip(value: str | None, *, blank_ok: bool) -> str | None:
    """Surrounding ASCII whitespace is dropped after the length check (maxLength counts what was sent)."""
    if value is None:
        return None
    value = value.strip(ASCII_SPACE)
    if not value and not blank_ok:
        raise ValueError("must contain more than whitespace")
    return value


class SchemaCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(pattern=SCHEMA_NAME_PATTERN)
    description: str | None = Field(None, max_length=SCHEMA_DESCRIPTION_MAX)
    schema_: dict[str, Any] = Field(alias="schema")


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
        return _strip(value, blank_ok=info.field_name == "service")


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
        return _strip(value, blank_ok=info.field_name == "service")

    @model_validator(mode="after")
    def _no_null_for_required_columns(self) -> MemoryPatch:
        for name in ("category", "value", "confidence", "active"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null (only service may be cleared)")
        return self


def _limit(request: Request, bounds: tuple[int, int, int]) -> int:
    default, low, high = bounds
    return int_param(request, "limit", default, minimum=low, maximum=high)


async def _session_or_404(request: Request) -> SessionRow:
    pk = path_int(request)
    row = await session_store.get_session(state(request).db, pk)
    if row is None:
        raise ApiError(404, "not_found", f"no session {pk}")
    return row


async def sessions(request: Request) -> Response:
    """Newest first, each with its chain's totals (issue #14: ``stats_api.with_chains``)."""
    db = state(request).db
    rows = await session_store.list_sessions(
        db, status=choice_param(request, "status", values(SessionStatus)),
        tier=int_param(request, "tier", minimum=MIN_TIER, maximum=MAX_TIER),
        limit=_limit(request, SESSIONS_LIMIT), offset=int_param(request, "offset", 0))
    return JSONResponse(await stats_api.with_chains(db, rows))


async def session(request: Request) -> Response:
    row = await _session_or_404(request)
    db = state(request).db
    body: SessionDetail = {**row, "output_attempts": await attempts.list_attempts(db, row["id"]),
                           "proposals": await action_store.proposals(db, session_pk=row["id"], limit=PROPOSALS_MAX)}
    return JSONResponse(body)


async def activity(request: Request) -> Response:
    pk = path_int(request)
    db = state(request).db
    if await session_store.session_status(db, pk) is None:
        raise ApiError(404, "not_found", f"no session {pk}")
    after = int_param(request, "after", 0)
    rows = await activity_store.lines_after(db, pk, after, _limit(request, ACTIVITY_LIMIT))
    # the session is in the URL
    lines: list[ActivityLine] = [{"seq": r["seq"], "attempt": r["attempt"], "ts": r["ts"], "type": r["type"],
                                  "subtype": r["subtype"], "display": r["display"], "raw": r["raw"]} for r in rows]
    return JSONResponse(lines)


async def result(request: Request) -> Response:
    """result_data (the accepted structured output, whatever its schema) or result_text (the CLI's
    text, only when there is no schema), never both; with the contract it ran under (issue #11)."""
    row = await _session_or_404(request)
    body = result_body(row, await attempts.list_attempts(state(request).db, row["id"], with_output=True))
    return JSONResponse(body)


async def stop(request: Request) -> Response:
    """Stop a running session, this server's own or (issue #14) one another process runs on the
    same state directory: its verified CLI's process group is signalled (``remote_stop``)."""
    pk = path_int(request)
    st = state(request)
    try:
        await stop_anywhere(st.supervisor, pk, f"{incidents_api.actor_for(request, None)}, server pid {os.getpid()}")
    except StopRefused as exc:
        raise ApiError(exc.status, "not_found" if exc.status == 404 else "not_running", exc.message) from None
    accepted: StopAccepted = {"id": pk, "stopping": True}
    return JSONResponse(accepted, status_code=202)


class AttentionAckRequest(BaseModel):
    """Issue #14: the optional body of POST /sessions/{id}/attention/ack."""

    model_config = ConfigDict(extra="forbid", strict=True)
    by: str | None = Field(None, max_length=OPERATOR_MAX, pattern=OPERATOR_PATTERN)

    @field_validator("by")
    @classmethod
    def _stripped(cls, value: str | None) -> str | None:
        return _strip(value, blank_ok=True) or None


async def attention_ack(request: Request) -> Response:
    """Issue #14: acknowledge a session's needs-attention flag (who: ``by`` and how the request
    was authenticated); the overview stops listing it. 409 when it needs no attention."""
    pk = path_int(request)
    body: AttentionAckRequest = await json_body(request, AttentionAckRequest, required=False)
    try:
        row = await session_store.acknowledge_attention(state(request).db, pk,
                                                        incidents_api.actor_for(request, body.by))
    except LookupError:
        raise ApiError(404, "not_found", f"no session {pk}") from None
    except session_store.AttentionStateError as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    return JSONResponse(row)


async def runs(request: Request) -> Response:
    """Start a chain; answer with its first session as soon as it exists (Supervisor.start_cycle).
    An output contract that cannot be used is refused (422) before anything starts."""
    req = await json_body(request, RunRequest, required=False)
    st = state(request)
    tier = st.settings.first_tier if req.tier is None else req.tier
    if tier > st.settings.max_tier:
        raise ApiError(422, "invalid_body", f"tier {tier} is above TIEROPS_MAX_TIER={st.settings.max_tier}")
    if (problem := tier0_problem(st.settings, tier, custom_contract=req.output_schema is not None
                                 or req.output_schema_name is not None or req.output_mode is not None)):
        raise ApiError(422, "invalid_body", problem)
    try:
        spec = await resolve_spec(st.db, st.validator, st.settings, inline=req.output_schema,
                                  name=req.output_schema_name, mode=req.output_mode,
                                  max_retries=req.max_retries)
    except ContractError as exc:
        raise ApiError(422, "invalid_output_schema", exc.detail) from None
    try:
        started = await st.supervisor.start_cycle(tier=tier, prompt=req.prompt, trigger=Trigger.MANUAL,
                                                  spec=spec, dry_run=req.dry_run)
    except CycleBusy as exc:
        raise ApiError(409, "cycle_running", str(exc)) from None
    except BudgetSpent as exc:  # issue #13: no session was created
        raise ApiError(409, "daily_budget_spent", str(exc)) from None
    except ModelTiersPaused as exc:  # the API rejected these credentials: no session was created
        raise ApiError(409, "model_tiers_paused", str(exc)) from None
    except Exception as exc:  # the cycle failed before its first session (logged by the supervisor)
        if (reason := storage_fault(exc)) is not None:  # a full disk is 503, not a server error
            raise unavailable(f"the cycle could not start: {reason}") from None
        raise ApiError(500, "run_failed", f"the cycle could not start: {exc}") from None
    if started.session_pk is None:
        raise ApiError(503, "run_not_started", "the cycle did not create its session in time; see /api/v1/sessions")
    pk = started.session_pk
    started_body: RunStarted = {"id": pk, "tier": tier, "status": SessionStatus.RUNNING}
    return JSONResponse(started_body, status_code=202, headers={"location": f"/api/v1/sessions/{pk}"})


async def schemas(request: Request) -> Response:
    """GET: the registry; POST: store a new named schema (checked first; 409 if the name exists)."""
    st = state(request)
    if request.method == "POST":
        body = await json_body(request, SchemaCreate)
        try:
            check_schema(body.schema_, st.settings, what=f"schema {body.name!r}")
            row = await schema_store.create_schema(st.db, name=body.name, schema=body.schema_,
                                                   description=_strip(body.description, blank_ok=True) or None)
        except ContractError as exc:
            raise ApiError(422, "invalid_output_schema", exc.detail) from None
        except schema_store.SchemaExists as exc:
            raise ApiError(409, "conflict", str(exc)) from None
        return JSONResponse(row, status_code=201, headers={"location": f"/api/v1/schemas/{row['name']}"})
    rows = await schema_store.list_schemas(st.db, limit=_limit(request, SCHEMAS_LIMIT),
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


async def events(request: Request) -> Response:
    rows = await findings.list_events(
        state(request).db, level=choice_param(request, "level", values(Level)),
        service=request.query_params.get("service") or None, session=int_param(request, "session"),
        limit=_limit(request, EVENTS_LIMIT), offset=int_param(request, "offset", 0))
    return JSONResponse(rows)


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
        active=_active_param(request), limit=_limit(request, MEMORIES_LIMIT),
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


async def cooldowns(request: Request) -> Response:
    """Issue #13: the limits, what each (kind, service) has used and the newest actions."""
    st = state(request)
    try:
        limits = cooldown_engine.parse_limits(st.settings.cooldowns)
    except cooldown_engine.CooldownError as exc:
        raise ApiError(500, "config_error", str(exc)) from None
    body = await cooldown_engine.report(st.db, limits, recent=_limit(request, COOLDOWN_ACTIONS_LIMIT))
    return JSONResponse(body)


async def openapi(request: Request) -> Response:
    return JSONResponse(document(token_required=state(request).token is not None))


Endpoint = Callable[[Request], Awaitable[Response]]


def _documented(path: str, endpoint: Endpoint) -> Endpoint:
    """``endpoint`` refusing query parameters its OpenAPI operation does not list (422 naming them,
    so a misspelt filter is not silently ignored)."""
    ops = document(token_required=False)["paths"][path]
    known = {method.upper(): {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
             for method, op in ops.items()}
    if "GET" in known:
        known["HEAD"] = known["GET"]

    async def checked(request: Request) -> Response:
        allowed = known.get(request.method, set())
        if unknown := sorted(set(request.query_params) - allowed):
            takes = ", ".join(sorted(allowed)) or "none"
            raise ApiError(422, "invalid_parameter", f"unknown query parameter(s) {', '.join(map(repr, unknown))};"
                                                     f" {request.method} {path} takes: {takes}")
        return await endpoint(request)

    return checked


routes = [
    Route("/sessions", _documented("/sessions", sessions)),
    # issue #14: before /sessions/{id}, which would take "rollup" for an id
    Route("/sessions/rollup", _documented("/sessions/rollup", stats_api.rollup)),
    Route("/sessions/{id}", _documented("/sessions/{id}", session)),
    Route("/sessions/{id}/activity", _documented("/sessions/{id}/activity", activity)),
    Route("/sessions/{id}/result", _documented("/sessions/{id}/result", result)),
    Route("/sessions/{id}/stop", _documented("/sessions/{id}/stop", stop), methods=["POST"]),
    Route("/sessions/{id}/attention/ack", _documented("/sessions/{id}/attention/ack", attention_ack),
          methods=["POST"]),  # issue #14
    Route("/runs", _documented("/runs", runs), methods=["POST"]),
    Route("/events", _documented("/events", events)),
    Route("/memories", _documented("/memories", memories), methods=["GET", "POST"]),
    Route("/memories/{id}", _documented("/memories/{id}", memory), methods=["PATCH", "DELETE"]),
    Route("/schemas", _documented("/schemas", schemas), methods=["GET", "POST"]),
    Route("/schemas/{name}", _documented("/schemas/{name}", schema), methods=["GET", "DELETE"]),
    Route("/incidents", _documented("/incidents", incidents_api.incidents)),
    Route("/incidents/{id}", _documented("/incidents/{id}", incidents_api.incident)),
    Route("/incidents/{id}/ack", _documented("/incidents/{id}/ack", incidents_api.ack), methods=["POST"]),
    Route("/incidents/{id}/resolve", _documented("/incidents/{id}/resolve", incidents_api.resolve), methods=["POST"]),
    Route("/incidents/{id}/silence", _documented("/incidents/{id}/silence", incidents_api.silence), methods=["POST"]),
    Route("/approvals", _documented("/approvals", approvals_api.approvals)),
    Route("/approvals/{id}", _documented("/approvals/{id}", approvals_api.approval)),
    Route("/approvals/{id}/approve", _documented("/approvals/{id}/approve", approvals_api.approve), methods=["POST"]),
    Route("/approvals/{id}/reject", _documented("/approvals/{id}/reject", approvals_api.reject_endpoint),
          methods=["POST"]),
    Route("/cooldowns", _documented("/cooldowns", cooldowns)),
    Route("/alerts", _documented("/alerts", alerts_api.alerts), methods=["POST", "PUT"]),  # issue #13; PUT: Grafana
    Route("/queue", _documented("/queue", alerts_api.queue)),
    Route("/stats", _documented("/stats", stats_api.stats)),  # issue #14
    Route("/maintenance", _documented("/maintenance", maintenance_api.maintenance), methods=["GET", "POST"]),
    Route("/maintenance/{id}/end", _documented("/maintenance/{id}/end", maintenance_api.end), methods=["POST"]),
    Route("/notifications", _documented("/notifications", notifications_api.notifications)),
    Route("/notifications/preview", _documented("/notifications/preview", notifications_api.preview)),
    Route("/openapi.json", openapi),
]
