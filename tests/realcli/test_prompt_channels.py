"""Prompts stay off the command line and the CLI's own transcripts go, with the REAL claude CLI
(2.1.197) against the fake Messages API.

An alert's investigation gets the alert's text as its prompt: annotations, the generator URL and
labels, which may carry tokens. A command line is readable by every local user
(``/proc/PID/cmdline``), so TierOps builds the prompt and the appended system prompt from
redacted text and hands both to the CLI another way: the prompt on stdin (a pipe, closed after
it), the system prompt in a 0600 file in the session's folder (``--append-system-prompt-file``),
again on the output-recovery resume because the CLI forgets it (reference §8). Here the model is
shown to receive both texts exactly as stored, the running CLI's ``/proc/PID/cmdline`` to hold
neither, and no secret to reach the API.

The CLI keeps every session in ``HOME/.claude/projects/<cwd slug>/<id>.jsonl`` with every tool
output verbatim (reference §8); TierOps removes it once the session is final, and prune removes
one left behind (the slug of a cwd longer than 200 characters included).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import subprocess
from pathlib import Path

import psutil
import pytest

from app.engine.cli_transcripts import slug
from app.engine.retention import prune
from app.redact import MASK
from app.store import sessions
from app.supervisor.session import SYSTEM_PROMPT_FILE, TierRequest, run_tier_session
from tests.fakes.fake_anthropic import FakeAnthropic, hang, structured, text
from tests.realcli.test_supervisor_e2e import (
    DISABLE_VARS,
    HEALTHY,
    child_env,  # noqa: F401 (a fixture: the CLI's environment, pointed at the fake API)
    make_settings,
    open_supervisor,
    session_row,
)
from tests.secrets_corpus import ENV_SECRET_NAME, ENV_SECRET_VALUE

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(120), pytest.mark.usefixtures("child_env")]

MATCH = "TIEROPS-ALERT-CASE-5e1b"
ALERT_PROMPT = f"""## Alert {MATCH}: HighErrorRate on api (critical)
- runbook: curl -H "Authorization: Bearer q7Zk2LmN9xWp4RtY8uVb" https://api.internal/debug
- generator: https://grafana.example/alerting/list?token=ghp_R8s7Kd92LmQp0xZ1Wv3Yb4Nc5Td6Ue7Fg8Hi
- labels: service="api", db_password="hunter22horse"
- log line: upstream said {ENV_SECRET_VALUE}
"""
SYSTEM = "You are TierOps tier 1 (observe).\n\n## Runbook notes\nexport PGPASSWORD=pgEnvPassw0rd42\nSYSTEM-MARKER-77c1"
SECRETS = ("q7Zk2LmN9xWp4RtY8uVb", "ghp_R8s7", "hunter22horse", ENV_SECRET_VALUE, "pgEnvPassw0rd42")


def cmdline(pid: int) -> list[str] | None:
    """The process's command line as any local user reads it."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.decode("utf-8", "replace").split("\0")[:-1] or None


