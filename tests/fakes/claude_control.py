"""Test helpers around tests/fakes/fake_claude.py.

``make_fake_claude(directory, stages)`` writes an executable ``directory/claude`` that
runs the fake with its control file, and returns a :class:`FakeClaude`. The builders
below return stream-json lines (dicts) with the field names and field order of the
lines the real CLI 2.1.197 printed (fixtures c_structured, d_invalid_structured,
g_max_turns_1, e_resume_unknown_id, f_api_500, f_api_529, b_tool_fails).

Example::

    sid = new_session_id()
    fake = make_fake_claude(tmp_path, [{"lines": structured_stream(sid, {"summary": "ok", ...})}])
    ... run the supervisor with claude_bin=fake.path ...
    [inv] = fake.invocations()
    assert inv["parsed"]["prompt_from"] == "stdin" and inv["parsed"]["model"] == "claude-haiku-4-5"
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# The real CLI captures live in the repository (a lone clone runs the whole suite);
# scripts/sync-fixtures.sh refreshes them from ../shared/fixtures, where new captures arrive.
FIXTURES = (REPO / "tests" / "fixtures" / "claude-code" / "2.1.197").resolve()
FAKE_CLAUDE = Path(__file__).resolve().parent / "fake_claude.py"

STAGE_KEYS = {
    "lines", "replay", "session_id", "delay", "start_delay", "mode", "after", "size",
    "ignore_sigterm", "spawn_child", "partial_line", "signal", "stderr", "exit_code", "check_argv",
    "setsid_child", "daemon", "clear_pdeathsig", "write_files", "burst",
}
MODES = ("normal", "crash", "hang", "huge_line", "no_result", "no_structured")

# init fields as printed by 2.1.197 (c_structured); "Task" is the CLI's legacy name for Agent.
DEFAULT_TOOLS = [
    "Task", "Bash", "CronCreate", "CronDelete", "CronList", "Edit", "EnterWorktree", "ExitWorktree",
    "NotebookEdit", "Read", "ReportFindings", "ScheduleWakeup", "SendMessage", "Skill",
    "StructuredOutput", "TaskCreate", "TaskGet", "TaskList", "TaskOutput", "TaskStop", "TaskUpdate",
    "WebFetch", "WebSearch", "Workflow", "Write",
]
_SKILLS = [
    "deep-research", "update-config", "verify", "debug", "code-review", "simplify", "batch",
    "fewer-permission-prompts", "loop", "claude-api", "run", "run-skill-generator",
]
_SLASH_COMMANDS = [*_SKILLS, "clear", "compact", "config", "context", "heapdump", "init", "reload-skills", "review", "security-review", "usage", "insights", "goal", "team-onboarding"]
_AGENTS = ["claude", "Explore", "general-purpose", "Plan", "statusline-setup"]
INIT_MODEL = "claude-opus-4-8[1m]"   # init "model" and the modelUsage key
API_MODEL = "claude-opus-4-8"        # assistant message "model"


# --- fixtures ---------------------------------------------------------------------------

def fixture(scenario: str) -> Path:
    """Path of a captured stdout.jsonl, e.g. fixture("c_structured")."""
    return FIXTURES / scenario / "stdout.jsonl"


def fixture_lines(scenario: str) -> list[dict]:
    return [json.loads(x) for x in fixture(scenario).read_text(encoding="utf-8").splitlines() if x.strip()]


# --- the fake ---------------------------------------------------------------------------

@dataclass
class FakeClaude:
    path: Path          # the executable to use as the claude binary
    directory: Path
    control_path: Path
    log_path: Path
    state_path: Path

    def invocations(self) -> list[dict]:
        """One dict per run of the fake, oldest first (see fake_claude.py for the fields)."""
        try:
            text = self.log_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        # a record still being appended (no newline yet) is read on the next call
        complete = text[:text.rfind("\n") + 1]
        return [json.loads(line) for line in complete.splitlines() if line.strip()]

    def last(self) -> dict:
        return self.invocations()[-1]

    def set_stages(self, stages: list[dict], *, reset: bool = True) -> None:
        """Replace the stages; with reset the next invocation uses stages[0] again."""
        control = json.loads(self.control_path.read_text(encoding="utf-8"))
        control["stages"] = _check_stages(stages)
        _write_json(self.control_path, control)
        if reset:
            _write_json(self.state_path, {"count": 0})


def make_fake_claude(directory: Path, stages: list[dict], *, name: str = "claude",
                     check_argv: bool = True, by_model: dict[str, dict] | None = None) -> FakeClaude:
    """Write ``directory/<name>`` (executable), its control file, and return a FakeClaude.

    ``by_model``: a stage per ``--model`` value, used whatever the invocation count (concurrent
    runs whose tiers must behave differently).

    The wrapper has the control path baked in, so it works under an empty environment.
    It is a Python script whose shebang is ``sys.executable -I`` rather than an sh
    script: dash exports PWD into every child, which would make the logged environment
    differ from what the supervisor passed.
    """
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    stem = "fake-claude" if name == "claude" else f"fake-{name}"
    control_path = directory / f"{stem}.json"
    log_path = directory / f"{stem}-invocations.jsonl"
    state_path = directory / f"{stem}-state.json"
    _write_json(control_path, {
        "log": str(log_path), "state": str(state_path), "check_argv": check_argv,
        "stages": _check_stages(stages),
        **({"by_model": dict(zip(by_model, _check_stages(list(by_model.values())), strict=True))} if by_model else {}),
    })
    _write_json(state_path, {"count": 0})
    log_path.unlink(missing_ok=True)

    wrapper = directory / name
    python = sys.executable
    if " " in python or len(python) > 120:
        # A shebang cannot hold this; fall back to sh (the logged env then gains PWD).
        body = (
            "#!/bin/sh\n"
            f"{_ENV_VAR}={shlex.quote(str(control_path))}\n"
            f"export {_ENV_VAR}\n"
            f"exec {shlex.quote(python)} -I {shlex.quote(str(FAKE_CLAUDE))} \"$@\"\n"
        )
    else:
        body = (
            f"#!{python} -I\n"
            "# Generated by tests/fakes/claude_control.py: runs fake_claude.py in this process.\n"
            "import os, runpy\n"
            f"os.environ[{_ENV_VAR!r}] = {str(control_path)!r}\n"
            f"runpy.run_path({str(FAKE_CLAUDE)!r}, run_name='__main__')\n"
        )
    wrapper.write_text(body, encoding="utf-8")
    wrapper.chmod(0o755)
    return FakeClaude(path=wrapper, directory=directory, control_path=control_path,
                      log_path=log_path, state_path=state_path)


_ENV_VAR = "FAKE_CLAUDE_CONTROL"


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def _check_stages(stages: list[dict]) -> list[dict]:
    if not stages:
        raise ValueError("at least one stage is needed")
    out = []
    for stage in stages:
        unknown = set(stage) - STAGE_KEYS
        if unknown:
            raise ValueError(f"unknown stage keys: {sorted(unknown)}")
        if stage.get("mode", "normal") not in MODES:
            raise ValueError(f"unknown mode {stage['mode']!r}")
        stage = dict(stage)
        if "replay" in stage:
            replay = Path(stage["replay"])
            if not replay.is_file():
                raise FileNotFoundError(replay)
            stage["replay"] = str(replay.resolve())
        out.append(stage)
    return out


# --- stream line builders ---------------------------------------------------------------

def new_session_id() -> str:
    return str(uuid.uuid4())


def _uuid() -> str:
    return str(uuid.uuid4())


def _msg_id() -> str:
    return "msg_fake_" + uuid.uuid4().hex[:20]


def _req_id() -> str:
    return "req_fake_" + uuid.uuid4().hex[:16]


def tool_use_id() -> str:
    return "toolu_fake_" + uuid.uuid4().hex[:20]


def _timestamp() -> str:
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def _slug(path: str) -> str:
    return path.replace("/", "-").replace(".", "-").replace("_", "-")


def init_line(session_id: str, model: str = INIT_MODEL, cwd: str | None = None,
              tools: list[str] | None = None, *, home: str | None = None,
              permission_mode: str = "default") -> dict:
    cwd = cwd or os.getcwd()
    home = home or os.path.expanduser("~")
    return {
        "type": "system", "subtype": "init", "cwd": cwd, "session_id": session_id,
        "tools": list(DEFAULT_TOOLS if tools is None else tools), "mcp_servers": [],
        "model": model, "permissionMode": permission_mode, "slash_commands": list(_SLASH_COMMANDS),
        "apiKeySource": "ANTHROPIC_API_KEY", "claude_code_version": "2.1.197",
        "output_style": "default", "agents": list(_AGENTS), "skills": list(_SKILLS), "plugins": [],
        "analytics_disabled": True, "product_feedback_disabled": True, "uuid": _uuid(),
        "memory_paths": {"auto": f"{home}/.claude/projects/{_slug(cwd)}/memory/"},
        "fast_mode_state": "off",
    }


def _assistant(session_id: str, block: dict, *, model: str, message_id: str | None,
               request_id: str | None, input_tokens: int) -> dict:
    return {
        "type": "assistant",
        "message": {
            "id": message_id or _msg_id(), "type": "message", "role": "assistant", "model": model,
            "content": [block], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 1,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
            "context_management": None,
        },
        "parent_tool_use_id": None, "session_id": session_id, "uuid": _uuid(),
        "request_id": request_id or _req_id(),
    }


def assistant_text(session_id: str, text: str, *, model: str = API_MODEL, message_id: str | None = None,
                   request_id: str | None = None, input_tokens: int = 19834) -> dict:
    return _assistant(session_id, {"type": "text", "text": text}, model=model, message_id=message_id,
                      request_id=request_id, input_tokens=input_tokens)


def assistant_tool_use(session_id: str, name: str, input: dict, *, id: str | None = None,
                       model: str = API_MODEL, message_id: str | None = None,
                       request_id: str | None = None, input_tokens: int = 19834) -> dict:
    """The tool_use id is line["message"]["content"][0]["id"] (or pass id=...)."""
    block = {"type": "tool_use", "id": id or tool_use_id(), "name": name, "input": input}
    return _assistant(session_id, block, model=model, message_id=message_id,
                      request_id=request_id, input_tokens=input_tokens)


def tool_result(session_id: str, tool_use_id: str, content: str, is_error: bool = False) -> dict:
    """A Bash-style tool result (b_tool_use_allowedtools / b_tool_fails shapes)."""
    if is_error:
        block = {"type": "tool_result", "content": content, "is_error": True, "tool_use_id": tool_use_id}
        tool_use_result: Any = "Error: " + content
    else:
        block = {"tool_use_id": tool_use_id, "type": "tool_result", "content": content, "is_error": False}
        tool_use_result = {"stdout": content, "stderr": "", "interrupted": False, "isImage": False,
                           "noOutputExpected": False}
    return {
        "type": "user", "message": {"role": "user", "content": [block]}, "parent_tool_use_id": None,
        "session_id": session_id, "uuid": _uuid(), "timestamp": _timestamp(),
        "tool_use_result": tool_use_result,
    }


def structured_output_ack(session_id: str, tool_use_id: str) -> dict:
    """The user line after an accepted StructuredOutput call (no is_error field)."""
    text = "Structured output provided successfully"
    return {
        "type": "user",
        "message": {"role": "user", "content": [
            {"tool_use_id": tool_use_id, "type": "tool_result", "content": text}]},
        "parent_tool_use_id": None, "session_id": session_id, "uuid": _uuid(),
        "timestamp": _timestamp(), "tool_use_result": text,
    }


def _usage(input_tokens: int, output_tokens: int) -> dict:
    return {
        "input_tokens": input_tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
        "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
        "service_tier": "standard",
        "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
        "inference_geo": "", "iterations": [], "speed": "standard",
    }


def _model_usage(model: str, input_tokens: int, output_tokens: int, cost: float) -> dict:
    return {model: {
        "inputTokens": input_tokens, "outputTokens": output_tokens, "cacheReadInputTokens": 0,
        "cacheCreationInputTokens": 0, "webSearchRequests": 0, "costUSD": cost,
        "contextWindow": 1000000, "maxOutputTokens": 64000,
    }}


def result_success(session_id: str, structured_output: dict | None = None, result_text: str = "",
                   cost: float = 0.01, num_turns: int = 3, *, model: str = INIT_MODEL,
                   stop_reason: str | None = None, input_tokens: int = 39760, output_tokens: int = 169,
                   duration_ms: int = 172, permission_denials: list | None = None) -> dict:
    """result/success with is_error false. ``result`` is the compact JSON of structured_output
    (as the CLI prints it) unless result_text is given."""
    if not result_text and structured_output is not None:
        result_text = json.dumps(structured_output, ensure_ascii=False, separators=(",", ":"))
    line: dict = {
        "type": "result", "subtype": "success", "is_error": False, "api_error_status": None,
        "duration_ms": duration_ms, "duration_api_ms": max(1, duration_ms // 4), "ttft_ms": 104,
        "ttft_stream_ms": 104, "time_to_request_ms": 95, "num_turns": num_turns, "result": result_text,
        "stop_reason": stop_reason or ("tool_use" if structured_output is not None else "end_turn"),
        "session_id": session_id, "total_cost_usd": cost, "usage": _usage(input_tokens, output_tokens),
        "modelUsage": _model_usage(model, input_tokens, output_tokens, cost),
        "permission_denials": list(permission_denials or []),
    }
    if structured_output is not None:
        line["structured_output"] = structured_output
    line.update({"terminal_reason": "completed", "fast_mode_state": "off", "uuid": _uuid()})
    return line


# subtype -> (stop_reason, num_turns, terminal_reason or None, has fast_mode_state, any usage)
_ERROR_SUBTYPES = {
    "error_max_structured_output_retries": ("tool_use", 7, None, True, True),
    "error_max_turns": ("tool_use", 2, "max_turns", True, True),
    "error_during_execution": (None, 0, None, False, False),
    # not observed; shaped like error_max_turns minus terminal_reason
    "error_max_budget_usd": ("tool_use", 2, None, True, True),
}


def result_error(session_id: str, subtype: str, errors: list[str] | str, *, cost: float | None = None,
                 num_turns: int | None = None, model: str = INIT_MODEL) -> dict:
    """An error-subtype result: no ``result`` and no ``structured_output`` field.

    Typical errors: "Failed to provide valid structured output after 5 attempts",
    "Reached maximum number of turns (1)", "No conversation found with session ID: <id>".
    """
    stop_reason, turns, terminal, fast, used = _ERROR_SUBTYPES[subtype]
    input_tokens, output_tokens = (100538, 539) if used else (0, 0)
    if cost is None:
        cost = 0.516165 if used else 0
    line: dict = {
        "type": "result", "subtype": subtype, "duration_ms": 244 if used else 0,
        "duration_api_ms": 92 if used else 0, "is_error": True,
        "num_turns": turns if num_turns is None else num_turns, "stop_reason": stop_reason,
        "session_id": session_id, "total_cost_usd": cost, "usage": _usage(input_tokens, output_tokens),
        "modelUsage": _model_usage(model, input_tokens, output_tokens, cost) if used else {},
        "permission_denials": [],
    }
    if terminal:
        line["terminal_reason"] = terminal
    if fast:
        line["fast_mode_state"] = "off"
    line["uuid"] = _uuid()
    line["errors"] = [errors] if isinstance(errors, str) else list(errors)
    return line


def api_error_result(session_id: str, status: int | None, text: str) -> dict:
    """The result after a final API failure: subtype "success" but is_error true.
    status is the HTTP status (None for 529 overload, as the CLI prints it)."""
    return {
        "type": "result", "subtype": "success", "is_error": True, "api_error_status": status,
        "duration_ms": 1761, "duration_api_ms": 0, "num_turns": 1, "result": text,
        "stop_reason": "stop_sequence", "session_id": session_id, "total_cost_usd": 0,
        "usage": _usage(0, 0), "modelUsage": {}, "permission_denials": [],
        "terminal_reason": "completed", "fast_mode_state": "off", "uuid": _uuid(),
    }


def synthetic_api_error(session_id: str, text: str, error: str = "server_error",
                        request_id: str | None = None, *, with_request_id: bool = True) -> dict:
    """The "<synthetic>" assistant line printed before api_error_result (the 529 case
    had no request_id: with_request_id=False)."""
    line = {
        "type": "assistant",
        "message": {
            "id": _uuid(), "container": None, "model": "<synthetic>", "role": "assistant",
            "stop_details": None, "stop_reason": "stop_sequence", "stop_sequence": "", "type": "message",
            "usage": {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0,
                      "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
                      "service_tier": None,
                      "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
                      "inference_geo": None, "iterations": None, "speed": None},
            "content": [{"type": "text", "text": text}], "context_management": None,
        },
        "parent_tool_use_id": None, "session_id": session_id, "uuid": _uuid(), "error": error,
    }
    if with_request_id:
        line["request_id"] = request_id or _req_id()
    return line


def api_retry(session_id: str, attempt: int, max_retries: int = 2, status: int | None = 500,
              error: str = "server_error", delay_ms: float = 502.60088185009977) -> dict:
    return {
        "type": "system", "subtype": "api_retry", "attempt": attempt, "max_retries": max_retries,
        "retry_delay_ms": float(delay_ms), "error_status": status, "error": error,
        "session_id": session_id, "uuid": _uuid(),
    }


_API_ERRORS = {
    500: ("server_error", "API Error: 500 Internal server error. This is a server-side issue, usually "
          "temporary — try again in a moment. If it persists, check your inference gateway "
          "(127.0.0.1:39209)."),
    529: ("server_error", "API Error: Repeated 529 Overloaded errors. The API is at capacity — this is "
          "usually temporary. Try again in a moment. If it persists, check your inference gateway "
          "(127.0.0.1:45221)."),
    401: ("authentication_failed", "Invalid API key · Fix external API key"),
    400: ("unknown", "API Error: 400 fake: prompt is malformed"),
}


# --- whole streams ----------------------------------------------------------------------

def structured_stream(session_id: str, structured_output: dict, *, text: str = "Checking services.",
                      command: str | None = "echo ok", command_output: str = "ok",
                      model: str = INIT_MODEL, cwd: str | None = None, cost: float = 0.01) -> list[dict]:
    """A complete successful run like c_structured: init, text, [Bash + result],
    StructuredOutput call, its acknowledgement, result/success with structured_output."""
    lines = [init_line(session_id, model=model, cwd=cwd)]
    first_msg, first_req = _msg_id(), _req_id()
    if text:
        lines.append(assistant_text(session_id, text, message_id=first_msg, request_id=first_req))
    turns = 2
    if command is not None:
        use = assistant_tool_use(session_id, "Bash", {"command": command, "description": "Health probe"},
                                 message_id=first_msg, request_id=first_req)
        lines += [use, tool_result(session_id, use["message"]["content"][0]["id"], command_output)]
        turns = 3
    so = assistant_tool_use(session_id, "StructuredOutput", structured_output, input_tokens=19926)
    lines += [so, structured_output_ack(session_id, so["message"]["content"][0]["id"]),
              result_success(session_id, structured_output, cost=cost, num_turns=turns, model=model)]
    return lines


def api_error_stream(session_id: str, status: int = 500, text: str | None = None, *,
                     retries: int = 2, cwd: str | None = None) -> list[dict]:
    """init, `retries` api_retry lines (none for 400), synthetic assistant, api_error_result.
    For 529 the result's api_error_status is null, as observed."""
    error, default_text = _API_ERRORS.get(status, ("server_error", f"API Error: {status}"))
    text = text or default_text
    lines: list[dict] = [init_line(session_id, cwd=cwd)]
    if status != 400:
        lines += [api_retry(session_id, i + 1, retries, status,
                            {529: "overloaded"}.get(status, error), 502.6 * 2 ** i)
                  for i in range(retries)]
    lines.append(synthetic_api_error(session_id, text, error, with_request_id=status != 529))
    lines.append(api_error_result(session_id, None if status == 529 else status, text))
    return lines
