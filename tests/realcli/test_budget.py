"""What the REAL claude CLI (2.1.197) does at its ``--max-budget-usd``, and what TierOps
makes of it. Run against the fake Messages API: each response costs what the CLI computes from the
usage the fake reports (about $0.09 for the CLI's ~19k-token first request).

Found here (and kept as the capture ``tests/fixtures/claude-code/2.1.197/o_max_budget_usd/``):

* the CLI checks its spend after each API response; once it reached the amount it stops at once:
  a tool call in that response is **not** run, and no further request is made;
* the last line is ``result`` with ``subtype: "error_max_budget_usd"``, ``is_error: true``,
  ``errors: ["Reached maximum budget ($0.15)"]`` (the amount as given), ``total_cost_usd`` over the
  amount (by up to one response), ``stop_reason: "tool_use"``, and no ``result``,
  ``structured_output`` or ``terminal_reason`` field; the exit code is 1, stderr is empty;
* the budget counts one process: a ``--resume`` starts again from $0 (so TierOps gives a resume
  what is left of the session's budget, ``app/supervisor/session.py``);
* ``--max-budget-usd 0`` is refused before the run ("must be a positive number greater than 0"),
  hence no flag at all for a budget of 0 (= none).

So TierOps need not enforce the budget itself: the run is ``failed`` with "budget exceeded: $X of
$Y (TIEROPS_TIERn_MAX_BUDGET_USD)" (``app/output/outcome.py``) and the chain does not escalate.

Re-capture after a CLI upgrade: ``.venv/bin/python -m tests.realcli.test_budget`` (writes the
fixture folder of the installed version); the first test fails while the CLI behaves differently
from the capture.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.output.outcome import Budget, decide_status, usd
from app.output.validate import OutputValidator
from app.stream.parser import parse_line
from app.supervisor.launch import build_argv
from tests.fakes.fake_anthropic import FakeAnthropic, bash, structured
from tests.realcli.test_supervisor_e2e import (  # noqa: F401 (child_env is a fixture)
    ESCALATE,
    TIER1_MATCH,
    TIER2_MATCH,
    child_env,
    make_settings,
    open_supervisor,
    session_row,
)

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(90)]

SCENARIO = "o_max_budget_usd"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "claude-code" / "2.1.197" / SCENARIO
MATCH = "TIEROPS-BUDGET-CASE-7d41"
PROMPT = f"{MATCH}: check the host (echo one, then echo two) and report."
BUDGET = 0.15  # over the first response (~$0.09), under the second (~$0.17 in all)
REPORT = {
    "summary": "the host answers",
    "events": [],
    "escalation": {"needed": False, "reason": None, "context": None, "failed_checks": []},
    "services_checked": [{"name": "host", "status": "healthy", "detail": "echo"}],
}
ENV_FLAGS = {"DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
             "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CODE_MAX_RETRIES": "1"}


@dataclass
class Capture:
    argv: list[str]
    exit_code: int
    stdout: str
    stderr: str
    wall_s: float
    requests: int

    @property
    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    @property
    def result(self) -> dict[str, Any]:
        return [m for m in self.lines if m.get("type") == "result"][-1]


SYSTEM_FILE = ".tierops-system-prompt.md"  # in the cwd, as TierOps writes it
SYSTEM = "You are TierOps tier 2 (investigate)."


def argv_for(claude_bin: str, prompt: str, budget: float, resume: str | None = None) -> tuple[list[str], str]:
    """The command line exactly as TierOps builds it (no prompt in it, the variadic tool lists
    followed by other options), with ``--max-budget-usd``; and the prompt, for stdin."""
    argv = build_argv(claude_bin, model="sonnet", wire_schema=OutputValidator.from_file().wire_schema(),
                      system_prompt_file=SYSTEM_FILE, allowed_tools=["Bash"], disallowed_tools=["WebSearch"],
                      max_turns=10, resume=resume, max_budget_usd=budget)
    return argv, prompt


def run_cli(call: tuple[list[str], str], cwd: Path, home: Path, fake: FakeAnthropic) -> Capture:
    argv, prompt = call
    (cwd / SYSTEM_FILE).write_text(SYSTEM, encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), "ANTHROPIC_BASE_URL": fake.url,
           "ANTHROPIC_API_KEY": "sk-test-dummy", **ENV_FLAGS}
    before = len(fake.message_requests)
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, env=env, input=prompt, capture_output=True, text=True,
                          timeout=60, check=False)
    return Capture(argv, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started,
                   len(fake.message_requests) - before)


def capture(claude_bin: str, fake: FakeAnthropic, folder: Path) -> Capture:
    """The scenario: Bash, Bash, StructuredOutput scripted; the budget is reached by the second response."""
    fake.script(MATCH, [bash("echo one", text="Checking the host."), bash("echo two"), structured(REPORT)])
    (folder / "cwd").mkdir(parents=True, exist_ok=True)
    (folder / "home").mkdir(parents=True, exist_ok=True)
    return run_cli(argv_for(claude_bin, PROMPT, BUDGET), folder / "cwd", folder / "home", fake)


def test_the_cli_stops_once_its_spend_reaches_the_budget(claude_bin, fake_api, tmp_path) -> None:
    run = capture(claude_bin, fake_api, tmp_path)
    result = run.result
    assert run.exit_code == 1, run.stderr
    assert run.stderr == ""
    assert (result["subtype"], result["is_error"], result["errors"]) == (
        "error_max_budget_usd", True, [f"Reached maximum budget (${BUDGET})"])
    assert result["total_cost_usd"] > BUDGET and result["num_turns"] == 2 and result["stop_reason"] == "tool_use"
    assert not {"result", "structured_output", "terminal_reason", "api_error_status"} & set(result)
    # The second response's Bash call was never run, and nothing more was asked of the API.
    tool_results = [m for m in run.lines if m["type"] == "user"]
    assert [t["tool_use_result"]["stdout"] for t in tool_results] == ["one"]
    assert run.requests == 2

    # What TierOps records: failed, with the spend and the setting; not an API failure.
    status = decide_status(parse_line(json.dumps(result)), run.exit_code,
                           budget=Budget(BUDGET, "TIEROPS_TIER2_MAX_BUDGET_USD"))
    assert (status.status, status.api_failure) == ("failed", False)
    assert status.reason == (f"budget exceeded: {usd(result['total_cost_usd'])} of $0.15 "
                             "(TIEROPS_TIER2_MAX_BUDGET_USD)")

    # The stored capture (read by the offline tests) shows the same behaviour.
    stored = [json.loads(line) for line in (FIXTURE / "stdout.jsonl").read_text().splitlines()]
    assert [(m["type"], m.get("subtype")) for m in stored] == [(m["type"], m.get("subtype")) for m in run.lines]
    assert list(stored[-1]) == list(result)  # the same fields, in the same order
    assert stored[-1]["errors"] == result["errors"]


def test_a_resume_gets_a_budget_of_its_own(claude_bin, fake_api, tmp_path) -> None:
    """The CLI counts its budget per process: a resumed session starts again from $0."""
    fake_api.script(MATCH, [bash("echo one"), structured(REPORT), bash("echo two"), bash("echo three"),
                            structured(REPORT)])
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    first = run_cli(argv_for(claude_bin, PROMPT, 5.0), cwd, home, fake_api)
    assert first.result["subtype"] == "success", first.stdout
    spent = first.result["total_cost_usd"]
    # A budget the first run alone already exceeds: were it counted per session, the resume would
    # stop after its first response.
    budget = round(spent * 0.75, 4)
    again = run_cli(argv_for(claude_bin, "go on", budget, resume=first.result["session_id"]), cwd, home, fake_api)
    result = again.result
    assert result["session_id"] == first.result["session_id"]
    assert result["subtype"] == "error_max_budget_usd" and result["num_turns"] == 2, again.stdout
    assert result["total_cost_usd"] < spent + budget  # its own spend only
    assert [t["tool_use_result"]["stdout"] for t in again.lines if t["type"] == "user"] == ["two"]


@pytest.mark.usefixtures("child_env")
async def test_a_tier_stopped_at_its_budget_fails_and_does_not_escalate(claude_bin, fake_api, tmp_path) -> None:
    fake_api.script(TIER1_MATCH, [bash("echo ok", text="Checking the host."), structured(ESCALATE)])
    fake_api.script(TIER2_MATCH, [structured(REPORT)])
    settings = make_settings(claude_bin, tmp_path, tier1_max_budget_usd=0.01)

    async with open_supervisor(settings) as (sup, db):
        chain = await sup.run_cycle()
        assert len(chain) == 1, chain
        [s] = chain
        row = await session_row(db, s["id"])

    assert row["result_subtype"] == "error_max_budget_usd" and row["exit_code"] == 1
    assert row["max_budget_usd"] == 0.01 and row["dry_run"] == 0
    argv = json.loads(row["argv"])
    assert argv[argv.index("--max-budget-usd") + 1] == "0.01"
    reason = f"budget exceeded: {usd(row['cost_usd'])} of $0.01 (TIEROPS_TIER1_MAX_BUDGET_USD)"
    assert (s["status"], s["status_reason"]) == ("failed", reason)
    assert s["attention"] == f"tier 1 failed: {reason}"
    assert s["escalated_to"] is None and row["attempts"] == 1  # a failed run is not resumed
    assert all(r["script"] == TIER1_MATCH for r in fake_api.message_requests)
    assert len(fake_api.message_requests) == 1  # the Bash call of the first response never ran


# --- writing the capture --------------------------------------------------------------------------

def _write_fixture(claude_bin: str, out: Path) -> None:
    with FakeAnthropic() as fake, tempfile.TemporaryDirectory() as tmp:
        run = capture(claude_bin, fake, Path(tmp))
        base = f"/srv/ops/{SCENARIO}"

        def clean(value: str) -> str:  # the temporary folder, also as the CLI's project slug
            slug = tmp.replace("/", "-").replace(".", "-").replace("_", "-")
            return value.replace(tmp, base).replace(slug, base.replace("/", "-").replace("_", "-"))

        out.mkdir(parents=True, exist_ok=True)
        (out / "stdout.jsonl").write_text(clean(run.stdout), encoding="utf-8")
        (out / "stderr.txt").write_text(clean(run.stderr), encoding="utf-8")
        env = " ".join(f"{k}={v}" for k, v in {"HOME": f"{base}/home", "ANTHROPIC_BASE_URL": fake.url,
                                                "ANTHROPIC_API_KEY": "sk-test-dummy", **ENV_FLAGS}.items())
        (out / "cmd.txt").write_text(
            f"# scenario: {SCENARIO}   (fake API script: tests/realcli/test_budget.py capture())\n"
            f"# cwd: {base}/cwd (holding {SYSTEM_FILE}: {SYSTEM})\n# stdin: the prompt, a pipe then closed\n"
            f"cd {base}/cwd && printf '%s' {shlex.quote(PROMPT)} | env -i {env} {shlex.join(['claude', *run.argv[1:]])}\n"
            f"# exit code: {run.exit_code}\n# wall time: {run.wall_s:.2f}s\n", encoding="utf-8")
        lines = run.lines
        meta = {"exit_code": run.exit_code, "wall_s": round(run.wall_s, 2), "timeout_s": 60,
                "fake_script": "tests/realcli/test_budget.py", "stdout_lines": len(lines),
                "line_types": [f"{m['type']}/{m['subtype']}" if m.get("subtype") else m["type"] for m in lines],
                "result_subtype": run.result["subtype"], "result_is_error": run.result["is_error"],
                "has_structured_output": "structured_output" in run.result}
        (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}: exit {run.exit_code}, {len(lines)} lines, result {run.result['subtype']}")


if __name__ == "__main__":
    from tests.realcli.conftest import claude_install_dir

    _write_fixture(str(claude_install_dir() / "node_modules" / ".bin" / "claude"),
                   Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURE)
