"""``app/engine/evidence.py``: citations checked against the tool calls of real CLI captures.

The captures are tests/fixtures/claude-code/2.1.197 and tests/fixtures/evidence/cli_tool_outputs.jsonl
(one real CLI 2.1.197 session showing the CLI's cuts of long outputs; its docstring says how it was
made). Excerpts are taken here, from the text as the CLI printed it, with this file's own reading of
whitespace and ANSI: the module under test is never asked what to quote.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app.engine.evidence import QUOTE_MAX, ToolCall, check, finding_status, normalise, tool_calls_of
from app.redact import MASK, Redactor
from tests.helpers import FIXTURES

EVIDENCE = Path(__file__).resolve().parents[1] / "fixtures" / "evidence" / "cli_tool_outputs.jsonl"
CAPTURES = [*sorted(FIXTURES.glob("*/stdout.jsonl")), EVIDENCE]
NEVER_PRINTED = "this sentence was never printed by any tool 7f3a9c"
FAKE_ID = "toolu_01FakeFakeFakeFakeFakeFake"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
REDACT = Redactor()


def lines_of(path: Path, attempt: int = 1, first_seq: int = 1) -> list[tuple[int, int, str]]:
    return [(first_seq + i, attempt, raw) for i, raw in enumerate(path.read_text().split("\n")) if raw]


def squash(text: str) -> str:
    """This test's own reading: colours dropped, whitespace runs as one space, case folded."""
    return " ".join(_ANSI.sub("", text).split()).casefold()


def shown_text(text: str) -> str:
    """What a persisted output showed the model of the tool's own output: its 2 KB preview."""
    if text.startswith("<persisted-output>"):
        return text.split("Preview (first 2KB):\n", 1)[1].removesuffix("\n...\n</persisted-output>")
    return text


def excerpts(text: str) -> list[str]:
    """Real excerpts of a result: its start, a middle slice, its last line, and a stretch with
    colours or runs of spaces. None of them spans the CLI's truncation marker."""
    text = shown_text(text)
    mid = len(text) // 2
    lines = [line for line in text.splitlines() if line.strip()]
    found = [text[:40], text[max(mid - 20, 0):mid + 20], lines[-1] if lines else ""]
    odd = re.search(r".{0,15}(?:\x1b\[[0-9;]*m|  +|\t).{0,15}", text)
    if odd:
        found.append(odd.group(0))
    return [e for e in found if e.strip() and "characters truncated]" not in e]


def calls_in(path: Path) -> list[ToolCall]:
    return tool_calls_of(lines_of(path))


WITH_CALLS = [p for p in CAPTURES if calls_in(p)]


def test_the_captures_with_tool_calls_are_all_read():
    # 27 of the CLI captures hold a tool_use block, the array line of h_json_output_verbose included.
    names = {p.parent.name for p in WITH_CALLS if p != EVIDENCE}
    assert len(names) == 27
    assert {"h_json_output_verbose", "p_mcp_stdio_server", "b_tool_fails", "o_max_budget_usd"} <= names
    assert EVIDENCE in WITH_CALLS


@pytest.mark.parametrize("path", WITH_CALLS, ids=lambda p: p.parent.name if p != EVIDENCE else "evidence")
def test_real_excerpts_hold_and_others_do_not(path):
    calls = calls_in(path)
    checked = 0
    for call in calls:
        for quote in excerpts(call.result_text):
            checked += 1
            with_id = check({"quote": quote, "tool_use_id": call.tool_use_id}, calls, REDACT)
            assert with_id.holds and with_id.tool_use_id == call.tool_use_id, (quote, with_id)
            anywhere = check({"quote": quote, "tool_use_id": None}, calls, REDACT)
            assert anywhere.holds, (quote, anywhere)
            assert squash(quote) in squash(next(c for c in calls if c.tool_use_id == anywhere.tool_use_id)
                                            .result_text)
            for other in calls:
                if squash(quote) not in squash(shown_text(other.result_text)):
                    wrong = check({"quote": quote, "tool_use_id": other.tool_use_id}, calls, REDACT)
                    assert not wrong.holds
                    assert wrong.why == f"the quote is not in {other.tool_use_id}'s result"
            fake = check({"quote": quote, "tool_use_id": FAKE_ID}, calls, REDACT)
            assert (fake.holds, fake.why) == (False, f"no tool call {FAKE_ID} in this session")
    never = check({"quote": NEVER_PRINTED}, calls, REDACT)
    assert (never.holds, never.why) == (False, "the quote is not in any tool result of this session")
    assert checked or all(not c.result_text for c in calls)


