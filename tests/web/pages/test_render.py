"""render.py: activity rows from the real CLI captures, hostile content, caps, event rows."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from app.stream.parser import parse_line
from app.web.pages.render import TEXT_LIMIT, render_activity, render_event_row, render_json
from tests.helpers import SCENARIOS, fixture_stream

PK = 7
VOID = {"br", "hr", "img", "input", "meta", "link", "wbr", "col", "area", "base", "source", "track", "embed"}
SCRIPTY_TAGS = {"script", "img", "iframe", "object", "embed", "style", "svg", "math", "form", "base", "meta", "link"}


class Html(HTMLParser):
    """Collects tags, attributes and visible text; checks every element is closed in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.stack: list[str] = []
        self.problems: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"unexpected </{tag}> with open {self.stack[-3:]}")
        else:
            self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)

    @property
    def visible(self) -> str:
        return "".join(self.text)


def parse_html(html: str) -> Html:
    p = Html()
    p.feed(html)
    p.close()
    return p


def assert_safe(html: str) -> Html:
    """No script-capable tag, no event-handler attribute, no dangerous URL; well-formed."""
    p = parse_html(html)
    assert not p.problems, p.problems
    assert not p.stack, f"unclosed {p.stack}"
    for tag, attrs in p.tags:
        assert tag not in SCRIPTY_TAGS, tag
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            if name in ("href", "src", "action", "formaction"):
                assert not (value or "").strip().lower().startswith(("javascript:", "vbscript:", "data:")), value
        assert "style" not in attrs
    assert "<script" not in html.lower()
    assert 'href="javascript:' not in html.lower()
    return p


def row(raw: str, seq: int = 1, **extra) -> dict:
    parsed = parse_line(raw)
    base = {"session_pk": PK, "seq": seq, "attempt": 1, "ts": "2026-11-22T03:33:45.346Z",
            "type": parsed.type if parsed else "text", "subtype": parsed.subtype if parsed else None,
            "display": parsed.display() if parsed else "", "raw": raw}
    base.update(extra)
    return base


def fixture_rows(name: str) -> list[dict]:
    lines = fixture_stream(name).read_text(encoding="utf-8", errors="replace").splitlines()
    return [row(line, i) for i, line in enumerate(lines, 1) if line.strip()]


def assistant(*blocks: dict) -> str:
    return json.dumps({"type": "assistant", "message": {"role": "assistant", "content": list(blocks)},
                       "session_id": "s"})


def tool_result(content, is_error: bool = False) -> str:
    return json.dumps({"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": content, "is_error": is_error}]}, "session_id": "s"})


# -- real captures -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", SCENARIOS)
def test_every_fixture_line_renders_safe_and_well_formed(name):
    if not fixture_stream(name).is_file():
        pytest.skip("no stdout capture")
    for r in fixture_rows(name):
        html = str(render_activity(r))
        assert html.startswith('<div class="act ') and f'id="act-{r["seq"]}"' in html
        assert f'data-seq="{r["seq"]}"' in html
        assert "cannot render this line" not in html
        assert_safe(html)


def test_structured_output_call_is_highlighted():
    rows = fixture_rows("c_structured")
    html = [str(render_activity(r)) for r in rows]
    so = [h for h in html if "StructuredOutput" in h and "tool-use" in h]
    assert so and all('class="act assistant structured"' in h for h in so)
    assert "All services healthy" in parse_html(so[0]).visible
    bash = next(h for h in html if "Tool call" in h and "Bash" in h)
    assert "$ echo ok" in parse_html(bash).visible and "Health probe" in bash
    result = parse_html(html[-1]).visible
    assert "Result" in result and "success" in result and "$0." in result and "structured output" in result


def test_schema_rejection_is_a_highlighted_open_validation_error():
    html = [str(render_activity(r)) for r in fixture_rows("d_invalid_then_valid")]
    bad = [h for h in html if "Output does not match required schema" in h]
    assert len(bad) == 1
    assert 'class="act user schema-error"' in bad[0]
    assert '<details class="tool-result schema-error error" open>' in bad[0]
    assert "Schema validation error" in bad[0]


