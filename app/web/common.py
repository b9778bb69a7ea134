"""Helpers every web module shares: app state access, errors, query and path parameters, and
the one request-body reader (forms and the API), which stops reading as soon as a body is over
its limit, the JSON body parser every API module uses and how its texts are stripped."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from app.config import Settings
from app.output.validate import OutputValidator
from app.store.db import Database
from app.supervisor.hub import Hub
from app.supervisor.scheduler import Supervisor
from app.web.limits import API_BODY_MAX_BYTES

log = logging.getLogger(__name__)


@dataclass
class WebState:
    base_settings: Settings  # as loaded at start: what needs a restart
    db: Database
    hub: Hub
    supervisor: Supervisor
    validator: OutputValidator
    token: str | None

    @property
    def settings(self) -> Settings:
        """The settings in force: the base with the run-time changes (``Supervisor.reload_settings``)."""
        return self.supervisor.settings


def state(request: Request) -> WebState:
    st: WebState = request.app.state.tierops  # set by the lifespan before any request
    return st


class ApiError(HTTPException):
    """An error with its status code and a machine-readable ``error``. The app's handler renders
    it as JSON ``{error, detail}`` under ``/api/`` and for streams, as the error page elsewhere
    (``detail`` is then the page's message)."""

    def __init__(self, status_code: int, error: str, detail: Any = None) -> None:
        super().__init__(status_code=status_code, detail=detail)
        self.error = error


def json_error(status: int, error: str, detail: Any = None, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": error, "detail": detail}, status_code=status, headers=headers)


async def read_body(request: Request, limit: int, what: str = "request body", setting: str | None = None) -> bytes:
    """The request body, read chunk by chunk; 413 as soon as it is known to exceed ``limit`` bytes
    (naming ``setting`` when the limit is one).

    A declared ``Content-Length`` over the limit is refused before anything is read; otherwise
    (chunked, or a lying length) reading stops at the first chunk that crosses the limit, so at
    most ``limit`` + one chunk is ever held. The rest of the body is never read: the server
    closes the connection after the 413."""
    named = f" ({setting})" if setting else ""
    declared = (request.headers.get("content-length") or "").strip()
    if declared.isascii() and declared.isdigit() and (len(declared) > 18 or int(declared) > limit):
        raise ApiError(413, "too_large", f"{what} is {declared} bytes; the limit is {limit} bytes{named}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, "too_large", f"{what} is larger than the limit of {limit} bytes{named}")
    return bytes(body)


@overload
def int_param(request: Request, name: str, default: int, *, minimum: int = 0, maximum: int = ...) -> int: ...


@overload
def int_param(request: Request, name: str, default: None = None, *, minimum: int = 0,
              maximum: int = ...) -> int | None: ...


def int_param(request: Request, name: str, default: int | None = None, *, minimum: int = 0,
              maximum: int = 2**63 - 1) -> int | None:
    """An optional integer query parameter within [minimum, maximum] (422 otherwise); empty is unset."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = _integral(raw, name)
    if not minimum <= value <= maximum:
        raise ApiError(422, "invalid_parameter", f"query parameter {name!r} must be between {minimum} and {maximum}")
    return value


def _integral(raw: str, name: str) -> int:
    """``10.0`` or ``1e3``: integers as JSON Schema counts them (the OpenAPI document's ``integer``)."""
    try:
        number = float(raw)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number.is_integer()):
        raise ApiError(422, "invalid_parameter", f"query parameter {name!r} must be an integer, got {raw[:40]!r}")
    return int(number)


def limit_param(request: Request, bounds: tuple[int, int, int], name: str = "limit") -> int:
    """``?limit=`` (or ``name``) within ``bounds``: (default, minimum, maximum), from :mod:`app.web.limits`."""
    default, low, high = bounds
    return int_param(request, name, default, minimum=low, maximum=high)


def choice_param(request: Request, name: str, choices: tuple[str, ...]) -> str | None:
    """An optional query parameter from a closed set (``app.vocab.values(SomeEnum)``)."""
    raw = request.query_params.get(name) or None
    if raw is not None and raw not in choices:
        raise ApiError(422, "invalid_parameter", f"query parameter {name!r} must be one of {', '.join(choices)}")
    return raw


SQLITE_MAX_INT = 2**63 - 1


def path_int(request: Request, name: str = "id") -> int:
    try:
        value = int(request.path_params[name])
    except (KeyError, ValueError):
        raise ApiError(404, "not_found", f"no such {name}") from None
    if not 0 <= value <= SQLITE_MAX_INT:  # beyond SQLite's integers: cannot exist (and would overflow)
        raise ApiError(404, "not_found", f"no such {name}")
    return value


M = TypeVar("M", bound=BaseModel)

ASCII_SPACE = " \t\n\r\f\v"  # what is stripped: a set every regex engine agrees on (the document's patterns)


def stripped(value: str | None, *, blank_ok: bool) -> str | None:
    """Surrounding ASCII whitespace is dropped after the length check (maxLength counts what was sent)."""
    if value is None:
        return None
    value = value.strip(ASCII_SPACE)
    if not value and not blank_ok:
        raise ValueError("must contain more than whitespace")
    return value


def _is_json(content_type: str) -> bool:
    media = content_type.split(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


async def json_body(request: Request, model: type[M], *, required: bool = True, limit: int = API_BODY_MAX_BYTES,
                    setting: str | None = None) -> M:
    """The JSON body as ``model``. A request without ``Content-Type`` is read as JSON (scripts);
    another declared media type is 415. No body at all is ``{}`` when the body is optional.
    ``limit`` (bytes) and the ``setting`` that sets it: see :func:`read_body`."""
    ctype = request.headers.get("content-type")
    if ctype is not None and not _is_json(ctype):
        raise ApiError(415, "unsupported_media_type",
                       f"the request body must be application/json, not {ctype.split(';')[0].strip()!r}")
    raw = await read_body(request, limit, setting=setting)
    if not raw.strip():
        if required:
            raise ApiError(422, "invalid_body", "a JSON object body is required")
        raw = b"{}"
    try:
        data = json.loads(raw, parse_constant=_no_constant)
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
