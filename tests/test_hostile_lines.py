"""One bad line never costs more than itself, proved with property-based tests.

Every line type the real CLI printed (all captures in ``tests.helpers.FIXTURES``) is taken as a
template; hypothesis substitutes arbitrary JSON values into its field paths, the hostile ones
included on purpose: numbers where lists are expected, objects where strings are expected,
integers beyond 64 bits, ``1e999``, ``NaN``/``Infinity``, lone UTF-16 surrogate escapes (a JS
string cut mid-emoji) and nesting deeper than the recursion limit. The substituted value is
spliced into the line as JSON *text*, so values ``json.dumps`` cannot even produce (``1e999``,
100,000 brackets) reach the parser exactly as a CLI could print them.

Asserted, for every example: the parser never raises and keeps ``raw`` as printed; what it
extracts can be stored and encoded; a real ``SessionRecorder`` over a real database never aborts
the session and stores every line; the stored rows render and serialise as the API sends them
(Starlette's ``JSONResponse``: ``allow_nan=False``, UTF-8); the session report holds no
``NaN``/``Infinity``. Derandomized and bounded: the module runs in well under 30 s.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.responses import JSONResponse

from app.engine.recorder import RecorderOptions, SessionRecorder
from app.output.handoff import HandoffError, parse_handoff
from app.output.validate import OutputValidator
from app.store import activity, attempts, sessions
from app.store.db import Database
from app.stream.parser import ArrayLine, ResultLine, SystemLine, TextLine, parse_line
from app.stream.values import INT64_MAX, INT64_MIN, json_safe
from app.web.pages.render import render_activity
from tests.helpers import FIXTURES

# -- the templates: one line per (type, subtype) the real CLI printed ---------------------------


def _captured_lines() -> Iterator[tuple[str, Any]]:
    for stream in sorted(FIXTURES.glob("*/stdout.jsonl")):
        for text in stream.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                yield stream.parent.name, json.loads(text)
            except ValueError:
                continue


def _kind(obj: Any) -> tuple[str, ...]:
    if isinstance(obj, list):
        return ("array",)
    if not isinstance(obj, dict):
        return ("scalar",)
    kind = (str(obj.get("type")), str(obj.get("subtype")))
    if obj.get("type") in ("assistant", "user"):  # one block per line: the block type matters too
        content = (obj.get("message") or {}).get("content")
        if isinstance(content, list) and content and isinstance(content[0], dict):
            kind += (str(content[0].get("type")), str(content[0].get("name")))
    return kind


def _templates() -> list[Any]:
    seen: dict[tuple[str, ...], Any] = {}
    for _, obj in _captured_lines():
        if len(json.dumps(obj)) < 200_000:  # the line type matters, not its size
            seen.setdefault(_kind(obj), obj)
    return [seen[k] for k in sorted(seen)]


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every field path of a decoded line (dict keys, list indexes), the root's children first."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj[:20]):
            yield (*prefix, i)
            yield from _paths(value, (*prefix, i))


TEMPLATES = _templates()
TEMPLATE_PATHS = [list(_paths(t)) for t in TEMPLATES]
SCENARIO_STREAMS = {
    stream.parent.name: [line for line in stream.read_text(encoding="utf-8").splitlines() if line.strip()]
    for stream in sorted(FIXTURES.glob("*/stdout.jsonl"))
    if 0 < stream.stat().st_size < 2_000_000
}


def test_the_templates_cover_every_captured_line_type():
    kinds = {_kind(t)[0] for t in TEMPLATES}
    assert {"system", "assistant", "user", "result", "stream_event", "array"} <= kinds, kinds
    assert len(TEMPLATES) >= 15 and all(TEMPLATE_PATHS), len(TEMPLATES)


# -- hostile values, as JSON text --------------------------------------------------------------

DEEP = 100_000  # far beyond any recursion limit
HOSTILE = [
    "NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1e-999", "99999999999999999999999",
    str(INT64_MAX + 1), str(INT64_MIN - 1), "-0", "1" + "0" * 400,
    '"\\ud83d"', '"cut mid-emoji \\ud83d"', '"\\udc00\\ud83d"', '["\\ud83d", {"\\udfff": "\\ud800"}]',
    '{"\\ud83d": 1}', '"\\u0000"', '""', "null", "true", "false", "0", "[]", "{}", "[[]]",
    "[" * DEEP + "]" * DEEP,
    '{"a":' * 5_000 + "1" + "}" * 5_000,
    "[" * 990 + "]" * 990,  # decodes or not depending on the stack depth at json.loads
    '{"a":' * 985 + "[]" + "}" * 985,
    '[{"type": "text", "text": ' + "[" * 960 + "]" * 960 + "}]",
    '"<script>alert(1)</script>"', '"[EVENT:critical:web-1] \\ud83d down"', '"[MEMORY:disk:db] \\udfff"',
    '{"type": "result", "total_cost_usd": 1e999}', '{"needed": true, "reason": NaN}',
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=2**63 - 5, max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
fragments = st.one_of(
    st.sampled_from(HOSTILE),
    json_values.map(lambda v: json.dumps(v)),  # NaN and Infinity included: json.dumps writes them
    st.sampled_from(HOSTILE).map(lambda h: f"[{h}, {h}]"),
    st.sampled_from(HOSTILE).map(lambda h: '{"text": ' + h + ', "type": ' + h + "}"),
)


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> bool:
    for step in path[:-1]:
        try:
            obj = obj[step]
        except (KeyError, IndexError, TypeError):
            return False
    if not isinstance(obj, dict | list):
        return False
    try:
        obj[path[-1]] = value
    except (IndexError, TypeError):
        return False
    return True


def _splice(template: Any, subs: list[tuple[tuple[Any, ...], str]]) -> str:
    """The template as one printed line, each path's value replaced by a JSON text fragment."""
    obj = copy.deepcopy(template)
    placed: dict[str, str] = {}
    for i, (path, fragment) in enumerate(subs):
        if not path:
            return fragment
        marker = f"@@HOSTILE{i}@@"
        if _set(obj, path, marker):
            placed[json.dumps(marker)] = fragment
    line = json.dumps(obj, ensure_ascii=False)
    for marker, fragment in placed.items():
        line = line.replace(marker, fragment, 1)
    return line


