"""How a finding's evidence shows on the pages: its status next to it, a link to the transcript line
of the tool call it was found in, and on that line a badge back to each finding that cites it.

The statuses and checked citations are stored when the session is routed
(``app/engine/evidence_check.py``); this module only lays them out. A finding whose status is None
was not checked (``TIEROPS_EVIDENCE_POLICY=off``, or stored before the check existed) and shows
nothing, never "uncited". A transcript line is found by the tool call's id
(``app/store/guard.tool_call_lines``: the assistant line that carries the call); a call whose line
is not on the page still gets its badge when the page shows it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from markupsafe import Markup

log = logging.getLogger(__name__)

LINKS_MAX = 5  # transcript links per finding (a finding citing more shows the first ones)
REASON_MAX = 500  # characters of the "why not" title


def _citations(evidence: Any) -> list[Mapping[str, Any]]:
    return [c for c in evidence if isinstance(c, Mapping)] if isinstance(evidence, list) else []


def found_ids(evidence_lists: Iterable[Any]) -> list[str]:
    """The tool calls the citations of every finding were found in (for ``tool_call_lines``)."""
    return list(dict.fromkeys(str(c["found_in"]) for ev in evidence_lists for c in _citations(ev)
                              if c.get("holds") and c.get("found_in")))


def _line_links(evidence: Any, lines: Mapping[str, int]) -> Markup:
    seqs = list(dict.fromkeys(lines[c["found_in"]] for c in _citations(evidence)
                              if c.get("holds") and c.get("found_in") in lines))[:LINKS_MAX]
    return Markup("").join(Markup(' <a class="small evidence-line" href="#act-{s}">line #{s}</a>').format(s=s)
                           for s in seqs)


def mark(status: str | None, evidence: Any, lines: Mapping[str, int]) -> Markup:
    """A finding's status (verified ✓ / unsupported, the reasons as its title / uncited, muted) and
    links to the lines of the calls its quotes were found in; nothing when it was not checked."""
    if status == "verified":
        word = Markup('<span class="evidence evidence-verified" title="every cited quote is in a tool result of'
                      ' this session">✓ verified</span>')
    elif status == "unsupported":
        why = "; ".join(dict.fromkeys(str(c["why"]) for c in _citations(evidence) if c.get("why")))
        word = Markup('<span class="evidence evidence-unsupported badge warn" title="{t}">unsupported</span>').format(
            t=(why or "a citation does not hold")[:REASON_MAX])
    elif status == "uncited":
        return Markup('<span class="evidence evidence-uncited muted small" title="it cites no evidence">uncited'
                      '</span>')
    else:
        return Markup("")
    return word + _line_links(evidence, lines)


def cited_lines(findings: Iterable[tuple[str, str, Any]], lines: Mapping[str, int]) -> dict[int, list[tuple[str, str]]]:
    """Per transcript seq, the findings that cite the call on it: ``(label, anchor)``, from
    ``findings`` as ``(label, anchor, evidence)``."""
    out: dict[int, list[tuple[str, str]]] = {}
    for label, anchor, evidence in findings:
        for seq in dict.fromkeys(lines[c["found_in"]] for c in _citations(evidence)
                                 if c.get("holds") and c.get("found_in") in lines):
            out.setdefault(seq, []).append((label, anchor))
    return out


def cite_badges(cites: Sequence[tuple[str, str]] | None) -> Markup:
    """"cited by: event #4" badges on a tool call's line, each linking back to the finding."""
    return Markup("").join(Markup(' <a class="badge cited" href="#{a}" title="this call\'s output is cited as'
                                  ' evidence">cited by {l}</a>').format(a=anchor, l=label)
                           for label, anchor in cites or ())


def summary(s: Mapping[str, Any]) -> dict[str, int] | None:
    """"N of M findings verified" figures from the session's counts (None: not checked)."""
    counts = (s.get("findings_verified"), s.get("findings_unsupported"), s.get("findings_uncited"))
    if any(n is None for n in counts):
        return None
    verified, unsupported, uncited = (int(n or 0) for n in counts)
    return {"verified": verified, "unsupported": unsupported, "uncited": uncited,
            "total": verified + unsupported + uncited}


def _short(value: Any, limit: int = 60) -> str:
    text = " ".join(str(value or "").split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def session_findings(events: Sequence[Mapping[str, Any]], checks: Sequence[Mapping[str, Any]],
                     actions: Sequence[Mapping[str, Any]], escalation: Any) -> list[tuple[str, str, Any]]:
    """The session page's findings as ``(label, anchor, evidence)``: the anchors are the ids its rows
    carry (``event-<id>``, ``check-<n>``, ``action-<n>``, ``escalation-evidence``)."""
    return [*((f"event #{e['id']}", f"event-{e['id']}", e.get("evidence")) for e in events),
            *((f"check {_short(c['name'])}", f"check-{n}", c.get("evidence")) for n, c in enumerate(checks)),
            *((f"action {_short(a['action'])}", f"action-{n}", a.get("evidence")) for n, a in enumerate(actions)),
            ("escalation", "escalation-evidence", escalation)]
