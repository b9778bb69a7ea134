"""HTML fragments for stream lines (activity rows) and events, shared by pages and SSE streams.

Why one module: the session page renders stored activity rows server-side and the live stream
sends the very same fragment for each new row (the browser inserts it with
``insertAdjacentHTML``), so both paths must produce identical, *fully escaped* HTML.

Trust rules: everything in a stream line comes from the model or from tools and is untrusted.
Text is escaped by :class:`markupsafe.Markup` formatting; the only HTML not built here from escaped parts
is markdown-it's output for assistant text, in its ``js-default`` preset (raw HTML off), with
images disabled (no remote loads from a transcript) and links limited to http(s)/mailto/relative.
Every piece of text is capped at :data:`TEXT_LIMIT` characters with a note pointing at the API.

Any field of a line may hold any JSON value: values are shown through the parser's
``as_text``/``json_safe`` (never ``str()`` of a value nested a thousand deep), and the fragment
itself is made encodable (lone surrogates from ``\ud83d`` escapes become U+FFFD), so rendering a
stored line never raises and never breaks the response's UTF-8.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from markdown_it import MarkdownIt
from markupsafe import Markup

from app.engine.mcp_policy import split_tool_name
from app.stream.parser import (
    ArrayLine,
    AssistantLine,
    ParsedLine,
    ResultLine,
    StreamEventLine,
    SystemLine,
    TextLine,
    UnknownLine,
    UserLine,
    parse_line,
)
from app.stream.values import as_text, clean_text, json_safe
from app.vocab import Level
from app.web.formats import fmt_cost, time_tag

log = logging.getLogger(__name__)

TEXT_LIMIT = 20_000
# Stream lines larger than this are not parsed for display: their one-line ``display`` is shown.
RAW_RENDER_LIMIT = 64_000_000
# The session page fetches lines larger than this as NULL raw (500 rows must fit in memory).
PAGE_RAW_LIMIT = 4_000_000
SCHEMA_ERROR_PREFIX = "Output does not match required schema"
_LEVELS = frozenset(Level)

_SAFE_SCHEME = re.compile(r"^(?:https?:|mailto:|[^:/?#]*(?:[/?#]|$))", re.IGNORECASE)


def _validate_link(url: str) -> bool:
    """Allow http(s), mailto and scheme-less (relative) links; refuse everything else."""
    url = url.strip()
    return bool(_SAFE_SCHEME.match(url)) and not re.match(r"^[\x00-\x20]*(?:javascript|vbscript|data|file):",
                                                          url, re.IGNORECASE)


def _make_markdown() -> MarkdownIt:
    md = MarkdownIt("js-default")  # html=False, linkify=False
    md.disable("image")
    md.validateLink = _validate_link  # type: ignore[method-assign]

    def link_open(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        tokens[idx].attrSet("rel", "nofollow noopener noreferrer")
        html: str = renderer.renderToken(tokens, idx, options, env)
        return html

    md.add_render_rule("link_open", link_open)
    return md


_MD = _make_markdown()


# -- small helpers ---------------------------------------------------------------------------

def _cap(text: str, limit: int = TEXT_LIMIT) -> tuple[str, int]:
    """``text`` cut at ``limit`` characters, and how many characters were left out."""
    if len(text) <= limit:
        return text, 0
    return text[:limit], len(text) - limit


def _more_note(left: int, session_pk: Any) -> Markup:
    if not left:
        return Markup("")
    if isinstance(session_pk, int):
        url = f"/api/v1/sessions/{session_pk}/activity"
        return Markup('<p class="more">… {:,} more characters (full line: <a href="{}">{}</a>)</p>').format(
            left, url, url)
    return Markup('<p class="more">… {:,} more characters</p>').format(left)


def _pre(text: str, session_pk: Any = None, cls: str = "") -> Markup:
    text, left = _cap(text)
    klass = Markup(' class="{}"').format(cls) if cls else Markup("")
    return Markup("<pre{}>{}</pre>{}").format(klass, text, _more_note(left, session_pk))


def _markdown(text: str, session_pk: Any = None) -> Markup:
    text, left = _cap(text)
    # markdown-it js-default output: raw HTML is escaped, unsafe links refused (see module doc).
    html = Markup(_MD.render(text))  # noqa: S704 (html=False: markdown-it escapes raw HTML itself)
    return Markup('<div class="md">') + html + Markup("</div>") + _more_note(left, session_pk)


def _dumps(value: Any) -> str:
    try:
        return json.dumps(json_safe(value), indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return as_text(value)


def _first_line(text: str, limit: int = 160) -> str:
    line = text.strip().split("\n", 1)[0][:limit + 1]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def render_json(value: Any, *, session_pk: int | None = None, cls: str = "json") -> Markup:
    """``value`` as pretty JSON in an escaped ``<pre>`` (capped like every other text)."""
    return _pre(_dumps(value), session_pk, cls)


def _text_of(content: Any) -> str:
    """A tool result's content as text: a string, or a list of content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict):
                if block.get("type") == "text" or isinstance(block.get("text"), str):
                    parts.append(_str(block.get("text")))
                else:
                    parts.append(f"({as_text(block.get('type', 'block'), 200)})")
            else:
                parts.append(as_text(block))
        return "\n".join(parts)
    if content is None:
        return ""
    return _dumps(content)