@st.composite
def hostile_line(draw: st.DrawFn, template_index: int | None = None) -> str:
    i = draw(st.integers(0, len(TEMPLATES) - 1)) if template_index is None else template_index
    paths = TEMPLATE_PATHS[i]
    chosen = draw(st.lists(st.sampled_from(paths), min_size=1, max_size=3))
    if draw(st.integers(0, 40)) == 0:
        chosen = [()]  # now and then the whole line is the hostile value
    return _splice(TEMPLATES[i], [(p, draw(fragments)) for p in chosen])


# -- what every parsed line must satisfy ----------------------------------------------------------


def _storable(value: Any) -> None:
    """What SQLite binding and the API's JSON need: encodable text, 64-bit integers, finite floats."""
    if isinstance(value, str):
        value.encode("utf-8")
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, int):
        assert INT64_MIN <= value <= INT64_MAX, value
    elif isinstance(value, float):
        assert math.isfinite(value), value
    else:
        json.dumps(value, allow_nan=False).encode("utf-8")


def _row(parsed: Any, seq: int = 1) -> dict[str, Any]:
    return {"session_pk": 1, "seq": seq, "attempt": 1, "ts": "2026-01-01T00:00:00.000Z", "type": parsed.type,
            "subtype": parsed.subtype, "display": parsed.display(), "raw": parsed.raw}


