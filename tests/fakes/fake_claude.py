#!/usr/bin/env python3
"""A stand-in for the ``claude`` CLI (2.1.197) used by the TierOps tests.

Standard library only. It does not talk to any API: it prints stream-json lines
it is told to print, the way the real CLI prints them (see
/work/shared/reference/claude-code-stream-json.md), and records how it was run.

Control file
------------
Path: env var ``FAKE_CLAUDE_CONTROL``; if unset, ``fake-claude.json`` in the
directory of ``sys.argv[0]`` (not resolved, so a symlink named ``claude`` in a
tmp dir works). Relative paths inside it are relative to the control file::

    {"log": "invocations.jsonl",      # one JSON line appended per invocation
     "state": "state.json",           # invocation counter (default <control>.state)
     "check_argv": true,              # emulate the CLI's usage errors (default true)
     "stages": [STAGE, ...],          # invocation n uses stages[n]; the last repeats
     "by_model": {MODEL: STAGE}}      # optional: a run with --model MODEL uses this stage instead

STAGE::

    "lines": [str | dict, ...]   str printed verbatim, dict dumped compactly
    "replay": "/path/stdout.jsonl"   printed verbatim instead of "lines"
    "session_id": "..."          replace the session_id of every printed JSON line.
                                 Default: --resume ID, else --session-id ID, else keep.
    "delay": 0.0                 seconds between lines; "start_delay" before the first
    "burst": false               normal modes: all lines in one write (a reader gets them together)
    "mode": "normal"             normal | crash | hang | huge_line | no_result | no_structured
    "after": 1                   crash/hang: lines printed before dying/hanging;
                                 huge_line: lines printed before the huge line
    "size": 20971520             huge_line: bytes of the text block
    "ignore_sigterm": false      ignore SIGTERM (any mode)
    "spawn_child": false         start `sleep 1000` in our process group first (any mode);
                                 it inherits stdout/stderr; its pid is logged as child_pid
    "setsid_child": false        start `sleep 1000` that calls setsid (leaves our process group
                                 and session, stays our child) and keeps stdout/stderr open;
                                 its pid is logged as daemon_pid, its group as daemon_pgid
    "daemon": false              the same, daemonized: double fork + setsid, so it is reparented
                                 at once (no longer our descendant); pid logged as daemon_pid
    "clear_pdeathsig": false     reset the parent-death signal the supervisor set (as if the
                                 platform had none), so the fake outlives a killed supervisor
    "partial_line": "..."        crash: written without a newline just before dying
    "signal": "SIGSEGV"          crash: die by this signal instead of os._exit
    "stderr": "..."              written to stderr before any stdout line
    "exit_code": 0               normal/huge_line/no_structured: 0, no_result: 1,
                                 crash: os._exit(exit_code or 139)
    "check_argv": bool           per-stage override of the control-level flag
    "write_files": {NAME: str | dict}  written into the cwd before the run is logged and anything
                                 is printed (a dict dumped as JSON), as a model writes handoff.json

With check_argv (default on) the fake reproduces the usage errors observed with the
real CLI (stderr message, exit 1, nothing on stdout): stream-json without --verbose,
--json-schema not JSON / not an object, and -p without a prompt (for instance when a
variadic option such as --allowedTools swallowed it) while stdin is /dev/null.

``--version`` / ``-v`` prints ``2.1.197 (Claude Code)`` and exits 0; it is logged
(``"version_probe": true``) but does not consume a stage.

Log line fields: ts, invocation, stage_index, argv (arguments after the program, exactly),
parsed (prompt, model, json_schema, ...: what the CLI goes on with, so ``prompt`` is the
positional argument or else what it read from stdin, ``prompt_from`` says which ("argv",
"stdin", null), and ``append_system_prompt`` is the inline flag's value or else the content of
--append-system-prompt-file), cwd, env (the environment minus
FAKE_CLAUDE_CONTROL, read from /proc/self/environ), stdin_is_devnull, stdin_kind, pid, ppid, pgid, sid, control,
session_id (the substituted id or null), usage_error, version_probe, child_pid (if any),
daemon_pid (if any), pdeathsig (the parent-death signal number this process was started with,
Linux; 0 = none), stdin_prompt (the prompt read from stdin when -p got no prompt argument and
stdin is not /dev/null, else null), system_prompt_file_text (the content of
--append-system-prompt-file when given, else null).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import stat
import sys
import time
import uuid

VERSION = "2.1.197 (Claude Code)"
CONTROL_ENV = "FAKE_CLAUDE_CONTROL"
CONTROL_FILENAME = "fake-claude.json"
MODES = ("normal", "crash", "hang", "huge_line", "no_result", "no_structured")
DEFAULT_HUGE_SIZE = 20 * 1024 * 1024
_UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")

# Option arity, from `claude --help` of 2.1.197 plus the hidden options seen in the
# reference: "bool" takes nothing, "value" one argument, "optional" one argument
# unless the next token starts with "-", "variadic" every following token that does
# not start with "-" (commander semantics).
_OPTIONS = {
    "--add-dir": "variadic", "--agent": "value", "--agents": "value",
    "--allow-dangerously-skip-permissions": "bool", "--allowedTools": "variadic",
    "--allowed-tools": "variadic", "--append-system-prompt": "value",
    "--append-system-prompt-file": "value", "--ax-screen-reader": "bool", "--bg": "bool",
    "--background": "bool", "--bare": "bool", "--betas": "variadic", "--brief": "bool",
    "--chrome": "bool", "-c": "bool", "--continue": "bool",
    "--dangerously-skip-permissions": "bool", "-d": "optional", "--debug": "optional",
    "--debug-file": "value", "--disable-slash-commands": "bool",
    "--disallowedTools": "variadic", "--disallowed-tools": "variadic", "--effort": "value",
    "--exclude-dynamic-system-prompt-sections": "bool", "--fallback-model": "value",
    "--file": "variadic", "--fork-session": "bool", "--from-pr": "optional", "-h": "bool",
    "--help": "bool", "--ide": "bool", "--include-hook-events": "bool",
    "--include-partial-messages": "bool", "--input-format": "value", "--json-schema": "value",
    "--max-budget-usd": "value", "--max-turns": "value", "--mcp-config": "variadic",
    "--model": "value", "-n": "value", "--name": "value", "--no-chrome": "bool",
    "--no-session-persistence": "bool", "--output-format": "value",
    "--permission-mode": "value", "--plugin-dir": "value", "--plugin-url": "value",
    "-p": "bool", "--print": "bool", "--prompt-suggestions": "optional",
    "--remote-control": "optional", "--remote-control-session-name-prefix": "value",
    "--replay-user-messages": "bool", "-r": "optional", "--resume": "optional",
    "--safe-mode": "bool", "--session-id": "value", "--setting-sources": "value",
    "--settings": "value", "--strict-mcp-config": "bool", "--system-prompt": "value",
    "--system-prompt-file": "value", "--tmux": "optional", "--tools": "variadic",
    "--verbose": "bool", "-v": "bool", "--version": "bool", "-w": "optional",
    "--worktree": "optional",
}
_CANONICAL = {
    "-p": "print", "--print": "print", "--model": "model", "--output-format": "output_format",
    "--verbose": "verbose", "--json-schema": "json_schema",
    "--append-system-prompt": "append_system_prompt", "--system-prompt": "system_prompt",
    "--allowedTools": "allowed_tools", "--allowed-tools": "allowed_tools",
    "--disallowedTools": "disallowed_tools", "--disallowed-tools": "disallowed_tools",
    "--tools": "tools", "-r": "resume", "--resume": "resume", "--session-id": "session_id",
    "--max-turns": "max_turns", "--permission-mode": "permission_mode",
    "--input-format": "input_format", "--mcp-config": "mcp_config", "--add-dir": "add_dir",
    "--dangerously-skip-permissions": "dangerously_skip_permissions",
    "--include-partial-messages": "include_partial_messages", "--fallback-model": "fallback_model",
    "--max-budget-usd": "max_budget_usd", "-v": "version", "--version": "version",
}


def parse_argv(args: list[str]) -> dict:
    """Commander-like parse, good enough to see what the real CLI would see."""
    parsed: dict = {"positionals": [], "unknown_options": []}
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if tok == "--":
            parsed["positionals"].extend(args[i:])
            break
        if not tok.startswith("-") or tok == "-":
            parsed["positionals"].append(tok)
            continue
        name, eq, inline = tok.partition("=")
        kind = _OPTIONS.get(name)
        key = _CANONICAL.get(name, name.lstrip("-").replace("-", "_"))
        if kind is None:
            parsed["unknown_options"].append(tok)
            continue
        if kind == "bool":
            parsed[key] = True
        elif eq:
            value = inline
            parsed[key] = value.replace(",", " ").split() if kind == "variadic" else value
        elif kind == "value":
            parsed[key] = args[i] if i < len(args) else None
            i += 1
        elif kind == "optional":
            if i < len(args) and not args[i].startswith("-"):
                parsed[key] = args[i]
                i += 1
            else:
                parsed[key] = True
        else:  # variadic: eats every following token up to the next option
            values = parsed.setdefault(key, [])
            while i < len(args) and not args[i].startswith("-"):
                values.extend(args[i].replace(",", " ").split())
                i += 1
    parsed["prompt"] = parsed["positionals"][0] if parsed["positionals"] else None
    return parsed


def usage_error(parsed: dict, stdin_kind: str) -> str | None:
    """The usage errors the real 2.1.197 printed (fixtures l_*)."""
    if parsed.get("print") and parsed.get("output_format") == "stream-json" and not parsed.get("verbose"):
        return "Error: When using --print, --output-format=stream-json requires --verbose"
    if "json_schema" in parsed:
        raw = parsed["json_schema"]
        try:
            schema = json.loads(raw) if raw is not None else None
        except ValueError as exc:
            return f"Error: --json-schema is not valid JSON: JSON Parse error: {exc}"
        if not isinstance(schema, dict):
            return "Error: --json-schema must be a JSON object"
    if parsed.get("print") and parsed.get("prompt") is None and stdin_kind in ("devnull", "closed"):
        return "Error: Input must be provided either through stdin or as a prompt argument when using --print"
    return None


def stdin_kind() -> str:
    try:
        st = os.fstat(0)
    except OSError:
        return "closed"
    try:
        dn = os.stat(os.devnull)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == dn.st_rdev:
            return "devnull"
    except OSError:
        pass
    if stat.S_ISFIFO(st.st_mode):
        return "pipe"
    if stat.S_ISREG(st.st_mode):
        return "file"
    if stat.S_ISSOCK(st.st_mode):
        return "socket"
    if stat.S_ISCHR(st.st_mode):
        return "tty" if os.isatty(0) else "chardev"
    return "other"


def exec_environment() -> dict:
    """The environment this process was exec'd with.

    os.environ is not it: CPython's C-locale coercion (PEP 538) adds LC_CTYPE=C.UTF-8
    when the parent passed no locale, and the wrapper adds FAKE_CLAUDE_CONTROL.
    /proc/self/environ keeps the block the kernel received.
    """
    try:
        with open("/proc/self/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        env = dict(os.environ)
    else:
        env = {}
        for item in raw.split(b"\0"):
            if item:
                key, _, value = item.partition(b"=")
                env[os.fsdecode(key)] = os.fsdecode(value)
    env.pop(CONTROL_ENV, None)
    return env


def _resolve(base_dir: str, path: str | None) -> str | None:
    if not path:
        return None
    path = os.path.expanduser(str(path))
    return path if os.path.isabs(path) else os.path.join(base_dir, path)


def next_invocation(state_path: str) -> int:
    """Atomically read and increment the invocation counter."""
    fd = os.open(state_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = b""
        while chunk := os.read(fd, 65536):
            raw += chunk
        try:
            count = int(json.loads(raw or b"{}").get("count", 0))
        except (ValueError, AttributeError):
            count = 0
        data = json.dumps({"count": count + 1}).encode()
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, data)
        return count
    finally:
        os.close(fd)  # also releases the lock


def append_log(log_path: str | None, record: dict) -> None:
    if not log_path:
        return
    data = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, data)
    finally:
        os.close(fd)


# --- output ---------------------------------------------------------------------------

def _dump(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def load_lines(stage: dict, base_dir: str) -> list[tuple[str, bool]]:
    """(text without newline, ends_with_newline) pairs."""
    if stage.get("replay"):
        with open(_resolve(base_dir, stage["replay"]), encoding="utf-8", newline="") as fh:
            data = fh.read()
        out = []
        for piece in data.splitlines(keepends=True):
            if piece.endswith("\n"):
                out.append((piece[:-1], True))
            else:
                out.append((piece, False))
        return out
    out = []
    for item in stage.get("lines", []):
        out.append((item if isinstance(item, str) else _dump(item), True))
    return out


def _parse(text: str):
    if not text.lstrip().startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def transform(text: str, mode: str, session_id: str | None) -> str | None:
    """Apply mode filters and session-id substitution. None means: drop the line."""
    obj = _parse(text)
    if obj is None:
        return text
    if mode == "no_result" and obj.get("type") == "result":
        return None
    if mode == "no_structured" and obj.get("type") == "result" and "structured_output" in obj:
        # As d_text_only: success, no structured_output, and prose as the final text (a JSON text
        # would be taken as an extracted answer, and no recovery would happen).
        del obj["structured_output"]
        obj["result"] = "Done: the checks are complete."
        text = _dump(obj)
    old = obj.get("session_id")
    if session_id and isinstance(old, str) and old != session_id:
        if _UUID_RE.match(old):
            # A real id appears nowhere else by accident (errors, paths): replace all.
            new_text = text.replace(old, session_id)
        else:
            new_text = text.replace('"session_id":' + _dump(old), '"session_id":' + _dump(session_id))
        if new_text == text or _parse(new_text) is None or _parse(new_text).get("session_id") != session_id:
            obj = _parse(text)
            obj["session_id"] = session_id
            new_text = _dump(obj)
        text = new_text
    return text


def huge_assistant_line(session_id: str, size: int) -> str:
    line = {
        "type": "assistant",
        "message": {
            "id": "msg_fake_" + uuid.uuid4().hex[:20], "type": "message", "role": "assistant",
            "model": "claude-opus-4-8", "content": [{"type": "text", "text": "x" * size}],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 19834, "output_tokens": 1, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0},
            "context_management": None,
        },
        "parent_tool_use_id": None, "session_id": session_id, "uuid": str(uuid.uuid4()),
        "request_id": "req_fake_" + uuid.uuid4().hex[:16],
    }
    return _dump(line)


class Out:
    def __init__(self, delay: float, start_delay: float):
        self.delay = delay
        self.start_delay = start_delay
        self.count = 0
        self.buf = sys.stdout.buffer

    def line(self, text: str, newline: bool = True) -> None:
        wait = self.delay if self.count else self.start_delay
        if wait:
            time.sleep(wait)
        self.raw(text + ("\n" if newline else ""))
        self.count += 1

    def raw(self, text: str) -> None:
        try:
            self.buf.write(text.encode("utf-8"))
            self.buf.flush()
        except BrokenPipeError:
            # The reader went away: behave like a CLI killed by EPIPE, quietly.
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
            except OSError:
                pass
            os._exit(1)


def _signum(value) -> int:
    if isinstance(value, int):
        return value
    name = str(value).upper()
    return int(getattr(signal, name if name.startswith("SIG") else "SIG" + name))


def spawn_grandchild() -> int:
    import shutil
    import subprocess

    sleep = shutil.which("sleep", path=os.environ.get("PATH") or os.defpath) or "/bin/sleep"
    # Same process group (no new session); inherits stdout/stderr like a tool process would.
    child = subprocess.Popen([sleep, "1000"], stdin=subprocess.DEVNULL, close_fds=True)
    return child.pid


def spawn_detached(double_fork: bool) -> int:
    """`sleep 1000` in a new session (setsid), holding our stdout/stderr; returns its pid."""
    import shutil

    sleep = shutil.which("sleep", path=os.environ.get("PATH") or os.defpath) or "/bin/sleep"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: new session, then (double fork) a grandchild, which execs sleep
        try:
            os.close(r)
            os.setsid()
            if double_fork and os.fork() != 0:
                os._exit(0)  # the intermediate exits: the daemon is reparented
            os.write(w, str(os.getpid()).encode())
            os.close(w)
            fd = os.open(os.devnull, os.O_RDONLY)
            os.dup2(fd, 0)
            os.execv(sleep, [sleep, "1000"])  # noqa: S606 (a fixed program, no shell)
        finally:
            os._exit(127)
    os.close(w)
    data = b""
    while chunk := os.read(r, 64):
        data += chunk
    os.close(r)
    if double_fork:
        os.waitpid(pid, 0)  # reap the intermediate
    return int(data)


def _prctl():
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def pdeathsig() -> int | None:
    """The parent-death signal this process has (PR_GET_PDEATHSIG), None when unknown."""
    prctl = _prctl()
    if prctl is None:
        return None
    import ctypes

    value = ctypes.c_int(0)
    if prctl(2, ctypes.byref(value), 0, 0, 0) != 0:
        return None
    return value.value


def clear_pdeathsig() -> None:
    prctl = _prctl()
    if prctl is not None:
        prctl(1, 0, 0, 0, 0)


def run(argv: list[str]) -> int:
    args = argv[1:]
    control_path = os.environ.pop(CONTROL_ENV, None) or os.path.join(
        os.path.dirname(os.path.abspath(argv[0])), CONTROL_FILENAME)
    kind = stdin_kind()
    parsed = parse_argv(args)
    version_probe = bool(parsed.get("version"))

    record = {
        "ts": time.time(), "invocation": None, "stage_index": None, "argv": args, "parsed": parsed,
        "cwd": os.getcwd(), "env": exec_environment(), "stdin_is_devnull": kind == "devnull",
        "stdin_kind": kind, "pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgrp(),
        "sid": os.getsid(0), "control": control_path, "session_id": None, "usage_error": None,
        "version_probe": version_probe, "pdeathsig": pdeathsig(), "stdin_prompt": None,
        "system_prompt_file_text": None,
    }
    parsed["prompt_from"] = "argv" if parsed.get("prompt") is not None else None
    if parsed.get("print") and parsed.get("prompt") is None and kind in ("pipe", "file", "socket"):
        # The real CLI reads -p's prompt from stdin when no prompt argument is given (reference §2).
        text = sys.stdin.buffer.read().decode("utf-8", "replace")
        record["stdin_prompt"] = text
        if text.strip():
            kind = "stdin-prompt"  # usage_error: the prompt was provided
            parsed["prompt"], parsed["prompt_from"] = text, "stdin"  # the prompt the CLI goes on with
    if isinstance(parsed.get("append_system_prompt_file"), str):
        try:
            with open(parsed["append_system_prompt_file"], encoding="utf-8") as fh:
                record["system_prompt_file_text"] = fh.read()
        except OSError as exc:
            record["system_prompt_file_text"] = None
            record["system_prompt_file_error"] = str(exc)
        else:  # what the CLI appends to its system prompt, as with the inline flag
            parsed.setdefault("append_system_prompt", record["system_prompt_file_text"])

    try:
        with open(control_path, encoding="utf-8") as fh:
            control = json.load(fh)
    except (OSError, ValueError) as exc:
        if version_probe:
            sys.stdout.write(VERSION + "\n")
            return 0
        sys.stderr.write(f"fake_claude: cannot read control file {control_path}: {exc}\n")
        return 2
    base_dir = os.path.dirname(os.path.abspath(control_path))
    log_path = _resolve(base_dir, control.get("log"))

    if version_probe:
        append_log(log_path, record)
        sys.stdout.write(VERSION + "\n")
        sys.stdout.flush()
        return 0

    stages = control.get("stages") or []
    if not stages:
        append_log(log_path, record)
        sys.stderr.write("fake_claude: control file has no stages\n")
        return 2
    state_path = _resolve(base_dir, control.get("state")) or control_path + ".state"
    n = next_invocation(state_path)
    index = min(n, len(stages) - 1)
    stage = stages[index]
    if isinstance(by_model := control.get("by_model"), dict) and parsed.get("model") in by_model:
        stage, index = by_model[parsed["model"]], -1
    mode = stage.get("mode", "normal")
    record.update(invocation=n, stage_index=index, mode=mode)
    if mode not in MODES:
        append_log(log_path, record)
        sys.stderr.write(f"fake_claude: unknown mode {mode!r}\n")
        return 2

    resume = parsed.get("resume")
    session_id = (stage.get("session_id")
                  or (resume if isinstance(resume, str) else None)
                  or parsed.get("session_id"))
    record["session_id"] = session_id

    check = stage.get("check_argv", control.get("check_argv", True))
    error = usage_error(parsed, kind) if check else None
    if error:
        record["usage_error"] = error
        append_log(log_path, record)
        sys.stderr.write(error + "\n")
        sys.stderr.flush()
        return 1

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if stage.get("clear_pdeathsig"):
        clear_pdeathsig()
    if stage.get("spawn_child"):
        record["child_pid"] = spawn_grandchild()
    if stage.get("setsid_child") or stage.get("daemon"):
        record["daemon_pid"] = spawn_detached(double_fork=bool(stage.get("daemon")))
        record["daemon_pgid"] = os.getpgid(record["daemon_pid"])
    if stage.get("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for name, content in (stage.get("write_files") or {}).items():
        with open(name, "w", encoding="utf-8") as fh:  # relative: the cwd the supervisor gave us
            fh.write(content if isinstance(content, str) else _dump(content))
    append_log(log_path, record)

    if stage.get("stderr"):
        sys.stderr.write(stage["stderr"])
        sys.stderr.flush()

    lines = []
    for text, newline in load_lines(stage, base_dir):
        new = transform(text, mode, session_id)
        if new is not None:
            lines.append((new, newline))
    out = Out(float(stage.get("delay", 0) or 0), float(stage.get("start_delay", 0) or 0))

    if mode in ("crash", "hang"):
        after = int(stage.get("after", 1))
        for text, newline in lines[:after]:
            out.line(text, newline)
        if mode == "crash":
            if stage.get("partial_line"):
                out.raw(stage["partial_line"])
            sys.stderr.flush()
            if stage.get("signal") is not None:
                signum = _signum(stage["signal"])
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
                time.sleep(5)  # the signal is delivered before this returns
            os._exit(stage.get("exit_code") or 139)
        while True:  # hang
            time.sleep(3600)

    if mode == "huge_line":
        after = int(stage.get("after", 1))
        sid = session_id
        if not sid:
            for text, _ in lines:
                obj = _parse(text)
                if obj and isinstance(obj.get("session_id"), str):
                    sid = obj["session_id"]
                    break
        huge = huge_assistant_line(sid or str(uuid.uuid4()), int(stage.get("size", DEFAULT_HUGE_SIZE)))
        lines.insert(min(after, len(lines)), (huge, True))

    if stage.get("burst") and lines:  # after start_delay, every line in one write
        if out.start_delay:
            time.sleep(out.start_delay)
        out.raw("".join(text + ("\n" if newline else "") for text, newline in lines))
        lines = []
    for text, newline in lines:
        out.line(text, newline)
    default_code = 1 if mode == "no_result" else 0
    code = stage.get("exit_code")
    return default_code if code is None else int(code)


def main() -> None:
    code = run(sys.argv)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        os._exit(1)
    sys.exit(code)


if __name__ == "__main__":
    main()