def test_calls_are_paired_with_their_results_by_id():
    calls = calls_in(EVIDENCE)
    assert [c.name for c in calls] == ["Bash", "Bash", "Bash", "Bash", "Read", "Bash"]
    long_out, coloured, failing, _written, read, config = calls
    # two calls in one message; the CLI answered the second first
    assert long_out.seq == coloured.seq - 1 and coloured.result_seq < long_out.result_seq
    assert long_out.input_text == "seq 1 7000" and failing.input_text == "seq 1 30000 >&2; exit 3"
    assert json.loads(read.input_text) == {"file_path": read.input_text.split('"')[3]}
    assert " " not in read.input_text.split(":", 1)[0]  # compact JSON
    assert failing.is_error and not coloured.is_error and not read.is_error
    assert failing.result_text.startswith("Exit code 3\n1\n2\n")
    assert config.result_text == "db_password=correcthorsebatterystaple host=db-1"
    assert all(c.attempt == 1 and c.result_seq and c.result_seq > c.seq for c in calls)


def test_error_results_are_results():
    calls = calls_in(FIXTURES / "b_tool_fails" / "stdout.jsonl")
    assert calls[0].is_error and calls[0].result_text == "Exit code 3\nto-stdout\nto-stderr"
    assert check({"quote": "to-stderr", "tool_use_id": calls[0].tool_use_id}, calls, REDACT).holds
    mcp = calls_in(FIXTURES / "p_mcp_server_failed" / "stdout.jsonl")[0]
    assert mcp.is_error and check({"quote": "No such tool available"}, [mcp], REDACT).holds


def test_a_call_without_a_result_has_none():
    # the run hit its budget after the second call was made and before it ran
    calls = calls_in(FIXTURES / "o_max_budget_usd" / "stdout.jsonl")
    assert [(c.input_text, c.result_text, c.result_seq) for c in calls][1] == ("echo two", "", None)
    assert not check({"quote": "two", "tool_use_id": calls[1].tool_use_id}, calls, REDACT).holds


def test_a_quote_across_a_truncation_marker_does_not_hold():
    calls = calls_in(EVIDENCE)
    failing, long_out = calls[2], calls[0]
    cut = {"tool_use_id": failing.tool_use_id}
    # the CLI kept ~5,000 characters each side of "... [20012 characters truncated] ..."
    assert "1219\n\n\n... [20012 characters truncated] ...\n\n22\n5223" in failing.result_text
    assert check({**cut, "quote": "1217 1218 1219"}, calls, REDACT).holds
    assert check({**cut, "quote": "22\n5223\n5224"}, calls, REDACT).holds
    assert check({**cut, "quote": failing.result_text[:QUOTE_MAX]}, calls, REDACT).holds  # the cap is inclusive
    for spanning in ("1219 22 5223", "1219\n\n\n... [20012 characters truncated] ...\n\n22",
                     "... [20012 characters truncated] ...", "1219 1220"):
        assert not check({**cut, "quote": spanning}, calls, REDACT).holds, spanning
    # over 30,000 characters: the model was shown a 2 KB preview; the rest is not evidence here
    assert long_out.result_text.startswith("<persisted-output>\nOutput too large (33.1KB).")
    assert check({"quote": "525\n526\n527", "tool_use_id": long_out.tool_use_id}, calls, REDACT).holds
    for unseen in ("5000 5001 5002", "6999 7000", "527 ...", "527 ... </persisted-output>"):
        assert not check({"quote": unseen, "tool_use_id": long_out.tool_use_id}, calls, REDACT).holds, unseen


def test_whitespace_ansi_and_case_are_normalised():
    calls = calls_in(EVIDENCE)
    coloured = calls[1]
    assert coloured.result_text == "status:  \x1b[31mFAILED\x1b[0m   (exit 1)\n\tunit nginx.service"
    for quote in ("status: FAILED (exit 1) unit nginx.service", "status:  \x1b[31mFAILED", "FAILED\n(exit 1)",
                  "  status: failed (EXIT 1)  ", "\x1b]0;title\x07FAILED (exit"):
        found = check({"quote": quote}, calls, REDACT)
        assert found.holds and found.tool_use_id == coloured.tool_use_id, quote
    assert normalise("\x1b[1;31m a \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\n\n\tb\x9b0m ") == "a link b"
    assert normalise("A  b") == "A b"  # case kept; check() also tries case-folded


