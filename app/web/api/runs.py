"""``POST /api/v1/runs``: start a chain now and answer with its first session as soon as it exists.

The start is the Run Now form's (``Supervisor.start_cycle``); an output contract that cannot be
used is refused (422) before anything starts, and every reason a cycle cannot start now is a 409
naming it (a cycle running, the daily budget spent, the model tiers paused). The body model is
strict: a JSON string is not a number and 0 is not false (the OpenAPI types are the only ones
accepted).
"""

from __future__ import annotations

import logging
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.engine.contracts import ContractError, resolve_spec
from app.errors import CycleBusy
from app.supervisor.credentials import ModelTiersPaused
from app.supervisor.guards import BudgetSpent, tier0_problem
from app.vocab import MAX_TIER, MIN_TIER, SessionStatus, Trigger
from app.web.common import ApiError, json_body, state
from app.web.faults import storage_fault, unavailable
from app.web.limits import OUTPUT_MAX_RETRIES_MAX, PROMPT_MAX_CHARS, SCHEMA_NAME_PATTERN

log = logging.getLogger(__name__)


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    tier: int | None = Field(None, ge=MIN_TIER, le=MAX_TIER)  # None: 0 with a checks file, else 1
    prompt: str | None = Field(None, max_length=PROMPT_MAX_CHARS)
    # The output contract of the first session (inline > named > the default).
    output_schema: dict[str, Any] | None = None
    output_schema_name: str | None = Field(None, pattern=SCHEMA_NAME_PATTERN)
    output_mode: Literal["native", "prompted"] | None = None
    max_retries: int | None = Field(None, ge=0, le=OUTPUT_MAX_RETRIES_MAX)
    dry_run: bool = False  # the whole chain read-only, reporting what it would do

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


class RunStarted(TypedDict):
    id: int
    tier: int
    status: str


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
    except BudgetSpent as exc:  # no session was created
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
