"""The address of ``tierops serve`` inside a checks file: ``${TIEROPS_SERVE_URL}`` and friends.

Why: a checks file that watches TierOps itself (``examples/checks.yaml``: its ``/healthz`` and its
port) must follow the address ``serve`` actually listens on, not assume ``127.0.0.1:8080``. So
``serve`` puts its address in its environment (:func:`serve_environment`), the supervisor passes
those variables to the probe child (``session.py``), and a checks file may write, in any string
value:

* ``${TIEROPS_SERVE_URL}`` — ``http://HOST:PORT``, a URL that reaches the dashboard from this host
  (``--host 0.0.0.0`` is reached at ``127.0.0.1``, ``::`` at ``[::1]``);
* ``${TIEROPS_SERVE_HOST}`` — that host (an IPv6 address in brackets, ready for ``HOST:PORT``);
* ``${TIEROPS_SERVE_PORT}`` — the port;

each optionally with a default, ``${TIEROPS_SERVE_PORT:-8080}``, used when the variable is unset
(``tierops checks validate``, ``tierops run --tier 0``, ``supervise``: no server). Without a
default the address of ``serve``'s own defaults stands in. Only these names are replaced: any
other ``${TIEROPS_…}`` is a problem of the file (a typo must not pass silently), and ``${X}`` of
any other name is left as written (a ``command`` check's shell expands it).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["SERVE_DEFAULTS", "SERVE_VARIABLES", "serve_environment", "substitute"]

SERVE_URL, SERVE_HOST, SERVE_PORT = "TIEROPS_SERVE_URL", "TIEROPS_SERVE_HOST", "TIEROPS_SERVE_PORT"
SERVE_VARIABLES = (SERVE_URL, SERVE_HOST, SERVE_PORT)
# `tierops serve`'s own defaults (--host 127.0.0.1 --port 8080).
SERVE_DEFAULTS = {SERVE_URL: "http://127.0.0.1:8080", SERVE_HOST: "127.0.0.1", SERVE_PORT: "8080"}
_REFERENCE = re.compile(r"\$\{(TIEROPS_[A-Za-z0-9_]*)(?::-([^}]*))?\}")
_ANY_ADDRESS = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1", "[::]": "::1"}  # noqa: S104 (mapped away)


def serve_environment(host: str, port: int) -> dict[str, str]:
    """The variables ``serve --host HOST --port PORT`` sets: how a check on this host reaches it."""
    connect = _ANY_ADDRESS.get(host.strip(), host.strip())
    if ":" in connect and not connect.startswith("["):
        connect = f"[{connect}]"
    return {SERVE_URL: f"http://{connect}:{port}", SERVE_HOST: connect, SERVE_PORT: str(port)}


def substitute(data: Any, environ: Mapping[str, str] | None = None,
               path: list[str | int] | None = None) -> tuple[Any, list[tuple[list[str | int], str]]]:
    """``data`` (the parsed YAML) with every reference replaced in its string values, and the
    problems found as ``(path, message)`` (an unknown ``${TIEROPS_…}`` name)."""
    env = os.environ if environ is None else environ
    where: list[str | int] = path or []
    problems: list[tuple[list[str | int], str]] = []
    if isinstance(data, dict):
        out_dict: dict[Any, Any] = {}
        for key, value in data.items():
            out_dict[key], found = substitute(value, env, [*where, str(key)])
            problems += found
        return out_dict, problems
    if isinstance(data, list):
        out_list = []
        for i, value in enumerate(data):
            item, found = substitute(value, env, [*where, i])
            out_list.append(item)
            problems += found
        return out_list, problems
    if not isinstance(data, str) or "${TIEROPS_" not in data:
        return data, problems

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name not in SERVE_VARIABLES:
            problems.append((where, f"{_dotted(where)}: unknown variable ${{{name}}}; a checks file may use "
                                    + ", ".join(f"${{{n}}}" for n in SERVE_VARIABLES)
                                    + " (with a default: ${TIEROPS_SERVE_PORT:-8080})"))
            return match.group(0)
        value = env.get(name, "").strip()
        return value or (default if default is not None else SERVE_DEFAULTS[name])

    return _REFERENCE.sub(replace, data), problems


def _dotted(path: list[str | int]) -> str:
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out or "the file"