def _str(value: Any) -> str:
    """A field's value as text: a string as is, nothing for a missing one, JSON for the rest."""
    return "" if value is None else as_text(value)


# -- blocks ----------------------------------------------------------------------------------

def _tool_use(block: dict[str, Any], pk: Any) -> Markup:
    name = _str(block.get("name")) or "?"
    inp = block.get("input")
    tool_id = block.get("id")
    id_attr = Markup(' title="{}"').format(tool_id) if isinstance(tool_id, str) else Markup("")
    if name == "StructuredOutput":
        return Markup('<div class="tool-use structured"{}><div class="label">Structured output '
                      '<span class="tool-name">StructuredOutput</span></div>{}</div>').format(
            id_attr, render_json(inp, session_pk=pk))
    body: list[Markup] = []
    if isinstance(inp, dict) and isinstance(inp.get("command"), str):
        desc = inp.get("description")
        if isinstance(desc, str) and desc:
            body.append(Markup('<div class="tool-desc">{}</div>').format(_first_line(desc, 300)))
        body.append(_pre("$ " + inp["command"], pk, "cmd"))
        rest = {k: v for k, v in inp.items() if k not in ("command", "description")}
        if rest:
            body.append(render_json(rest, session_pk=pk, cls="json small"))
    else:
        body.append(render_json(inp, session_pk=pk))
    if (mcp := split_tool_name(name)) is not None:  # mcp__SERVER__TOOL: say which server answers
        return Markup('<div class="tool-use mcp"{}><div class="label">MCP tool call <span class="tool-name">{}</span> '
                      '<span class="muted small">(server {}, tool {})</span></div>{}</div>').format(
            id_attr, name, mcp[0], mcp[1], Markup("").join(body))
    return Markup('<div class="tool-use"{}><div class="label">Tool call <span class="tool-name">{}</span>'
                  '</div>{}</div>').format(id_attr, name, Markup("").join(body))


def _tool_result(block: dict[str, Any], pk: Any) -> Markup:
    text = _text_of(block.get("content"))
    is_error = block.get("is_error") is True
    schema = text.lstrip().startswith(SCHEMA_ERROR_PREFIX)
    if schema:
        classes, label = "tool-result schema-error error", "Schema validation error"
    elif is_error:
        classes, label = "tool-result error", "Tool error"
    else:
        classes, label = "tool-result", "Tool result"
    open_attr = Markup(" open") if (is_error or schema) else Markup("")
    preview = _first_line(text) if text.strip() else "(empty)"
    return Markup('<details class="{}"{}><summary><span class="label">{}</span> '
                  '<span class="preview">{}</span></summary>{}</details>').format(
        classes, open_attr, label, preview, _pre(text, pk))


def _thinking(block: dict[str, Any], pk: Any) -> Markup:
    if block.get("type") == "redacted_thinking":
        return Markup('<details class="thinking"><summary>Thinking (redacted)</summary></details>')
    text = _str(block.get("thinking"))
    return Markup('<details class="thinking"><summary>Thinking <span class="preview">{}</span></summary>'
                  '{}</details>').format(_first_line(text, 100), _pre(text, pk))