def test_read_results_match_without_their_line_numbers():
    calls = calls_in(EVIDENCE)
    read = calls[4]
    assert read.result_text.startswith("1\tfilesystem   use%\n2\t/dev/sda1    91%\n")
    for quote in ("/dev/sda1 91%", "filesystem use%\n/dev/sda1 91%", "2\t/dev/sda1"):
        assert check({"quote": quote, "tool_use_id": read.tool_use_id}, calls, REDACT).holds, quote
    assert not check({"quote": "91% /dev/sdb1 12% 4", "tool_use_id": read.tool_use_id}, calls, REDACT).holds


def test_a_quote_with_the_secret_the_model_saw_matches_the_redacted_record():
    # stored as the recorder stores it: each raw line redacted
    stored = [(seq, attempt, REDACT(raw)) for seq, attempt, raw in lines_of(EVIDENCE)]
    calls = tool_calls_of(stored)
    config = calls[5]
    assert config.result_text == f"db_password={MASK} host=db-1"
    quote = {"quote": "db_password=correcthorsebatterystaple host=db-1", "tool_use_id": config.tool_use_id}
    assert check(quote, calls, REDACT).holds
    assert not check(quote, calls, lambda text: text).holds  # without the redactor it could not match
    # an exact secret from the environment, quoted bare
    secret = "s3cr3t-Value-0042"
    env_redact = Redactor([secret])
    stored = [(1, 1, _assistant("toolu_e1", "Bash", {"command": "cat /etc/app.env"})),
              (2, 1, env_redact(_user("toolu_e1", f"APP_SECRET_VALUE {secret} loaded")))]
    calls = tool_calls_of(stored)
    assert MASK in calls[0].result_text and secret not in calls[0].result_text
    assert check({"quote": f"{secret} loaded", "tool_use_id": "toolu_e1"}, calls, env_redact).holds


@pytest.mark.parametrize(("citation", "why"), [
    ({"quote": ""}, "empty quote"),
    ({"quote": " \n\t "}, "empty quote"),
    ({"quote": "\x1b[0m"}, "empty quote"),
    ({"quote": "x" * (QUOTE_MAX + 1)}, f"quote over {QUOTE_MAX:,} characters"),
    ({"quote": "ok" * 600_000}, f"quote over {QUOTE_MAX:,} characters"),
    ({"quote": ".*"}, "the quote is not in any tool result of this session"),
    ({"quote": "(exit 1"}, None),  # regex characters are plain text
    ({"quote": "[0-9]+"}, "the quote is not in any tool result of this session"),
    ({"quote": "written\x00"}, "the quote is not in any tool result of this session"),
    ({"quote": "written", "tool_use_id": "toolu_01ChfvAnotherSessionsCall"},
     "no tool call toolu_01ChfvAnotherSessionsCall in this session"),
    ({"quote": "written", "tool_use_id": "x\n' OR 1=1 --"}, 'no tool call "x\\n\' OR 1=1 --" in this session'),
    ({"quote": "written", "tool_use_id": ""}, 'no tool call "" in this session'),
    ({"quote": None}, "the quote is not text"),
    ({"quote": ["written"]}, "the quote is not text"),
    ({}, "the quote is not text"),
    ({"quote": "written", "tool_use_id": 7}, "the tool_use_id is not text"),
])
def test_hostile_quotes(citation, why):
    result = check(citation, calls_in(EVIDENCE), REDACT)
    assert (result.holds, result.why) == (why is None, why)


def test_content_part_arrays_keep_their_text_and_skip_images():
    parts = [{"type": "text", "text": "disk /var 91% used"}, {"type": "image", "source": {"data": "iVBORw0KGgoAAAA"}},
             {"type": "text", "text": "inodes 3% used"}, {"type": "mystery"}, 17]
    calls = tool_calls_of([(1, 1, _assistant("toolu_p1", "mcp__ops__disk", {"host": "web-1"})),
                           (2, 1, _user("toolu_p1", parts, is_error=True))])
    assert calls[0].result_text == "disk /var 91% used\ninodes 3% used" and calls[0].is_error
    assert calls[0].input_text == '{"host":"web-1"}'
    assert check({"quote": "91% used inodes 3%"}, calls, REDACT).holds
    assert not check({"quote": "iVBORw0KGgo"}, calls, REDACT).holds


