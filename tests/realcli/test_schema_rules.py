"""The schema rules of the pinned CLI still hold.

``scripts/capture-schema-rules.py`` recorded, per construct, what the real CLI 2.1.197 does with a
``--json-schema`` (offers the StructuredOutput tool verbatim, drops it silently, refuses to start…)
in tests/fixtures/claude-code/2.1.197/schema-rules/. ``app/output/preflight.py`` refuses schemas
from those captures. Here:

- the captures and the script's cases are the same set, with the same schemas;
- a probe is re-run against the real CLI for every (rule, verdict) pair the rules cite, plus the
  wire evidence and a baseline, and must observe exactly what was captured, so a CLI upgrade that
  changes a behaviour fails here (``TIEROPS_SCHEMA_RULES=all`` re-runs every case, ~1.5 min);
- every rule that says the CLI drops the tool cites a capture where the tool was dropped, and every
  capture case named in preflight.py's comments exists.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from app.output import preflight, schema_walk

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "capture-schema-rules.py"
CAPTURES = REPO / preflight.CAPTURES_DIR


def _load_script() -> ModuleType:
    name = "capture_schema_rules"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


capture = _load_script()


def _captures() -> dict[str, dict[str, Any]]:
    return capture.load_captures(CAPTURES)


def _live_cases() -> list[str]:
    """The baseline, then the first case of each (rule, verdict) pair and of each wire verdict."""
    if os.environ.get("TIEROPS_SCHEMA_RULES") == "all":
        return list(capture.CASES)
    groups = [rule.evidence for rule in preflight.RULES.values()] + [preflight.WIRE_EVIDENCE]
    chosen = ["baseline"]
    for evidence in groups:
        firsts: dict[str, str] = {}
        for case, verdict in evidence:
            firsts.setdefault(verdict, case)
        chosen += firsts.values()
    return list(dict.fromkeys(chosen))


# --------------------------------------------------------------------------- offline


def test_captures_are_the_scripts_cases():
    captures = _captures()
    assert sorted(captures) == sorted(capture.CASES)
    for name, case in capture.CASES.items():
        rec = captures[name]
        assert rec["case"] == name and rec["cli_version"] == capture.CLAUDE_VERSION == preflight.CLI_VERSION
        assert rec["construct"] == case.construct and rec["instance"] == case.instance
        if case.raw is not None:
            assert rec["schema_text"] == case.raw
        elif case.generator is not None:
            text = case.schema_text().encode("utf-8")
            assert (rec["schema_bytes"], rec["schema_sha256"]) == (len(text), hashlib.sha256(text).hexdigest())
        else:
            assert rec["schema"] == case.schema
    summary = json.loads((CAPTURES / "summary.json").read_text(encoding="utf-8"))
    assert summary["verdicts"] == {name: captures[name]["observed"]["verdict"] for name in capture.CASES}


def test_rules_that_say_the_cli_drops_the_tool_are_backed_by_a_capture():
    captures = _captures()
    for rule in preflight.RULES.values():
        for case, verdict in rule.evidence:
            assert captures[case]["observed"]["verdict"] == verdict, f"{rule.id}: {case} is not {verdict}"
        verdicts = {v for _, v in rule.evidence}
        if rule.id.endswith("-dropped-by-cli") or "drops" in rule.summary:
            assert "tool-dropped" in verdicts, f"{rule.id} says the CLI drops the tool; no capture shows it"
    for case, verdict in preflight.WIRE_EVIDENCE:
        assert captures[case]["observed"]["verdict"] == verdict
    assert captures["large-200k"]["observed"]["verdict"] == "exec-refused"
    assert ("large-200k", "exec-refused") in preflight.RULES["size-exec-limit"].evidence


def test_capture_cases_named_in_preflight_comments_exist():
    source = "".join(Path(m.__file__).read_text(encoding="utf-8") for m in (preflight, schema_walk))
    named = set()
    for m in re.finditer(r"captures? ((?:[a-z0-9]+(?:-[a-z0-9]+)+(?:,\s*|\s+and\s+|\)|:|;|\s)(?:#\s*)?)+)", source):
        named |= set(re.findall(r"[a-z0-9]+(?:-[a-z0-9]+)+", m.group(1)))
    named.discard("schema-rules")
    assert named, "preflight.py names no capture"
    assert named <= set(_captures()), sorted(named - set(_captures()))


# --------------------------------------------------------------------------- the real CLI


def test_the_cli_is_the_captured_version(claude_bin: str):
    assert capture.claude_version(claude_bin) == capture.CLAUDE_VERSION


@pytest.mark.parametrize("case", _live_cases())
def test_the_cli_still_does_what_was_captured(claude_bin: str, case: str):
    observed = capture.probe(capture.CASES[case], claude_bin)
    assert observed == _captures()[case]["observed"], (
        f"CLI behaviour changed for {case}: re-run scripts/capture-schema-rules.py --check, then review the rules "
        "in app/output/preflight.py that cite it")