def check_line(line: str) -> None:
    for given_as in (line, line.encode("utf-8")):
        parsed = parse_line(given_as)
        assert parsed is not None
        assert parsed.raw == line  # kept exactly as printed
        for value in (parsed.type, parsed.subtype, parsed.display(), parsed.session_id):
            _storable(value)
        if isinstance(parsed, TextLine) and parsed.note:
            assert parsed.subtype in ("too_deep", "bad_json", "not_utf8")
    items = parsed.items if isinstance(parsed, ArrayLine) else [parsed]
    for item in items:
        if isinstance(item, ResultLine):
            for value in (item.api_error_status, item.num_turns, item.duration_ms, item.duration_api_ms,
                          item.total_cost_usd, item.result_text, item.stop_reason, item.terminal_reason,
                          item.usage, item.model_usage, item.permission_denials, item.errors,
                          item.structured_output, item.subtype, item.is_error):
                _storable(value)
        if isinstance(item, SystemLine):
            for value in (item.model, item.cli_version, item.cwd):
                assert value is None or isinstance(value, str)
                _storable(value)
        if hasattr(item, "texts"):
            for text in item.texts():
                _storable(text)
        _storable(json_safe(item.data))
    html = str(render_activity(_row(parsed)))
    html.encode("utf-8")
    json.dumps({"html": html}, allow_nan=False)


PARSER_SETTINGS = settings(max_examples=1500, derandomize=True, deadline=None, database=None,
                           suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@PARSER_SETTINGS
@given(line=hostile_line())
def test_any_value_in_any_field_parses_stores_and_renders(line):
    check_line(line)


@pytest.mark.parametrize("index", range(len(TEMPLATES)))
def test_every_field_of_every_line_type_takes_every_hostile_value(index):
    """Exhaustive over the fixed hostile values: each one at each field path of each line type."""
    for path in TEMPLATE_PATHS[index][:60]:
        for fragment in HOSTILE:
            if fragment.startswith(("[" * 100, '{"a":' * 100)) and len(path) > 2:
                continue  # the deep values at the top levels are enough (and keep this test fast)
            check_line(_splice(TEMPLATES[index], [(path, fragment)]))


def test_the_hostile_values_are_kept_safe_where_it_matters():
    deep = parse_line("[" * DEEP + "]" * DEEP)
    assert isinstance(deep, TextLine) and deep.subtype == "too_deep" and "nested too deeply" in deep.display()
    result = parse_line('{"type": "result", "subtype": "success", "num_turns": 99999999999999999999999,'
                        ' "total_cost_usd": 1e999, "duration_ms": NaN, "usage": {"input_tokens": Infinity,'
                        ' "output_tokens": 18446744073709551616}, "result": "cut \\ud83d",'
                        ' "errors": [{"e": -Infinity}], "structured_output": {"x": [NaN, "\\udc00"]}}')
    assert isinstance(result, ResultLine)
    assert (result.num_turns, result.total_cost_usd, result.duration_ms) == (None, None, None)
    assert result.usage == {"input_tokens": None, "output_tokens": None}
    assert result.result_text == "cut \ufffd" and result.structured_output == {"x": [None, "\ufffd"]}
    assert result.errors == ['{"e":null}']
    bad = parse_line('{"type": "assistant", "message": {"content": [1, 2')
    assert isinstance(bad, TextLine) and bad.subtype == "bad_json" and bad.display().startswith("(invalid JSON:")
    assert parse_line("plain text").subtype is None  # plain text needs no note


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(fragment=fragments, key=st.sampled_from(["needed", "reason", "context", "failed_checks", "escalation"]))
def test_a_hostile_handoff_is_a_problem_or_storable(fragment, key):
    doc = {"needed": True, "reason": "r", "context": "c", "failed_checks": ["a"]}
    raw = json.dumps(doc).replace(json.dumps(doc[key]) if key in doc else "@@", fragment, 1)
    if key == "escalation":
        raw = '{"escalation": ' + fragment + ', "needed": true}'
    try:
        handoff = parse_handoff(raw)
    except HandoffError:
        return
    for value in (handoff.reason, handoff.context, *handoff.failed_checks, handoff.raw):
        _storable(value)


# -- through a real recorder and database -------------------------------------------------------

VALIDATOR = OutputValidator.from_file()


async def _record(lines: list[str], db_path: Path) -> dict[str, Any]:
    db = await Database.open(db_path)
    try:
        rec = await SessionRecorder.begin(db, VALIDATOR, RecorderOptions())
        for line in lines:
            await rec.feed(line)
        report = await rec.finalize()
        pk = rec.session_pk
        stored = await activity.count_lines(db, pk)
        assert stored == len(lines), (stored, len(lines))  # every line, none lost, none added
        # What the API and the pages send: Starlette renders JSON with allow_nan=False, as UTF-8.
        JSONResponse(await sessions.get_session(db, pk))
        JSONResponse(await attempts.list_attempts(db, pk, with_output=True))
        rows = await activity.lines_after(db, pk, 0, len(lines) + 10)
        JSONResponse(rows)
        for row in rows:
            str(render_activity(row)).encode("utf-8")
        return dict(report)
    finally:
        await db.close()


@st.composite
def hostile_session(draw: st.DrawFn) -> list[str]:
    """A real capture with a few of its lines made hostile (and now and then an extra line)."""
    name = draw(st.sampled_from(sorted(SCENARIO_STREAMS)))
    original = SCENARIO_STREAMS[name]
    lines = list(original)
    for _ in range(draw(st.integers(1, 4))):
        index = draw(st.integers(0, len(lines) - 1))
        try:
            template = json.loads(original[index])
        except ValueError:
            continue
        paths = list(_paths(template))
        if paths:
            chosen = draw(st.lists(st.sampled_from(paths), min_size=1, max_size=3))
            lines[index] = _splice(template, [(p, draw(fragments)) for p in chosen])
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), draw(hostile_line()))
    return lines