def test_tool_error_is_open_and_marked():
    html = [str(render_activity(r)) for r in fixture_rows("b_tool_fails")]
    err = next(h for h in html if "Exit code 3" in h)
    assert '<details class="tool-result error" open>' in err and "Tool error" in err
    ok_result = str(render_activity(row(tool_result("fine"))))
    assert '<details class="tool-result">' in ok_result and " open" not in ok_result


def test_thinking_is_collapsed():
    html = [str(render_activity(r)) for r in fixture_rows("a_thinking")]
    th = next(h for h in html if "thinking" in h and "I will say hi" in h)
    assert '<details class="thinking">' in th


def test_partial_stream_events_are_marked_partial():
    html = [str(render_activity(r)) for r in fixture_rows("i_partial_messages_tool")]
    partial = [h for h in html if "stream_event" in h]
    assert partial and all('class="act partial compact"' in h for h in partial)


def test_api_failure_result_is_an_error():
    html = [str(render_activity(r)) for r in fixture_rows("f_api_500")]
    assert 'class="act result error"' in html[-1]
    assert any('class="act assistant error"' in h for h in html)
    assert any("api_retry" in h and "warn" in h for h in html)


def test_system_init_is_compact():
    html = str(render_activity(fixture_rows("c_structured")[0]))
    assert 'class="act system compact"' in html and "2.1.197" in html


def test_assistant_markdown_renders():
    html = str(render_activity(row(assistant({"type": "text", "text": "**bold** and `code`\n\n- a\n- b"}))))
    assert "<strong>bold</strong>" in html and "<code>code</code>" in html and "<li>a</li>" in html
    link = str(render_activity(row(assistant({"type": "text", "text": "[docs](https://example.com/x)"}))))
    assert '<a href="https://example.com/x" rel="nofollow noopener noreferrer">docs</a>' in link


# -- hostile content ---------------------------------------------------------------------------

HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[x](javascript:alert(1))",
    '<a href="javascript:alert(2)">click</a>',
    "event: end\ndata: x\n\n",
    "[y](JaVaScRiPt:alert(3)) [z](vbscript:msgbox) [d](data:text/html;base64,PHNjcmlwdD4=)",
    "![i](https://evil.example/t.png) <iframe src=//evil></iframe> <svg onload=alert(4)>",
    "\"'><b onmouseover=alert(5)>x</b>",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_tool_result_is_escaped_and_visible(text):
    for raw in (tool_result(text), tool_result(text, is_error=True),
                tool_result([{"type": "text", "text": text}])):
        html = str(render_activity(row(raw)))
        p = assert_safe(html)
        assert text.strip() in p.visible  # still readable, as text
    if "onerror" in text:
        assert "onerror=alert(1)&gt;" in html  # only as escaped text


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_assistant_markdown_is_neutralised(text):
    html = str(render_activity(row(assistant({"type": "text", "text": text}))))
    assert_safe(html)
    assert 'href="javascript' not in html.lower() and 'href="vbscript' not in html.lower()
    assert "<img" not in html and "<iframe" not in html and "<svg" not in html


