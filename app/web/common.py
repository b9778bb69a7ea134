"""Helpers every web module shares: app state access, JSON errors, query parameters, templates."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.templating import Jinja2Templates

from app.config import Settings
from app.output.validate import OutputValidator
from app.store.db import Database
from app.supervisor.hub import Hub
from app.supervisor.scheduler import Supervisor

WEB_DIR = Path(__file__).resolve().parent
templates = Jinja2Templates(directory=str(WEB_DIR / "templates"))  # autoescape on for .html


@dataclass
class WebState:
    settings: Settings
    db: Database
    hub: Hub
    supervisor: Supervisor
    validator: OutputValidator
    token: str | None


def state(request: Request) -> WebState:
    return request.app.state.tierops


class ApiError(HTTPException):
    """An error rendered as JSON ``{error, detail}`` with its status code."""

    def __init__(self, status_code: int, error: str, detail: Any = None) -> None:
        super().__init__(status_code=status_code, detail=detail)
        self.error = error


def json_error(status: int, error: str, detail: Any = None) -> JSONResponse:
    return JSONResponse({"error": error, "detail": detail}, status_code=status)


def int_param(request: Request, name: str, default: int | None = None, *, minimum: int = 0,
              maximum: int = 2**63 - 1) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(422, "invalid_parameter", f"query parameter {name!r} must be an integer, got {raw!r}") from None
    if not minimum <= value <= maximum:
        raise ApiError(422, "invalid_parameter", f"query parameter {name!r} must be between {minimum} and {maximum}")
    return value


def choice_param(request: Request, name: str, choices: tuple[str, ...]) -> str | None:
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