@settings(max_examples=80, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(lines=hostile_session())
def test_a_session_of_hostile_lines_is_recorded_whole(lines):
    with tempfile.TemporaryDirectory() as tmp:
        report = asyncio.run(_record(lines, Path(tmp) / "t.db"))
    assert report["activity_count"] == len(lines)
    json.dumps(report, allow_nan=False).encode("utf-8")  # `tierops ingest --json`: no NaN, no Infinity


RECORDER_FRAGMENTS = ['{"x": [1]}', "[1, 2]", "99999999999999999999999", "1e999", "NaN", '"\\ud83d"',
                      "[" * DEEP + "]" * DEEP, '{"a":' * 985 + "[]" + "}" * 985]


def test_every_field_of_every_line_type_through_the_recorder(tmp_path):
    """Exhaustive over line types, top-level fields and the worst values: one session per (line
    type, value), holding the line once per field path with that field replaced."""

    async def run() -> int:
        db = await Database.open(tmp_path / "t.db")
        sessions_run = 0
        try:
            for template, paths in zip(TEMPLATES, TEMPLATE_PATHS, strict=True):
                shallow = sorted((p for p in paths if len(p) <= 3), key=len)[:60]
                for fragment in RECORDER_FRAGMENTS:
                    lines = [_splice(template, [(p, fragment)]) for p in shallow]
                    rec = await SessionRecorder.begin(db, VALIDATOR, RecorderOptions())
                    for line in lines:
                        await rec.feed(line)
                    report = await rec.finalize()
                    assert report["activity_count"] == len(lines)
                    json.dumps(report, allow_nan=False).encode("utf-8")
                    JSONResponse(await sessions.get_session(db, rec.session_pk))
                    sessions_run += 1
        finally:
            await db.close()
        return sessions_run

    assert asyncio.run(run()) == len(TEMPLATES) * len(RECORDER_FRAGMENTS)
