"""What one claude CLI process is started with: its command line, its environment, its binary.

Why a module of its own: these are the CLI's quirks, decided before any process exists (nothing
here starts one; ``runner.py`` does). No prompt is ever on the command line: ``-p`` takes none
(the prompt goes to stdin) and the appended system prompt is a file the caller wrote
(``--append-system-prompt-file``), so no variadic option can swallow a prompt and no argument can
reach the kernel's per-argument limit (:func:`check_arg_sizes`; the wire schema, inline only, is
checked against it). A resume repeats every flag. The child gets a minimal environment
(:func:`child_env`), tier 0 less still (:func:`tier0_env`). The reasons, with the reference's
sections: ARCHITECTURE.md, "The supervisor".
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app.config import PROBE_MODEL
from app.errors import CLIError
from app.probe.environment import probe_environment
from app.probe.executor import checks_argument, extension_arguments

log = logging.getLogger(__name__)

# The kernel's limit on one argument, terminating NUL included (MAX_ARG_STRLEN = 32 pages).
MAX_ARG_STRLEN = 128 * 1024
ENV_PREFIXES = ("ANTHROPIC_", "CLAUDE_CODE_")
ENV_ALWAYS = ("PATH", "LANG", "LC_ALL", "TZ")
INSTALL_HINT = ("install it with `npm install -g @anthropic-ai/claude-code@2.1.197` (or `bash "
                "scripts/install-claude.sh`) and/or point TIEROPS_CLAUDE_BIN at the binary")


class CLINotFound(CLIError):
    def __init__(self, binary: str) -> None:
        super().__init__(f"claude CLI not found: {binary!r} is not an executable file or on PATH; {INSTALL_HINT}")
        self.binary = binary


@dataclass
class Launch:
    """Everything needed to start one CLI process. ``stdin``: bytes written to the CLI's stdin
    (then closed: the prompt), or None for ``/dev/null``."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]
    timeout: float
    stdin: bytes | None = None


def stdin_bytes(text: str) -> bytes:
    """A prompt as written to the CLI's stdin (valid UTF-8 whatever the text holds)."""
    return text.encode("utf-8", "replace")


def build_argv(binary: str | Sequence[str], *, model: str, wire_schema: str | None, system_prompt_file: str,
               allowed_tools: list[str], disallowed_tools: list[str], max_turns: int | None,
               add_dirs: Sequence[str] = (), resume: str | None = None,
               max_budget_usd: float | None = None, settings_json: str | None = None,
               mcp_config: str | None = None, partial_messages: bool = False) -> list[str]:
    """The command line: no prompt and no system prompt in it. ``-p`` takes no argument (the caller
    writes the prompt to stdin, reference §2) and ``system_prompt_file`` is passed as
    ``--append-system-prompt-file`` (the caller wrote it). ``wire_schema`` None: no
    ``--json-schema`` (prompted output mode: the schema is in the prompt). ``binary``
    may be a command with leading arguments (tier 0: ``python -m app probe --checks F``).
    ``max_budget_usd``: ``--max-budget-usd`` (the tier's budget; None: none), a single value, not
    variadic. ``settings_json``: ``--settings`` inline (the guard's PreToolUse hook, reference
    §11a), with ``--include-hook-events`` so the stream shows each hook's answer. ``mcp_config``:
    ``--mcp-config`` inline with ``--strict-mcp-config`` (no other MCP source counts, §11b); its
    values are ``${VAR}`` references only (``engine/mcp_launch``). ``partial_messages``:
    ``--include-partial-messages`` (``stream_event`` lines with each text delta, §4.6: a chat
    answer streams as it is written)."""
    head = [binary] if isinstance(binary, str) else list(binary)
    argv = [*head, "-p"]  # -p without a prompt argument reads it from stdin
    if resume:
        argv += ["--resume", resume]
    if add_dirs:
        # Read-only commands outside the cwd are blocked without it (found by the realcli tests:
        # `tail /var/log/x` → "may only read ... from the allowed working directories"). Variadic:
        # the next option (--model) ends the list.
        argv += ["--add-dir", *add_dirs]
    argv += ["--model", model, "--output-format", "stream-json", "--verbose"]
    if partial_messages:
        argv.append("--include-partial-messages")
    if wire_schema is not None:
        argv += ["--json-schema", wire_schema]
    argv += ["--append-system-prompt-file", system_prompt_file]
    if settings_json is not None:
        argv += ["--settings", settings_json, "--include-hook-events"]
    if mcp_config is not None:  # variadic: the next option ends it
        argv += ["--mcp-config", mcp_config, "--strict-mcp-config"]
    if allowed_tools:
        argv += ["--allowedTools", ",".join(allowed_tools)]
    if disallowed_tools:
        argv += ["--disallowedTools", ",".join(disallowed_tools)]
    if max_turns:
        argv += ["--max-turns", str(max_turns)]
    if max_budget_usd is not None:
        # The CLI refuses 0 or less ("must be a positive number greater than 0") and stops a run
        # once its own spend reaches the amount (tests/realcli/test_budget.py).
        argv += ["--max-budget-usd", repr(float(max_budget_usd))]
    return argv


def check_arg_sizes(argv: Sequence[str]) -> None:
    """Raise :class:`CLIError` naming the argument that ``execve`` would refuse (E2BIG): the
    wire schema, for one, can only be passed inline (reference §2, ``--json-schema``)."""
    for i, arg in enumerate(argv):
        size = len(arg.encode("utf-8", "surrogatepass")) + 1
        if size > MAX_ARG_STRLEN:
            what = f"the value of {argv[i - 1]}" if i > 1 and argv[i - 1].startswith("-") else f"argument {i}"
            raise CLIError(f"cannot start the CLI: {what} is {size - 1} bytes, over the kernel's limit of "
                           f"{MAX_ARG_STRLEN // 1024} KiB per command-line argument")


def child_env(home: Path, allow: list[str], source: dict[str, str] | None = None) -> dict[str, str]:
    source = dict(os.environ if source is None else source)
    env = {k: v for k, v in source.items()
           if k in ENV_ALWAYS or k.startswith(ENV_PREFIXES) or k in allow}
    env.setdefault("PATH", os.defpath)
    env["HOME"] = str(home)
    return env


def is_probe(argv: Sequence[str]) -> bool:
    """Whether ``argv`` starts tier 0: the probe runs as model ``tierops-probe`` (``config.tier(0)``)."""
    return any(flag == "--model" and value == PROBE_MODEL for flag, value in itertools.pairwise(argv))


def tier0_env(launch: Launch) -> dict[str, str]:
    """The probe's environment instead of the CLI's ``launch.env``: no credential of the CLI or of
    TierOps, its own HOME, the variables its checks file names (``probe_environment``). Blocking
    (reads the checks file): call it in a thread."""
    return probe_environment(launch.env, os.environ, checks_argument(launch.argv[1:]),
                             extension_arguments(launch.argv[1:]))


def resolve_binary(binary: str, path: str | None) -> str:
    if os.sep in binary:
        if os.path.isfile(binary) and os.access(binary, os.X_OK):
            return binary
        raise CLINotFound(binary)
    found = shutil.which(binary, path=path)
    if not found:
        raise CLINotFound(binary)
    return found