def _assistant(line: AssistantLine, pk: Any) -> tuple[str, Markup]:
    parts: list[Markup] = []
    classes = ["assistant"]
    if line.is_synthetic_error:
        classes.append("error")
        err = line.data.get("error")
        parts.append(Markup('<div class="label">API error{}</div>').format(
            Markup(": {}").format(as_text(err, 2_000)) if err else ""))
    for block in line.blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append(_markdown(_str(block.get("text")), pk))
        elif kind == "tool_use":
            if block.get("name") == "StructuredOutput":
                classes.append("structured")
            parts.append(_tool_use(block, pk))
        elif kind in ("thinking", "redacted_thinking"):
            classes.append("thinking-line")
            parts.append(_thinking(block, pk))
        else:
            parts.append(Markup('<div class="label">({})</div>').format(as_text(kind, 200)))
            parts.append(render_json(block, session_pk=pk, cls="json small"))
    return " ".join(classes), Markup("").join(parts)


def _user(line: UserLine, pk: Any) -> tuple[str, Markup]:
    parts: list[Markup] = []
    classes = ["user"]
    if line.data.get("isSynthetic") is True:
        parts.append(Markup('<div class="label">(synthetic)</div>'))
    for block in line.blocks:
        kind = block.get("type")
        if kind == "tool_result":
            text = _text_of(block.get("content"))
            if text.lstrip().startswith(SCHEMA_ERROR_PREFIX):
                classes.append("schema-error")
            elif block.get("is_error") is True:
                classes.append("error")
            parts.append(_tool_result(block, pk))
        elif kind == "text":
            parts.append(Markup('<div class="user-text"><div class="label">User</div>{}</div>').format(
                _pre(_str(block.get("text")), pk)))
        else:
            parts.append(Markup('<div class="label">({})</div>').format(as_text(kind, 200)))
            parts.append(render_json(block, session_pk=pk, cls="json small"))
    return " ".join(classes), Markup("").join(parts)


def _result(line: ResultLine, pk: Any) -> tuple[str, Markup]:
    is_error = line.is_error
    facts = [("subtype", line.subtype or "?"), ("is_error", as_text(line.data.get("is_error"), 200))]
    if line.api_error_status is not None:
        facts.append(("api status", str(line.api_error_status)))
    if line.num_turns is not None:
        facts.append(("turns", str(line.num_turns)))
    if line.duration_ms is not None:
        facts.append(("duration", f"{line.duration_ms / 1000:.1f} s"))
    facts.append(("cost", fmt_cost(line.total_cost_usd)))
    if line.stop_reason:
        facts.append(("stop", line.stop_reason))
    if line.terminal_reason:
        facts.append(("terminal", line.terminal_reason))
    facts.append(("structured output", "yes" if line.has_structured_output else "no"))
    if line.permission_denials:
        facts.append(("permission denials", str(len(line.permission_denials))))
    dl = Markup("").join(Markup("<span><b>{}</b> {}</span>").format(k, v) for k, v in facts)
    parts = [Markup('<div class="label">Result</div><div class="facts">{}</div>').format(dl)]
    if line.errors:
        items = Markup("").join(Markup("<li>{}</li>").format(_cap(e, 2_000)[0]) for e in line.errors[:50])
        parts.append(Markup('<ul class="errors">{}</ul>').format(items))
    text = line.result_text
    if text and line.has_structured_output and _same_json(text, line.data.get("structured_output")):
        # the CLI's result text is the structured output again; not shown twice
        parts.append(Markup('<p class="muted small result-is-output">Result text: the structured output, '
                            'as JSON (not repeated here).</p>'))
        text = ""
    if text:
        open_attr = Markup(" open") if is_error else Markup("")
        parts.append(Markup('<details class="result-text"{}><summary>Result text</summary>{}</details>').format(
            open_attr, _pre(text, pk)))
    if line.permission_denials:
        parts.append(Markup('<details><summary>Permission denials</summary>{}</details>').format(
            render_json(line.permission_denials, session_pk=pk)))
    return "result" + (" error" if is_error else ""), Markup("").join(parts)


def _same_json(text: str, value: Any) -> bool:
    """True when ``text`` is JSON for ``value`` (the CLI's result text repeating the output)."""
    if len(text) > RAW_RENDER_LIMIT:
        return False
    try:
        return bool(json.loads(text) == value)
    except (ValueError, RecursionError):
        return False