def test_a_result_without_text_falls_back_to_the_lines_tool_use_result():
    line = json.loads(_user("toolu_s1", []))
    line["tool_use_result"] = {"stdout": "api: active", "stderr": "warning: slow", "interrupted": False}
    calls = tool_calls_of([(1, 1, _assistant("toolu_s1", "Bash", {"command": "systemctl is-active api"})),
                           (2, 1, json.dumps(line))])
    assert calls[0].result_text == "api: active\nwarning: slow"


def test_unreadable_lines_are_skipped_and_the_rest_still_read():
    good = lines_of(FIXTURES / "c_structured" / "stdout.jsonl")
    junk = ["not json", "[1, 2", "[" * 100_000 + "]" * 100_000, "null", "[]", '"text"',
            '{"type":"assistant","message":{"content":"x"}}', '{"type":"assistant","message":[1]}',
            '{"type":"assistant","message":{"content":[{"type":"tool_use","id":5,"name":"Bash"}, 3]}}',
            '{"type":"user","message":{"content":[{"type":"tool_result"}, {"type":"tool_result","tool_use_id":[1]}]}}',
            '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_nobody","content":"x"}]}}',
            _assistant("toolu_odd", "Bash", {"command": ["rm", "-rf"]}), "\ud800"]
    mixed = [(100 + i, 1, raw) for i, raw in enumerate(junk)] + good
    calls = tool_calls_of(mixed)
    assert [c.name for c in calls] == ["Bash", "Bash", "StructuredOutput"]
    assert calls[0].input_text == '{"command":["rm","-rf"]}' and calls[0].result_text == ""
    assert calls[1].result_text == "ok"


def test_every_attempt_of_a_resumed_session_counts():
    first = lines_of(FIXTURES / "c_structured" / "stdout.jsonl")
    second = lines_of(FIXTURES / "e_resume" / "stdout.jsonl", attempt=2, first_seq=len(first) + 1)
    calls = tool_calls_of(first + second)
    assert [(c.name, c.attempt) for c in calls] == [("Bash", 1), ("StructuredOutput", 1), ("StructuredOutput", 2)]
    assert check({"quote": "ok", "tool_use_id": calls[0].tool_use_id}, calls, REDACT).holds


def test_finding_status():
    calls = calls_in(EVIDENCE)
    assert finding_status([], calls, REDACT) == ("uncited", [])
    assert finding_status(None, calls, REDACT) == ("uncited", [])
    status, results = finding_status([{"quote": "status: FAILED"}, {"quote": "/dev/sda1 91%"}], calls, REDACT)
    assert status == "verified" and [r.tool_use_id for r in results] == [calls[1].tool_use_id, calls[4].tool_use_id]
    status, results = finding_status([{"quote": "status: FAILED"}, {"quote": NEVER_PRINTED}, "text"], calls, REDACT)
    assert status == "unsupported" and [r.holds for r in results] == [True, False, False]
    assert results[2].why == "the citation is not an object"
    # an action cites the call's input (the command), not its output
    failing = calls[2].tool_use_id
    status, results = finding_status([{"quote": "seq 1 30000 >&2", "tool_use_id": failing}], calls, REDACT,
                                     action=True)
    assert status == "verified"
    assert not check({"quote": "seq 1 30000 >&2"}, calls, REDACT).holds
    wrong = check({"quote": "Exit code 3", "tool_use_id": failing}, calls, REDACT, action=True)
    assert wrong.why == f"the quote is not in {failing}'s input"
    assert check({"quote": NEVER_PRINTED}, calls, REDACT, action=True).why == (
        "the quote is not in any tool input of this session")


def _assistant(tool_use_id: str, name: str, tool_input: object) -> str:
    block = {"type": "tool_use", "id": tool_use_id, "name": name, "input": tool_input}
    return json.dumps({"type": "assistant", "message": {"role": "assistant", "content": [block]}})


def _user(tool_use_id: str, content: object, *, is_error: bool = False) -> str:
    block = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}
    return json.dumps({"type": "user", "message": {"role": "user", "content": [block]}})
