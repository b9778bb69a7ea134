"""Which output contract a run gets: inline schema > registry name > the tier's default.

Why in the engine: the API, the CLI and the scheduler all start runs, and each must resolve a
request the same way, with the same refusals (an unknown name, a schema the pinned CLI would
silently drop, one that is not valid JSON Schema) said before any CLI starts. The result is an
:class:`~app.output.spec.OutputSpec`; :func:`check_schema` is the one gate every schema passes,
whether it is stored in the registry or sent inline.
"""

from __future__ import annotations

import logging
from typing import Any

from app.config import Settings
from app.errors import InputError
from app.output import preflight
from app.output.spec import OutputMode, OutputSpec
from app.output.validate import OutputValidator, SchemaLoadError
from app.store import schemas as schema_store
from app.store.db import Database

log = logging.getLogger(__name__)

__all__ = ["ContractError", "check_schema", "resolve_spec"]


class ContractError(InputError):
    """The run's schema cannot be used (HTTP 422, CLI exit 2). ``problems`` name each JSON path
    and rule; ``str()`` is one line for the CLI."""

    def __init__(self, message: str, problems: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []

    @property
    def detail(self) -> str | list[dict[str, str]]:
        return self.problems or str(self)


def check_schema(schema: Any, settings: Settings, *, what: str = "the schema") -> OutputValidator:
    """Preflight ``schema`` (``app/output/preflight.py``) and compile it; :class:`ContractError`
    naming every problem when it cannot be used."""
    problems = preflight.preflight(schema, max_bytes=settings.schema_max_bytes)
    if problems:
        listed = [{"path": p.path, "rule": p.rule, "message": p.message} for p in problems]
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ContractError(f"{what} is refused: {first.path}: {first.message} [{first.rule}]{more}", listed)
    try:
        return OutputValidator(schema, source=what)
    except SchemaLoadError as exc:  # preflight checks the meta-schema too; kept as a last guard
        raise ContractError(str(exc), [{"path": "$", "rule": "meta-schema", "message": str(exc)}]) from None


async def resolve_spec(db: Database, default: OutputValidator, settings: Settings, *, inline: Any = None,
                       name: str | None = None, mode: OutputMode | None = None,
                       max_retries: int | None = None) -> OutputSpec:
    """The contract for one run. ``inline`` wins over ``name``; neither gives ``default``.
    ``mode`` None is ``TIEROPS_OUTPUT_MODE``; ``max_retries`` None is ``TIEROPS_OUTPUT_MAX_RETRIES``."""
    chosen: OutputMode = mode or settings.output_mode
    if inline is not None:
        return OutputSpec(validator=check_schema(inline, settings, what="the inline output_schema"),
                          source="inline", mode=chosen, max_retries=max_retries)
    if name is not None:
        row = await schema_store.get_schema(db, name)
        if row is None:
            raise ContractError(f"no schema named {name!r} is stored; see `tierops schemas list` or "
                                "GET /api/v1/schemas")
        return OutputSpec(validator=check_schema(row["body"], settings, what=f"schema {name!r}"), source="named",
                          name=name, mode=chosen, max_retries=max_retries)
    return OutputSpec(validator=default, source="default", mode=chosen, max_retries=max_retries)