def _system(line: SystemLine, pk: Any) -> tuple[str, Markup]:
    sub = line.subtype or "?"
    d = line.data
    if sub == "init":
        tools = d.get("tools") if isinstance(d.get("tools"), list) else []
        mcp = d.get("mcp_servers") if isinstance(d.get("mcp_servers"), list) else []
        facts = [("model", as_text(d.get("model"), 2_000)), ("version", as_text(d.get("claude_code_version"), 2_000)),
                 ("cwd", as_text(d.get("cwd"), 2_000)), ("permission", as_text(d.get("permissionMode"), 2_000)),
                 ("tools", str(len(tools)))]
        if mcp:
            facts.append(("mcp", _cap(", ".join(f"{as_text(s.get('name'), 200)}:{as_text(s.get('status'), 200)}"
                                                for s in mcp if isinstance(s, dict)))[0]))
        body = Markup("").join(Markup("<span><b>{}</b> {}</span>").format(k, v) for k, v in facts)
        tools_list = Markup('<details><summary>tools</summary><div class="small">{}</div></details>').format(
            _cap(", ".join(as_text(t, 2_000) for t in tools))[0]) if tools else Markup("")
        return "system compact", Markup('<div class="facts">{}</div>{}').format(body, tools_list)
    cls = "system compact" + (" warn" if sub == "api_retry" else "")
    return cls, Markup('<span class="small">{}</span>').format(line.display())


def _body(parsed: ParsedLine | None, pk: Any) -> tuple[str, Markup]:
    if parsed is None:
        return "text", Markup('<span class="muted">(empty line)</span>')
    if isinstance(parsed, AssistantLine):
        return _assistant(parsed, pk)
    if isinstance(parsed, UserLine):
        return _user(parsed, pk)
    if isinstance(parsed, ResultLine):
        return _result(parsed, pk)
    if isinstance(parsed, SystemLine):
        return _system(parsed, pk)
    if isinstance(parsed, StreamEventLine):
        return "partial compact", Markup('<span class="small">{}</span>').format(parsed.display())
    if isinstance(parsed, ArrayLine):
        parts = []
        for item in parsed.items[:200]:
            cls, body = _body(item, pk)
            parts.append(Markup('<div class="act-item {}">{}</div>').format(cls, body))
        if len(parsed.items) > 200:
            parts.append(Markup('<p class="more">… {} more messages</p>').format(len(parsed.items) - 200))
        return "array", Markup("").join(parts)
    if isinstance(parsed, UnknownLine):
        return "unknown", _pre(_dumps(parsed.data), pk)
    if isinstance(parsed, TextLine):
        note = Markup('<div class="label">{}</div>').format(parsed.note) if parsed.note else Markup("")
        return "text", note + _pre(parsed.raw, pk)
    return "unknown", _pre(parsed.raw, pk)


def _label(row: Mapping[str, Any]) -> str:
    kind = _str(row.get("type")) or "?"
    sub = _str(row.get("subtype"))
    return f"{kind}/{sub}" if sub else kind


_FINDING_WORDS = (("events", "event", "events"), ("memories", "memory", "memories"),
                  ("cooldowns", "cooldown", "cooldowns"))


def finding_badges(badges: Mapping[str, Any] | None) -> Markup:
    """"2 events", "1 memory", "cooldown" badges for a line that produced findings
    (counts from :func:`app.web.pages.verdict.transcript_badges`); nothing for None or all zeros."""
    if not badges:
        return Markup("")
    parts = []
    for key, one, many in _FINDING_WORDS:
        n = badges.get(key) or 0
        if n > 0:
            text = one if key == "cooldowns" and n == 1 else f"{n} {one if n == 1 else many}"
            parts.append(Markup(' <a class="badge finding finding-{key}" href="#verdict" data-finding="{key}" '
                                'data-count="{n}" title="this line produced {n} {word} (routed)">{text}</a>').format(
                key=key, n=n, word=one if n == 1 else many, text=text))
    return Markup("").join(parts)


def guard_badges(decisions: Sequence[Mapping[str, Any]] | None) -> Markup:
    """"guard: denied (dry-run)" on a tool call's line, the reason as its title."""
    parts = [Markup(' <a class="badge guard guard-{d} {warn}" href="#guard" title="{reason}">guard: {word} ({rule})</a>').format(
        d=g["decision"], warn="warn" if g["decision"] == "deny" else "", reason=_str(g["reason"]),
        word="denied" if g["decision"] == "deny" else "allowed", rule=_str(g["rule"])) for g in decisions or ()]
    return Markup("").join(parts)