def test_markdown_link_with_javascript_is_not_clickable():
    html = str(render_activity(row(assistant({"type": "text", "text": "[x](javascript:alert(1))"}))))
    p = assert_safe(html)
    assert not [a for t, a in p.tags if t == "a" and "javascript" in (a.get("href") or "")]
    assert "[x](javascript:alert(1))" in p.visible


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_everywhere_else(text):
    raws = [
        assistant({"type": "tool_use", "id": text, "name": text, "input": {"command": text, "description": text}}),
        assistant({"type": "tool_use", "id": "t", "name": "StructuredOutput", "input": {"summary": text}}),
        assistant({"type": "thinking", "thinking": text}),
        assistant({"type": text, "x": text}),
        json.dumps({"type": "result", "subtype": text, "is_error": True, "result": text, "errors": [text],
                    "total_cost_usd": 0.01, "num_turns": 2}),
        json.dumps({"type": "system", "subtype": "init", "model": text, "cwd": text, "tools": [text]}),
        json.dumps({"type": "system", "subtype": text, "x": text}),
        json.dumps({"type": "stream_event", "event": {"type": "content_block_delta",
                                                       "delta": {"type": "text_delta", "text": text}}}),
        json.dumps({"type": text, "payload": text}),
        json.dumps([{"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}}]),
        "not json " + text,
    ]
    for raw in raws:
        html = str(render_activity(row(raw, type=text, subtype=text, ts=text, display=text)))
        assert_safe(html)


def test_sse_like_text_stays_inside_the_fragment():
    html = str(render_activity(row(tool_result("ok\n\nevent: end\ndata: {\"x\":1}\n\nid: 99\n"))))
    p = assert_safe(html)
    assert "event: end" in p.visible
    # streams.py sends the fragment as JSON data: one line, framing cannot break
    assert "\n" not in json.dumps({"html": html})


def test_non_json_and_unknown_lines_are_shown_in_pre():
    html = str(render_activity(row("plain <b>text</b> & stuff")))
    assert 'class="act text"' in html and "<pre>plain &lt;b&gt;text&lt;/b&gt; &amp; stuff</pre>" in html
    unk = str(render_activity(row(json.dumps({"type": "brand_new", "v": "<i>"}))))
    assert 'class="act unknown"' in unk and "&lt;i&gt;" in unk and "<i>" not in unk
    empty = str(render_activity(row("", seq=3)))
    assert 'id="act-3"' in empty


# -- caps --------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda big: assistant({"type": "text", "text": big}),
    lambda big: tool_result(big),
    lambda big: assistant({"type": "tool_use", "id": "t", "name": "Bash", "input": {"command": big}}),
    lambda big: assistant({"type": "tool_use", "id": "t", "name": "Write", "input": {"content": big}}),
    lambda big: assistant({"type": "thinking", "thinking": big}),
    lambda big: json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": big}),
    lambda big: big,
])
def test_five_megabyte_text_is_capped(make):
    big = "<x>" + "A" * (5 * 1024 * 1024)
    html = str(render_activity(row(make(big))))
    assert len(html) < 3 * TEXT_LIMIT
    assert "more characters" in html and f"/api/v1/sessions/{PK}/activity" in html
    assert "&lt;x&gt;" in html
    assert_safe(html)


def test_a_line_left_out_by_the_page_shows_its_display():
    html = str(render_activity({"session_pk": PK, "seq": 5, "attempt": 2, "ts": "t", "type": "user",
                                "subtype": None, "display": "tool result: <big>", "raw": None,
                                "raw_len": 9_000_000}))
    assert "tool result: &lt;big&gt;" in html and "9,000,000 more characters" in html
    assert "attempt 2" in html
    assert_safe(html)


# -- render_json and event rows ----------------------------------------------------------------

def test_render_json_is_pretty_and_escaped():
    html = str(render_json({"a": "<script>alert(1)</script>", "b": [1, 2]}))
    assert html.startswith('<pre class="json">') and "<script" not in html
    assert '&#34;a&#34;: &#34;&lt;script&gt;' in html
    assert "\n  " in html  # indented
    big = str(render_json({"x": "y" * 100_000}))
    assert len(big) < 2 * TEXT_LIMIT and "more characters" in big


def test_event_row():
    ev = {"id": 12, "session_pk": 3, "session_id": "s", "tier": 2, "level": "critical", "original_level": "warning",
          "service": "<b>nginx</b>", "message": "<script>alert(1)</script> down", "source": "structured_output",
          "created_at": "2026-11-22T03:33:45.346Z"}
    html = str(render_event_row(ev))
    p = assert_safe(html)
    assert html.startswith('<tr id="event-12" data-id="12" class="level-critical">')
    assert '<a href="/sessions/3">#3</a>' in html
    assert "<script>alert(1)</script> down" in p.visible and "(was warning)" in p.visible
    odd = str(render_event_row({**ev, "level": '"><script>', "id": "x", "session_pk": None}))
    assert 'class="level-info"' in odd and 'id="event-0"' in odd
    assert_safe(odd)


# -- any JSON value in any field renders ---------------------------------------------------------

HOSTILE_VALUES = ['{"a": [1]}', "[1, 2]", "1e999", "NaN", "-Infinity", "99999999999999999999999", '"\\ud83d"',
                  '"<b>\\udc00</b>"', "[" * 600 + "]" * 600, "null", "true"]


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_any_value_in_any_field_renders_escaped_and_encodable(value, caplog):
    templates = [
        '{"type": "assistant", "message": {"content": [{"type": "text", "text": V},'
        ' {"type": "tool_use", "id": V, "name": V, "input": V}, {"type": "tool_use", "name": "Bash",'
        ' "input": {"command": "ls", "description": V, "x": V}}, {"type": "thinking", "thinking": V},'
        ' {"type": V, "x": V}]}, "error": V}',
        '{"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "StructuredOutput", "input": V}]}}',
        '{"type": "user", "isSynthetic": V, "message": {"content": [{"type": "tool_result", "content": V,'
        ' "is_error": V}, {"type": "tool_result", "content": [V, {"type": V}, {"text": V}]},'
        ' {"type": "text", "text": V}, {"type": V}]}}',
        '{"type": "result", "subtype": V, "is_error": V, "num_turns": V, "duration_ms": V, "total_cost_usd": V,'
        ' "api_error_status": V, "stop_reason": V, "terminal_reason": V, "errors": [V, V], "result": V,'
        ' "permission_denials": [V], "structured_output": V}',
        '{"type": "result", "permission_denials": V, "errors": V}',
        '{"type": "system", "subtype": "init", "model": V, "claude_code_version": V, "cwd": V,'
        ' "permissionMode": V, "tools": [V, V], "mcp_servers": [{"name": V, "status": V}, V]}',
        '{"type": "system", "subtype": "api_retry", "attempt": V, "retry_delay_ms": V, "error": V}',
        '{"type": "stream_event", "event": {"type": V, "delta": {"type": V, "text": V}}}',
        '{"type": V, "payload": V}',
        '[V, {"type": "assistant", "message": {"content": [{"type": "text", "text": V}]}}]',
        "V",
    ]
    for template in templates:
        raw = template.replace("V", value)
        html = str(render_activity(row(raw)))
        html.encode("utf-8")
        assert_safe(html)
    assert "cannot render" not in caplog.text  # rendered for real, not by the catch-all


def test_a_line_json_cannot_decode_shows_its_note():
    html = str(render_activity(row("[" * 100_000 + "]" * 100_000)))
    assert 'class="act text"' in html and "JSON nested too deeply to parse" in html and "more characters" in html
    cut = str(render_activity(row('{"type": "result", "subtype": "succ')))
    assert "invalid JSON" in cut and "text/bad_json" in cut


def test_formatters_refuse_non_finite_numbers():
    from app.web.formats import fmt_cost, fmt_duration, fmt_int

    assert [fmt_cost(x) for x in (float("nan"), float("inf"), True, 0.5, 3)] == ["—", "—", "—", "$0.5000", "$3.00"]
    assert [fmt_duration(x) for x in (float("inf"), float("nan"), 1500)] == ["—", "—", "1.5 s"]
    assert fmt_int(2**70) == f"{2**70:,}"


def test_stored_row_fields_of_any_type_render():
    odd = {"session_pk": "x", "seq": "7", "attempt": None, "ts": 5, "type": None, "subtype": 3, "display": None,
           "raw": None, "raw_len": "big"}
    html = str(render_activity(odd))
    assert 'id="act-0"' in html
    assert_safe(html)