async def test_an_alert_prompt_reaches_the_model_redacted_and_never_the_command_line(
        claude_bin, fake_api, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_SECRET_NAME, ENV_SECRET_VALUE)  # a secret of the supervisor's environment
    # Text twice (the CLI nudges once in between), then output recovery resumes the session. Each
    # run waits 2 s at its first request: time to read the running CLI's command line.
    fake_api.script(MATCH, [hang(2, then=text("TEXT-ONLY-1")), text("TEXT-ONLY-2"), hang(2, then=structured(HEALTHY))])
    settings = make_settings(claude_bin, tmp_path)
    projects = settings.state_dir.resolve() / "home" / ".claude" / "projects"
    me = psutil.Process()
    seen: dict[int, list[str]] = {}
    parents: dict[int, int] = {}
    transcripts: set[Path] = set()

    async def watch() -> None:
        while True:
            for child in me.children(recursive=True):
                if child.pid not in seen and (args := cmdline(child.pid)) and args[0] == claude_bin:
                    seen[child.pid] = args
                    with contextlib.suppress(psutil.Error):
                        parents[child.pid] = child.ppid()
            transcripts.update(projects.glob("*/*.jsonl"))
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch())
    try:
        async with open_supervisor(settings) as (_sup, db):
            req = TierRequest(tier=1, prompt=ALERT_PROMPT, system_prompt=SYSTEM, trigger="alert")
            result = await run_tier_session(db, settings, _sup.validator, None, req)
            row = await session_row(db, result.pk)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher

    assert (row["status"], row["source"], row["attempts"]) == ("completed", "structured_output", 2), row["stderr_tail"]
    # What is stored is redacted, and it is exactly what the model got.
    assert row["prompt"].count(MASK) == len(SECRETS) - 1 and row["system_prompt"].count(MASK) == 1
    reqs = [r for r in fake_api.message_requests if r.get("script") == MATCH]
    assert len(reqs) == 3, [r["script"] for r in fake_api.message_requests]
    assert FakeAnthropic.prompt_text(reqs[0]) == row["prompt"]
    for req in (reqs[0], reqs[2]):  # the first run, and the resume (the file passed again)
        assert FakeAnthropic.system_text(req).endswith("\n\n" + row["system_prompt"])
    assert "did not call the StructuredOutput tool" in FakeAnthropic.last_prompt_text(reqs[2])
    sent = json.dumps(fake_api.requests)
    for secret in SECRETS:
        assert secret not in sent and secret not in row["prompt"] + row["system_prompt"], secret

    # Neither text was on the command line of either CLI process, as /proc showed it while it ran.
    # Two runs; a process the CLI forks from itself shares its command line and is checked too.
    runs = [pid for pid in seen if parents.get(pid) not in seen]
    assert len(runs) == 2, (seen, parents)
    cwd = Path(row["cwd"])
    for args in seen.values():
        whole = "\0".join(args)
        assert MATCH not in whole and "SYSTEM-MARKER-77c1" not in whole and "HighErrorRate" not in whole, args
        assert args[1] == "-p" and args[2].startswith("--")
        assert args[args.index("--append-system-prompt-file") + 1] == str(cwd / SYSTEM_PROMPT_FILE)
    assert sum("--resume" in seen[pid] for pid in runs) == 1
    assert json.loads(row["argv"]) == seen[runs[0]]  # the stored argv is the one that ran

    # The system prompt's file: in the session's folder, this user's only.
    info = (cwd / SYSTEM_PROMPT_FILE).stat()
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.getuid()
    assert (cwd / SYSTEM_PROMPT_FILE).read_text(encoding="utf-8") == row["system_prompt"]

    # The CLI wrote its transcript where the reference says; it is gone now the session is final.
    assert transcripts == {projects / slug(str(cwd)) / f"{row['session_id']}.jsonl"}, transcripts
    assert list(projects.iterdir()) == []


def run_cli_in(claude_bin: str, fake: FakeAnthropic, cwd: Path, home: Path, prompt: str) -> str:
    """The CLI run by hand in ``cwd`` with TierOps' HOME (what a supervisor killed before the
    session was final leaves behind); returns its session id."""
    cwd.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), "ANTHROPIC_BASE_URL": fake.url,
           "ANTHROPIC_API_KEY": "sk-test-dummy", "CLAUDE_CODE_MAX_RETRIES": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", **dict.fromkeys(DISABLE_VARS, "1")}
    proc = subprocess.run([claude_bin, "-p", "--model", "sonnet", "--output-format", "stream-json", "--verbose"],
                          input=prompt, cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout.splitlines()[0])["session_id"])


async def test_prune_removes_a_transcript_left_behind_but_not_a_running_sessions(claude_bin, fake_api,
                                                                                 tmp_path) -> None:
    fake_api.script("TIEROPS-LEFT-BEHIND", [text("ok")])
    deep = tmp_path / ("long-state-folder-" * 8)  # session folders past the CLI's 200-character slug
    settings = make_settings(claude_bin, deep)
    state = settings.state_dir.resolve()
    home = state / "home"
    async with open_supervisor(settings) as (_sup, db):
        left_cwd = state / "sessions" / "41"
        assert len(str(left_cwd)) > 200
        left_id = run_cli_in(claude_bin, fake_api, left_cwd, home, "TIEROPS-LEFT-BEHIND a session left behind")
        left = home / ".claude" / "projects" / slug(str(left_cwd))
        assert (left / f"{left_id}.jsonl").is_file()  # the hashed slug is the CLI's own
        await asyncio.sleep(0.05)
        running = await sessions.create_session(db, tier=1, trigger="manual")  # a running session, started after
        mine_cwd = state / "sessions" / str(running)
        mine_id = run_cli_in(claude_bin, fake_api, mine_cwd, home, "TIEROPS-LEFT-BEHIND the running one")
        mine = home / ".claude" / "projects" / slug(str(mine_cwd))

        report = await prune(db, settings)
        assert report["transcripts"]["removed"] >= 1 and report["transcripts"]["errors"] == [], report
        assert not left.exists() and (mine / f"{mine_id}.jsonl").is_file()
