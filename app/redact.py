"""Redaction of secrets before anything is stored (issue #4: agent and tool output is untrusted
and may echo credentials it found on a host).

What is redacted, in every stream line before it is parsed and stored:

* exact values: the dashboard token, and the values of environment variables whose names look
  secret (``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ``*CREDENTIAL*``; 8+ characters);
* common credential shapes: Anthropic/OpenAI-style ``sk-…`` keys, GitHub tokens, AWS access key
  ids, Slack tokens, JWTs, PEM private keys, ``Authorization: Bearer …`` and
  ``password=…``/``"api_key": "…"`` assignments.

Each match becomes ``[REDACTED]``; JSON stays valid because only characters inside a string are
replaced (the patterns stop at quotes and backslashes). Speed: every line is first searched with
one RE2 pattern (a DFA: all rules in one linear pass, ~0.6 s per 168 MiB in bench/ingest.py,
where 23 ``in`` tests took 3.6 s and a Python ``re`` alternation 8-26 s); only lines that hit are
rewritten with the Python rules. This is defence in depth, not a guarantee: a secret in an
unknown shape passes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import re2

from app.errors import ConfigError

if TYPE_CHECKING:
    from app.config import Settings

MASK = "[REDACTED]"
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.I)
_NOT_SECRET_NAMES = {"TIEROPS_TOKEN_FILE"}
# (literal hints, pattern): a pattern runs only on a line containing one of its hints, so the
# common line costs a few substring searches (the regexes are slow over 100k lines; bench/ingest.py).
_RULES: list[tuple[tuple[str, ...], str]] = [
    (("sk-",), r"sk-ant-[A-Za-z0-9_\-]{8,}|\bsk-[A-Za-z0-9_\-]{20,}"),
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), r"\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"),
    (("AKIA",), r"\bAKIA[0-9A-Z]{16}\b"),
    (("xox",), r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    (("eyJ",), r"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"),
    (("PRIVATE KEY-----",), r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----"),
    # kept prefix (group "keep"), secret after it: "Bearer X", password=X, "api_key": "X" (also
    # JSON-escaped inside a stream line: \"api_key\": \"X\")
    (("earer", "EARER"), r"(?P<keep>(?i:bearer)\s+)[A-Za-z0-9._~+/=\-]{12,}"),
    (("assw", "ASSW", "ecret", "ECRET", "pi_key", "PI_KEY", "pikey", "pi-key", "ccess_token", "uth_token"),
     r"(?P<keep>(?i:password|passwd|secret|api[_-]?key|access_token|auth_token|client_secret)"
     r"(?:\\?[\"'])?\s*[:=]\s*(?:\\?[\"'])?)[^\s\"'\\&;,]{4,}"),
]


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._values = sorted({s for s in secrets if s and len(s) >= 8}, key=len, reverse=True)
        self._rules = [(hints, re.compile(pattern, re.S)) for hints, pattern in _RULES]
        if self._values:
            self._rules.append((tuple(self._values), re.compile("|".join(re.escape(v) for v in self._values))))
        # The same rules as one RE2 pattern: a line that does not match it needs no rewriting.
        self._prefilter = re2.compile("(?s)" + "|".join(f"(?:{_re2_safe(p)})" for _, p in _RULES) +
                                      "".join(f"|{re.escape(v)}" for v in self._values))

    @classmethod
    def from_environment(cls, extra: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> Redactor:
        env = os.environ if environ is None else environ
        found = [v for k, v in env.items() if _SECRET_NAME.search(k) and k not in _NOT_SECRET_NAMES]
        return cls([*found, *extra])

    def __call__(self, text: str) -> str:
        if not self._prefilter.search(text):
            return text
        for hints, regex in self._rules:
            for hint in hints:
                if hint in text:
                    text = regex.sub(_mask, text)
                    break
        return text


def _re2_safe(pattern: str) -> str:
    """The RE2 copy of a rule: RE2 rejects duplicate group names, and the prefilter needs none."""
    return pattern.replace("(?P<keep>", "(")


def _mask(match: re.Match[str]) -> str:
    keep = match.groupdict().get("keep")
    return (keep or "") + MASK


def redactor_for(settings: Settings) -> Redactor:
    """The redactor every recorder uses: environment secrets plus the dashboard token."""
    try:
        token = settings.resolved_token()
    except ConfigError:  # a broken token file is reported where the token is needed (serve)
        token = None
    return Redactor.from_environment(extra=[token] if token else [])