def render_activity(row: Mapping[str, Any], badges: Mapping[str, Any] | None = None,
                    guard: Sequence[Mapping[str, Any]] | None = None, cited: Markup | None = None) -> Markup:
    """One activity row (``session_pk, seq, attempt, ts, type, subtype, display, raw``) as HTML.

    ``raw`` may be None (the page leaves out lines over :data:`PAGE_RAW_LIMIT`): the stored
    one-line ``display`` is shown instead, with a pointer to the full line. ``badges`` (the
    session page only; the live stream sends lines before anything is routed): the findings this
    line produced; ``cited``: badges of the findings citing its tool call (``app/web/pages/evidence.py``).
    """
    seq = row.get("seq")
    seq = seq if isinstance(seq, int) else 0
    pk = row.get("session_pk")
    attempt = row.get("attempt") or 1
    raw = row.get("raw")
    try:
        if not isinstance(raw, str) or len(raw) > RAW_RENDER_LIMIT:
            size = row.get("raw_len")
            if not isinstance(size, int):
                size = len(raw) if isinstance(raw, str) else 0
            cls = "toolarge"
            body = Markup('<span class="small">{}</span>{}').format(
                _str(row.get("display")), _more_note(max(size, 1), pk))
        else:
            cls, body = _body(parse_line(raw), pk)
    except Exception as exc:  # a rendering bug must never lose the line: show it escaped
        log.exception("cannot render line %s of session %s", seq, pk)
        cls = "unknown"
        body = Markup('<p class="error">cannot render this line ({})</p>{}').format(
            type(exc).__name__, _pre(as_text(raw), pk))
    attempt_badge = (Markup(' <span class="badge">attempt {}</span>').format(attempt)
                     if isinstance(attempt, int) and attempt > 1 else Markup(""))
    ts = _str(row.get("ts"))
    html = Markup(
        '<div class="act {cls}" id="act-{seq}" data-seq="{seq}" data-attempt="{attempt}">'
        '<div class="act-meta"><a class="seq" href="#act-{seq}">#{seq}</a> '
        '<time datetime="{ts}" title="{ts}">{short_ts}</time> <span class="kind">{label}</span>{badge}{found}</div>'
        '<div class="act-body">{body}</div></div>'
    ).format(cls=cls, seq=seq, attempt=attempt, ts=ts, short_ts=ts[11:19] if len(ts) >= 19 else ts,
             label=_label(row), badge=attempt_badge, found=finding_badges(badges) + guard_badges(guard) + (cited or ""),
             body=body)
    return Markup(clean_text(html))  # noqa: S704 (already escaped above; only lone surrogates replaced)


def render_event_row(event: Mapping[str, Any], evidence: Markup | None = None) -> Markup:
    """One event (a row of :func:`app.store.findings.list_events`) as a ``<tr>`` for the events table;
    ``evidence`` (the session page): one more cell, its evidence status."""
    level = event.get("level") if event.get("level") in _LEVELS else Level.INFO
    eid = event.get("id") if isinstance(event.get("id"), int) else 0
    pk = event.get("session_pk")
    created = str(event.get("created_at") or "")
    original = event.get("original_level")
    was = (Markup(' <span class="muted small">(was {})</span>').format(original)
           if original and original != level else Markup(""))
    if isinstance(pk, int):
        tier = event.get("tier")
        session = Markup('<a href="/sessions/{pk}">#{pk}</a>{tier}').format(
            pk=pk, tier=Markup(' <span class="muted small">T{}</span>').format(tier) if tier else "")
    elif pk is None and "session_pk" in event:  # its session was pruned; the event is kept
        session = Markup('<span class="muted small" title="deleted by retention">session pruned</span>')
    else:
        session = Markup("")
    message, left = _cap(str(event.get("message") or ""), 2_000)
    more = Markup(" …") if left else Markup("")
    return Markup(
        '<tr id="event-{eid}" data-id="{eid}" class="level-{level}">'
        '<td class="nowrap">{created}</td>'
        '<td><span class="level level-{level}">{level}</span>{was}</td>'
        '<td>{service}</td><td class="message">{message}{more}</td><td class="nowrap">{session}</td>'
        '<td class="muted small">{source}</td>{evidence}</tr>'
    ).format(eid=eid, level=level, created=time_tag(created), was=was,
             service=event.get("service") or "—", message=message, more=more, session=session,
             source=event.get("source") or "",
             evidence=Markup("") if evidence is None else Markup('<td class="evidence-cell">{}</td>').format(evidence))
