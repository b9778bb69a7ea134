"""What tier 0 and its command checks see of the environment: a minimal one, no credential.

Why a module of its own: the probe used to be started with the claude CLI's environment (every
``ANTHROPIC_*`` and ``CLAUDE_CODE_*`` variable, the CLI's HOME with its stored login) and to pass
all of it to each command check. A command printing a key transformed (``rev``, ``base64``) got
it past redaction into incidents, stream lines, messages and tier 1's prompt. A check needs none
of that, so both ends are closed here, and the rules live in one place:

* :func:`command_environment`, what one command check runs with: ``PATH``, ``HOME``, ``LANG``,
  ``LC_ALL``, ``TZ``, ``serve``'s address (``TIEROPS_SERVE_URL``/``_HOST``/``_PORT``), and the
  variables its own ``env:`` names in the checks file (``env: [PGPASSWORD]``), nothing else;
* :func:`probe_environment`, what the supervisor starts the probe with (``supervisor/launch.py``):
  what the CLI would get, less every variable of the CLI or of TierOps (below) and
  every secret-named one (:func:`secret_named`) or holding a URL password, with ``HOME`` its own
  (:data:`PROBE_HOME`, next to the CLI's, never the CLI's with its ``.claude`` login and
  transcripts), plus the variables the checks file's command checks name, from the supervisor's
  environment;
* ``ANTHROPIC_*``, ``CLAUDE_CODE_*`` and ``TIEROPS_*`` are never given to a check, even by name
  (:func:`app.probe.inventory_rules.refused_name`: the checks file reports such a name at its
  ``FILE:LINE``; it is checked again here).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from app.probe.extensions import load_merged
from app.probe.inventory import InventoryError
from app.probe.inventory_rules import refused_name
from app.probe.variables import SERVE_VARIABLES

log = logging.getLogger(__name__)

__all__ = ["BASE_NAMES", "PROBE_HOME", "command_environment", "named_variables", "probe_environment",
           "secret_named"]

# Every command check gets these (when set), whatever its checks file says.
BASE_NAMES = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", *SERVE_VARIABLES)
# The probe's HOME, a folder of the state directory next to the CLI's ``home``.
PROBE_HOME = "probe-home"
# The probe itself also needs to find this package (session.py sets PYTHONPATH for tier 0).
_PROBE_NAMES = ("PYTHONPATH",)
# Wider than the redactor's (app/redact.py): here a false positive only keeps a variable from a check.
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|_PWD|PWD_|CRED|AUTH|COOKIE|PRIVATE|SESSION|SIGNATURE|DSN",
                          re.IGNORECASE)
_URL_PASSWORD = re.compile(r"://[^/\s:@]*:[^/\s@]+@")


def secret_named(name: str, value: str = "") -> bool:
    """A name that looks like a credential's (``*KEY*``, ``*TOKEN*``, ``*PASSWORD*``, …) or a value
    holding a URL password (``scheme://user:pw@host``)."""
    return bool(_SECRET_NAME.search(name) or _URL_PASSWORD.search(value))


def command_environment(names: Iterable[str] = (), source: Mapping[str, str] | None = None) -> dict[str, str]:
    """One command check's environment: :data:`BASE_NAMES` and the variables ``names`` (its
    ``env:``) from ``source`` (default: the probe's own environment); unset ones are left out."""
    src = os.environ if source is None else source
    env = {name: src[name] for name in BASE_NAMES if name in src}
    env.setdefault("PATH", os.defpath)
    for name in names:
        if name in src and refused_name(name) is None:
            env[name] = src[name]
    return env


def named_variables(checks: str | Path | None, extensions: Sequence[str | Path] = ()) -> frozenset[str]:
    """The variables the command checks of the checks file (and of the ``extensions``' checks files
    that load) name (``env:``); none when there is no file or it cannot be used (the probe reports why)."""
    if not checks:
        return frozenset()
    try:
        inv = load_merged(Path(checks), [Path(e) for e in extensions]).inventory
    except InventoryError:
        return frozenset()
    return frozenset(name for check in inv.checks for name in check.env) if inv is not None else frozenset()


def probe_environment(cli_env: Mapping[str, str], source: Mapping[str, str], checks: str | Path | None,
                      extensions: Sequence[str | Path] = ()) -> dict[str, str]:
    """The probe's environment: ``cli_env`` (what the CLI would be given) without the CLI's and
    TierOps' variables (``serve``'s address excepted) and without secret-named ones; ``HOME`` its
    own (:data:`PROBE_HOME` next to ``cli_env``'s HOME, created 0700); plus the variables the
    command checks of ``checks`` name, taken from ``source`` (the supervisor's environment).
    Blocking (reads the checks file, makes a folder): call it in a thread."""
    env = {name: value for name, value in cli_env.items()
           if name in _PROBE_NAMES or name.upper() in SERVE_VARIABLES
           or (refused_name(name) is None and not secret_named(name, value))}
    cli_home = cli_env.get("HOME")
    if cli_home:
        home = Path(cli_home).parent / PROBE_HOME
        try:
            home.mkdir(mode=0o700, exist_ok=True)
            env["HOME"] = str(home)
        except OSError as exc:  # the probe runs anyway, HOME unset rather than the CLI's
            log.warning("the probe's HOME %s cannot be created (%s); it runs without HOME", home, exc.strerror)
            env.pop("HOME", None)
    for name in sorted(named_variables(checks, extensions)):
        if name in source and refused_name(name) is None:
            env[name] = source[name]
    return env
